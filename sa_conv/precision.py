"""The precision of a run: decided once (``auto`` resolved for the machine, or the resumed run's own),
and the CPU's float32 arithmetic mode."""

from __future__ import annotations

import sys
from typing import Any

import torch

from sa_conv.machine import cpu_has_native_bf16, resolve_precision
from sa_conv.run_config import RunConfig

__all__ = ["flush_denormals", "settle_precision", "warn_slow_bf16"]


def settle_precision(config: RunConfig, accelerator: str, stored: dict[str, Any] | None = None) -> RunConfig:
    """The config with its precision decided: a resumed run keeps its own (``stored``, its checkpoint's
    config) whatever this machine would pick; a new run resolves ``auto`` for this machine."""
    if stored is None or config.precision != "auto":
        return config.replace(precision=resolve_precision(config.precision, accelerator))
    precision = stored.get("precision", "auto")
    if precision == "auto":  # written before runs recorded their precision: what auto meant here then
        precision = resolve_precision("auto", accelerator)
    return config.replace(precision=precision)


def flush_denormals() -> None:
    """Flush float32 denormals to zero on the CPU (x86 FTZ/DAZ), for the whole process.

    A quadratic head's softmax has tails e^-(alpha d^2) far below 1e-38: denormal numbers, on which x86
    arithmetic takes a slow microcode path. Flushed, the 6-layer CPU-scale step runs 1.5x faster in float32;
    what changes is below 1.2e-38 (the smallest normal float32), nothing a probability or a gradient of
    this model resolves. No effect on GPUs (and on CPUs without the mode it does nothing).

    The mode belongs to each thread, and the math library's worker threads copy it when they start: call
    this before the first parallel operation of the process (every command does, first thing), or some
    workers keep computing denormals (measured: the trained 6-layer 16-head step at 2 threads 1.2x slower)."""
    torch.set_flush_denormal(True)


def warn_slow_bf16(config: RunConfig, accelerator: str) -> None:
    """bf16 on a CPU without native bf16 (a resumed run keeps its precision): emulated, slower."""
    gpu = torch.cuda.is_available() and accelerator != "cpu"
    if config.precision == "bf16-mixed" and not gpu and not cpu_has_native_bf16():
        print(
            "warning: this run trains in bf16-mixed and this CPU has no native bf16 (AVX-512 BF16, AMX): its "
            "bf16 products are emulated in float32 (the same rounding), slower than a float32 run here",
            file=sys.stderr,
        )
