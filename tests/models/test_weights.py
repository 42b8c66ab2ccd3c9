"""Shipped weights: safetensors with a manifest, loaded by name by the library and every command that
takes a checkpoint; a study ships its finished runs and carries its unfinished ones to another machine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO, call, one_line_error, tiny, train
from helpers.rows import study_row

import sa_conv
from experiments import convert, evaluate, explore, figures, models
from experiments.study.weights import ship
from sa_conv.analysis.snapshots import read_history
from sa_conv.models.weights import ManifestEntry, manifest, weights_dir
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.trained import load_trained
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint

# two layers, two steps on 64 synthetic images, no explorer page
TWO_LAYERS = [*tiny(layers=2), "--synthetic", "--synthetic-size", "64", "--limit-train-batches", "2"]
TWO_LAYERS += ["--no-explore"]
NAME = "tiny/quadratic-seed0"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run that records its figures and locality history at every step."""
    flags = [*TWO_LAYERS, "--figures-every", "1", "--history-every", "1"]
    return train(tmp_path_factory.mktemp("runs"), "quadratic", *flags)


@pytest.fixture
def shipped(run_dir: Path) -> ManifestEntry:
    """The run's best checkpoint shipped as ``NAME`` into this test's weights folder."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ckpt = read_checkpoint(metrics["best_checkpoint"])
    row = study_row(
        {"name": "quadratic", "model": "quadratic", "seed": 0, "epochs": 1, "test_acc": metrics["test_acc"]}
        | {"n_test_images": 64}
    )
    return ship(
        NAME, ckpt, row=row, history=read_history(metrics["locality_history"], "metrics"), commit="abc"
    )


def test_shipped_weights_hold_the_checkpoints_tensors_and_load_by_name(
    run_dir: Path, shipped: ManifestEntry
) -> None:
    ckpt = read_checkpoint(json.loads((run_dir / "metrics.json").read_text())["best_checkpoint"])
    entry = manifest()[NAME]
    assert entry == shipped and entry.commit == "abc" and entry.file == f"{NAME}.safetensors"
    assert entry.bytes == (weights_dir() / entry.file).stat().st_size < 2**20
    record = load_trained(NAME)
    assert record.hyper_parameters.to_dict() == ckpt["hyper_parameters"] and record.shipped == entry
    assert record.run_config == ckpt["run_config"] and record.history
    assert set(record.state_dict) == set(ckpt["state_dict"])
    for key, tensor in ckpt["state_dict"].items():
        assert torch.equal(record.state_dict[key], tensor), key
    backbone = sa_conv.load_pretrained(NAME)
    assert not backbone.training
    images = torch.randn(2, 3, 32, 32)

    expected = module_from_checkpoint(ckpt).backbone.eval()(images)
    torch.testing.assert_close(backbone(images), expected, rtol=0, atol=0)


def test_a_changed_or_missing_weights_file_is_refused(shipped: ManifestEntry) -> None:
    path = weights_dir() / shipped.file
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="differs from the manifest's sha256"):
        load_trained(NAME)
    path.unlink()
    with pytest.raises(CheckpointError, match="are missing from this checkout"):
        load_trained(NAME)
    with pytest.raises(CheckpointError, match=r"nor a shipped model \(shipped: tiny/quadratic"):
        load_trained("tiny/nothing-seed0")


def test_a_safetensors_file_of_something_else_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    with pytest.raises(CheckpointError, match="not an sa-conv weights file"):
        load_trained(path)
    (tmp_path / "junk.safetensors").write_bytes(b"not a header")
    with pytest.raises(CheckpointError, match="not a readable weights file"):
        load_trained(tmp_path / "junk.safetensors")


def test_every_command_takes_a_shipped_name(shipped: dict, tmp_path: Path, capsys) -> None:
    page = tmp_path / "page.html"
    code, out, err = call(explore, [NAME, "--out", str(page), "--images", "2"], capsys)
    assert code == 0 and page.stat().st_size > 10_000, err
    assert '"checkpoint":"tiny/quadratic-seed0"' in page.read_text()
    assert f'"test_acc":{shipped.test_acc}' in page.read_text()
    code, out, err = call(figures, [NAME, "--out", str(tmp_path / "figs")], capsys)
    assert code == 0 and (tmp_path / "figs" / "tiny_quadratic-seed0_layer1.png").is_file(), err
    assert (
        tmp_path / "figs" / "tiny_quadratic-seed0_locality_over_training.png"
    ).is_file()  # the shipped history
    code, out, err = call(evaluate, [NAME, "--synthetic", "--json"], capsys)
    assert code == 0 and 0.0 <= json.loads(out)["accuracy"] <= 1.0, err
    assert "shipped weights keep no fingerprint" in err and "does not record" not in err
    code, out, err = call(convert, ["--checkpoint", NAME, "--to-conv", "--synthetic"], capsys)
    assert code == 0 and "layer 2: conv-likeness of each head" in out, err
    code, out, err = call(models, [], capsys)
    assert code == 0 and NAME in out and "0.00" not in out.split(NAME)[1].split()[2]
    one = one_line_error(*call(evaluate, ["tiny/absent-seed3", "--synthetic"], capsys)[::2])
    assert "neither a file nor a shipped model" in one


def test_the_shipped_models_of_the_checkout_are_listed_in_its_manifest() -> None:
    """Every file under weights/ is in the manifest with its size and sha256, and the reverse."""
    root = REPO / "weights"
    entries = manifest(root)
    files = sorted(str(p.relative_to(root)) for p in root.glob("*/*.safetensors"))
    assert sorted(e.file for e in entries.values()) == files
    from sa_conv.models.weights import sha256_of

    committed = json.loads((root / "manifest.json").read_text())
    assert {n: e.to_json() for n, e in entries.items()} == committed  # read and written back unchanged
    assert all(list(e.to_json()) == list(committed[n]) for n, e in entries.items())  # in its key order
    for name, e in entries.items():
        assert name == e.file.removesuffix(".safetensors")
        assert (root / e.file).stat().st_size == e.bytes and sha256_of(root / e.file) == e.sha256


QUICK_ENTRY = {"epochs": 2, "data": {"train_subset": None, "val_size": 16, "batch_size": 16}}


@pytest.mark.slow
def test_a_study_ships_its_finished_runs_and_resumes_a_carried_one_exactly(tmp_path: Path) -> None:
    """Uninterrupted, the study ships the run's weights. Stopped mid-run, ``--carry`` puts its newest
    checkpoint under weights/unfinished/; on another machine (its run folders gone) the study resumes from
    there, and ends with the uninterrupted run's weights exactly, shipped, the carried checkpoint gone."""
    script = (
        "import sys; from experiments import study; from experiments.study import Entry; "
        f"study.STUDIES['tiny'] = (Entry('quadratic', 'quadratic', (0,), {QUICK_ENTRY!r}),); "
        "from experiments.cli import main_guard; sys.exit(main_guard(study.main)(sys.argv[1:]))"
    )

    def study_in(folder: Path, *extra: str, wait_for: Path | None = None) -> int:
        argv = ["--scale", "tiny", "--synthetic", "--synthetic-size", "96", "--no-figures"]
        argv += ["--out", str(folder / "results"), "--weights", str(folder / "weights"), *extra]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-c", script, *argv], env=env, stdout=subprocess.DEVNULL)
        if wait_for is not None:  # stop it once it has a checkpoint after its first epoch
            while not wait_for.is_file() and proc.poll() is None:
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=600)

    whole, split = tmp_path / "whole", tmp_path / "split"
    assert study_in(whole) == 0
    shipped = manifest(whole / "weights")["tiny/quadratic-seed0"]
    assert shipped.epochs == 2 and (whole / "weights" / shipped.file).is_file()
    runs = split / "results" / "runs" / "tiny" / "quadratic-seed0" / "quadratic" / "version_0" / "checkpoints"
    assert study_in(split, wait_for=runs / "last.ckpt") == 143  # stopped by SIGTERM, checkpoint saved
    assert study_in(split, "--carry") == 0
    carried = split / "weights" / "unfinished" / "tiny" / "quadratic-seed0.ckpt"
    stopped = read_checkpoint(carried)
    assert 5 <= stopped["global_step"] < 2 * 5  # mid-run, after the first epoch: 5 steps an epoch
    first_epoch = stopped["callbacks"]["TrainingProgress"]["history"][0]
    shutil.rmtree(split / "results" / "runs")  # another machine: only the committed files travel
    assert study_in(split) == 0
    assert not carried.exists()
    metrics = json.loads(
        next((split / "results" / "runs").glob("tiny/*/quadratic/version_0/metrics.json")).read_text()
    )
    assert metrics["history"][0] == first_epoch  # continued, not started again
    a = load_trained(whole / "weights" / shipped.file).state_dict
    b = load_trained(split / "weights" / shipped.file).state_dict
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert manifest(split / "weights")["tiny/quadratic-seed0"].test_acc == shipped.test_acc
