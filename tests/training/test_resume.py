"""A run resumes exactly: after a crash (from its epoch-end checkpoint or a time snapshot), a process
killed outright, or random kills (chaos), its metrics and weights are the uninterrupted run's bit for bit;
a checkpoint from elsewhere starts a run folder of its own; every checkpoint rebuilds its module."""

import json
import random
import signal
import time
from pathlib import Path

import pytest
import torch
from helpers import TEN_STEPS, StepCounter, assert_resumed_exactly, call, run_cli, weights, with_callback
from helpers.processes import wait_for_step

from experiments import run
from experiments.cli import main_guard
from sa_conv.training.checkpoints import module_from_checkpoint


@pytest.mark.parametrize(("at", "remaining"), [(10, 20), (14, 20)])  # killed at the first step of epoch 2
def test_a_crash_resumes_exactly_from_the_epoch_end_checkpoint(
    straight, tmp_path, monkeypatch, capsys, at, remaining
):
    argv = ["quadratic", *TEN_STEPS, "--epochs", "3", "--output-dir", str(tmp_path)]
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
    code, out, _ = call(run, [*argv, "--resume"], capsys)
    assert code == 0 and "resuming from" in out
    assert_resumed_exactly(straight, tmp_path / "quadratic/version_0", counter, remaining)


def test_a_bf16_run_resumes_exactly(straight_bf16, tmp_path, monkeypatch, capsys):
    argv = [
        "quadratic",
        *TEN_STEPS,
        "--epochs",
        "3",
        "--output-dir",
        str(tmp_path),
        "--precision",
        "bf16-mixed",
    ]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(14, "crash"))
        with pytest.raises(RuntimeError, match="went away"):
            run.main(argv)
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    code, out, _ = call(run, [*argv, "--resume"], capsys)
    assert code == 0 and "resuming from" in out and "precision bf16-mixed" in out
    assert_resumed_exactly(straight_bf16, tmp_path / "quadratic/version_0", counter, 20)


def test_a_time_snapshot_resumes_exactly(straight, tmp_path, monkeypatch, capsys):
    argv = ["quadratic", *TEN_STEPS, "--epochs", "3", "--output-dir", str(tmp_path)]
    argv += ["--snapshot-minutes", "1e-9"]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(17, "crash"))
        with pytest.raises(RuntimeError):
            run.main(argv)
    snapshot = tmp_path / "quadratic/version_0/checkpoints/snapshot.ckpt"
    assert torch.load(snapshot, weights_only=True)["global_step"] == 17  # every step, here
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call(run, [*argv, "--resume"], capsys)[0] == 0
    assert_resumed_exactly(straight, tmp_path / "quadratic/version_0", counter, 30 - 17)


def test_resuming_a_checkpoint_from_elsewhere_starts_a_new_run_folder(tmp_path, capsys):
    base = ["quadratic", *TEN_STEPS, "--epochs", "1"]
    assert main_guard(run.main)([*base, "--output-dir", str(tmp_path / "a")]) == 0
    assert main_guard(run.main)([*base, "--output-dir", str(tmp_path / "b")]) == 0  # an unrelated run
    before = (tmp_path / "b/quadratic/version_0/metrics.json").read_text()
    ckpt = tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt"
    assert call(run, [*base, "--output-dir", str(tmp_path / "b"), "--resume", str(ckpt)], capsys)[0] == 0
    assert (tmp_path / "b/quadratic/version_0/metrics.json").read_text() == before  # untouched
    assert (tmp_path / "b/quadratic/version_1/metrics.json").is_file()


def test_the_module_rebuilds_from_every_checkpoint(straight):
    for path in (straight / "checkpoints").iterdir():
        module = module_from_checkpoint(path)
        assert module.hparams.model == "quadratic"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_killed_process_resumes_to_the_same_result(tmp_path, how):
    base = [
        "quadratic",
        *TEN_STEPS,
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
    assert wait_for_step(killed, lambda: latest_step(tmp_path / "b"), 70), (
        "no step 70 (the run ended or stalled)"
    )  # mid-epoch 2
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


def mtime(path: Path) -> float:
    """When the file was last written (0 while it is gone: between a checkpoint's removal and its
    replacement)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


_read: dict[tuple[Path, float], int] = {}  # step checkpoints already read, by path and write time


def latest_step(folder: Path) -> int:
    """The training step of the newest step checkpoint under `folder` (-1 before the first one, or when
    the newest cannot be read: replaced while read); each version of a file is read once."""
    written = [(p, t) for p in folder.glob("**/step.ckpt") if (t := mtime(p)) > 0.0]  # gone: not there
    if not written:
        return -1
    newest = max(written, key=lambda version: version[1])
    if newest not in _read:
        try:
            _read[newest] = int(torch.load(newest[0], weights_only=True)["global_step"])
        except (OSError, RuntimeError, EOFError, KeyError):  # replaced while read: the next poll reads it
            return -1
    return _read[newest]


@pytest.mark.slow
def test_chaos_random_kills_then_resumes_end_in_the_same_weights(tmp_path):
    """SIGKILL at random moments (seeded), three times, each run resumed with --resume auto: the final
    weights equal the uninterrupted run's, bit for bit."""
    base = ["quadratic", *TEN_STEPS, "--epochs", "10", "--batch-size", "8", "--checkpoint-every", "3"]
    straight = run_cli([*base, "--output-dir", str(tmp_path / "a")])
    assert straight.wait(timeout=900) == 0, straight.stderr.read().decode()[-2000:]
    last_a = tmp_path / "a/quadratic/version_0/checkpoints/last.ckpt"
    total = int(torch.load(last_a, weights_only=True)["global_step"])
    # each attempt trains a random number of steps (at most a fifth of the run) past its first step
    # checkpoint, then dies a random moment later, within three steps at its own pace: between or
    # during checkpoint writes. Kills follow each attempt's progress, not the clock, so a busy or idle
    # machine changes nothing, and three attempts cannot finish the run.
    chaos, out = random.Random(0), tmp_path / "b"
    kills = 0
    for attempt in range(3):
        proc = run_cli([*base, "--output-dir", str(out), "--resume", "auto"])
        since = latest_step(out)
        assert wait_for_step(proc, lambda: latest_step(out), since + 1), proc.stderr.read().decode()[-2000:]
        begin, first = time.monotonic(), latest_step(out)
        target = first + chaos.randint(3, total // 5)
        assert wait_for_step(proc, lambda: latest_step(out), target), (
            f"attempt {attempt + 1} ended or stalled before step {target}"
        )
        pace = (time.monotonic() - begin) / (target - first)  # seconds per step, this attempt's own
        time.sleep(chaos.uniform(0, 3) * pace)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += proc.wait() == -signal.SIGKILL
        assert kills == attempt + 1, (
            f"attempt {attempt + 1} ended before its kill (exit {proc.returncode}): "
            + proc.stderr.read().decode()[-2000:]
        )
    final = run_cli([*base, "--output-dir", str(out), "--resume", "auto"])
    assert final.wait(timeout=900) == 0, final.stderr.read().decode()[-2000:]
    last = max((out / "quadratic").glob("version_*/metrics.json"), key=lambda p: p.stat().st_mtime)
    wa = weights(last_a)
    wb = weights(last.parent / "checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)
