"""The precision contract: under the project's bf16, every op of the float32 set runs in float32 on the
CPU (as CUDA autocast runs it), for the training step of every model; the products run in bf16; emulated
bf16 products equal native ones."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from sa_conv.models import MODELS, create_model
from sa_conv.training import precision
from sa_conv.training.precision import (
    FLOAT32_ATEN_OPS,
    Bf16ProductsInFloat32,
    ContractPrecision,
    mixed_precision,
)

PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "convolution"}


class OpDtypes(TorchDispatchMode):
    """Counts every ATen op dispatched, by name and the dtypes of its tensor outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[tuple[str, tuple[torch.dtype, ...]]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, tuple | list) else (out,)
        dtypes = tuple(o.dtype for o in outs if isinstance(o, torch.Tensor))
        self.ops[(func.overloadpacket.__name__, dtypes)] += 1
        return out


def tiny(name: str) -> torch.nn.Module:
    """Model ``name`` at a test size, in training mode (dropout on)."""
    if MODELS[name].family.__name__ == "ResNetConfig":
        return create_model(name, width=4).train()
    return create_model(name, layers=2, hidden=16, heads=4, ffn=16, impl="reference").train()


def step_ops(model: torch.nn.Module, context) -> OpDtypes:
    """The ops of a training step's forward (logits and loss) under ``context``."""
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    record = OpDtypes()
    with context, record:
        F.cross_entropy(model(images), labels)
    return record


@pytest.mark.parametrize("name", list(MODELS))
def test_no_op_of_the_float32_set_runs_in_bf16(name: str) -> None:
    ops = step_ops(tiny(name), mixed_precision("cpu", emulate_bf16=False)).ops
    in_bf16 = sorted({op for op, dtypes in ops if op in FLOAT32_ATEN_OPS and torch.bfloat16 in dtypes})
    assert in_bf16 == [], f"{name}: ops of the float32 set ran in bf16: {in_bf16}"
    assert any(op in FLOAT32_ATEN_OPS for op, _ in ops)  # the set is met (the loss at least)
    products = {op for op, dtypes in ops if op in PRODUCTS and dtypes == (torch.bfloat16,)}
    assert products, f"{name}: no product ran in bf16: the step is not mixed precision"


def test_plain_cpu_autocast_breaks_the_contract_where_the_contract_mends_it() -> None:
    """What the contract changes on a CPU: the LayerNorm outputs (the residual stream) leave bf16."""
    model = tiny("quadratic")
    plain = step_ops(model, torch.autocast("cpu", dtype=torch.bfloat16)).ops
    assert any(op == "native_layer_norm" and dtypes[0] == torch.bfloat16 for op, dtypes in plain)
    contract = step_ops(model, mixed_precision("cpu", emulate_bf16=False)).ops
    assert all(dtypes[0] == torch.float32 for op, dtypes in contract if op == "native_layer_norm")


def test_outside_autocast_the_contract_changes_nothing() -> None:
    x = torch.randn(4, 8).bfloat16()
    with mixed_precision("cpu", emulate_bf16=False), torch.autocast("cpu", enabled=False):
        assert x.sum().dtype == torch.bfloat16  # a layer's own no-autocast block keeps its dtypes
    with mixed_precision("cpu", emulate_bf16=False):
        assert x.sum().dtype == torch.float32
        assert F.layer_norm(x, (8,)).dtype == torch.float32


@pytest.mark.parametrize(
    "product",
    [
        lambda a, b, c: a @ b,
        lambda a, b, c: torch.bmm(a[None].expand(3, -1, -1), b[None].expand(3, -1, -1)),
        lambda a, b, c: torch.addmm(c, a, b),
        lambda a, b, c: c.clone().addmm_(a, b),
        lambda a, b, c: F.conv2d(a[None, None], b[None, None, :3, :3]),
    ],
    ids=["mm", "bmm", "addmm", "addmm_", "conv2d"],
)
def test_emulated_bf16_products_equal_native_ones(product) -> None:
    a, b = torch.randn(24, 40).bfloat16(), torch.randn(40, 16).bfloat16()
    c = torch.randn(24, 16).bfloat16()
    native = product(a, b, c)
    with Bf16ProductsInFloat32():
        emulated = product(a, b, c)
    assert emulated.dtype == native.dtype == torch.bfloat16
    # the same exact products, accumulated in float32 in another order: at most one bf16 rounding apart
    torch.testing.assert_close(emulated.float(), native.float(), rtol=2**-7, atol=1e-6)
    exact = product(a.double(), b.double(), c.double())
    assert (emulated.double() - exact).abs().max() <= (native.double() - exact).abs().max() * 1.01 + 1e-6


def test_an_emulated_training_step_has_the_gradients_of_a_native_one() -> None:
    model = tiny("quadratic").eval()  # no dropout: both steps see the same network
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([1, 7, 0, 3])

    def grads(emulate: bool) -> list[torch.Tensor]:
        model.zero_grad()
        with mixed_precision("cpu", emulate_bf16=emulate):
            loss = F.cross_entropy(model(images), labels)
        with Bf16ProductsInFloat32() if emulate else contextlib.nullcontext():
            loss.backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    native, emulated = grads(False), grads(True)
    reference = grads(False)
    for n, e, r in zip(native, emulated, reference, strict=True):
        scale = n.abs().max().clamp_min(1e-6)
        assert torch.equal(n, r)  # native bf16 on this CPU is deterministic
        assert (e - n).abs().max() <= 0.05 * scale  # bf16 noise between two accumulation orders


def test_the_trainer_takes_the_contract_for_bf16() -> None:
    plugin = ContractPrecision("cpu")
    with plugin.forward_context():
        x = torch.randn(2, 4)
        assert torch.nn.functional.linear(x, torch.randn(3, 4)).dtype == torch.bfloat16
        assert F.layer_norm(x.bfloat16(), (4,)).dtype == torch.float32


def test_layernorm_parameter_gradients_are_float32_sums_under_the_contract() -> None:
    """The divergence's mechanism: plain CPU autocast (PyTorch 2.14) sums LayerNorm's weight and bias
    gradients over the batch's tokens in bf16 (16-24% off at this size, docs/performance.md); under the
    contract they are the float32 sums of the same bf16 inputs."""
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(64, eps=1e-12)
    x = (torch.randn(25_600, 64) * 3 + 1).bfloat16()  # 100 images x 256 tokens, as a bf16 Linear's output
    upstream = torch.randn(25_600, 64).bfloat16()

    def grads(context) -> list[torch.Tensor]:
        norm.zero_grad()
        with context:
            out = norm(x)
        out.backward(upstream.to(out.dtype))
        return [norm.weight.grad.clone(), norm.bias.grad.clone()]

    norm.zero_grad()
    out = norm(x.float())
    out.backward(upstream.float())
    reference = [norm.weight.grad.clone(), norm.bias.grad.clone()]
    contract = grads(mixed_precision("cpu", emulate_bf16=False))
    for got, want in zip(contract, reference, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("native", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_the_projection_times_products_in_the_dtype_they_run_in(
    monkeypatch: pytest.MonkeyPatch, native: bool, expected: torch.dtype
) -> None:
    """bf16 on a CPU without it multiplies in float32 (emulated): its projection takes float32's rate."""
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert precision.product_dtype("bf16-mixed", "cpu") == expected
    assert precision.product_dtype("32-true", "cpu") == torch.float32
    assert precision.product_dtype("bf16-mixed", "cuda") == torch.bfloat16
