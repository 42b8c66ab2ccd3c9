"""Render every attention figure of a checkpoint to PNG files named after the run (model, scale, seed).

python -m experiments.figures CKPT [--out figures/] [--name NAME] [--query ROW COL] [--images N]
                                   [--data-dir DIR]

The centre plot and the locality-over-training plot come from the run's own locality history (kept in
its checkpoints). Positional-only models need no image; content models average over ``--images`` test
images of the checkpoint's own data (or ``--data-dir``). ``<name>_locality.json`` holds the locality
scalars and, per layer and head, the shift of its peak from the query and how constant it is over the
interior queries and images (1: the head follows the query like one tap of a convolution).
"""

from __future__ import annotations

import sys
from pathlib import Path

from experiments.cli import (
    ArgumentParser,
    UserError,
    computing,
    data_flags,
    data_note,
    datamodule_of_checkpoint,
    main_guard,
    positive_int,
    trained_model,
)
from experiments.cli.memory import MemoryUse
from sa_conv.utils.files import save_png, write_json


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.figures", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument(
        "--out", type=Path, default=Path("figures"), help="folder of the PNGs (default figures/)"
    )
    parser.add_argument(
        "--name", help="file name prefix (default: the run's SCALE_MODEL-seedN, e.g. small_quadratic-seed0)"
    )
    parser.add_argument(
        "--query", type=int, nargs=2, metavar=("ROW", "COL"), help="query pixel of the token grid"
    )
    parser.add_argument(
        "--images", type=positive_int, default=100, help="test images averaged for content models"
    )
    data_flags(parser, default_note="the checkpoint's own data")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    import torch

    from sa_conv.analysis.locality import head_table
    from sa_conv.analysis.maps import attention_maps_of, figures_of, locality_queries

    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} is a file, not a folder")
    # read once: the model and the run's locality history
    record, module = trained_model(args.checkpoint, needs_attention="attention maps to draw")
    history = record.history  # checked as it was read, before any file is written
    backbone = module.backbone.eval()
    model, run = record.model, record.config()
    side = backbone.config.grid
    if args.query is not None and not all(0 <= v < side for v in args.query):
        raise UserError(f"--query {args.query[0]} {args.query[1]} is outside the {side}x{side} token grid")
    if not backbone.input_dependent:  # the attention does not depend on the image: no data needed
        images = torch.zeros(
            1, backbone.config.in_channels, backbone.config.image_size, backbone.config.image_size
        )
    else:
        data = datamodule_of_checkpoint(record, args)
        images, _ = data.evaluation_images(args.images)
        print(data_note(data, record), file=sys.stderr)
    name = args.name or f"{run.get('scale', 'custom')}_{model}-seed{run.get('seed', 0)}"  # as the study's
    args.out.mkdir(parents=True, exist_ok=True)
    written, scalars = [], {}
    query = tuple(args.query) if args.query else None
    with MemoryUse(batch_size=len(images), lower="lower it with --images {n}"):
        maps = attention_maps_of(backbone, images)  # per layer (B|1, heads, N, N): the figures and the table
    for tag, value in figures_of(
        backbone, images, maps=maps, query=query, history=history, lr=record.lr_schedule(), name=name
    ):
        if isinstance(value, float):
            scalars[tag] = value
            continue
        path = args.out / f"{name}_{tag.split('/', 1)[1]}.png"
        save_png(value, path)
        written.append(path)
    queries = locality_queries(side)  # per head: where its peak sits, how constantly
    heads = {f"layer{i + 1}": head_table(m, side, side, queries=queries) for i, m in enumerate(maps)}
    write_json(args.out / f"{name}_locality.json", {**scalars, "heads": heads})
    for path in [*written, args.out / f"{name}_locality.json"]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
