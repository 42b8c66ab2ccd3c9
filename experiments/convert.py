"""Theorem 1, one command away: convert a convolution into self-attention and check they agree.

python -m experiments.convert --kernel-size 3 --padding 1            # one random conv
python -m experiments.convert --sweep-alpha                          # error vs alpha, 1..100
python -m experiments.convert --checkpoint CKPT --layer layers.2.conv1 --data-dir DIR
python -m experiments.convert --checkpoint RESNET_CKPT --all [--json FILE]      # every conv of a ResNet18
python -m experiments.convert --checkpoint SA_CKPT --to-conv [--layers 1,2]      # trained attention -> conv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from torch import Tensor, nn

    from sa_conv.nn.conversion import ConvAsAttention
    from sa_conv.training.trained import TrainedModel

from experiments.cli import (
    ArgumentParser,
    UserError,
    computing,
    data_flags,
    datamodule_of_checkpoint,
    main_guard,
    output_file,
    positive_float,
    positive_int,
    seed_int,
    trained_model,
)
from experiments.cli.memory import MemoryUse, is_out_of_memory
from sa_conv.utils.files import write_json
from sa_conv.utils.quote import quoted


def _ints(text: str, *, minimum: int = 1) -> int | tuple[int, ...]:
    """argparse type: ``K`` or ``Kh,Kw``, each an integer >= ``minimum``."""
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K or Kh,Kw (integers), got {quoted(text)}") from None
    if any(p < minimum for p in parts):
        raise argparse.ArgumentTypeError(f"every value must be >= {minimum}, got {text}")
    return parts[0] if len(parts) == 1 else parts


def _padding(text: str) -> str | int | tuple[int, ...]:
    """argparse type: ``same``, ``valid``, ``P`` or ``Ph,Pw`` (>= 0)."""
    return text if text in ("same", "valid") else _ints(text, minimum=0)


def build_parser() -> ArgumentParser:
    """The command line: a random convolution's shape, the check, or a trained network to convert."""
    parser = ArgumentParser(prog="python -m experiments.convert", description=__doc__.splitlines()[0])
    _conv_flags(parser.add_argument_group("the random convolution"))
    _check_flags(parser.add_argument_group("the check"))
    _checkpoint_flags(parser.add_argument_group("a trained network (a checkpoint made by experiments.run)"))
    return parser


def _conv_flags(conv: argparse._ActionsContainer) -> None:
    """The random convolution's shape and input."""
    conv.add_argument("--dims", type=int, choices=(1, 2), default=2, help="1: Conv1d, 2: Conv2d (default: 2)")
    conv.add_argument(
        "--in-channels", type=positive_int, default=8, metavar="N", help="input channels (default: 8)"
    )
    conv.add_argument(
        "--out-channels", type=positive_int, default=16, metavar="N", help="output channels (default: 16)"
    )
    conv.add_argument("--kernel-size", type=_ints, default=3, metavar="K", help="K or Kh,Kw (default: 3)")
    conv.add_argument("--stride", type=_ints, default=1, metavar="S", help="S or Sh,Sw (default: 1)")
    conv.add_argument(
        "--padding", type=_padding, default=1, metavar="P", help="P, Ph,Pw, same or valid (default: 1)"
    )
    conv.add_argument("--dilation", type=_ints, default=1, metavar="D", help="D or Dh,Dw (default: 1)")
    conv.add_argument(
        "--groups", type=int, default=1, metavar="G", help="channel groups, dividing both counts (default: 1)"
    )
    conv.add_argument(
        "--padding-mode",
        default="zeros",
        choices=("zeros", "reflect", "replicate", "circular"),
        help="how the input is padded (default: zeros)",
    )
    conv.add_argument("--no-bias", action="store_true", help="a convolution without a bias")
    conv.add_argument(
        "--size",
        type=positive_int,
        default=16,
        metavar="N",
        help="input height and width (1D: length) (default: 16)",
    )
    conv.add_argument(
        "--batch",
        type=positive_int,
        default=4,
        metavar="N",
        help="inputs checked: random ones, or test images with --layer (default: 4)",
    )


def _check_flags(check: argparse._ActionsContainer) -> None:
    """How the attention twin is built and judged."""
    check.add_argument(
        "--alpha",
        type=float,
        default=46.0,
        metavar="A",
        help="quadratic encoding sharpness (default: 46, the paper's)",
    )
    check.add_argument(
        "--tolerance",
        type=positive_float,
        default=1e-5,
        metavar="TOL",
        help="max relative error to PASS (default: 1e-5)",
    )
    check.add_argument(
        "--max-heads", type=int, metavar="N", help="refuse kernels that need more heads (default: no limit)"
    )
    check.add_argument(
        "--impl",
        default="auto",
        choices=("auto", "reference", "separable"),
        help="the attention's computation; auto: the fastest exact one (default: auto)",
    )
    check.add_argument(
        "--seed", type=seed_int, default=0, metavar="N", help="seed of the random conv and input (default: 0)"
    )
    check.add_argument("--sweep-alpha", action="store_true", help="error for alpha = 1..100")
    check.add_argument(
        "--figure", type=output_file, metavar="FILE", help="save the conversion picture (2D) to this PNG"
    )


