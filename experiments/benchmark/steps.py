"""The benchmark's training steps: the quadratic model's step on its fast path against the reference (with
and without the paper's attention dropout, in float32 and bf16), every model's step at a preset scale
in float32 (fast and reference paths) and in the default precision, and the steps of the models with
dense attention before and after the allocator keeps freed memory; each as images per second, measured
in one process."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, cast

import torch
from torch import nn

from experiments.benchmark.tools import Scale, time_it
from sa_conv.analysis.flops import counted_flops
from sa_conv.models import MODELS, Backbone, create_model
from sa_conv.nn.attention import Impl, MultiHeadSelfAttention2d
from sa_conv.training.precision import emulated_products, mixed_precision
from sa_conv.training.presets import preset
from sa_conv.utils.allocator import keep_freed_memory
from sa_conv.utils.machine import resolve_precision
from sa_conv.utils.precisions import BF16, FLOAT32, Precision

__all__ = [
    "ALLOCATOR_MODELS",
    "bench_allocator",
    "bench_model_steps",
    "bench_training_step",
    "build_model",
    "interleaved",
    "sgd_step",
]

# the models whose steps make large tensors anew every step (dense attention), and one that does not
ALLOCATOR_MODELS = ("learned-content", "gaussian", "quadratic")


def per_image_dropout(layer: MultiHeadSelfAttention2d) -> Callable[..., torch.Tensor]:
    """A forward of ``layer``'s reference computation drawing one attention-dropout mask per image (what
    the suite did before following the paper's one mask per step): the baseline of the dropout step."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        b, h, w, d = x.shape
        probs = layer.probabilities(x).expand(b, -1, -1, -1)  # (B, heads, N, N)
        heads_out = (layer.attn_dropout(probs) @ x.reshape(b, 1, h * w, d)).transpose(1, 2)
        return layer.proj(heads_out.reshape(b, h, w, layer.heads * d))

    return forward


def step_images_per_second(
    model: nn.Module, scale: Scale, device: torch.device, *, bf16: bool = False
) -> float:
    """Images per second of full SGD steps (forward, backward, update) of ``model``."""
    step = sgd_step(model, scale.step_batch, device, BF16 if bf16 else FLOAT32)
    return scale.step_batch / time_it(step, device, scale.min_time, scale.repeats)


def bench_training_step(scale: Scale, device: torch.device) -> dict[str, Any]:
    """Training steps of the quadratic model at the scale: with attention dropout off (separable against
    the reference), with the paper's dropout 0.1 (one mask per step on the shared path, against the
    reference with one mask per image), and in bf16 autocast against float32."""

    def model(dropout: float, impl: Impl) -> Backbone:
        torch.manual_seed(0)
        m = create_model("quadratic", **{**scale.model, "attn_dropout": dropout}).to(device).train()
        for layer in m.attention_layers():
            assert isinstance(layer, MultiHeadSelfAttention2d)  # every layer of the quadratic model
            layer.impl = impl
        return m

    result: dict[str, Any] = {"batch": scale.step_batch}
    off = {impl: step_images_per_second(model(0.0, impl), scale, device) for impl in ("reference", "auto")}
    result["dropout_off"] = {**off, "speedup": off["auto"] / off["reference"]}
    baseline = model(0.1, "reference")
    for layer in baseline.attention_layers():
        layer.forward = per_image_dropout(cast(MultiHeadSelfAttention2d, layer))
    paper = {
        "per_image_reference": step_images_per_second(baseline, scale, device),
        "reference": step_images_per_second(model(0.1, "reference"), scale, device),
        "auto": step_images_per_second(model(0.1, "auto"), scale, device),
    }
    result["paper_dropout"] = {**paper, "speedup": paper["auto"] / paper["per_image_reference"]}
    dropout = scale.model.get("attn_dropout", 0.1)  # the scale's own training configuration
    precisions = {
        name: step_images_per_second(model(dropout, "auto"), scale, device, bf16=name == "bf16")
        for name in ("float32", "bf16")
    }
    result["bf16"] = {
        **precisions,
        "attn_dropout": dropout,
        "speedup": precisions["bf16"] / precisions["float32"],
    }
    return result


def interleaved(
    steps: Mapping[str, Callable[[], object]], device: torch.device, *, repeats: int | None = None
) -> dict[str, float]:
    """Seconds per call of each function, measured in alternation (3 rounds, the best kept), so that a
    machine's other load falls on every configuration alike; ``repeats``: one round of that many timed
    calls each (a fixed amount of work)."""
    for fn in steps.values():
        fn()  # warm-up
    best = dict.fromkeys(steps, math.inf)
    for _ in range(3 if repeats is None else 1):
        for name, fn in steps.items():
            best[name] = min(best[name], time_it(fn, device, 0.0, repeats))
    return best


