"""What a resumed run is held to: the uninterrupted run's metrics and, bit for bit, its weights."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers.callbacks import StepCounter


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint."""
    return torch.load(path, weights_only=True)["state_dict"]


def assert_resumed_exactly(straight: Path, resumed: Path, counter: StepCounter, remaining: int) -> None:
    """The resumed run folder equals the uninterrupted one (metrics, history, last weights bit for bit),
    and the resumed process trained only the ``remaining`` steps."""
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (straight, resumed))
    for key in ("best_val_acc", "test_acc", "global_steps", "epochs_completed"):
        assert a[key] == b[key], key
    assert [h["val_acc"] for h in a["history"]] == [h["val_acc"] for h in b["history"]]
    wa, wb = weights(straight / "checkpoints/last.ckpt"), weights(resumed / "checkpoints/last.ckpt")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=0, msg=k)
    assert counter.steps == remaining  # the resumed process trained only what was left