def _checkpoint_flags(ckpt: argparse._ActionsContainer) -> None:
    """A trained network to convert, and its data."""
    ckpt.add_argument(
        "--checkpoint",
        type=Path,
        metavar="CKPT",
        help="a resnet18 (--layer, --all) or SA (--to-conv) checkpoint",
    )
    what = ckpt.add_mutually_exclusive_group()
    what.add_argument(
        "--layer",
        metavar="NAME",
        help="check one Conv2d of a ResNet18 on its real inputs, e.g. layers.2.conv1",
    )
    what.add_argument(
        "--all", action="store_true", help="replace every convolution: an all-attention network"
    )
    what.add_argument("--to-conv", action="store_true", help="replace attention layers by their convolutions")
    ckpt.add_argument(
        "--layers", type=_ints, metavar="L", help="--to-conv: the layers (1-based, e.g. 1,2; default: all)"
    )
    data_flags(ckpt, default_note="the checkpoint's own data")
    ckpt.add_argument(
        "--json", type=output_file, metavar="FILE", help="--all / --to-conv: also write the report here"
    )
    ckpt.add_argument(
        "--eval-batch",
        type=positive_int,
        default=250,
        metavar="N",
        help="--all / --to-conv: test images per forward pass (default: 250)",
    )


def errors(got: Tensor, expected: Tensor) -> tuple[float, float]:
    """Max absolute error and max relative error (|diff| / max|expected|)."""
    import torch

    diff = (got - expected).abs().max().item()
    return diff, diff / max(expected.abs().max().item(), torch.finfo(expected.dtype).tiny)


def random_conv(args: argparse.Namespace) -> nn.Conv1d | nn.Conv2d:
    from torch import nn

    cls: type[nn.Conv1d] | type[nn.Conv2d] = nn.Conv1d if args.dims == 1 else nn.Conv2d
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


SWEEP_SHOWN = (1, 5, 10, 25, 46, 100)  # the rows printed besides the threshold's neighbours


def sweep(conv: nn.Conv1d | nn.Conv2d, x: Tensor, expected: Tensor, args: argparse.Namespace) -> int:
    """The error for every alpha in 1..100; prints the rows around the tolerance's threshold and a few
    landmarks (alpha 46 is the paper's), and the first alpha within the tolerance."""
    from sa_conv.nn.conversion import conv_to_attention

    rows = []
    for alpha in range(1, 101):
        abs_err, rel_err = errors(conv_to_attention(conv, alpha=float(alpha), impl=args.impl)(x), expected)
        rows.append((alpha, abs_err, rel_err, rel_err <= args.tolerance))
    first = next((alpha for alpha, _, _, ok in rows if ok), None)
    exact = next((alpha for alpha, _, rel, _ in rows if rel == 0), None)
    shown = {*SWEEP_SHOWN, *([first - 1, first] if first else [])}
    print(f"{'alpha':>6} {'max abs error':>14} {'max rel error':>14}  within {args.tolerance:g}?")
    for alpha, abs_err, rel_err, ok in rows:
        if alpha in shown:
            print(f"{alpha:>6} {abs_err:>14.3e} {rel_err:>14.3e}  {'PASS' if ok else 'FAIL'}")
    print(f"first alpha within {args.tolerance:g}: {first} (every alpha from 1 to 100 computed)")
    if exact is not None:
        print(f"bit-exact from alpha {exact}: every off-target weight below float32 resolution")
    elif args.impl != "reference":
        print(
            "(not bit-exact: the fused path sums the heads in another order than the convolution; "
            "--impl reference is, where this CPU's convolution sums in its order)"
        )
    else:
        print("(not bit-exact on this CPU: its convolution sums the taps in another order; float32 rounding)")
    return 0 if first is not None else 1


