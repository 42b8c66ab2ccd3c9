"""A resume is checked before it trains: a run of another config or on other data is refused in one line
(a moved copy of the same data accepted), an unreadable checkpoint skipped, a bad path named."""

import json
import os
import shutil
import time

import pytest
import torch
from helpers import TEN_STEPS, TINY, call, one_line_error, write_tree

from experiments import evaluate, run
from experiments.cli import main_guard


def test_resume_refuses_a_run_of_another_config(tmp_path, capsys):
    base = ["quadratic", *TEN_STEPS, "--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*base, "--epochs", "1"]) == 0
    code, _, err = call(run, [*base, "--epochs", "2", "--resume"], capsys)
    line = one_line_error(code, err)
    assert "epochs=1 (now: 2)" in line and "version_0" in line
    ckpt = tmp_path / "quadratic/version_0/checkpoints/last.ckpt"
    code, _, err = call(run, [*base, "--epochs", "1", "--heads", "2", "--resume", str(ckpt)], capsys)
    assert "heads=4 (now: 2)" in one_line_error(code, err)
    code, _, err = call(
        run, ["learned", *TEN_STEPS, "--output-dir", str(tmp_path), "--resume", str(ckpt)], capsys
    )
    assert "model='quadratic' (now: 'learned')" in one_line_error(code, err)
    code, _, err = call(run, [*base, "--epochs", "2", "--resume", "auto"], capsys)  # none: a new run
    assert code == 0 and "starting one" in err and (tmp_path / "quadratic/version_1/metrics.json").is_file()


def test_resume_skips_an_unreadable_checkpoint(tmp_path, capsys):
    args = ["quadratic", *TEN_STEPS, "--epochs", "1", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(args) == 0
    ckpts = tmp_path / "quadratic/version_0/checkpoints"
    broken = ckpts / "zz-broken.ckpt"
    broken.write_bytes(b"\x00not a checkpoint")
    os.utime(broken, (time.time() + 10, time.time() + 10))  # the newest file
    code, _, err = call(run, [*args, "--resume"], capsys)
    assert code == 0 and f"warning: skipping {broken} is not a readable checkpoint" in err


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_resume_from_a_bad_path_is_one_line(tmp_path, capsys, kind):
    bad = tmp_path / "bad.ckpt"
    bad.mkdir() if kind == "directory" else bad.write_bytes(b"garbage")
    code, _, err = call(run, ["quadratic", *TEN_STEPS, "--resume", str(bad)], capsys)
    assert ("not a readable checkpoint" if kind == "garbage" else "is a directory") in one_line_error(
        code, err
    )


def test_resume_refuses_other_data_and_accepts_a_moved_copy(tmp_path, capsys):
    data = write_tree(tmp_path / "data", per_class=4)
    argv = ["quadratic", *TINY, "--batch-size", "8", "--figures-every", "none", "--no-explore"]
    argv += ["--output-dir", str(tmp_path / "runs")]
    assert main_guard(run.main)([*argv, "--data-dir", str(data)]) == 0
    metrics = json.loads((tmp_path / "runs/quadratic/version_0/metrics.json").read_text())
    assert metrics["data"]["fingerprint"]["train"] + metrics["data"]["fingerprint"]["val"] == 40
    moved = shutil.copytree(data, tmp_path / "moved")  # the same data elsewhere: accepted
    capsys.readouterr()
    assert main_guard(run.main)([*argv, "--data-dir", str(moved), "--resume"]) == 0
    other = write_tree(tmp_path / "other", per_class=4)  # the same counts, one image changed
    (other / "train/cat/0001.jpg").write_bytes((other / "train/dog/0002.jpg").read_bytes())
    code, _, err = call(run, [*argv, "--data-dir", str(other), "--resume"], capsys)
    line = one_line_error(code, err)
    assert "trained on other data" in line and "other images or labels" in line
    fewer = write_tree(tmp_path / "fewer", per_class=3)
    code, _, err = call(run, [*argv, "--data-dir", str(fewer), "--resume"], capsys)
    assert "test 40 images (now: 30)" in one_line_error(code, err)
    ckpt = tmp_path / "runs/quadratic/version_0/checkpoints/last.ckpt"
    code = main_guard(evaluate.main)([str(ckpt), "--data-dir", str(fewer)])
    err = capsys.readouterr().err
    assert code == 0 and "not the data the checkpoint trained on: train" in err
    assert main_guard(evaluate.main)([str(ckpt), "--data-dir", str(moved)]) == 0
    assert "the checkpoint's own" in capsys.readouterr().err


def _crafted(tmp_path, change) -> tuple[list[str], str]:
    """A run of 10 steps and its last checkpoint changed by ``change`` (in place); the run's flags and
    the checkpoint's path."""
    argv = ["quadratic", *TEN_STEPS, "--epochs", "2", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*argv, "--limit-train-batches", "5"]) == 0
    path = tmp_path / "quadratic/version_0/checkpoints/last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    change(ckpt)
    torch.save(ckpt, path)
    return [*argv, "--limit-train-batches", "5"], str(path)


def _momentum(ckpt) -> dict:
    return next(iter(ckpt["optimizer_states"][0]["state"].values()))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: c.update(global_step="abc"), "its global_step 'abc' is not a count"),
        (lambda c: c.update(global_step=-3), "its global_step -3 is not a count"),
        (lambda c: c.update(epoch=10**15), "its epoch 1000000000000000 is not a count"),
        (  # one value broadcast to the parameter's shape: stride 0
            lambda c: _momentum(c).update(
                momentum_buffer=torch.zeros(1).expand(_momentum(c)["momentum_buffer"].shape)
            ),
            "is not a dense tensor (strides",
        ),
        (lambda c: _momentum(c).update(momentum_buffer=torch.zeros(3, 5, 7)), "not ("),
        (lambda c: c["optimizer_states"][0]["state"].update({999: {}}), "names a parameter 999"),
    ],
)
def test_a_crafted_training_state_is_refused_before_it_is_restored(tmp_path, capsys, change, said):
    argv, path = _crafted(tmp_path, change)
    code, _, err = call(run, [*argv, "--resume", path], capsys)
    line = one_line_error(code, err)
    assert said in line and path in line
