"""What an out-of-memory error says: the batch size the broken work ran at, the flag that lowers it, and,
for a run with a checkpoint, how to resume. A command wraps its work in ``with MemoryUse(...)``; the error
guard (``experiments.cli.guard.main_guard``) turns the error into that one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

__all__ = ["MemoryUse", "is_out_of_memory", "memory_device", "out_of_memory_line"]

_OUT_OF_MEMORY = ("out of memory", "DefaultCPUAllocator: can't allocate memory", "CUBLAS_STATUS_ALLOC_FAILED")


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is a device or host out of memory: ``torch.cuda.OutOfMemoryError`` (CUDA out of
    memory), PyTorch's CPU allocator failing, or Python's ``MemoryError``."""
    if isinstance(err, MemoryError):
        return True
    return isinstance(err, RuntimeError) and any(words in str(err) for words in _OUT_OF_MEMORY)


def memory_device(err: BaseException) -> str:
    """Whose memory ran out, in words."""
    text = str(err)
    if type(err).__name__ == "OutOfMemoryError" or "CUDA" in text or "CUBLAS" in text:
        return "the GPU"
    if "MPS" in text:
        return "the MPS device"
    return "the CPU"


@dataclass(frozen=True, kw_only=True)
class MemoryUse:
    """The work of a command, for its out-of-memory line: the batch size it runs at, how to ask for a
    smaller one (``lower``, ``{n}``: half of it), what it is (``what``, e.g. ``training quadratic seed
    0``) and, for a run that can continue from a checkpoint, how (``resume``, ``{checkpoint}``) and where
    its newest checkpoint is (``checkpoint``, asked once the error has let go of the batch's memory).

    Used as ``with MemoryUse(batch_size=...):`` around the work: an out-of-memory error in the block
    carries it to ``main_guard`` (the innermost one, where blocks nest).
    """

    batch_size: int
    lower: str = "lower it with --batch-size {n}"
    what: str = ""
    resume: str = ""
    checkpoint: Callable[[], Path | None] | None = None

    def __enter__(self) -> MemoryUse:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if err is not None and is_out_of_memory(err) and not hasattr(err, "memory_use"):
            err.memory_use = self  # type: ignore[attr-defined]
        return False


def out_of_memory_line(where: str, use: MemoryUse | None) -> str:
    """The one line of an out-of-memory error on ``where`` (the GPU, the CPU) in the work ``use``."""
    if use is None:
        return f"out of memory on {where}: free memory, or ask for less at once (a smaller batch)"
    what = f" {use.what}" if use.what else ""
    head = f"out of memory on {where}{what} at batch size {use.batch_size}"
    half = use.batch_size // 2
    lower = (
        use.lower.format(n=half) if half else "not even one image fits: free memory or use a bigger device"
    )
    checkpoint = None
    if use.checkpoint is not None and use.resume:
        try:
            checkpoint = use.checkpoint()
        except Exception:  # the line says what it can; it never hides the error behind another
            checkpoint = None
    tail = f", or free memory and {use.resume.format(checkpoint=checkpoint)}" if checkpoint else ""
    return f"{head}: {lower}{tail}"