def check_checkpoint(args: argparse.Namespace) -> tuple[nn.Conv2d, Tensor]:
    """A Conv2d of a trained ResNet18 and its real input on a batch of test images."""
    import torch
    from torch import nn

    if not args.layer:
        raise UserError("--checkpoint needs --layer NAME, --all or --to-conv")
    record, module = trained_model(args.checkpoint)
    backbone = module.backbone.eval()
    convs = {name for name, m in backbone.named_modules() if type(m) is nn.Conv2d}
    if args.layer not in convs:
        raise UserError(
            f"{args.checkpoint} has no Conv2d named {quoted(args.layer)}; some: "
            f"{', '.join(sorted(convs)[:6])}"
        )
    images, _ = test_images(record, args, limit=args.batch)
    # the layer's real input: run the network up to it
    captured: list[Tensor] = []
    conv = cast(nn.Conv2d, backbone.get_submodule(args.layer))  # in convs: a Conv2d
    handle = conv.register_forward_pre_hook(lambda _m, inputs: captured.append(inputs[0]))
    with torch.no_grad():
        backbone(images)
    handle.remove()
    return conv, captured[0]


def test_images(
    record: TrainedModel, args: argparse.Namespace, *, limit: int | None = None
) -> tuple[Tensor, Tensor]:
    """Normalized test images and labels of the checkpoint's own data (or the flags' data)."""
    return datamodule_of_checkpoint(record, args).evaluation_images(limit)


def logits_of(model: nn.Module, images: Tensor, batch: int = 250) -> tuple[Tensor, float]:
    """Logits of every image, and the seconds per image."""
    import torch

    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        out = torch.cat([model(images[i : i + batch]) for i in range(0, len(images), batch)])
    return out, (time.perf_counter() - start) / len(images)


def compare(reference: Tensor, other: Tensor, labels: Tensor) -> dict[str, float]:
    """Accuracy of both, agreement of their predictions, largest logit difference relative to the max."""
    diff = (other - reference).abs().max() / reference.abs().max()
    return {
        "accuracy_before": (reference.argmax(1) == labels).float().mean().item(),
        "accuracy_after": (other.argmax(1) == labels).float().mean().item(),
        "agreement": (reference.argmax(1) == other.argmax(1)).float().mean().item(),
        "max_rel_logit_diff": diff.item(),
    }


def finish(report: dict[str, Any], lines: list[str], args: argparse.Namespace) -> int:
    """Print the summary lines; write the report with --json."""
    if args.json is not None:
        write_json(args.json, report)
    print("\n".join(lines))
    return 0


def convert_whole_network(args: argparse.Namespace) -> int:
    """Every convolution of a trained ResNet18 replaced by its attention twin, evaluated on the test split."""
    from sa_conv.nn.attention import MultiHeadSelfAttention2d
    from sa_conv.nn.conversion import convert_network
    from sa_conv.utils.machine import hardware

    record, module = trained_model(args.checkpoint)
    conv_net = module.backbone.eval()
    attention_net, converted = convert_network(conv_net, alpha=args.alpha, impl=args.impl)
    if not converted:
        raise UserError(f"{args.checkpoint} has no convolution to convert")
    images, labels = test_images(record, args)
    reference, conv_time = logits_of(conv_net, images, args.eval_batch)
    got, attention_time = logits_of(attention_net, images, args.eval_batch)
    measured = compare(reference, got, labels)
    heads = sum(m.heads for m in attention_net.modules() if isinstance(m, MultiHeadSelfAttention2d))
    report: dict[str, Any] = {
        "checkpoint": str(args.checkpoint),
        "layers_converted": converted,
        "attention_heads": heads,
        "alpha": args.alpha,
        "params_conv": sum(p.numel() for p in conv_net.parameters()),
        "params_attention": sum(p.numel() for p in attention_net.parameters()),
        "n_images": len(labels),
        "accuracy_conv": measured["accuracy_before"],
        "accuracy_attention": measured["accuracy_after"],
        "agreement": measured["agreement"],
        "max_rel_logit_diff": measured["max_rel_logit_diff"],
        "seconds_per_image_conv": conv_time,
        "seconds_per_image_attention": attention_time,
        "attention_slowdown": attention_time / conv_time,
        "hardware": hardware()["cpu"],
    }
    lines = [
        f"converted {converted} convolutions into {heads} attention heads (alpha {args.alpha:g}); parameters "
        f"{report['params_conv']:,} -> {report['params_attention']:,}",
        f"test accuracy on {len(labels)} images: conv {report['accuracy_conv']:.4f}, attention "
        f"{report['accuracy_attention']:.4f}; predictions agree on {100 * report['agreement']:.2f}%",
        f"largest logit difference: {report['max_rel_logit_diff']:.2e} of the largest logit",
        f"time per image: conv {1e3 * conv_time:.2f} ms, attention {1e3 * attention_time:.2f} ms "
        f"({report['attention_slowdown']:.1f}x slower; {report['hardware']})",
    ]
    return finish(report, lines, args)


