"""A signal (SIGTERM, Ctrl-C) stops a run in one ``stopped:`` line with a checkpoint it resumes from
exactly, in training or in its test; the interrupt checkpoint goes once a later one exists."""

import os
import signal

import pytest
import pytorch_lightning as pl
from helpers import TEN_STEPS, StepCounter, assert_resumed_exactly, call, one_line_stop, with_callback

from experiments import run
from sa_conv.training.checkpoints import InterruptCheckpoint


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_a_checkpoint_and_resumes_exactly(straight, tmp_path, monkeypatch, capsys, sig, code):
    argv = ["quadratic", *TEN_STEPS, "--epochs", "3", "--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(13, sig))
        got, _, err = call(run, argv, capsys)
    line = one_line_stop(got, err)
    assert got == code and f"{sig.name} at step 13" in line and "--resume" in line
    # a Ctrl-C is acknowledged at once, with the step time measured so far (SIGTERM stops silently)
    acknowledged = "stopping after this step, about 1 s; Ctrl-C again to abort without a checkpoint"
    assert err.count(acknowledged) == (sig == signal.SIGINT)
    assert (tmp_path / "quadratic/version_0/checkpoints/interrupted.ckpt").is_file()
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call(run, [*argv, "--resume"], capsys)[0] == 0
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


def test_a_signal_while_testing_is_one_line_and_a_resume_finishes(tmp_path, monkeypatch, capsys):
    class KillWhileTesting(pl.Callback):
        def on_test_batch_end(self, trainer, *args, **kwargs) -> None:
            os.kill(os.getpid(), signal.SIGTERM)

    # 4,096 synthetic images: 1,024 test images in 4 batches (Lightning stops an evaluation before its last)
    argv = ["quadratic", *TEN_STEPS, "--epochs", "1", "--synthetic-size", "4096", "--limit-train-batches"]
    argv += ["2", "--output-dir", str(tmp_path)]
    with monkeypatch.context() as patch:
        with_callback(patch, KillWhileTesting())
        code, _, err = call(run, argv, capsys)
    assert code == 143 and "last.ckpt" in one_line_stop(code, err)
    checkpoints = tmp_path / "quadratic/version_0/checkpoints"
    assert not (checkpoints / "interrupted.ckpt").exists()  # the training was complete: nothing new to save
    assert not (tmp_path / "quadratic/version_0/metrics.json").exists()
    counter = StepCounter()
    with_callback(monkeypatch, counter)
    assert call(run, [*argv, "--resume"], capsys)[0] == 0
    assert counter.steps == 0 and (tmp_path / "quadratic/version_0/metrics.json").is_file()
