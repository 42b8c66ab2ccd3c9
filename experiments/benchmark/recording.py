"""The cost of recording the heads' dynamics: the quadratic model's training step with and without the
per-step part of the record (each centre's gradient norm added on the device, ``CentreGradients``),
alternated in one process."""

from __future__ import annotations

from typing import Any

import torch

from experiments.benchmark.steps import build_model, interleaved, sgd_step
from sa_conv.analysis.dynamics import CentreGradients

__all__ = ["bench_recording"]


def bench_recording(
    scale_name: str, batch: int, device: torch.device, *, repeats: int | None = None
) -> dict[str, Any]:
    """float32 steps of the quadratic model at a preset scale, plain and recording, interleaved
    (``repeats``: as ``interleaved``); their ratio is the recording's cost."""
    plain, recorded = (
        build_model("quadratic", scale_name, device),
        build_model("quadratic", scale_name, device),
    )
    meter = CentreGradients()
    encodings = recorded.encodings()
    steps = {
        "plain": sgd_step(plain, batch, device, "32-true"),
        "recording": sgd_step(
            recorded, batch, device, "32-true", after_backward=lambda: meter.add(encodings)
        ),
    }
    seconds = interleaved(steps, device, repeats=repeats)
    meter.take()  # what a snapshot does (one host sync per snapshot, not per step)
    return {
        "scale": scale_name,
        "batch": batch,
        "plain_images_per_s": batch / seconds["plain"],
        "recording_images_per_s": batch / seconds["recording"],
        "cost": seconds["recording"] / seconds["plain"] - 1,
    }
