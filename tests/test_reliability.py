"""Resume after a kill, atomic writes, one-line errors for bad input, determinism, DDP."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
import torch

from experiments import run
from experiments.cli import main_guard
from sa_conv.checkpointing import AtomicCheckpointIO

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--scale", "tiny", "--layers", "1", "--hidden", "16", "--heads", "4", "--no-figures"]


def call_run(argv, capsys):
    code = main_guard(run.main)(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err):
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_atomic_checkpoint_keeps_the_previous_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)

    def dies_midway(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # the process is killed while writing

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=False)["state_dict"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary left behind


def test_resume_skips_an_unreadable_checkpoint(tmp_path, capsys):
    args = ["quadratic", *TINY, "--synthetic", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*args, "--epochs", "1"]) == 0
    ckpts = tmp_path / "quadratic/version_0/checkpoints"
    broken = ckpts / "zz-broken.ckpt"
    broken.write_bytes(b"\x00not a checkpoint")
    os.utime(broken, (time.time() + 10, time.time() + 10))  # the newest file
    capsys.readouterr()
    code, _, err = call_run([*args, "--epochs", "2", "--resume"], capsys)
    assert code == 0
    assert f"warning: skipping unreadable checkpoint {broken}" in err
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["epochs_completed"] == 2


def test_resume_from_a_corrupt_path_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"garbage")
    code, _, err = call_run(["quadratic", *TINY, "--synthetic", "--resume", str(bad)], capsys)
    assert "not a readable checkpoint" in one_line_error(code, err)


def jpeg_tree(root: Path) -> Path:
    from torchvision.io import encode_jpeg

    from sa_conv.data import CIFAR10_CLASSES

    for split in ("train", "test"):
        for name in CIFAR10_CLASSES:
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                data = encode_jpeg(torch.randint(0, 255, (3, 32, 32), dtype=torch.uint8)).numpy().tobytes()
                (root / split / name / f"{i}.jpg").write_bytes(data)
    return root


def test_corrupt_and_wrong_size_images_are_named(tmp_path, capsys):
    root = jpeg_tree(tmp_path / "data")
    (root / "train" / "frog" / "1.jpg").write_bytes(b"\xff\xd8 broken")
    code, _, err = call_run(
        ["quadratic", *TINY, "--data-dir", str(root), "--output-dir", str(tmp_path / "o")], capsys
    )
    assert "frog/1.jpg" in one_line_error(code, err)
    from torchvision.io import encode_jpeg

    (root / "train" / "frog" / "1.jpg").write_bytes(
        encode_jpeg(torch.zeros(3, 64, 64, dtype=torch.uint8)).numpy().tobytes()
    )
    code, _, err = call_run(
        ["quadratic", *TINY, "--data-dir", str(root), "--output-dir", str(tmp_path / "o")], capsys
    )
    assert "frog/1.jpg is 64x64, expected 32x32" in one_line_error(code, err)


def test_no_network_for_the_download(tmp_path, capsys, monkeypatch):
    from torchvision.datasets import CIFAR10

    def offline(self):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    monkeypatch.setattr(run, "DEFAULT_DATA_DIR", tmp_path / "cifar10")
    code, _, err = call_run(["quadratic", *TINY, "--output-dir", str(tmp_path / "o")], capsys)
    line = one_line_error(code, err)
    assert "could not download CIFAR-10" in line and "--data-dir" in line


def test_more_devices_than_the_machine_has(capsys):
    code, _, err = call_run(
        ["quadratic", *TINY, "--synthetic", "--accelerator", "cpu", "--devices", "4096"], capsys
    )
    assert "--devices 4096: this machine has" in one_line_error(code, err)


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    import torch.nn.functional as F

    real, calls = F.cross_entropy, {"train": 0}

    def poisoned(logits, labels, *args, **kwargs):  # the 8th training loss is NaN
        loss = real(logits, labels, *args, **kwargs)
        if torch.is_grad_enabled():
            calls["train"] += 1
            if calls["train"] == 8:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(F, "cross_entropy", poisoned)
    args = ["quadratic", *TINY, "--synthetic", "--epochs", "3", "--output-dir", str(tmp_path)]
    code, _, err = call_run(args, capsys)  # 5 steps per epoch: NaN at step 7, in epoch 2
    assert "training loss became nan at step 7" in one_line_error(code, err)
    last = torch.load(tmp_path / "quadratic/version_0/checkpoints/last.ckpt", weights_only=False)
    assert last["global_step"] == 5  # the end of epoch 1: the last good state
    assert torch.isfinite(torch.cat([v.flatten().float() for v in last["state_dict"].values()])).all()


def test_different_seeds_give_different_metrics(tmp_path):
    for seed in ("0", "1"):
        argv = [
            "quadratic",
            *TINY,
            "--synthetic",
            "--epochs",
            "1",
            "--seed",
            seed,
            "--output-dir",
            str(tmp_path / seed),
        ]
        assert main_guard(run.main)(argv) == 0
    a, b = (json.loads((tmp_path / s / "quadratic/version_0/metrics.json").read_text()) for s in ("0", "1"))
    wa = torch.load(tmp_path / "0/quadratic/version_0/checkpoints/last.ckpt", weights_only=False)[
        "state_dict"
    ]
    wb = torch.load(tmp_path / "1/quadratic/version_0/checkpoints/last.ckpt", weights_only=False)[
        "state_dict"
    ]
    assert not all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["global_steps"] == b["global_steps"]  # the same run, only the seed differs ...
    assert (a["best_val_acc"], a["test_acc"]) != (b["best_val_acc"], b["test_acc"])  # ... and so the results


def run_cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.run", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_result(tmp_path):
    base = [
        "quadratic",
        *TINY,
        "--synthetic",
        "--epochs",
        "3",
        "--batch-size",
        "8",
        "--checkpoint-every",
        "7",
    ]  # 52 steps per epoch, 156 in all
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-2000:]

    killed = run_cli([*base, "--output-dir", str(tmp_path / "b")])
    ckpt = tmp_path / "b/quadratic/version_0/checkpoints/step.ckpt"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if ckpt.is_file():
            try:
                step = torch.load(ckpt, weights_only=False)["global_step"]
            except Exception:
                step = 0
            if step >= 70:  # mid-way through epoch 2
                break
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    resumed = run_cli([*base, "--output-dir", str(tmp_path / "b"), "--resume"])
    assert resumed.wait(timeout=900) == 0, resumed.stderr.read().decode()[-2000:]

    a = json.loads((tmp_path / "a/quadratic/version_0/metrics.json").read_text())
    b = json.loads((tmp_path / "b/quadratic/version_0/metrics.json").read_text())
    for key in ("best_val_acc", "test_acc", "global_steps", "epochs_completed"):
        assert a[key] == b[key], key
    wa = torch.load(tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt", weights_only=False)[
        "state_dict"
    ]
    wb = torch.load(tmp_path / "b/quadratic/version_0/checkpoints/last.ckpt", weights_only=False)[
        "state_dict"
    ]
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-6, msg=k)


@pytest.mark.slow
def test_ddp_on_cpu_evaluates_the_whole_test_set_once(tmp_path):
    args = [
        "quadratic",
        *TINY,
        "--synthetic",
        "--epochs",
        "1",
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--strategy",
        "ddp",
        "--output-dir",
        str(tmp_path),
    ]
    proc = run_cli(args)
    assert proc.wait(timeout=900) == 0, proc.stderr.read().decode()[-3000:]
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["devices"] == 2
    # the same checkpoint evaluated in one process over the whole test set gives the same accuracy
    out = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", metrics["best_checkpoint"], "--synthetic", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    single = json.loads(out.stdout.strip().splitlines()[-1])
    assert single["n_images"] == metrics["n_test_images"]
    assert single["accuracy"] == pytest.approx(metrics["test_acc"], abs=1e-6)
