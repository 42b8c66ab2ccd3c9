"""What a run says of its pace: the measured speed and projection (``Pace``, a plain class, and the thin
``TrainingProgress`` callback), the projection from the counted FLOPs printed at once, and the first
Ctrl-C acknowledged at once."""

import json
import signal
from types import SimpleNamespace

import pytest
import torch
from helpers import QUIET, TINY, call

import sa_conv.training.run as training
from experiments import run
from sa_conv.training.callbacks import TrainingProgress
from sa_conv.training.signals import sigint_as_sigterm, stopping_line
from sa_conv.utils.machine import matmul_flops_per_s
from sa_conv.utils.pace import Pace, duration, flop_projection


def ticking(step: float = 0.1):
    """A clock that advances ``step`` seconds each time it is read."""
    ticks = iter(step * t for t in range(1000))
    return lambda: next(ticks)


def test_a_resumed_run_projects_from_its_own_speed_and_records_the_whole_runs():
    """Resumed at 100x the speed of its first stretch: the projection follows this process, the record
    keeps the whole run's images/s."""
    pace = Pace(clock=ticking())
    pace.resume(1000, 10, 100.0)  # 10 images/s
    counted = []
    for _ in range(4):  # the first step is warm-up, left out; each later one takes 0.1 s: 1000 images/s
        pace.start_batch()
        counted.append(pace.end_batch(100))
    assert counted == [False, True, True, True]
    assert (pace.images, pace.steps) == (1300, 13)
    assert pace.current_images_per_second == pytest.approx(1000.0)
    assert pace.images_per_second == pytest.approx(1300 / 100.3)  # the whole run: 1300 images in 100.3 s
    assert pace.remaining_seconds(steps_left=1010 - 14, epochs_left=0) == pytest.approx((1010 - 14) * 0.1)
    assert pace.step_seconds() == pytest.approx(0.1)

    fresh = Pace()
    fresh.resume(1000, 10, 100.0)
    assert fresh.current_images_per_second == 10.0  # nothing timed here yet: the run's speed
    assert fresh.remaining_seconds(steps_left=1010 - 14, epochs_left=0) == pytest.approx((1010 - 14) * 10.0)
    assert fresh.step_seconds() == pytest.approx(10.0)


def test_the_time_left_counts_evaluations_measured_or_from_the_training_rate():
    pace = Pace(eval_images=300, test_images=600, clock=ticking())
    pace.resume(3000, 30, 10.0)  # 300 images/s: an evaluated image costs a third, 1/900 s
    assert pace.eval_estimate([]) == pytest.approx((300 / 900, 600 / 900))
    assert pace.eval_estimate([2.0, 4.0]) == pytest.approx((3.0, 600 / 900))  # the measured mean
    left = pace.remaining_seconds(steps_left=10, epochs_left=2, measured=[2.0, 4.0])
    assert left == pytest.approx(10 * 10.0 / 30 + 2 * 3.0 + 600 / 900)
    same = Pace(eval_images=600, test_images=600)  # the paper's protocol: the evaluation is the test
    same.resume(3000, 30, 10.0)
    assert same.eval_estimate([5.0]) == (5.0, 0.0)


def test_the_step_time_is_projected_before_any_step_is_timed():
    pace = Pace(clock=ticking(0.5))
    assert pace.step_seconds() is None
    pace.projected_step_seconds = 7.0
    assert pace.step_seconds() == 7.0
    for _ in range(2):
        pace.start_batch()
        pace.end_batch(10)
    assert pace.step_seconds() == pytest.approx(0.5)  # measured: the projection is replaced


def test_the_progress_callback_says_the_measured_speed_after_the_warm_up(capsys):
    progress = TrainingProgress(lines=False, pace=Pace(clock=ticking()), total_steps=lambda: 1010)
    progress.load_state_dict({"images": 1000, "steps": 10, "seconds": 100.0, "history": []})
    trainer = SimpleNamespace(
        world_size=1, global_step=10, max_epochs=None, progress_bar_callback=None, is_global_zero=True
    )
    batch = (torch.zeros(100, 3, 2, 2), torch.zeros(100))
    for i in range(4):
        progress.on_train_batch_start(trainer, None, batch, i)
        progress.on_train_batch_end(trainer, None, None, batch, i)
        trainer.global_step += 1
    out = capsys.readouterr().out
    assert out.count("speed: 1000.0 training images/s; projected time") == 1
    assert progress.remaining_seconds(trainer) == pytest.approx((1010 - 14) * 0.1)
    assert progress.state_dict() == {
        "images": 1300,
        "steps": 13,
        "seconds": pytest.approx(100.3),
        "history": [],
    }


def test_the_flop_projection_counts_training_evaluation_and_test():
    seconds = flop_projection(
        steps_left=6,
        batches_per_epoch=3,
        epoch_images=50,
        eval_images=10,
        test_images=20,
        train_flops=3e6,
        eval_flops=1e6,
        flop_rate=1e6,
    )
    assert seconds == pytest.approx(2 * 50 * 3 + (2 * 10 + 20) * 1)  # two epochs, two evaluations, a test


def test_the_run_projects_its_duration_from_counted_flops_at_once(tmp_path, monkeypatch, capsys):
    """Before its first step, a run prints the projection from its counted FLOPs at the measured matrix
    rate (here a monkeypatched 2 MFLOP/s), then the measured speed as before."""
    rates = []

    def rate(device, dtype):
        rates.append((torch.device(device).type, dtype))
        return 2e6

    monkeypatch.setattr(training, "matmul_flops_per_s", rate)
    argv = ["quadratic", *TINY, "--batch-size", "16", "--synthetic", "--synthetic-size", "64"]
    argv += [*QUIET, "--no-explore", "--output-dir", str(tmp_path)]
    code, out, err = call(run, argv, capsys)
    assert code == 0, err
    assert rates == [("cpu", torch.float32)]
    m = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    # one epoch of all 52 training images, one evaluation of the 12 held out, the test of 16
    assert (m["n_train_images"], m["n_val_images"], m["n_test_images"]) == (52, 12, 16)
    expected = (52 * m["train_flops_per_image"] + (12 + 16) * m["eval_flops_per_image"]) / 2e6
    lines = out.splitlines()
    projected = next(i for i, line in enumerate(lines) if line.startswith("projected from the counted FLOPs"))
    assert "matrix-product rate (0.0 GFLOP/s): at least" in lines[projected]
    assert f"at least {duration(expected)} to the end of the run" in lines[projected]
    speed = next(i for i, line in enumerate(lines) if line.startswith("speed: "))
    assert projected < speed  # at once, before the measured speed


def test_a_first_ctrl_c_is_acknowledged_at_once_and_a_second_aborts(capsys):
    terms = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(signum))
    try:
        with sigint_as_sigterm(lambda: stopping_line(42.4)) as received:
            signal.raise_signal(signal.SIGINT)
            assert received["signal"] == "SIGINT" and terms == [signal.SIGTERM]  # stops like SIGTERM
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)  # the second: at once
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert err == "stopping after this step, about 42 s; Ctrl-C again to abort without a checkpoint\n"
    assert stopping_line(None) == "stopping after this step; Ctrl-C again to abort without a checkpoint"
    assert stopping_line(0.2).startswith("stopping after this step, about 1 s;")


def test_the_matrix_rate_is_measured_without_drawing_random_numbers():
    """A run measures the rate after seeding: its random draws (dropout, crops) must stay the same."""
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    rate = matmul_flops_per_s("cpu", size=128, budget_s=0.01)
    assert torch.equal(torch.rand(4), expected)
    assert 1e6 < rate < 1e15  # FLOP/s of some CPU
