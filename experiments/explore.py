"""The attention explorer of a checkpoint: one self-contained HTML page (no server, no network).

    python -m experiments.explore CKPT [--out FILE.html] [--images N] [--data-dir DIR] [--synthetic]
                                       [--screenshot PNG [--layer L] [--query ROW COL]]

Pick one of N test images (the checkpoint's own data; synthetic images when there is none, said on the
page), point at a pixel, and see every head of every layer attend from there. Writes ``explorer.html``
in the checkpoint's run folder unless ``--out`` names another file.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.cli import (
    ArgumentParser,
    UserError,
    computing,
    data_flags,
    datamodule_of_checkpoint,
    main_guard,
    output_file,
    positive_int,
    trained_model,
)
from experiments.cli.memory import MemoryUse
from sa_conv.utils.files import atomic_write

if TYPE_CHECKING:
    from sa_conv.training.trained import TrainedModel


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.explore", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--out", type=output_file, help="the page (default: explorer.html in the run folder)")
    parser.add_argument("--images", type=positive_int, default=8, help="test images in the page (default: 8)")
    data_flags(parser, default_note="the checkpoint's own data")
    shot = parser.add_argument_group("a screenshot of the page (headless Chromium, through playwright)")
    shot.add_argument(
        "--screenshot", type=output_file, help="also save the page, as a browser draws it, to this PNG"
    )
    shot.add_argument("--layer", type=positive_int, help="the layer shown (default: 1)")
    shot.add_argument("--query", type=int, nargs=2, metavar=("ROW", "COL"), help="the query pixel pointed at")
    return parser


def screenshot(page: Path, png: Path, *, layer: int, query: tuple[int, int] | None) -> None:
    """The page in headless Chromium, the query pointed at with the mouse, saved as a PNG."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise UserError("--screenshot needs playwright (pip install playwright) and Chromium") from None
    browser_path = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
    )
    if browser_path is None:
        raise UserError("--screenshot needs Chromium (Debian: apt-get install chromium)")
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=flags)
        view = browser.new_page(viewport={"width": 1280, "height": 900})
        view.goto(page.resolve().as_uri())
        view.wait_for_selector("body[data-rendered]", state="attached")
        layers = view.locator("#layer option").count()
        if not 1 <= layer <= layers:
            raise UserError(f"--layer {layer}: the model has {layers} layers")
        view.select_option("#layer", str(layer - 1))
        grid = view.evaluate("DATA.grid")
        row, col = query or (grid // 2, grid // 2)
        if not (0 <= row < grid and 0 <= col < grid):
            raise UserError(f"--query {row} {col} is outside the {grid}x{grid} token grid")
        box = view.locator("#main").bounding_box()
        if box is None:
            raise UserError("the page drew no attention map to point at")
        view.mouse.move(
            box["x"] + (col + 0.5) / grid * box["width"], box["y"] + (row + 0.5) / grid * box["height"]
        )
        view.wait_for_function(f"document.body.dataset.rendered === '{layer - 1},0,{row},{col}'")
        atomic_write(png, lambda tmp: tmp.write_bytes(view.screenshot(full_page=True)), what="screenshot")
        browser.close()


def check_view(backbone: Any, *, layer: int | None, query: list[int] | None) -> None:
    """``UserError`` for a layer or query pixel the model does not have (before anything is written)."""
    layers, grid = len(backbone.blocks), backbone.config.grid
    if layer is not None and layer > layers:
        raise UserError(f"--layer {layer}: the model has {layers} layers")
    if query is not None and not all(0 <= q < grid for q in query):
        raise UserError(
            f"--query {query[0]} {query[1]} is outside the {grid}x{grid} token grid (0 to {grid - 1})"
        )


def default_out(checkpoint: Path) -> Path:
    """``explorer.html`` in the run folder of a run's checkpoint, else beside the checkpoint."""
    folder = checkpoint.resolve().parent
    if folder.name == "checkpoints":
        return folder.parent / "explorer.html"
    return checkpoint.with_suffix(".html")


def images_for(record: TrainedModel, args: Any, n: int) -> tuple[Any, Any, str]:
    """``n`` test images as stored and as the model takes them, and where they come from (the page says):
    the checkpoint's own data, ``--data-dir``, or synthetic images when no data can be had."""
    from sa_conv.data.config import DataConfig
    from sa_conv.data.datamodule import CIFAR10DataModule
    from sa_conv.data.sources import DataError
    from sa_conv.utils.safe_load import CheckpointError

    try:
        data = datamodule_of_checkpoint(record, args)
        note = f"{n} test images of {data.data_dir or 'synthetic data'}"
        images, _ = data.evaluation_images(n, normalized=False)
    except (UserError, CheckpointError, DataError):  # the data is not here, nor can it be downloaded
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
    computing()  # the arguments are checked: now the heavy imports
    from sa_conv.analysis.explorer import explorer_data, write_explorer

    out = args.out or default_out(args.checkpoint)
    if out.is_dir():
        raise UserError(f"--out {out} is a folder: name the page's file, e.g. {out / 'explorer.html'}")
    if args.screenshot is None and (args.layer is not None or args.query is not None):
        raise UserError("--layer and --query choose what --screenshot shows: give --screenshot PNG")
    record, module = trained_model(args.checkpoint, needs_attention="attention to explore")
    model = record.model
    check_view(module.backbone, layer=args.layer, query=args.query)
    images, normalized, note = images_for(record, args, args.images)
    metrics = default_out(args.checkpoint).with_name("metrics.json")
    test_acc = json.loads(metrics.read_text()).get("test_acc") if metrics.is_file() else None
    test_acc = record.shipped.test_acc if record.shipped is not None else test_acc
    meta = {
        "model": model,
        "config": record.run_config or module.hparams["model_config"],
        "checkpoint": str(args.checkpoint),
        "step": record.step,
        "test_acc": test_acc,
        "images_note": note,
    }
    with MemoryUse(batch_size=len(images), lower="lower it with --images {n}"):
        data = explorer_data(module.backbone, images, normalized, meta=meta)
    path = write_explorer(out, data)
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")
    if args.screenshot is not None:
        query = tuple(args.query) if args.query else None
        screenshot(path, args.screenshot, layer=args.layer or 1, query=query)
        print(args.screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
