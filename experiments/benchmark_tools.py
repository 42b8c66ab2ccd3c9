"""What every benchmark measurement shares: its sizes (a scale), one timer, peak memory."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["SCALES", "Scale", "forward_backward", "peak_memory", "synchronize", "time_it"]


@dataclass(frozen=True, kw_only=True)
class Scale:
    """Sizes of one benchmark scale."""

    batch: int
    grid: int
    dim: int
    heads: int
    scaling_batch: int
    scaling_grids: tuple[int, ...]
    step_batch: int
    model: dict[str, Any]
    min_time: float


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_it(fn: Callable[[], Any], device: torch.device, min_time: float) -> float:
    """Median seconds of ``fn`` (torch.utils.benchmark, blocked autorange)."""
    fn()  # warm-up
    # imported here, quietly: at import it warns "No CUDA runtime is found" on every CPU machine
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark as tbench

    timer = tbench.Timer(stmt="fn(); sync()", globals={"fn": fn, "sync": lambda: synchronize(device)})
    return timer.blocked_autorange(min_run_time=min_time).median


def peak_memory(fn: Callable[[], Any], module: nn.Module, inputs: Any, device: torch.device) -> float:
    """Peak bytes allocated while ``fn`` runs (CUDA allocator stats; MemTracker on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return float(torch.cuda.max_memory_allocated() - base)
    # PyTorch's only tracker of CPU tensor memory (no public one): the peak of weights, activations, grads
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(module, inputs)
    with tracker:
        fn()
    return float(tracker.get_tracker_snapshot("peak")[device]["Total"])


def forward_backward(layer: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).backward(grad)

    return run


SCALES = {
    "paper": Scale(
        batch=32,
        grid=16,
        dim=400,
        heads=9,
        scaling_batch=8,
        scaling_grids=(8, 16, 32),
        step_batch=16,
        model={},
        min_time=2.0,
    ),
    "tiny": Scale(
        batch=4,
        grid=8,
        dim=32,
        heads=3,
        scaling_batch=2,
        scaling_grids=(4, 8, 16),
        step_batch=4,
        model={"layers": 1, "hidden": 32, "heads": 3, "ffn": 32, "attn_dropout": 0.0},  # as the tiny runs
        min_time=0.05,
    ),
}
