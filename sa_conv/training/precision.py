"""The precision of a run: decided once (``auto`` resolved for the machine, or the resumed run's own),
the CPU's float32 arithmetic mode, and the project's mixed precision, one contract on every device.

bf16 autocast casts the matrix products to bf16; which other ops stay in float32 differs by device.
CUDA autocast runs a list of ops in float32 (``layer_norm``, ``softmax``, ``log_softmax``, losses,
``sum``, ``exp``, ``pow``, ``norm``, ...: PyTorch's "CUDA ops that can autocast to float32"); CPU
autocast's list is shorter and leaves e.g. ``layer_norm`` in the dtype of its input, which is bf16 after
a ``Linear``: on a CPU the LayerNorm output, and so the whole residual stream of a post-LN transformer,
is rounded to bf16. The contract (``FLOAT32_OPS``, enforced by ``Float32Ops``) runs CUDA's float32 list
in float32 on every device; the attention's logits and softmax are float32 in the layer itself, under
any autocast. docs/performance.md ("bf16: why it diverged, and the precision contract") has the runs
behind it.

``Bf16ProductsInFloat32`` computes bf16 matrix products and convolutions as float32 ones on their bf16
operands, rounded back to bf16: what a CPU with native bf16 computes (exact products of bf16 numbers,
float32 accumulation, one rounding of the result), at float32 speed on a CPU without (whose own bf16
kernels are 10-15x slower than float32 there).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Collection, Generator, Iterable
from typing import Any

import torch
from pytorch_lightning.plugins.precision import MixedPrecision
from torch import Tensor
from torch._ops import OpOverload
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from sa_conv.training.config import RunConfig
from sa_conv.utils.machine import cpu_has_native_bf16, resolve_precision
from sa_conv.utils.precisions import BF16, FLOAT32, Precision

__all__ = [
    "FLOAT32_ATEN_OPS",
    "FLOAT32_OPS",
    "Bf16ProductsInFloat32",
    "ContractPrecision",
    "Float32Ops",
    "bf16_emulated",
    "emulated_products",
    "flush_denormals",
    "mixed_precision",
    "precision_plugin",
    "product_dtype",
    "settle_precision",
    "warn_slow_bf16",
]

LOW_PRECISION = (torch.bfloat16, torch.float16)

# PyTorch's "CUDA ops that can autocast to float32" (torch.amp docs), by the name of the function as
# torch.X, Tensor.X or torch.nn.functional.X: each runs in float32 under the project's mixed precision
FLOAT32_OPS = frozenset(
    [
        "__pow__",
        "__rdiv__",
        "__rpow__",
        "__rtruediv__",
        "acos",
        "asin",
        "binary_cross_entropy_with_logits",
        "cosh",
        "cosine_embedding_loss",
        "cdist",
        "cosine_similarity",
        "cross_entropy",
        "cumprod",
        "cumsum",
        "dist",
        "erfinv",
        "exp",
        "expm1",
        "group_norm",
        "hinge_embedding_loss",
        "kl_div",
        "l1_loss",
        "layer_norm",
        "log",
        "log_softmax",
        "log10",
        "log1p",
        "log2",
        "margin_ranking_loss",
        "mse_loss",
        "multilabel_margin_loss",
        "multi_margin_loss",
        "nll_loss",
        "norm",
        "normalize",
        "pdist",
        "poisson_nll_loss",
        "pow",
        "prod",
        "reciprocal",
        "rsqrt",
        "sinh",
        "smooth_l1_loss",
        "soft_margin_loss",
        "softmax",
        "softmin",
        "softplus",
        "sum",
        "renorm",
        "tan",
        "triplet_margin_loss",
    ]
)

# the same set as the ATen operators a training step dispatches (what the dtype test reads)
FLOAT32_ATEN_OPS = frozenset(
    [
        "native_layer_norm",
        "native_group_norm",
        "_softmax",
        "_log_softmax",
        "nll_loss_forward",
        "nll_loss2d_forward",
        "sum",
        "exp",
        "expm1",
        "pow",
        "log",
        "log2",
        "log10",
        "log1p",
        "linalg_vector_norm",
        "norm",
        "cumsum",
        "cumprod",
        "prod",
        "reciprocal",
        "rsqrt",
        "acos",
        "asin",
        "cosh",
        "sinh",
        "tan",
        "erfinv",
        "softplus",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "kl_div",
        "cdist",
        "_cdist_forward",
        "binary_cross_entropy_with_logits",
        "renorm",
    ]
)


def _low(value: Any) -> bool:
    return isinstance(value, Tensor) and value.dtype in LOW_PRECISION


def _autocast_on(values: Iterable[Any]) -> bool:
    """Whether autocast is on for the device of a low-precision tensor among ``values``."""
    devices = {v.device.type for v in values if _low(v)}
    return any(torch.amp.is_autocast_available(d) and torch.is_autocast_enabled(d) for d in devices)


class Float32Ops(TorchFunctionMode):
    """Under autocast, every op of ``FLOAT32_OPS`` runs in float32: its bf16/fp16 tensors cast up first
    (differentiably), as CUDA autocast does. Outside autocast (a layer's ``no_autocast`` block), nothing
    changes: ops then run in the dtypes their callers chose."""

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: Collection[type],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in FLOAT32_OPS:
            flat, _ = tree_flatten((args, kwargs))
            if _autocast_on(flat):
                args, kwargs = tree_map(lambda v: v.float() if _low(v) else v, (args, kwargs))
        return func(*args, **kwargs)


_aten = torch.ops.aten
# matrix products and convolutions (forward and backward), as dispatched below autograd
_PRODUCTS = {
    _aten.mm.default,
    _aten.bmm.default,
    _aten.addmm.default,
    _aten.baddbmm.default,
    _aten.addbmm.default,
    _aten.mv.default,
    _aten.convolution.default,
    _aten.convolution_backward.default,
}
# in-place products: their out-of-place form, whose result is copied into the first operand
_PRODUCTS_IN_PLACE = {
    _aten.addmm_.default: _aten.addmm.default,
    _aten.baddbmm_.default: _aten.baddbmm.default,
}


class Bf16ProductsInFloat32(TorchDispatchMode):
    """Every matrix product and convolution whose floating operands are all bf16 runs as a float32 one on
    those operands (exact: a product of two bf16 numbers fits in float32), its result rounded to bf16:
    native bf16 arithmetic (float32 accumulation) on CPUs that lack it. Forward and backward alike."""

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Collection[type],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        kwargs = kwargs or {}
        if func in _PRODUCTS or func in _PRODUCTS_IN_PLACE:
            floats = [
                v for v in tree_flatten((args, kwargs))[0] if isinstance(v, Tensor) and v.is_floating_point()
            ]
            if floats and all(v.dtype == torch.bfloat16 for v in floats):
                up_args, up_kwargs = tree_map(lambda v: v.float() if _low(v) else v, (args, kwargs))
                if func in _PRODUCTS_IN_PLACE:
                    target = args[0]  # the in-place product's first operand, a bf16 tensor (above)
                    assert isinstance(target, Tensor)
                    return target.copy_(_PRODUCTS_IN_PLACE[func](*up_args, **up_kwargs))
                out = func(*up_args, **up_kwargs)
                return tree_map(
                    lambda v: v.bfloat16() if isinstance(v, Tensor) and v.is_floating_point() else v, out
                )
        return func(*args, **kwargs)


def bf16_emulated(device_type: str) -> bool:
    """Whether bf16 products are emulated on ``device_type``: a CPU without native bf16."""
    return device_type == "cpu" and not cpu_has_native_bf16()


def product_dtype(precision: Precision, device_type: str) -> torch.dtype:
    """The dtype a run's matrix products compute in: bf16 under ``bf16-mixed`` where it is native, float32
    otherwise (emulated bf16 multiplies in float32): the rate that bounds its steps."""
    return torch.bfloat16 if precision == BF16 and not bf16_emulated(device_type) else torch.float32


def emulated_products(device_type: str) -> contextlib.AbstractContextManager[None]:
    """A block whose bf16 products are emulated where ``bf16_emulated`` (a backward pass, say)."""
    return Bf16ProductsInFloat32() if bf16_emulated(device_type) else contextlib.nullcontext()


@contextlib.contextmanager
def mixed_precision(device_type: str, *, emulate_bf16: bool | None = None) -> Generator[None, None, None]:
    """bf16 autocast on ``device_type`` under the contract (``Float32Ops``); ``emulate_bf16`` (default:
    ``bf16_emulated``): its products through ``Bf16ProductsInFloat32`` too."""
    emulate = bf16_emulated(device_type) if emulate_bf16 is None else emulate_bf16
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=False))
        stack.enter_context(Float32Ops())
        if emulate:
            stack.enter_context(Bf16ProductsInFloat32())
        yield


class ContractPrecision(MixedPrecision):
    """Lightning's ``bf16-mixed`` with the project's contract: the forward under ``mixed_precision``,
    and, where bf16 products are emulated, the backward's products too."""

    def __init__(self, device: str) -> None:
        super().__init__("bf16-mixed", device)  # Lightning names its own literal
        self.emulate_bf16 = bf16_emulated(device)

    @contextlib.contextmanager
    def forward_context(self) -> Generator[None, None, None]:
        """The forward (training, validation, test, predict) in the project's mixed precision."""
        with mixed_precision(self.device, emulate_bf16=self.emulate_bf16):
            yield

    def backward(self, tensor: Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's backward; its bf16 products emulated where the forward's were."""
        with Bf16ProductsInFloat32() if self.emulate_bf16 else contextlib.nullcontext():
            super().backward(tensor, model, optimizer, *args, **kwargs)


def precision_plugin(precision: Precision, device_type: str) -> ContractPrecision | None:
    """The Trainer's precision plugin for ``precision``: the contract for ``bf16-mixed``, else Lightning's
    own (None)."""
    return ContractPrecision(device_type) if precision == BF16 else None


def settle_precision(
    config: RunConfig, accelerator: str, stored: dict[str, object] | None = None
) -> RunConfig:
    """The config with its precision decided: a resumed run keeps its own (``stored``, its checkpoint's
    config) whatever this machine would pick; a new run resolves ``auto`` for this machine."""
    if stored is None or config.precision != "auto":
        return config.replace(precision=resolve_precision(config.precision, accelerator))
    precision = stored.get("precision", "auto")
    if precision == "auto":  # written before runs recorded their precision, all on CPUs: auto was float32
        precision = FLOAT32
    return config.replace(precision=precision)


def flush_denormals() -> None:
    """Flush float32 denormals to zero on the CPU (x86 FTZ/DAZ), for the whole process.

    A quadratic head's softmax has tails e^-(alpha d^2) far below 1e-38: denormal numbers, on which x86
    arithmetic takes a slow microcode path. Flushed, the 6-layer CPU-scale step runs 1.5x faster in float32;
    what changes is below 1.2e-38 (the smallest normal float32), nothing a probability or a gradient of
    this model resolves. No effect on GPUs (and on CPUs without the mode it does nothing).

    The mode belongs to each thread, and the math library's worker threads copy it when they start: call
    this before the first parallel operation of the process (every command does, first thing), or some
    workers keep computing denormals (measured: the trained 6-layer 16-head step at 2 threads 1.2x slower)."""
    torch.set_flush_denormal(True)


def warn_slow_bf16(config: RunConfig, accelerator: str) -> None:
    """bf16 on a CPU without native bf16 (a resumed run keeps its precision): emulated, slower."""
    gpu = torch.cuda.is_available() and accelerator != "cpu"
    if config.precision == BF16 and not gpu and not cpu_has_native_bf16():
        print(
            "warning: this run trains in bf16-mixed and this CPU has no native bf16 (AVX-512 BF16, AMX): its "
            "bf16 products are emulated in float32 (the same rounding), slower than a float32 run here",
            file=sys.stderr,
        )
