"""Theorem 1, one command away: convert a convolution into self-attention and check they agree.

python -m experiments.convert --kernel-size 3 --padding 1            # one random conv
python -m experiments.convert --sweep-alpha                          # error vs alpha, 1..100
python -m experiments.convert --checkpoint CKPT --layer layers.2.conv1 --data-dir DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from experiments.cli import ArgumentParser, UserError, main_guard, positive_int
from sa_conv.conversion import conv_to_attention


def _ints(text: str) -> int | tuple[int, ...]:
    parts = tuple(int(p) for p in text.split(","))
    return parts[0] if len(parts) == 1 else parts


def _padding(text: str) -> str | int | tuple[int, ...]:
    return text if text in ("same", "valid") else _ints(text)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.convert", description=__doc__.splitlines()[0])
    conv = parser.add_argument_group("the random convolution")
    conv.add_argument("--dims", type=int, choices=(1, 2), default=2)
    conv.add_argument("--in-channels", type=positive_int, default=8)
    conv.add_argument("--out-channels", type=positive_int, default=16)
    conv.add_argument("--kernel-size", type=_ints, default=3, help="K or Kh,Kw")
    conv.add_argument("--stride", type=_ints, default=1)
    conv.add_argument("--padding", type=_padding, default=1, help="P, Ph,Pw, same or valid")
    conv.add_argument("--dilation", type=_ints, default=1)
    conv.add_argument("--groups", type=int, default=1)
    conv.add_argument(
        "--padding-mode", default="zeros", choices=("zeros", "reflect", "replicate", "circular")
    )
    conv.add_argument("--no-bias", action="store_true")
    conv.add_argument("--size", type=positive_int, default=16, help="input height and width (length in 1D)")
    conv.add_argument("--batch", type=positive_int, default=4)
    check = parser.add_argument_group("the check")
    check.add_argument("--alpha", type=float, default=46.0, help="quadratic encoding sharpness (paper: 46)")
    check.add_argument("--tolerance", type=float, default=1e-5, help="max relative error to PASS")
    check.add_argument("--max-heads", type=int, help="refuse kernels that need more heads than this")
    check.add_argument("--impl", default="auto", choices=("auto", "reference", "separable"))
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--sweep-alpha", action="store_true", help="error for alpha = 1..100")
    check.add_argument("--figure", type=Path, help="save the conversion picture (2D) to this PNG")
    ckpt = parser.add_argument_group("a trained ResNet18")
    ckpt.add_argument("--checkpoint", type=Path, help="a resnet18 checkpoint made by experiments.run")
    ckpt.add_argument("--layer", help="name of a Conv2d in it, e.g. layers.2.conv1")
    ckpt.add_argument(
        "--data-dir", type=Path, help="check on real test images (ImageFolder or CIFAR-10 root)"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def errors(got: Tensor, expected: Tensor) -> tuple[float, float]:
    """Max absolute error and max relative error (|diff| / max|expected|)."""
    diff = (got - expected).abs().max().item()
    return diff, diff / max(expected.abs().max().item(), torch.finfo(expected.dtype).tiny)


def random_conv(args) -> nn.Module:
    cls = nn.Conv1d if args.dims == 1 else nn.Conv2d
    try:
        return cls(
            args.in_channels,
            args.out_channels,
            args.kernel_size,
            stride=args.stride,
            padding=args.padding,
            dilation=args.dilation,
            groups=args.groups,
            bias=not args.no_bias,
            padding_mode=args.padding_mode,
        )
    except (ValueError, RuntimeError) as err:
        raise UserError(f"invalid convolution: {err}") from None


def sweep(conv: nn.Module, x: Tensor, expected: Tensor, args) -> int:
    print(f"{'alpha':>6} {'max abs error':>14} {'max rel error':>14}  exact?")
    first = exact = None
    for alpha in range(1, 101):
        abs_err, rel_err = errors(conv_to_attention(conv, alpha=float(alpha), impl=args.impl)(x), expected)
        ok = rel_err <= args.tolerance
        if ok and first is None:
            first = alpha
        if rel_err == 0 and exact is None:
            exact = alpha
        print(f"{alpha:>6} {abs_err:>14.3e} {rel_err:>14.3e}  {'PASS' if ok else 'FAIL'}")
    print(f"first alpha within tolerance {args.tolerance:g}: {first}; first with error exactly 0: {exact}")
    return 0 if first is not None else 1


def check_checkpoint(args) -> tuple[nn.Module, Tensor]:
    from sa_conv.data import CIFAR10DataModule
    from sa_conv.lit import ImageClassifier

    if not args.layer:
        raise UserError("--checkpoint needs --layer NAME (a Conv2d of the model, e.g. layers.2.conv1)")
    backbone = ImageClassifier.from_checkpoint(args.checkpoint).backbone.eval()
    convs = {name for name, m in backbone.named_modules() if type(m) is nn.Conv2d}
    if args.layer not in convs:
        raise UserError(
            f"{args.checkpoint} has no Conv2d named {args.layer!r}; some: {', '.join(sorted(convs)[:6])}"
        )
    if args.data_dir is None:
        images = torch.randn(args.batch, 3, 32, 32)
    else:
        data = CIFAR10DataModule(data_dir=args.data_dir, batch_size=args.batch, augment=False)
        data.setup()
        images = data.normalize(data.test_set.images[: args.batch])
    # the layer's real input: run the network up to it
    captured: list[Tensor] = []
    conv = backbone.get_submodule(args.layer)
    handle = conv.register_forward_pre_hook(lambda _m, inputs: captured.append(inputs[0]))
    with torch.no_grad():
        backbone(images)
    handle.remove()
    return conv, captured[0]


def save_conversion_figure(conv: nn.Module, attention: nn.Module, x: Tensor, path: Path) -> None:
    """The kernel, the heads' centres on its grid, and their attention at a central query."""
    from sa_conv.conversion import dense_kernel
    from sa_conv.files import save_png
    from sa_conv.viz import conversion_figure

    if x.ndim != 4:
        raise UserError("--figure draws 2D convolutions only")
    if path.is_dir() or path.suffix.lower() != ".png":
        raise UserError(f"--figure {path} must be a .png file path")
    side = 2 * int(attention.centres.abs().max()) + 3  # the receptive field around a central query
    grid = torch.zeros(1, side, side, conv.in_channels)
    _, probs = attention.attention(grid, return_attention=True)
    save_png(
        conversion_figure(dense_kernel(conv), attention.centres, probs, side, side, (side // 2, side // 2)),
        path,
    )
    print(f"figure: {path}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    if args.checkpoint is not None:
        conv, x = check_checkpoint(args)
        source = f"{args.layer} of {args.checkpoint}" + (" on real test images" if args.data_dir else "")
    else:
        conv = random_conv(args)
        shape = (args.batch, args.in_channels) + (args.size,) * args.dims
        x = torch.randn(shape)
        source = "random conv on random input"
    with torch.no_grad():
        try:
            expected = conv(x)
        except RuntimeError as err:
            raise UserError(
                f"the conv cannot run on a {tuple(x.shape)} input: {str(err).splitlines()[0]}"
            ) from None
        if args.sweep_alpha:
            return sweep(conv, x, expected, args)
        attention = conv_to_attention(conv, alpha=args.alpha, max_heads=args.max_heads, impl=args.impl)
        got = attention(x)
    abs_err, rel_err = errors(got, expected)
    ok = rel_err <= args.tolerance
    if args.figure is not None:
        save_conversion_figure(conv, attention, x, args.figure)
    print(f"conv: {conv} ({source})")
    layer = attention.attention
    print(f"heads used: {layer.heads} (alpha {args.alpha:g}, computation {layer.resolved_impl(x.device)})")
    print(f"output: {tuple(got.shape)}")
    print(f"max abs error: {abs_err:.3e}")
    print(f"max rel error: {rel_err:.3e} (tolerance {args.tolerance:g})")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main_guard(main)())
