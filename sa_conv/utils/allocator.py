"""The process's memory allocator on a CPU: keep freed memory for the next training step.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves every block above its mmap
threshold (at most 32 MiB) with a fresh ``mmap`` and returns it to the kernel when it is freed, and it
trims freed memory at the top of its heap: a training step that makes the same large tensors as the
step before (content attention's ``(B, heads, N, N)`` logits and probabilities: 236 MB each at the
``small`` scale) gets new pages every time, and the kernel faults in and zeroes each 4 KiB page on its
first write; ``python -m experiments.benchmark --sections allocator`` measures the steps before and after
(docs/performance.md). Kept memory stays with the process (its resident size stays near its peak),
which a training process wants anyway. A step's tensors, freed together, are made again mostly in pages
already faulted in (tests/utils/test_allocator.py); a lone large tensor made again is not always (glibc's
aligned allocation asks a few bytes more than the block it freed). Where another allocator is preloaded
(jemalloc, tcmalloc) the call reaches glibc's unused one and changes nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

__all__ = ["keep_freed_memory"]

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's glibc, or None on other C libraries (musl, macOS, Windows)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse: no ``mmap`` per large block, no trimming of its
    heap below 2 GiB. For the whole process, from the next allocation on; returns whether it applies
    (False, and nothing changes, where the C library is not glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX))