def sgd_step(
    model: nn.Module,
    batch: int,
    device: torch.device,
    precision: Precision,
    *,
    after_backward: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """One full SGD step (forward, backward, update) of ``model`` on random images, in ``precision``;
    ``after_backward``: called between the backward pass and the update (a callback's hook)."""
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    bf16 = precision == BF16

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with mixed_precision(device.type) if bf16 else contextlib.nullcontext():
            loss = nn.functional.cross_entropy(model(images), labels)
        with emulated_products(device.type) if bf16 else contextlib.nullcontext():
            loss.backward()
        if after_backward is not None:
            after_backward()
        opt.step()

    return step


def _denormals_kept(step: Callable[[], None]) -> Callable[[], None]:
    """``step`` with float32 denormals computed as such (the runs flush them to zero on a CPU)."""

    def run() -> None:
        torch.set_flush_denormal(False)
        try:
            step()
        finally:
            torch.set_flush_denormal(True)

    return run


def _on_path(model: Backbone, impl: Impl) -> Backbone:
    """``model`` with every attention layer that has a choice of computation set to ``impl``."""
    for layer in model.attention_layers():
        if isinstance(layer, MultiHeadSelfAttention2d):
            layer.impl = impl
    return model


def _has_reference(model: Backbone) -> bool:
    """Whether ``model`` has attention layers with a reference computation to compare against."""
    return any(isinstance(layer, MultiHeadSelfAttention2d) for layer in model.attention_layers())


def build_model(name: str, scale_name: str, device: torch.device, impl: Impl = "auto") -> Backbone:
    """Model ``name`` at a preset scale in training mode, from seed 0, its attention on ``impl``."""
    torch.manual_seed(0)
    return _on_path(
        MODELS[name].build(preset(name, scale_name).resolved_model_config).to(device).train(), impl
    )


def bench_allocator(
    scale_name: str, batch: int, device: torch.device, *, repeats: int | None = None
) -> dict[str, Any]:
    """float32 training steps (reference and default paths) with glibc's own allocator settings, then
    after ``keep_freed_memory``: must run before anything in the process changes them (they cannot be
    put back), so the two phases are measured one after the other, each interleaved (``repeats``: as
    ``interleaved``)."""
    paths: list[tuple[str, Impl]] = [
        (name, impl) for name in ALLOCATOR_MODELS for impl in ("reference", "auto")
    ]
    steps = {
        f"{name}/{impl}": sgd_step(build_model(name, scale_name, device, impl), batch, device, FLOAT32)
        for name, impl in paths
    }
    before = interleaved(steps, device, repeats=repeats)
    applied = keep_freed_memory()
    after = interleaved(steps, device, repeats=repeats)
    rows = [
        {
            "model": name,
            "path": impl,
            "default_allocator_images_per_s": batch / before[f"{name}/{impl}"],
            "kept_memory_images_per_s": batch / after[f"{name}/{impl}"],
            "speedup": before[f"{name}/{impl}"] / after[f"{name}/{impl}"],
        }
        for name, impl in paths
    ]
    return {"scale": scale_name, "batch": batch, "applied": applied, "rows": rows}


def matmul_gflop_per_s(
    device: torch.device, dtype: torch.dtype, size: int = 2048, *, repeats: int | None = None
) -> float:
    """GFLOP/s of one large square matrix product in ``dtype``: the rate no training step exceeds."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    product = partial(torch.mm, a, b)
    seconds = interleaved({"mm": product}, device, repeats=repeats)["mm"]
    return 2 * size**3 / seconds / 1e9


def bench_model_steps(
    scale_name: str, batch: int, device: torch.device, *, repeats: int | None = None
) -> dict[str, Any]:
    """The training step of every model at a preset scale in float32 (as the runs compute it, denormals
    flushed, and plain eager float32), and in bf16-mixed, interleaved in one process, beside which
    precision ``auto`` picks on this device, and the float32 step of the reference computation where the
    model has one; achieved GFLOP/s from the counted FLOPs of the trained path, and as a fraction of the
    device's rate for one large matrix product in the default precision (``repeats``: as ``interleaved``)."""
    default = resolve_precision("auto", device.type)
    dtype = torch.bfloat16 if default == BF16 else torch.float32
    peak = matmul_gflop_per_s(device, dtype, repeats=repeats)
    rows = []
    for name in MODELS:
        model = build_model(name, scale_name, device)
        flops = counted_flops(model, training=True, batch=batch)
        steps: dict[str, Callable[[], None]] = {p: sgd_step(model, batch, device, p) for p in (FLOAT32, BF16)}
        if device.type == "cpu":  # flushing denormals is a CPU mode: on a GPU the two would be the same
            steps["eager"] = _denormals_kept(sgd_step(model, batch, device, FLOAT32))
        if _has_reference(model):
            reference = build_model(name, scale_name, device, "reference")
            steps["reference"] = sgd_step(reference, batch, device, FLOAT32)
        seconds = interleaved(steps, device, repeats=repeats)
        reference_speed = batch / seconds["reference"] if "reference" in seconds else None
        row: dict[str, Any] = {
            "model": name,
            "eager_float32_images_per_s": batch / seconds.get("eager", seconds[FLOAT32]),
            "float32_images_per_s": batch / seconds[FLOAT32],
            "reference_float32_images_per_s": reference_speed,
            "bf16_images_per_s": batch / seconds[BF16],
            "gflop_per_image": flops / 1e9,
        }
        row["bf16_speedup"] = row["bf16_images_per_s"] / row["float32_images_per_s"]
        row["flush_speedup"] = row["float32_images_per_s"] / row["eager_float32_images_per_s"]
        fastest = row["bf16_images_per_s"] if default == BF16 else row["float32_images_per_s"]
        row["default_gflop_per_s"] = flops * fastest / 1e9
        row["default_over_reference"] = fastest / reference_speed if reference_speed else None
        row["default_fraction_of_matmul"] = row["default_gflop_per_s"] / peak
        rows.append(row)
    return {
        "scale": scale_name,
        "batch": batch,
        "default_precision": default,
        "matmul_gflop_per_s": peak,
        "rows": rows,
    }
