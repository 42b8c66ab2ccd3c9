import platform
import resource

import pytest
import torch

from sa_conv import allocator


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


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_a_large_tensor_made_again_reuses_pages_already_faulted_in():
    assert allocator.keep_freed_memory()
    size = 96 * 2**20 // 4  # 96 MiB of float32: above glibc's largest mmap threshold (32 MiB)
    torch.empty(size).fill_(1.0)  # the first one may fault its pages in
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(size).fill_(1.0)  # freed above; made again
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 0.1 * size * 4 / resource.getpagesize()  # a fresh mmap would fault in every page
