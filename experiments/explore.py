"""The attention explorer of a checkpoint: one self-contained HTML page (no server, no network).

    python -m experiments.explore CKPT [--out FILE.html] [--images N] [--data-dir DIR] [--synthetic]

Pick one of N test images (the checkpoint's own data; synthetic images when there is none, said on the
page), point at a pixel, and see every head of every layer attend from there. Writes ``explorer.html``
in the checkpoint's run folder unless ``--out`` names another file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from experiments.cli import (
    ArgumentParser,
    UserError,
    data_flags,
    datamodule_of_checkpoint,
    main_guard,
    positive_int,
)
from sa_conv.checkpointing import CheckpointError, read_checkpoint
from sa_conv.data import CIFAR10DataModule, DataConfig
from sa_conv.explorer import explorer_data, write_explorer
from sa_conv.lit import ImageClassifier


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.explore", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=Path, help="the page (default: explorer.html in the run folder)")
    parser.add_argument("--images", type=positive_int, default=8, help="test images in the page (default: 8)")
    data_flags(parser, default_note="the checkpoint's own data")
    return parser


def default_out(checkpoint: Path) -> Path:
    """``explorer.html`` in the run folder of a run's checkpoint, else beside the checkpoint."""
    folder = checkpoint.resolve().parent
    if folder.name == "checkpoints":
        return folder.parent / "explorer.html"
    return checkpoint.with_suffix(".html")


def images_for(ckpt: dict[str, Any], args: Any, n: int) -> tuple[Any, Any, str]:
    """``n`` test images as stored and as the model takes them, and where they come from (the page says):
    the checkpoint's own data, ``--data-dir``, or synthetic images when no data can be had."""
    try:
        data = datamodule_of_checkpoint(ckpt, args)
        note = f"{n} test images of {data.data_dir or 'synthetic data'}"
        images, _ = data.evaluation_images(n, normalized=False)
    except (UserError, CheckpointError):  # the data is not here, or the checkpoint does not say which
        if args.data_dir is not None:
            raise
        data = CIFAR10DataModule(DataConfig(), source="synthetic", synthetic_size=max(4 * n, 16))
        note = f"{n} synthetic images (the checkpoint's data is not here: --data-dir DIR shows real ones)"
        images, _ = data.evaluation_images(n, normalized=False)
    if args.synthetic:
        note = f"{n} synthetic images (--synthetic)"
    elif data.resolved_source() == "synthetic" and "synthetic images" not in note:
        note = f"{n} synthetic images (the run trained on synthetic data)"
    return images, data.normalize(images), note


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or default_out(args.checkpoint)
    if out.is_dir():
        raise UserError(f"--out {out} is a folder: name the page's file, e.g. {out / 'explorer.html'}")
    ckpt = read_checkpoint(args.checkpoint)
    module = ImageClassifier.from_checkpoint(ckpt)
    model = ckpt["hyper_parameters"]["model"]
    if not module.backbone.has_attention:
        raise UserError(f"{args.checkpoint} is a {model} checkpoint: it has no attention to explore")
    images, normalized, note = images_for(ckpt, args, args.images)
    metrics = default_out(args.checkpoint).with_name("metrics.json")
    test_acc = json.loads(metrics.read_text()).get("test_acc") if metrics.is_file() else None
    meta = {
        "model": model,
        "config": ckpt.get("run_config") or module.hparams.model_config,
        "checkpoint": str(args.checkpoint),
        "step": ckpt.get("global_step"),
        "test_acc": test_acc,
        "images_note": note,
    }
    path = write_explorer(out, explorer_data(module.backbone, images, normalized, meta=meta))
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
