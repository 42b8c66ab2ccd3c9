"""Speed and memory of every fast path as a ratio against the reference, measured in one process.

    python -m experiments.benchmark [--device cpu|cuda] [--scale paper|tiny] [--json FILE]

The baseline of every ratio is the paper's own computation (``impl="reference"``): for positional
encodings the ``(heads, N, N)`` probabilities materialized once in float32 and contracted with the
full-width values; for content attention the materialized ``(B, heads, N, N)`` softmax.
"""

from __future__ import annotations

import dataclasses

from experiments.cli import ArgumentParser, computing, output_file, positive_int
from sa_conv.models.registry import MODELS
from sa_conv.utils.files import write_json

__all__ = ["SECTIONS", "main"]

SECTIONS = (
    "allocator",
    "variants",
    "scaling",
    "training_step",
    "model_steps",
    "run_steps",
    "recording",
    "data",
)


def main(argv: list[str] | None = None) -> int:
    """Measure the sections asked for, print the report and write it with ``--json``."""
    parser = ArgumentParser(prog="python -m experiments.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), help="where to measure (default: cuda where there is a GPU)"
    )
    parser.add_argument("--scale", default="paper", choices=("paper", "tiny"))
    parser.add_argument("--json", type=output_file, help="also write the results here")
    parser.add_argument(
        "--models-scale",
        default="small",
        choices=("tiny", "small", "small6", "paper"),
        help="the preset of the every-model training steps (default: small)",
    )
    parser.add_argument("--step-batch", type=positive_int, default=100, help="their batch (default: 100)")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=list(MODELS),
        help="the models of the back-to-back steps, run_steps (default: every model)",
    )
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
    computing()  # the arguments are checked: now the heavy imports
    import torch

    from experiments.benchmark.data import bench_data
    from experiments.benchmark.layers import BASELINE, bench_scaling, bench_variants
    from experiments.benchmark.recording import bench_recording
    from experiments.benchmark.report import print_report
    from experiments.benchmark.run_steps import bench_run_steps
    from experiments.benchmark.steps import bench_allocator, bench_model_steps, bench_training_step
    from experiments.benchmark.tools import SCALES
    from sa_conv.training.precision import flush_denormals
    from sa_conv.utils.allocator import keep_freed_memory
    from sa_conv.utils.machine import hardware

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
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
        "run_steps": lambda: bench_run_steps(
            args.models_scale, args.step_batch, device, args.models, repeats=args.repeats
        ),
        "recording": lambda: bench_recording(
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
