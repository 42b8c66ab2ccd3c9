from types import SimpleNamespace

import pytest
import torch

import sa_conv.training.callbacks as callbacks
from sa_conv.training.callbacks import TrainingProgress


def test_a_resumed_run_projects_from_its_own_speed_and_records_the_whole_runs(monkeypatch, capsys):
    """Resumed at 100x the speed of its first stretch: the projection follows this process, the record
    keeps the whole run's images/s."""
    progress = TrainingProgress(lines=False)
    progress.load_state_dict({"images": 1000, "steps": 10, "seconds": 100.0, "history": []})  # 10 images/s
    trainer = SimpleNamespace(
        world_size=1,
        global_step=10,
        max_epochs=None,
        estimated_stepping_batches=1010,
        datamodule=None,
        progress_bar_callback=None,
        is_global_zero=True,
    )
    clock = iter(0.1 * t for t in range(100))
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    batch = (torch.zeros(100, 3, 2, 2), torch.zeros(100))
    for i in range(4):  # the first step is warm-up, left out; each later one takes 0.1 s: 1000 images/s
        progress.on_train_batch_start(trainer, None, batch, i)
        progress.on_train_batch_end(trainer, None, None, batch, i)
        trainer.global_step += 1
    assert progress.current_images_per_second == pytest.approx(1000.0)
    assert progress.images_per_second == pytest.approx(1300 / 100.3)  # the whole run: 1300 images in 100.3 s
    assert "speed: 1000.0 training images/s" in capsys.readouterr().out
    assert progress._remaining_seconds(trainer, None) == pytest.approx(
        (1010 - 14) * 0.1
    )  # this process's 0.1 s per step

    fresh = TrainingProgress(lines=False)
    fresh.load_state_dict({"images": 1000, "steps": 10, "seconds": 100.0, "history": []})
    assert fresh.current_images_per_second == 10.0  # nothing timed here yet: the run's speed
    assert fresh._remaining_seconds(trainer, None) == pytest.approx((1010 - 14) * 10.0)
