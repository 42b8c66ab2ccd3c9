"""What every benchmark measurement shares: its sizes (a scale), one timer, peak memory."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["SCALES", "Scale", "forward_backward", "median_seconds", "peak_memory", "synchronize", "time_it"]


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
    repeats: int | None = None  # timed calls per measurement: bounded by work, not time (a smoke run)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn: Callable[[], Any], device: torch.device, calls: int) -> float:
    """Median seconds of ``calls`` consecutive calls of ``fn``, each timed on its own."""
    seconds = []
    for _ in range(calls):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def time_it(
    fn: Callable[[], Any], device: torch.device, min_time: float, repeats: int | None = None
) -> float:
    """Median seconds of ``fn`` on one thread: over ``repeats`` calls (a fixed amount of work, whatever
    the machine's load), else over as many as torch.utils.benchmark's blocked autorange takes to fill
    ``min_time`` seconds."""
    fn()  # warm-up
    if repeats is not None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as torch.utils.benchmark's Timer measures
        try:
            return median_seconds(fn, device, repeats)
        finally:
            torch.set_num_threads(threads)
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
