"""The benchmark (``python -m experiments.benchmark``): speed and memory of every fast path as ratios
measured in one process. One module a part: ``tools`` (scales, the timer, peak memory), ``layers`` (the
attention variants and their scaling), ``steps`` (training steps of the quadratic model and of every
model, the allocator), ``data`` (the data path), ``report`` (the printed tables), ``command`` (the
command line, ``main``)."""

from experiments.benchmark.command import SECTIONS, main

__all__ = ["SECTIONS", "main"]
