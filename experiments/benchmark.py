"""Speed and memory of every fast path as a ratio against the reference, measured in one process.

    python -m experiments.benchmark [--device cpu|cuda] [--scale paper|tiny] [--json FILE]

The baseline of every ratio is the paper's own computation (``impl="reference"``): for positional
encodings the ``(heads, N, N)`` probabilities materialized once in float32 and contracted with the
full-width values; for content attention the materialized ``(B, heads, N, N)`` softmax.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import torch

from experiments.benchmark_steps import bench_allocator, bench_model_steps, bench_training_step
from experiments.benchmark_tools import SCALES, Scale, forward_backward, peak_memory, time_it
from experiments.cli import ArgumentParser, main_guard, output_file, positive_int
from sa_conv.data.augmentation import CIFAR10_MEAN, CIFAR10_STD, random_crop_flip
from sa_conv.nn.attention import MultiHeadSelfAttention2d
from sa_conv.nn.encodings import (
    CompositeRelativeEncoding,
    GaussianEncoding,
    LearnedRelativeEncoding,
    QuadraticEncoding,
)
from sa_conv.training.precision import flush_denormals
from sa_conv.utils.allocator import keep_freed_memory
from sa_conv.utils.files import write_json
from sa_conv.utils.machine import hardware

BASELINE = (
    "reference: dense float32 probabilities (heads, N, N) shared by the batch, "
    "or (B, heads, N, N) with content"
)


def variants(
    dim: int, heads: int, grid: int, device: torch.device
) -> dict[str, tuple[MultiHeadSelfAttention2d, str]]:
    """Each attention variant at one size, with its fast path on ``device``."""
    content = "sdpa" if device.type == "cuda" else "tiled"
    return {
        "quadratic": (MultiHeadSelfAttention2d(dim, heads, encoding=QuadraticEncoding(heads)), "separable"),
        "gaussian": (MultiHeadSelfAttention2d(dim, heads, encoding=GaussianEncoding(heads)), "shared"),
        "learned": (
            MultiHeadSelfAttention2d(dim, heads, encoding=LearnedRelativeEncoding(heads, dim, max_size=grid)),
            "separable",
        ),
        "learned-content": (
            MultiHeadSelfAttention2d(
                dim, heads, encoding=LearnedRelativeEncoding(heads, dim, max_size=grid), content=True
            ),
            content,
        ),
        "composite": (
            MultiHeadSelfAttention2d(
                dim, heads, encoding=CompositeRelativeEncoding(heads, dim), content=True
            ),
            content,  # measured, though auto keeps the reference on a CPU (the bias is per image)
        ),
    }


def projection_floor(
    layer: MultiHeadSelfAttention2d, batch: int, grid: int, device: torch.device
) -> Callable:
    """The unavoidable part of a full-width layer: its output projection ``Linear(heads * dim, dim)`` alone,
    forward and backward (input gradient included), on a ``(B, H, W, heads * dim)`` input."""
    proj = copy.deepcopy(layer.proj)
    z = torch.randn(batch, grid, grid, proj.in_features, device=device, requires_grad=True)
    return forward_backward(proj, z, torch.randn(batch, grid, grid, proj.out_features, device=device))


def bench_variants(scale: Scale, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    for name, (layer, fast) in variants(scale.dim, scale.heads, scale.grid, device).items():
        layer = layer.to(device).train()
        x = torch.randn(scale.batch, scale.grid, scale.grid, scale.dim, device=device, requires_grad=True)
        grad = torch.randn(scale.batch, scale.grid, scale.grid, scale.dim, device=device)
        row: dict[str, Any] = {"variant": name, "fast_path": fast}
        for impl in ("reference", fast):
            layer.impl = impl
            run = forward_backward(layer, x, grad)
            row[f"{impl if impl == 'reference' else 'fast'}_s"] = time_it(
                run, device, scale.min_time, scale.repeats
            )
            row[f"{impl if impl == 'reference' else 'fast'}_peak_mb"] = (
                peak_memory(run, layer, x, device) / 2**20
            )
        row["floor_s"] = time_it(
            projection_floor(layer, scale.batch, scale.grid, device), device, scale.min_time, scale.repeats
        )
        row["speedup"] = row["reference_s"] / row["fast_s"]
        row["floor_ratio"] = row["fast_s"] / row["floor_s"]
        row["memory_ratio"] = row["fast_peak_mb"] / row["reference_peak_mb"]
        rows.append(row)
    return rows


def bench_scaling(scale: Scale, device: torch.device) -> dict[str, Any]:
    rows = []
    for grid in scale.scaling_grids:
        layer = MultiHeadSelfAttention2d(scale.dim, scale.heads, encoding=QuadraticEncoding(scale.heads)).to(
            device
        )
        x = torch.randn(scale.scaling_batch, grid, grid, scale.dim, device=device, requires_grad=True)
        grad = torch.randn_like(x)
        row: dict[str, Any] = {"grid": grid, "tokens": grid * grid}
        for impl in ("reference", "separable"):
            layer.impl = impl
            row[f"{impl}_s"] = time_it(
                forward_backward(layer, x, grad), device, scale.min_time, scale.repeats
            )
        rows.append(row)
    exponents = {}
    for impl in ("reference", "separable"):
        logs = [(math.log(r["tokens"]), math.log(r[f"{impl}_s"])) for r in rows]
        mx, my = sum(a for a, _ in logs) / len(logs), sum(b for _, b in logs) / len(logs)
        slope = sum((a - mx) * (b - my) for a, b in logs) / sum((a - mx) ** 2 for a, _ in logs)
        exponents[impl] = slope
    return {"rows": rows, "exponent": exponents}


def bench_data(device: torch.device, min_time: float, repeats: int | None = None) -> dict[str, Any]:
    """Augmentation + normalization per batch on the device vs per image with transforms.v2."""
    from torchvision.transforms import v2

    images = torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8, device=device)
    per_image = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
    normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(CIFAR10_MEAN, CIFAR10_STD)])
    batched = time_it(lambda: normalize(random_crop_flip(images)), device, min_time, repeats)
    cpu_images = images.cpu()
    looped = time_it(
        lambda: normalize(torch.stack([per_image(im) for im in cpu_images])), device, min_time, repeats
    )
    return {
        "batch": len(images),
        "batched_images_per_s": len(images) / batched,
        "per_image_v2_images_per_s": len(images) / looped,
        "speedup": looped / batched,
    }


SECTIONS = ("allocator", "variants", "scaling", "training_step", "model_steps", "data")


def print_report(report: dict[str, Any]) -> None:
    print(
        f"hardware: {report['hardware'].get('gpu') or report['hardware']['cpu']} | device {report['device']}"
    )
    print(f"baseline: {BASELINE}")
    if "allocator" in report:
        _print_allocator(report["allocator"])
    _print_variants(report)
    _print_steps(report)
    d = report.get("data")
    if d:
        print(
            f"data path (batch {d['batch']}): per-batch crop/flip/normalize "
            f"{d['batched_images_per_s']:,.0f} images/s, "
            f"per-image transforms.v2 {d['per_image_v2_images_per_s']:,.0f} images/s, {d['speedup']:.1f}x"
        )


def _print_variants(report: dict[str, Any]) -> None:
    s = report["sizes"]
    if "variants" not in report:
        return
    print(
        f"\nattention sublayer forward+backward (B={s['batch']}, {s['grid']}x{s['grid']}, dim {s['dim']}, "
        f"{s['heads']} heads, dropout off)"
    )
    print(
        f"{'variant':16} {'fast path':10} {'ref ms':>9} {'fast ms':>9} {'floor ms':>9} {'speedup':>8} "
        f"{'/floor':>7} {'ref MB':>9} {'fast MB':>9} {'mem':>6}"
    )
    for r in report["variants"]:
        print(
            f"{r['variant']:16} {r['fast_path']:10} {r['reference_s'] * 1e3:9.1f} {r['fast_s'] * 1e3:9.1f} "
            f"{r['floor_s'] * 1e3:9.1f} {r['speedup']:7.2f}x {r['floor_ratio']:6.2f}x "
            f"{r['reference_peak_mb']:9.1f} {r['fast_peak_mb']:9.1f} {r['memory_ratio']:6.2f}"
        )
    print("floor: the output projection Linear(heads * dim, dim) alone, forward + backward")
    sc = report.get("scaling")
    if not sc:
        return
    print(f"\nquadratic layer, time vs tokens (B={s['scaling_batch']})")
    print(f"{'grid':>6} {'tokens':>7} {'ref ms':>10} {'fast ms':>10} {'speedup':>8}")
    for r in sc["rows"]:
        print(
            f"{r['grid']:>6} {r['tokens']:>7} {r['reference_s'] * 1e3:10.1f} {r['separable_s'] * 1e3:10.1f} "
            f"{r['reference_s'] / r['separable_s']:7.2f}x"
        )
    print(
        f"fitted exponent of time vs tokens: reference {sc['exponent']['reference']:.2f}, "
        f"fast {sc['exponent']['separable']:.2f}"
    )


def _print_steps(report: dict[str, Any]) -> None:
    t = report.get("training_step")
    if t:
        _print_quadratic_step(t)
    m = report.get("model_steps")
    if m:
        _print_model_steps(m)


def _print_quadratic_step(t: dict[str, Any]) -> None:
    off, paper, bf16 = t["dropout_off"], t["paper_dropout"], t["bf16"]
    print(
        f"\ntraining step of the quadratic model (batch {t['batch']}), images/s:\n"
        f"  attention dropout off: reference {off['reference']:.1f}, fast {off['auto']:.1f}, "
        f"{off['speedup']:.2f}x\n"
        f"  the paper's dropout 0.1: reference with one mask per image {paper['per_image_reference']:.1f}, "
        f"reference with one mask per step {paper['reference']:.1f}, fast (shared) {paper['auto']:.1f}, "
        f"{paper['speedup']:.2f}x against the per-image reference\n"
        f"  bf16 autocast against float32 (attention dropout {bf16['attn_dropout']}): {bf16['float32']:.1f} "
        f"-> {bf16['bf16']:.1f}, {bf16['speedup']:.2f}x"
    )


def _print_model_steps(m: dict[str, Any]) -> None:
    print(
        f"\ntraining step of every model at the {m['scale']} scale (batch {m['batch']}), images/s, "
        f"interleaved in one process; the default precision here: {m['default_precision']}; one "
        f"2048 x 2048 matrix product in it: {m['matmul_gflop_per_s']:.1f} GFLOP/s"
    )
    print(
        f"{'model':16} {'eager f32':>9} {'float32':>9} {'flushed':>8} {'ref f32':>9} {'vs ref':>7} "
        f"{'bf16':>9} {'bf16/f32':>9} {'GFLOP/img':>10} {'GFLOP/s':>9} {'of mm':>6}"
    )
    for r in m["rows"]:
        ref, vs_ref = r.get("reference_float32_images_per_s"), r.get("default_over_reference")
        print(
            f"{r['model']:16} {r['eager_float32_images_per_s']:9.1f} {r['float32_images_per_s']:9.1f} "
            f"{r['flush_speedup']:7.2f}x {_or_dash(ref, '9.1f')} {_or_dash(vs_ref, '6.2f', 'x')} "
            f"{r['bf16_images_per_s']:9.1f} {r['bf16_speedup']:8.2f}x "
            f"{r['gflop_per_image']:10.3f} {r['default_gflop_per_s']:9.1f} "
            f"{r['default_fraction_of_matmul']:6.0%}"
        )
    print(
        "eager f32: float32 with denormals computed; float32: as the runs compute it (denormals flushed to "
        "zero; 'flushed': its speed-up); ref f32: the reference computation of the attention, as the runs "
        "compute float32 ('vs ref': the default precision's step against it); GFLOP/s: in the default "
        "precision, from the counted FLOPs of the trained path (forward + backward); of mm: that rate "
        "over the matrix product's"
    )


def _print_allocator(a: dict[str, Any]) -> None:
    print(
        f"\nfloat32 training steps at the {a['scale']} scale (batch {a['batch']}), images/s: glibc's "
        f"allocator settings, then freed memory kept (measured first in the process, one phase after the "
        f"other){'' if a['applied'] else ' -- not applied here: the C library is not glibc'}"
    )
    print(f"{'model':16} {'path':10} {'glibc':>9} {'kept':>9} {'speed-up':>9}")
    for r in a["rows"]:
        print(
            f"{r['model']:16} {r['path']:10} {r['default_allocator_images_per_s']:9.1f} "
            f"{r['kept_memory_images_per_s']:9.1f} {r['speedup']:8.2f}x"
        )


def _or_dash(value: float | None, spec: str, suffix: str = "") -> str:
    width = int(spec.split(".")[0])
    return "-".rjust(width + len(suffix)) if value is None else f"{value:{spec}}{suffix}"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda")
    )
    parser.add_argument("--scale", default="paper", choices=tuple(SCALES))
    parser.add_argument("--json", type=output_file, help="also write the results here")
    parser.add_argument(
        "--models-scale",
        default="small",
        choices=("tiny", "small", "small6", "paper"),
        help="the preset of the every-model training steps (default: small)",
    )
    parser.add_argument("--step-batch", type=positive_int, default=100, help="their batch (default: 100)")
    parser.add_argument(
        "--sections",
        nargs="+",
        default=list(SECTIONS),
        choices=SECTIONS,
        help="what to measure (default: everything)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        help="time each measurement by N calls, once: a fixed amount of work, whatever the machine's load "
        "(a smoke run; default: about --scale's time per measurement, the best of 3 rounds)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device on this machine")
    device = torch.device(args.device)
    scale = dataclasses.replace(SCALES[args.scale], repeats=args.repeats)
    flush_denormals()  # as the runs do (a CPU mode)
    if device.type == "cuda":  # as the runs do: float32 products in TF32
        torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    report = {
        "device": args.device,
        "scale": args.scale,
        "baseline": BASELINE,
        "sizes": {k: v for k, v in scale.__dict__.items() if k not in ("model", "min_time", "repeats")},
        "repeats": args.repeats,
        "hardware": hardware(),
    }
    if device.type == "cpu" and "allocator" in args.sections:  # first: it measures glibc's own settings
        allocator = bench_allocator(args.models_scale, args.step_batch, device, repeats=args.repeats)
        report["allocator"] = allocator
    keep_freed_memory()  # as the runs do
    sections = {
        "variants": lambda: bench_variants(scale, device),
        "scaling": lambda: bench_scaling(scale, device),
        "training_step": lambda: bench_training_step(scale, device),
        "model_steps": lambda: bench_model_steps(
            args.models_scale, args.step_batch, device, repeats=args.repeats
        ),
        "data": lambda: bench_data(device, scale.min_time, scale.repeats),
    }
    for name in args.sections:
        if name in sections:
            report[name] = sections[name]()
    print_report(report)
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
