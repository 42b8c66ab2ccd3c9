"""Facts about the machine a run or a number comes from: what it is, what it computes natively.

No Lightning here: the command-line programs import this without paying for it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import torch

from sa_conv.utils.precisions import AUTO, BF16, FLOAT32, HALF, LOW_PRECISIONS, Precision
from sa_conv.utils.quote import quoted

__all__ = [
    "BF16_FLAGS",
    "available_memory",
    "check_devices",
    "cpu_flags",
    "cpu_has_native_bf16",
    "cpu_name",
    "cuda_has_native_bf16",
    "hardware",
    "matmul_flops_per_s",
    "peak_flops",
    "resolve_precision",
    "source_commit",
]

# x86: AVX-512 BF16 or AMX-BF16; aarch64: the Armv8.6 BF16 extension (the kernel's "bf16" feature)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def _cpuinfo() -> list[str]:
    path = Path("/proc/cpuinfo")
    try:
        return path.read_text().splitlines() if path.is_file() else []
    except OSError:
        return []


def available_memory(device: torch.device) -> int | None:
    """Bytes a new allocation can take on ``device``: the GPU's free memory, or the host's available
    memory (``MemAvailable``, Linux); None where it cannot be known."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_name() -> str:
    """The CPU's model name (Linux), else what ``platform`` knows."""
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel lists them (``flags`` on x86, ``Features`` on Arm)."""
    for line in _cpuinfo():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 products natively (AVX-512 BF16, AMX, Arm BF16); the environment
    variable ``SA_CONV_CPU_BF16`` (``native`` or ``emulated``) overrides its flags (a VM that hides them)."""
    override = os.environ.get("SA_CONV_CPU_BF16")  # empty: unset
    if override:
        if override not in ("native", "emulated"):
            raise ValueError(f"SA_CONV_CPU_BF16={quoted(override)}: expected native or emulated")
        return override == "native"
    flags = cpu_flags()
    if flags:
        return bool(flags & BF16_FLAGS)
    # no /proc/cpuinfo (macOS, Windows): ask PyTorch's own probe (private; no public one exists)
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    return bool(probe()) if probe is not None else False


def cuda_has_native_bf16() -> bool:
    """Whether the CUDA GPU computes bfloat16 natively (Ampere and later), not through emulation."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve_precision(precision: Precision, accelerator: str) -> Precision:
    """``auto`` -> ``bf16-mixed`` where bf16 is native (a CUDA GPU with bf16, a CPU with AVX-512 BF16, AMX or
    Arm BF16), else ``32-true`` (TF32 products on older CUDA GPUs, unless ``--no-tf32``).

    The project's bf16 (``sa_conv.training.precision``) trained the CPU-scale quadratic model like float32
    over two seeds (docs/performance.md); where it would be emulated it is slower than float32, so never the
    default there. ``accelerator``: the device the run asks for (``auto``: a GPU if there is one).
    """
    if precision != AUTO:
        return precision
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        native = cuda_has_native_bf16()
    else:
        native = cpu_has_native_bf16()
    return BF16 if native else FLOAT32


def check_devices(accelerator: str, devices: int | str) -> None:
    """More devices than the machine has: one clear error instead of a hang or a process storm."""
    if not isinstance(devices, int):
        return
    gpu = accelerator in ("gpu", "cuda")
    if gpu and not torch.cuda.is_available():
        raise ValueError(f"accelerator {accelerator}: this machine has no GPU")
    gpu = gpu or (accelerator == "auto" and torch.cuda.is_available())
    available = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    if devices > available:
        raise ValueError(f"devices {devices}: this machine has {available} {'GPUs' if gpu else 'CPU cores'}")


# dense (no sparsity) tensor-core peaks in FLOP/s, bf16 and TF32, of the GPUs this suite expects, by a
# part of their CUDA name (more specific first); Lightning's table lists sparse figures for some (H200)
DENSE_PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989.4e12, 494.7e12),
    ("H100 PCIe", 756.5e12, 378.0e12),
    ("H100", 989.4e12, 494.7e12),
    ("A100", 312.0e12, 156.0e12),
)


def peak_flops(device: torch.device, precision: Precision) -> float | None:
    """The device's dense matrix-product peak in FLOP/s for ``precision`` (bf16 for ``bf16-mixed``, TF32
    for ``32-true`` when float32 products use it, else float32): our table of dense peaks, then Lightning's
    table of GPUs; None on a CPU or an unknown GPU."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    tf32 = torch.get_float32_matmul_precision() != "highest"
    for part, bf16, tf32_peak in DENSE_PEAKS:
        if part in name:
            if precision in LOW_PRECISIONS:
                return bf16
            return tf32_peak if tf32 else None  # plain float32 peaks are not in the table
    from lightning_fabric.utilities.throughput import get_available_flops  # Lightning's table of GPU peaks

    dtype = {BF16: torch.bfloat16, HALF: torch.float16}.get(precision, torch.float32)
    return get_available_flops(device, dtype)


def matmul_flops_per_s(
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    size: int = 1024,
    budget_s: float = 0.25,
) -> float:
    """FLOP/s of one large square matrix product in ``dtype`` on ``device``, the best of the products
    that fit in about ``budget_s`` seconds (at least three): the rate no training step exceeds.
    A quick measure for a projection; ``experiments.benchmark.steps`` measures it at length."""
    device = torch.device(device)
    # constant operands: the time does not depend on the values, and no random number is drawn (a run
    # measures this after seeding; its draws must stay the same)
    a = b = torch.full((size, size), 0.5, device=device, dtype=dtype)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    best, start, runs = float("inf"), time.perf_counter(), 0
    torch.mm(a, b)  # warm-up: the first product pays for allocations and kernel selection
    sync()
    while runs < 3 or time.perf_counter() - start < budget_s:
        began = time.perf_counter()
        torch.mm(a, b)
        sync()
        best, runs = min(best, time.perf_counter() - began), runs + 1
    return 2 * size**3 / best


def source_commit() -> str | None:
    """The git commit of the sa-conv checkout running (``+dirty`` with uncommitted changes to its code),
    or None outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "sa_conv", "experiments"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def hardware() -> dict[str, object]:
    """The machine a number came from."""
    info: dict[str, object] = {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    return info
