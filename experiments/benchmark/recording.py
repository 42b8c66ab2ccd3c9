"""The cost of recording the heads' dynamics: the quadratic model's training step with and without the
per-step part of the record (each centre's gradient norm added on the device, ``CentreGradients``),
one step of each in turn in one process."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from experiments.benchmark.steps import build_model, sgd_step
from experiments.benchmark.tools import synchronize
from sa_conv.analysis.dynamics import CentreGradients
from sa_conv.utils.precisions import FLOAT32

__all__ = ["bench_recording"]


def bench_recording(
    scale_name: str, batch: int, device: torch.device, *, repeats: int | None = None
) -> dict[str, Any]:
    """float32 steps of the quadratic model at a preset scale, plain and recording, one of each in turn
    (``repeats`` pairs, default 30; medians): their ratio is the recording's cost."""
    plain, recorded = (
        build_model("quadratic", scale_name, device),
        build_model("quadratic", scale_name, device),
    )
    meter = CentreGradients()
    encodings = recorded.encodings()
    steps = {
        "plain": sgd_step(plain, batch, device, FLOAT32),
        "recording": sgd_step(recorded, batch, device, FLOAT32, after_backward=lambda: meter.add(encodings)),
    }
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()  # warm-up
    for _ in range(repeats or 30):
        for name, step in steps.items():
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    meter.take()  # what a snapshot does (one host sync per snapshot, not per step)
    plain_s, recording_s = (statistics.median(seconds[name]) for name in steps)
    return {
        "scale": scale_name,
        "batch": batch,
        "pairs": repeats or 30,
        "plain_images_per_s": batch / plain_s,
        "recording_images_per_s": batch / recording_s,
        "cost": recording_s / plain_s - 1,
    }