def convert_attention_to_conv(args: argparse.Namespace) -> int:
    """Attention layers of a trained SA model replaced by their convolutions, evaluated on the test split."""
    from sa_conv.models.sa_classifier import SAClassifier
    from sa_conv.nn.conversion import ConvInPlaceOfAttention, attention_to_conv, conv_likeness, gaussian_layer

    record, module = trained_model(args.checkpoint, needs_attention="attention layers")
    model = module.backbone.eval()
    assert isinstance(model, SAClassifier)  # the models with attention layers
    n = len(model.blocks)
    chosen = sorted({args.layers} if isinstance(args.layers, int) else set(args.layers or range(1, n + 1)))
    if not all(1 <= i <= n for i in chosen):
        raise UserError(f"--layers must be in 1..{n}, got {args.layers}")
    images, labels = test_images(record, args)
    reference, _ = logits_of(model, images, args.eval_batch)
    side, layers = model.config.grid, []
    for i in chosen:
        block = model.blocks[i - 1]
        attention = gaussian_layer(block.attention)  # ValueError names a layer that has no Gaussian heads
        conv = attention_to_conv(attention)
        likeness = conv_likeness(attention, side, side)
        gaussians = attention.encoding.head_gaussians() if attention.encoding is not None else None
        assert gaussians is not None  # attention_to_conv took the layer: its heads are Gaussian
        taps = gaussians[0].round().long().tolist()
        layers.append({"layer": i, "taps": taps, "conv_likeness": likeness.tolist()})
        block.attention = ConvInPlaceOfAttention(conv)
    got, _ = logits_of(model, images, args.eval_batch)
    measured = compare(reference, got, labels)
    report: dict[str, Any] = {
        "checkpoint": str(args.checkpoint),
        "n_images": len(labels),
        "accuracy_attention": measured["accuracy_before"],
        "accuracy_conv": measured["accuracy_after"],
        "agreement": measured["agreement"],
        "max_rel_logit_diff": measured["max_rel_logit_diff"],
        "layers": layers,
    }
    lines = [
        f"layer {layer['layer']}: conv-likeness of each head (mass on its tap) "
        + " ".join(f"{v:.2f}" for v in layer["conv_likeness"])
        + "; taps (dy, dx) "
        + " ".join(f"({dy},{dx})" for dy, dx in layer["taps"])
        for layer in layers
    ]
    lines.append(
        f"test accuracy on {len(labels)} images: attention {report['accuracy_attention']:.4f}, with the "
        f"layers as convolutions {report['accuracy_conv']:.4f}; predictions agree on "
        f"{100 * report['agreement']:.2f}%"
    )
    return finish(report, lines, args)


def save_conversion_figure(
    conv: nn.Conv1d | nn.Conv2d, attention: ConvAsAttention, x: Tensor, path: Path
) -> None:
    """The kernel, the heads' centres on its grid, and their attention at a central query."""
    import torch

    from sa_conv.analysis.figures import conversion_figure
    from sa_conv.nn.conversion import dense_kernel
    from sa_conv.utils.files import save_png

    if x.ndim != 4:
        raise UserError("--figure draws 2D convolutions only")
    if path.is_dir() or path.suffix.lower() != ".png":
        raise UserError(f"--figure {path} must be a .png file path")
    side = 2 * int(attention.centres.abs().max()) + 3  # the receptive field around a central query
    grid = torch.zeros(1, side, side, conv.in_channels)
    probs = attention.attention.probabilities(grid)
    save_png(
        conversion_figure(dense_kernel(conv), attention.centres, probs, side, side, (side // 2, side // 2)),
        path,
    )
    print(f"figure: {path}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    import torch

    torch.manual_seed(args.seed)
    if (args.all or args.to_conv or args.layers) and args.checkpoint is None:
        raise UserError("--all, --to-conv and --layers need --checkpoint")
    if args.all or args.to_conv:
        with MemoryUse(batch_size=args.eval_batch, lower="lower it with --eval-batch {n}"):
            return convert_whole_network(args) if args.all else convert_attention_to_conv(args)
    with MemoryUse(batch_size=args.batch, lower="lower it with --batch {n}"):
        return convert_one(args)


def convert_one(args: argparse.Namespace) -> int:
    """One convolution (random, or a trained ResNet's layer on its real input) into attention, checked."""
    import torch

    from sa_conv.nn.conversion import conv_to_attention

    conv: nn.Conv1d | nn.Conv2d
    if args.checkpoint is not None:
        conv, x = check_checkpoint(args)
        source = f"{args.layer} of {args.checkpoint}, on its input for {args.batch} test images"
    else:
        conv = random_conv(args)
        shape = (args.batch, args.in_channels) + (args.size,) * args.dims
        x = torch.randn(shape)
        source = "random conv on random input"
    with torch.no_grad():
        try:
            expected = conv(x)
        except RuntimeError as err:
            if is_out_of_memory(err):
                raise
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
