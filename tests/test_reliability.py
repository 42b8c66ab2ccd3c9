"""Exact resume (epoch ends, snapshots, signals), config-checked resumes, atomic and readable files,
one-line errors for bad input, determinism, DDP."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from cli_helpers import one_line_error

import sa_conv.training.run as training
from experiments import cli, run
from experiments.cli import main_guard
from sa_conv.training.checkpoints import AtomicCheckpointIO, InterruptCheckpoint
from sa_conv.training.module import ImageClassifier
from sa_conv.training.signals import RankRecord, peer_lost

ROOT = Path(__file__).resolve().parents[1]
# 410 synthetic training images in batches of 41: 10 steps per epoch; attention dropout on (its RNG)
TINY = ["--scale", "tiny", "--layers", "1", "--hidden", "16", "--heads", "4", "--attn-dropout", "0.1"]
TINY += ["--batch-size", "41", "--synthetic", "--figures-every", "none", "--snapshot-minutes", "0"]


def call_run(argv, capsys):
    code = main_guard(run.main)(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_stop(code, err):
    """A requested stop: one ``stopped:`` line, no error line, no traceback."""
    lines = [line for line in err.strip().splitlines() if line.startswith("stopped:")]
    assert code != 0 and len(lines) == 1 and "error:" not in err and "Traceback" not in err, err
    assert "Received SIG" not in err  # Lightning's own line about the signal is not repeated
    return lines[0]


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


class StepCounter(pl.Callback):
    """Counts the training steps a process runs, and acts at one of them."""

    def __init__(self, at: int | None = None, action=None) -> None:
        self.steps, self.at, self.action = 0, at, action

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.at is not None and trainer.global_step == self.at and self.action == "crash":
            raise RuntimeError("the machine went away")  # a kill: nothing saved at this step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1
        if self.at is not None and trainer.global_step == self.at and isinstance(self.action, signal.Signals):
            os.kill(os.getpid(), self.action)


def with_callback(monkeypatch, callback: pl.Callback) -> None:
    """Every Trainer that ``sa_conv.training.run`` builds gets ``callback`` too."""

    class Trainer(pl.Trainer):
        def __init__(self, *args, callbacks=(), **kwargs):
            super().__init__(*args, callbacks=[*callbacks, callback], **kwargs)

    monkeypatch.setattr(training.pl, "Trainer", Trainer)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run: 3 epochs of 10 steps."""
    out = tmp_path_factory.mktemp("straight")
    assert main_guard(run.main)(["quadratic", *TINY, "--epochs", "3", "--output-dir", str(out)]) == 0
    return out / "quadratic/version_0"


