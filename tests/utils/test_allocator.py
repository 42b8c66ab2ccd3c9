import platform
import subprocess
import sys

import pytest

from sa_conv.utils import allocator


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_keep_freed_memory_turns_off_mmap_blocks_and_heap_trimming(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(allocator, "_glibc", lambda: libc)
    assert allocator.keep_freed_memory()
    assert libc.calls == [(-4, 0), (-1, 2**31 - 1)]  # M_MMAP_MAX = 0, M_TRIM_THRESHOLD = INT_MAX


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    assert not allocator.keep_freed_memory()


STEPS = """
import resource, torch
from sa_conv.utils.allocator import keep_freed_memory
if {keep}:
    assert keep_freed_memory()
mib = 2**20 // 4  # float32 elements


def step():  # a training step's large tensors (above glibc's largest mmap threshold, 32 MiB), all freed
    held = [torch.empty(size * mib).fill_(1.0) for size in (96, 40, 96)]
    held += [torch.empty(10) for _ in range(5)]
    return sum(t.numel() * 4 for t in held[:3])


size = step()  # the first step faults its pages in
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(6):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (6 * size / resource.getpagesize()))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_steps_that_make_the_same_large_tensors_reuse_pages_already_faulted_in():
    """In a process of its own (the setting is for the whole process): with glibc's defaults every step
    faults all its large tensors' pages in anew; with freed memory kept, few (measured: 7-14%)."""

    def fresh_pages(keep: bool) -> float:
        run = subprocess.run([sys.executable, "-c", STEPS.format(keep=keep)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return float(run.stdout)

    assert fresh_pages(keep=False) > 0.9
    assert fresh_pages(keep=True) < 0.4
