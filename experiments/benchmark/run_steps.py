"""Every model's float32 training step as a run sees it: one model at a time, its steps back to back on
all of torch's threads with freed memory kept, the fast path (``auto``) beside the reference where the
model has one (and the tiled kernel for content attention where ``auto`` takes another path), in two
rounds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from experiments.benchmark.steps import build_model, sgd_step
from experiments.benchmark.tools import median_seconds
from sa_conv.models import MODELS
from sa_conv.nn.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.utils.precisions import FLOAT32

__all__ = ["ROUNDS", "back_to_back", "bench_run_steps"]

ROUNDS = 2


def back_to_back(step: Callable[[], None], device: torch.device, steps: int) -> float:
    """Median seconds of ``steps`` consecutive calls of ``step``, after two warm-up calls."""
    step()
    step()
    return median_seconds(step, device, steps)


def _paths(name: str, scale_name: str, device: torch.device) -> tuple[Impl, ...]:
    """``auto``; ``reference`` where model ``name`` has attention with a choice of computation; and
    ``tiled`` for content attention on a CPU where ``auto`` takes another path (what it would gain)."""
    model = build_model(name, scale_name, device)
    layers = [layer for layer in model.attention_layers() if isinstance(layer, MultiHeadSelfAttention2d)]
    if not layers:
        return ("auto",)
    untiled = device.type == "cpu" and any(
        layer.content and layer.resolved_impl(device) != "tiled" for layer in layers
    )
    return ("auto", "reference", "tiled") if untiled else ("auto", "reference")


def bench_run_steps(
    scale_name: str,
    batch: int,
    device: torch.device,
    models: Sequence[str] | None = None,
    *,
    repeats: int | None = None,
) -> dict[str, Any]:
    """images/s of ``models``' (default: all) float32 steps, each path's ``repeats`` (default 10) steps
    back to back, model after model, in ``ROUNDS`` rounds; the best rounds' speed-ups over the reference."""
    names = list(models or MODELS)
    paths = {name: _paths(name, scale_name, device) for name in names}
    speeds: dict[str, dict[str, list[float]]] = {name: {p: [] for p in paths[name]} for name in names}
    for _ in range(ROUNDS):
        for name in names:
            for impl in paths[name]:
                step = sgd_step(build_model(name, scale_name, device, impl), batch, device, FLOAT32)
                speeds[name][impl].append(batch / back_to_back(step, device, repeats or 10))
    rows = []
    for name in names:
        best = {impl: max(values) for impl, values in speeds[name].items()}
        over = {impl: speed / best["reference"] for impl, speed in best.items() if "reference" in best}
        rows.append(
            {
                "model": name,
                "images_per_s": speeds[name],
                "auto_over_reference": over.get("auto"),
                "tiled_over_reference": over.get("tiled"),
            }
        )
    return {
        "scale": scale_name,
        "batch": batch,
        "threads": torch.get_num_threads(),
        "rounds": ROUNDS,
        "steps": repeats or 10,
        "rows": rows,
    }