def assert_resumed_exactly(straight: Path, resumed: Path, counter: StepCounter, remaining: int) -> None:
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (straight, resumed))
    for key in ("best_val_acc", "test_acc", "global_steps", "epochs_completed"):
        assert a[key] == b[key], key
    assert [h["val_acc"] for h in a["history"]] == [h["val_acc"] for h in b["history"]]
    wa, wb = weights(straight / "checkpoints/last.ckpt"), weights(resumed / "checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)
    assert counter.steps == remaining  # the resumed process trained only what was left


@pytest.mark.parametrize(("at", "remaining"), [(10, 20), (14, 20)])  # killed at the first step of epoch 2
def test_a_crash_resumes_exactly_from_the_epoch_end_checkpoint(
    straight, tmp_path, monkeypatch, capsys, at, remaining
):
    argv = ["quadratic", *TINY, "--epochs", "3", "--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(at, "crash"))
        with pytest.raises(RuntimeError, match="went away"):
            run.main(argv)
    assert (
        torch.load(tmp_path / "quadratic/version_0/checkpoints/last.ckpt", weights_only=True)["global_step"]
        == 10
    )
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    code, out, _ = call_run([*argv, "--resume"], capsys)
    assert code == 0 and "resuming from" in out
    assert_resumed_exactly(straight, tmp_path / "quadratic/version_0", counter, remaining)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_a_checkpoint_and_resumes_exactly(straight, tmp_path, monkeypatch, capsys, sig, code):
    argv = ["quadratic", *TINY, "--epochs", "3", "--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(13, sig))
        got, _, err = call_run(argv, capsys)
    line = one_line_stop(got, err)
    assert got == code and f"{sig.name} at step 13" in line and "--resume" in line
    # a Ctrl-C is acknowledged at once, with the step time measured so far (SIGTERM stops silently)
    acknowledged = "stopping after this step, about 1 s; Ctrl-C again to abort without a checkpoint"
    assert err.count(acknowledged) == (sig == signal.SIGINT)
    assert (tmp_path / "quadratic/version_0/checkpoints/interrupted.ckpt").is_file()
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call_run([*argv, "--resume"], capsys)[0] == 0
    assert_resumed_exactly(straight, tmp_path / "quadratic/version_0", counter, 30 - 13)
    assert not (tmp_path / "quadratic/version_0/checkpoints/interrupted.ckpt").exists()  # finished: stale


def test_the_interrupt_checkpoint_goes_only_once_a_later_last_checkpoint_exists(tmp_path):
    callback = InterruptCheckpoint(dirpath=tmp_path)
    trainer = type("Trainer", (), {"is_global_zero": True})()
    interrupted, last = tmp_path / "interrupted.ckpt", tmp_path / "last.ckpt"
    last.write_bytes(b"epoch end")
    interrupted.write_bytes(b"signal")
    os.utime(last, ns=(1_000, 1_000))  # last.ckpt older: a fit that saved nothing (a smoke test)
    callback.on_fit_end(trainer, None)
    assert interrupted.exists()
    os.utime(last, ns=(interrupted.stat().st_mtime_ns + 1,) * 2)  # a later epoch end was saved
    callback.on_fit_end(trainer, None)
    assert not interrupted.exists() and last.exists()


def test_a_time_snapshot_resumes_exactly(straight, tmp_path, monkeypatch, capsys):
    argv = ["quadratic", *TINY, "--epochs", "3", "--output-dir", str(tmp_path), "--snapshot-minutes", "1e-9"]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(17, "crash"))
        with pytest.raises(RuntimeError):
            run.main(argv)
    snapshot = tmp_path / "quadratic/version_0/checkpoints/snapshot.ckpt"
    assert torch.load(snapshot, weights_only=True)["global_step"] == 17  # every step, here
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call_run([*argv, "--resume"], capsys)[0] == 0
    assert_resumed_exactly(straight, tmp_path / "quadratic/version_0", counter, 30 - 17)


def test_resume_refuses_a_run_of_another_config(tmp_path, capsys):
    base = ["quadratic", *TINY, "--output-dir", str(tmp_path)]
    assert main_guard(run.main)([*base, "--epochs", "1"]) == 0
    code, _, err = call_run([*base, "--epochs", "2", "--resume"], capsys)
    line = one_line_error(code, err)
    assert "epochs=1 (now: 2)" in line and "version_0" in line
    ckpt = tmp_path / "quadratic/version_0/checkpoints/last.ckpt"
    code, _, err = call_run([*base, "--epochs", "1", "--heads", "2", "--resume", str(ckpt)], capsys)
    assert "heads=4 (now: 2)" in one_line_error(code, err)
    code, _, err = call_run(["learned", *TINY, "--output-dir", str(tmp_path), "--resume", str(ckpt)], capsys)
    assert "model='quadratic' (now: 'learned')" in one_line_error(code, err)
    code, _, err = call_run([*base, "--epochs", "2", "--resume", "auto"], capsys)  # none: a new run
    assert code == 0 and "starting one" in err and (tmp_path / "quadratic/version_1/metrics.json").is_file()


def test_resume_skips_an_unreadable_checkpoint(tmp_path, capsys):
    args = ["quadratic", *TINY, "--epochs", "1", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(args) == 0
    ckpts = tmp_path / "quadratic/version_0/checkpoints"
    broken = ckpts / "zz-broken.ckpt"
    broken.write_bytes(b"\x00not a checkpoint")
    os.utime(broken, (time.time() + 10, time.time() + 10))  # the newest file
    code, _, err = call_run([*args, "--resume"], capsys)
    assert code == 0 and f"warning: skipping {broken} is not a readable checkpoint" in err


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_resume_from_a_bad_path_is_one_line(tmp_path, capsys, kind):
    bad = tmp_path / "bad.ckpt"
    bad.mkdir() if kind == "directory" else bad.write_bytes(b"garbage")
    code, _, err = call_run(["quadratic", *TINY, "--resume", str(bad)], capsys)
    assert ("not a readable checkpoint" if kind == "garbage" else "is a directory") in one_line_error(
        code, err
    )


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
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary left behind


def test_files_are_readable_like_the_rest_of_the_run(tmp_path):
    old = os.umask(0o022)
    try:
        argv = [
            "quadratic",
            *TINY[:-4],
            "--epochs",
            "1",
            "--figures-every",
            "1",
            "--output-dir",
            str(tmp_path),
        ]
        assert main_guard(run.main)(argv) == 0
    finally:
        os.umask(old)
    run_dir = tmp_path / "quadratic/version_0"
    files = [run_dir / "metrics.json", run_dir / "config.yaml", *(run_dir / "checkpoints").iterdir()]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def jpeg_tree(root: Path) -> Path:
    from torchvision.io import encode_jpeg

    from sa_conv.data.datamodule import CIFAR10_CLASSES

    for split in ("train", "test"):
        for name in CIFAR10_CLASSES:
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                data = encode_jpeg(torch.randint(0, 255, (3, 32, 32), dtype=torch.uint8)).numpy().tobytes()
                (root / split / name / f"{i}.jpg").write_bytes(data)
    return root


def test_corrupt_and_wrong_size_images_are_named(tmp_path, capsys):
    root = jpeg_tree(tmp_path / "data")
    argv = ["quadratic", *TINY[:-5], "--data-dir", str(root), "--output-dir", str(tmp_path / "o")]
    (root / "train" / "frog" / "1.jpg").write_bytes(b"\xff\xd8 broken")
    code, _, err = call_run(argv, capsys)
    assert "frog/1.jpg" in one_line_error(code, err)
    assert not (tmp_path / "o").exists()  # nothing written: no empty run folder left behind
    from torchvision.io import encode_jpeg

    (root / "train" / "frog" / "1.jpg").write_bytes(
        encode_jpeg(torch.zeros(3, 64, 64, dtype=torch.uint8)).numpy().tobytes()
    )
    code, _, err = call_run(argv, capsys)
    assert "frog/1.jpg is 64x64, expected 32x32" in one_line_error(code, err)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ("split", "it is one split of an ImageFolder tree; pass its parent folder"),  # DIR/train
        ("test-only", "has no 'train' folder"),
        ("other", "refusing to download CIFAR-10 into it"),
    ],
)
def test_a_mistaken_data_dir_never_downloads_into_it(tmp_path, capsys, layout, match, monkeypatch):
    from torchvision.datasets import CIFAR10

    monkeypatch.setattr(CIFAR10, "download", lambda self: pytest.fail("tried to download"))
    root = jpeg_tree(tmp_path / "data")
    data_dir = {"split": root / "train", "test-only": root, "other": tmp_path / "notes"}[layout]
    if layout == "test-only":
        import shutil

        shutil.rmtree(root / "train")
    if layout == "other":
        data_dir.mkdir()
        (data_dir / "readme.txt").write_text("my notes")
    argv = ["quadratic", *TINY[:-5], "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "o")]
    code, _, err = call_run(argv, capsys)
    assert match in one_line_error(code, err)


def test_no_network_for_the_download(tmp_path, capsys, monkeypatch):
    from torchvision.datasets import CIFAR10

    def offline(self):
        Path(self.root).mkdir(parents=True)  # as torchvision does before it connects
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    monkeypatch.setattr(cli, "DEFAULT_DATA_DIR", tmp_path / "data" / "cifar10")
    code, _, err = call_run(["quadratic", *TINY[:-5], "--output-dir", str(tmp_path / "o")], capsys)
    line = one_line_error(code, err)
    assert "could not download CIFAR-10" in line and "--data-dir" in line
    assert sorted(tmp_path.iterdir()) == []  # neither an empty download folder nor an empty run folder


def test_new_folders_are_removed_on_error_only_when_empty(tmp_path):
    from sa_conv.utils.files import new_folders_removed_on_error

    (tmp_path / "old").mkdir()
    with pytest.raises(RuntimeError), new_folders_removed_on_error(tmp_path / "old" / "a" / "b"):
        (tmp_path / "old" / "a" / "b").mkdir(parents=True)
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["old"]  # the folder that was there stays
    with pytest.raises(RuntimeError), new_folders_removed_on_error(tmp_path / "new" / "run"):
        (tmp_path / "new" / "run").mkdir(parents=True)
        (tmp_path / "new" / "run" / "last.ckpt").write_text("x")
        raise RuntimeError
    assert (tmp_path / "new" / "run" / "last.ckpt").is_file()  # a file written: everything kept
    with new_folders_removed_on_error(tmp_path / "ok"):
        (tmp_path / "ok").mkdir()
    assert (tmp_path / "ok").is_dir()  # no error: nothing removed


def test_more_devices_than_the_machine_has(capsys):
    code, _, err = call_run(["quadratic", *TINY, "--accelerator", "cpu", "--devices", "4096"], capsys)
    assert "devices 4096: this machine has" in one_line_error(code, err)


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    import torch.nn.functional as F

    real, calls = F.cross_entropy, {"train": 0}

    def poisoned(logits, labels, *args, **kwargs):  # the 14th training loss is NaN
        loss = real(logits, labels, *args, **kwargs)
        if torch.is_grad_enabled():
            calls["train"] += 1
            if calls["train"] == 14:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(F, "cross_entropy", poisoned)
    code, _, err = call_run(["quadratic", *TINY, "--epochs", "3", "--output-dir", str(tmp_path)], capsys)
    assert "training loss became nan at step 13" in one_line_error(code, err)
    checkpoints = tmp_path / "quadratic/version_0/checkpoints"
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert last["global_step"] == 10  # the end of epoch 1: the last good state
    assert torch.isfinite(torch.cat([v.flatten().float() for v in last["state_dict"].values()])).all()
    assert not (checkpoints / "interrupted.ckpt").exists()


def test_different_seeds_give_different_metrics(tmp_path):
    for seed in ("0", "1"):
        argv = ["quadratic", *TINY, "--epochs", "1", "--seed", seed, "--output-dir", str(tmp_path / seed)]
        assert main_guard(run.main)(argv) == 0
    a, b = (json.loads((tmp_path / s / "quadratic/version_0/metrics.json").read_text()) for s in ("0", "1"))
    wa = weights(tmp_path / "0/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(tmp_path / "1/quadratic/version_0/checkpoints/last.ckpt")
    assert not all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["global_steps"] == b["global_steps"]  # the same run, only the seed differs ...
    assert (a["best_val_acc"], a["test_acc"]) != (b["best_val_acc"], b["test_acc"])  # ... and so the results


def test_the_module_rebuilds_from_every_checkpoint(straight):
    for path in (straight / "checkpoints").iterdir():
        module = ImageClassifier.from_checkpoint(path)
        assert module.hparams.model == "quadratic"


def run_cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.run", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_killed_process_resumes_to_the_same_result(tmp_path, how):
    base = [
        "quadratic",
        *TINY,
        "--epochs",
        "3",
        "--batch-size",
        "8",
        "--checkpoint-every",
        "7",
    ]  # 52 steps/epoch
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-2000:]

    killed = run_cli([*base, "--output-dir", str(tmp_path / "b")])
    ckpt = tmp_path / "b/quadratic/version_0/checkpoints/step.ckpt"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if ckpt.is_file():
            try:
                step = torch.load(ckpt, weights_only=True)["global_step"]
            except Exception:
                step = 0
            if step >= 70:  # mid-way through epoch 2
                break
        time.sleep(0.05)
    killed.send_signal(getattr(signal, how))
    code = killed.wait()
    if how == "SIGKILL":
        assert code == -signal.SIGKILL, "the run finished before it could be killed"
    else:
        message = killed.stderr.read().decode()
        assert code == 143 and "stopped: SIGTERM at step" in message and "--resume" in message
    resumed = run_cli([*base, "--output-dir", str(tmp_path / "b"), "--resume"])
    assert resumed.wait(timeout=900) == 0, resumed.stderr.read().decode()[-2000:]

    a = json.loads((tmp_path / "a/quadratic/version_0/metrics.json").read_text())
    b = json.loads((tmp_path / "b/quadratic/version_0/metrics.json").read_text())
    for key in ("best_val_acc", "test_acc", "global_steps", "epochs_completed"):
        assert a[key] == b[key], key
    wa = weights(tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(tmp_path / "b/quadratic/version_0/checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)


@pytest.mark.slow
def test_ddp_on_cpu_evaluates_the_whole_test_set_once(tmp_path):
    args = [
        "quadratic",
        *TINY,
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
        [sys.executable, "-m", "experiments.evaluate", metrics["best_checkpoint"], "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    single = json.loads(out.stdout.strip().splitlines()[-1])
    assert single["n_images"] == metrics["n_test_images"]
    assert single["accuracy"] == pytest.approx(metrics["test_acc"], abs=1e-6)


def test_a_signal_while_testing_is_one_line_and_a_resume_finishes(tmp_path, monkeypatch, capsys):
    class KillWhileTesting(pl.Callback):
        def on_test_batch_end(self, trainer, *args, **kwargs) -> None:
            os.kill(os.getpid(), signal.SIGTERM)

    # 4,096 synthetic images: 1,024 test images in 4 batches (Lightning stops an evaluation before its last)
    argv = ["quadratic", *TINY, "--epochs", "1", "--synthetic-size", "4096", "--limit-train-batches", "2"]
    argv += ["--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:
        with_callback(patch, KillWhileTesting())
        code, _, err = call_run(argv, capsys)
    assert code == 143 and "last.ckpt" in one_line_stop(code, err)
    checkpoints = tmp_path / "quadratic/version_0/checkpoints"
    assert not (checkpoints / "interrupted.ckpt").exists()  # the training was complete: nothing new to save
    assert not (tmp_path / "quadratic/version_0/metrics.json").exists()
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call_run([*argv, "--resume"], capsys)[0] == 0
    assert counter.steps == 0 and (tmp_path / "quadratic/version_0/metrics.json").is_file()


def test_resuming_a_checkpoint_from_elsewhere_starts_a_new_run_folder(tmp_path, capsys):
    base = ["quadratic", *TINY, "--epochs", "1"]
    assert main_guard(run.main)([*base, "--output-dir", str(tmp_path / "a")]) == 0
    assert main_guard(run.main)([*base, "--output-dir", str(tmp_path / "b")]) == 0  # an unrelated run
    before = (tmp_path / "b/quadratic/version_0/metrics.json").read_text()
    ckpt = tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt"
    assert call_run([*base, "--output-dir", str(tmp_path / "b"), "--resume", str(ckpt)], capsys)[0] == 0
    assert (tmp_path / "b/quadratic/version_0/metrics.json").read_text() == before  # untouched
    assert (tmp_path / "b/quadratic/version_1/metrics.json").is_file()


def test_resume_refuses_other_data_and_accepts_a_moved_copy(tmp_path, capsys):
    import shutil

    from test_data import write_tree

    from experiments import evaluate

    data = write_tree(tmp_path / "data", per_class=4)
    argv = [
        "quadratic",
        "--scale",
        "tiny",
        "--layers",
        "1",
        "--hidden",
        "16",
        "--heads",
        "4",
        "--epochs",
        "1",
    ]
    argv += ["--batch-size", "8", "--figures-every", "none", "--no-explore"]
    argv += ["--output-dir", str(tmp_path / "runs")]
    assert main_guard(run.main)([*argv, "--data-dir", str(data)]) == 0
    metrics = json.loads((tmp_path / "runs/quadratic/version_0/metrics.json").read_text())
    assert metrics["data"]["fingerprint"]["train"] + metrics["data"]["fingerprint"]["val"] == 40
    moved = shutil.copytree(data, tmp_path / "moved")  # the same data elsewhere: accepted
    capsys.readouterr()
    assert main_guard(run.main)([*argv, "--data-dir", str(moved), "--resume"]) == 0
    other = write_tree(tmp_path / "other", per_class=4)  # the same counts, one image changed
    (other / "train/cat/0001.jpg").write_bytes((other / "train/dog/0002.jpg").read_bytes())
    code, _, err = call_run([*argv, "--data-dir", str(other), "--resume"], capsys)
    line = one_line_error(code, err)
    assert "trained on other data" in line and "other images or labels" in line
    fewer = write_tree(tmp_path / "fewer", per_class=3)
    code, _, err = call_run([*argv, "--data-dir", str(fewer), "--resume"], capsys)
    assert "test 40 images (now: 30)" in one_line_error(code, err)
    ckpt = tmp_path / "runs/quadratic/version_0/checkpoints/last.ckpt"
    code = main_guard(evaluate.main)([str(ckpt), "--data-dir", str(fewer)])
    err = capsys.readouterr().err
    assert code == 0 and "not the data the checkpoint trained on: train" in err
    assert main_guard(evaluate.main)([str(ckpt), "--data-dir", str(moved)]) == 0
    assert "the checkpoint's own" in capsys.readouterr().err


def test_a_rank_whose_sockets_closed_before_its_process_ended_is_named(tmp_path, monkeypatch):
    """A killed rank's connections close before its process is gone: the survivor waits a moment for it."""
    monkeypatch.setenv("MASTER_PORT", "29999")
    record = RankRecord(tmp_path)
    closed = RuntimeError("Connection closed by peer [127.0.0.1]:29999")
    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    record.path(1).write_text(f"{socket.gethostname()} {ending.pid}")
    assert "stopped answering" in str(peer_lost(record, 0, 2, closed, grace_s=0))  # not yet gone
    assert "rank 1 of 2 is gone" in str(peer_lost(record, 0, 2, closed, grace_s=30))
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record.path(1).write_text(f"{socket.gethostname()} {alive.pid}")
        assert "a peer of rank 0 of 2 stopped answering" in str(peer_lost(record, 0, 2, closed, grace_s=0.3))
        assert peer_lost(record, 0, 2, ValueError("a shape mismatch"), grace_s=30) is None  # not about a peer
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.slow
def test_a_dead_ddp_rank_ends_the_other_with_one_line_and_the_run_resumes_exactly(tmp_path):
    base = ["quadratic", *TINY, "--epochs", "2", "--batch-size", "8", "--checkpoint-every", "5"]
    base += ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--ddp-timeout", "1"]
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-3000:]

    out = tmp_path / "b"
    killed = run_cli([*base, "--output-dir", str(out)])
    ckpt = out / "quadratic/version_0/checkpoints/step.ckpt"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not ckpt.is_file():
        time.sleep(0.05)
    time.sleep(1.0)  # mid-epoch, past a step checkpoint
    pid_file = next((out / ".ranks").glob("*-rank1.pid"))
    os.kill(int(pid_file.read_text().split()[1]), signal.SIGKILL)  # rank 1 dies (the OOM killer, a lost node)
    start = time.monotonic()
    code = killed.wait(timeout=300)
    err = killed.stderr.read().decode()
    assert time.monotonic() - start < 120, "the surviving rank did not end in time"
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "rank 1 of 2 is gone" in lines[0] and "--resume" in lines[0]

    resumed = run_cli([*base, "--output-dir", str(out), "--resume"])
    assert resumed.wait(timeout=900) == 0, resumed.stderr.read().decode()[-3000:]
    wa = weights(tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(out / "quadratic/version_0/checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)


def newer(path: Path, since: float) -> bool:
    """Whether the file was written after `since` (False when it is gone: a temporary file renamed)."""
    try:
        return path.stat().st_mtime > since
    except FileNotFoundError:
        return False


def wait_for_checkpoint(proc: subprocess.Popen, folder: Path, *, since: float) -> float:
    """Seconds until a checkpoint newer than `since` appears under `folder` (or the process ends)."""
    start = time.monotonic()
    while proc.poll() is None and time.monotonic() - start < 900:
        if any(newer(p, since) for p in folder.glob("**/*.ckpt")):
            break
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.slow
def test_chaos_random_kills_then_resumes_end_in_the_same_weights(tmp_path):
    """SIGKILL at random moments (seeded), three times, each run resumed with --resume auto: the final
    weights equal the uninterrupted run's, bit for bit."""
    import random

    base = ["quadratic", *TINY, "--epochs", "10", "--batch-size", "8", "--checkpoint-every", "3"]
    start = time.monotonic()
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    first = wait_for_checkpoint(straight, tmp_path / "a", since=time.time())
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-2000:]
    training = time.monotonic() - start - first  # from the first checkpoint to the end
    # each attempt dies at a random moment within a fifth of that after its own first checkpoint, so
    # three attempts cannot finish the run, and each dies in training (between or during checkpoint writes)
    chaos, out = random.Random(0), tmp_path / "b"
    kills = 0
    for _ in range(3):
        proc = run_cli([*base, "--output-dir", str(out), "--resume", "auto"])
        wait_for_checkpoint(proc, out, since=time.time())
        time.sleep(chaos.uniform(0, 0.2) * training)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += proc.wait() == -signal.SIGKILL
    assert kills >= 2, "the run finished before the kills"
    final = run_cli([*base, "--output-dir", str(out), "--resume", "auto"])
    assert final.wait(timeout=900) == 0, final.stderr.read().decode()[-2000:]
    last = max((out / "quadratic").glob("version_*/metrics.json"), key=lambda p: p.stat().st_mtime)
    wa = weights(tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(last.parent / "checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)


@pytest.mark.slow
def test_compile_trains_and_evaluates_with_partial_batches(tmp_path):
    """--compile on a CPU: the backbone is compiled in place (checkpoints keep their names); training,
    evaluation (another graph) and the last partial batch of each split all run, and the run resumes."""
    argv = ["quadratic", *TINY, "--epochs", "1", "--synthetic-size", "150", "--batch-size", "32", "--compile"]
    proc = run_cli([*argv, "--output-dir", str(tmp_path)])
    assert proc.wait(timeout=900) == 0, proc.stderr.read().decode()[-3000:]
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["n_train_images"] % 32 and metrics["n_test_images"] % 256  # partial last batches
    state = weights(tmp_path / "quadratic/version_0/checkpoints/last.ckpt")
    assert "backbone.blocks.0.attention.proj.weight" in state  # no _orig_mod in the names
    module = ImageClassifier.from_checkpoint(tmp_path / "quadratic/version_0/checkpoints/last.ckpt")
    assert module.hparams.model == "quadratic"
