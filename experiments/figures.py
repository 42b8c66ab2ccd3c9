"""Render every attention figure of a checkpoint to PNG files named after the model.

python -m experiments.figures CKPT [--out figures/] [--query ROW COL] [--images N] [--data-dir DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from matplotlib.figure import Figure

from experiments.cli import ArgumentParser, UserError, main_guard, write_json_atomic
from experiments.run import DEFAULT_DATA_DIR
from sa_conv.callbacks import figures_of
from sa_conv.data import CIFAR10DataModule, synthetic
from sa_conv.lit import ImageClassifier, read_checkpoint


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.figures", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=Path, default=Path("figures"))
    parser.add_argument("--name", help="file name prefix (default: the model's name)")
    parser.add_argument(
        "--query", type=int, nargs=2, metavar=("ROW", "COL"), help="query pixel of the token grid"
    )
    parser.add_argument("--images", type=int, default=100, help="test images averaged for content models")
    parser.add_argument("--data-dir", type=Path, help=f"test images from here (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--synthetic", action="store_true", help="synthetic images instead of CIFAR-10")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def test_images(args, n: int) -> torch.Tensor:
    """``n`` normalized test images (the model sees them; no figure shows their pixels)."""
    if args.synthetic:
        images, _ = synthetic(n, seed=1)
        dm = CIFAR10DataModule(source="synthetic")
    else:
        if args.data_dir is not None and not args.data_dir.is_dir():
            raise UserError(f"--data-dir {args.data_dir} does not exist")
        dm = CIFAR10DataModule(data_dir=args.data_dir or DEFAULT_DATA_DIR, val_size=0)
        dm.setup()
        images = dm.test_set.images[:n]
    return dm.normalize(images)


def save_png(fig: Figure, path: Path) -> None:
    """Write a PNG atomically (temporary file, then rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight", pad_inches=0.15)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ckpt = read_checkpoint(args.checkpoint)  # read once: the model and the callback's centre history
    module = ImageClassifier.from_checkpoint(ckpt)
    backbone = module.backbone.eval()
    model = module.hparams.model
    if not hasattr(backbone, "attention_maps"):
        raise UserError(f"{args.checkpoint} is a {model} checkpoint: it has no attention maps to draw")
    side = backbone.config.grid
    if args.query is not None and not all(0 <= v < side for v in args.query):
        raise UserError(f"--query {args.query[0]} {args.query[1]} is outside the {side}x{side} token grid")
    state = next((v for k, v in ckpt.get("callbacks", {}).items() if k.startswith("AttentionFigures")), {})
    n_images = args.images if backbone.config.content else 1
    images = test_images(args, n_images)
    name = args.name or model
    args.out.mkdir(parents=True, exist_ok=True)
    written, scalars = [], {}
    for tag, value in figures_of(
        backbone,
        images,
        query=tuple(args.query) if args.query else None,
        history=state.get("history"),
        steps=state.get("steps"),
        name=name,
    ):
        if isinstance(value, Figure):
            path = args.out / f"{name}_{tag.split('/', 1)[1]}.png"
            save_png(value, path)
            written.append(path)
        else:
            scalars[tag] = value
    write_json_atomic(args.out / f"{name}_locality.json", scalars)
    for path in written:
        print(path)
    print(args.out / f"{name}_locality.json")
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
