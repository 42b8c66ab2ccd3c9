"""The gallery of the shipped models: one attention explorer page per model and an index page.

    python -m experiments.gallery [--data-dir DIR] [--out weights/gallery] [--only NAME ...]
                                  [--screenshot NAME PNG]

Each page holds one test image per class (the first of each class in the test split); positional models
store their maps once (about 0.1 MiB a page); content models store them per image, so their pages hold
the images of the first three classes, at a coarser quantization where needed (a MiB or two).
``index.html`` lists every shipped model with its test accuracy and its committed locality row
(results/<scale>.json) and opens its page. Everything is offline: open ``index.html`` from the disk.
Without CIFAR-10 the pages show synthetic images, and say so.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from sa_conv.data.datamodule import CIFAR10DataModule

from experiments.cli import DEFAULT_DATA_DIR, ArgumentParser, UserError, check_data_dir, computing, main_guard
from sa_conv.models.manifest_entry import ManifestEntry
from sa_conv.training.config import RunConfig
from sa_conv.utils.files import write_text

CONTENT_IMAGES = 3  # a content model's maps differ per image: its page holds the first classes' images
CONTENT_BUDGET_MB = 1.5  # and their maps in coarser steps where needed


def one_per_class(data: CIFAR10DataModule) -> tuple[torch.Tensor, list[int]]:
    """The first test image of each class, in class order, uint8 ``(C, 3, 32, 32)``, and their labels."""
    images, labels = data.evaluation_images(normalized=False)
    firsts = [int((labels == c).nonzero()[0]) for c in sorted(set(labels.tolist()))]
    return images[firsts], [int(labels[i]) for i in firsts]


def gallery_images(config: RunConfig, data_dir: Path) -> tuple[CIFAR10DataModule, torch.Tensor, str]:
    """The data module, one test image per class, and the page's note on where they come from."""
    from sa_conv.data.sources import DataError
    from sa_conv.training.run import datamodule_for

    try:
        data = datamodule_for(config, data_dir=data_dir)
        images, labels = one_per_class(data)
        return data, images, f"one test image per class ({len(labels)}), the first of each in the test split"
    except DataError:
        data = datamodule_for(config, data_dir=None, synthetic=True, synthetic_size=200)
        images, _ = one_per_class(data)
        return (
            data,
            images,
            f"{len(images)} synthetic images (CIFAR-10 is not here: --data-dir DIR shows real ones)",
        )


def model_page(name: str, entry: ManifestEntry, data_dir: Path, out: Path) -> Path | None:
    """The explorer page of one shipped model (None for a model without attention)."""
    from sa_conv.analysis.explorer import explorer_data, write_explorer
    from sa_conv.training.checkpoints import module_from_checkpoint
    from sa_conv.training.trained import load_trained

    record = load_trained(name)
    backbone = module_from_checkpoint(record).backbone.eval()
    if not backbone.has_attention:
        return None
    config = RunConfig.from_dict(record.config())
    data, images, note = gallery_images(config, data_dir)
    meta = {
        "model": entry.model,
        "config": record.run_config,
        "checkpoint": name,
        "step": record.step,
        "test_acc": entry.test_acc,
        "test_note": f"on the {entry.n_test_images} test images, the shipped weights",
        "images_note": note,
        "back": "../" * name.count("/") + "index.html",  # the page lies at <out>/<name>.html
    }
    budget = 18.0
    if backbone.input_dependent:
        images, budget = images[:CONTENT_IMAGES], CONTENT_BUDGET_MB
        note = note.replace(
            "one test image per class", f"one test image of each of the first {CONTENT_IMAGES} classes"
        )
    page = explorer_data(backbone, images, data.normalize(images), meta=meta, budget_mb=budget)
    return write_explorer(out / f"{name}.html", page)


def locality_cell(row: dict[str, Any] | None) -> str:
    """The committed locality of a run, layer by layer, in one cell."""
    if row is None or not row.get("layers"):
        return "-"
    cells = []
    for i, layer in enumerate(row["layers"]):
        cell = f"L{i + 1}: {layer['sharp_heads']}/{layer['heads']} sharp"
        if "sharp_distinct_taps" in layer:
            taps = layer["sharp_distinct_taps"]
            cell += f" on {taps} tap{'' if taps == 1 else 's'}"
        cell += f", {layer['mean_distance']:.2f} px"
        if "median_alpha" in layer:
            cell += f", alpha {layer['median_alpha']:.2f}"
        cells.append(cell)
    return "<br>".join(html.escape(c) for c in cells)


def rows_by_shipped_name(results: Path) -> dict[str, dict[str, Any]]:
    """The committed results rows by shipped name (``<scale>/<name>-seed<k>``); files of other JSON and
    entries that are not rows are passed over."""
    rows = {}
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"{path} is not a readable results file ({err})") from None
        if isinstance(data, list):
            named = [r for r in data if isinstance(r, dict) and "name" in r and "seed" in r]
            rows.update({f"{path.stem}/{r['name']}-seed{r['seed']}": r for r in named})
    return rows


def index_page(
    models: dict[str, ManifestEntry],
    pages: dict[str, Path | None],
    rows: dict[str, dict[str, Any]],
    out: Path,
) -> str:
    """The gallery's index: one row per shipped model, its page linked."""
    lines = []
    for name, entry in models.items():
        page = pages.get(name)
        link = (
            f'<a href="{html.escape(page.relative_to(out).as_posix())}">{html.escape(name)}</a>'
            if page
            else f"{html.escape(name)}<br><small>no attention: no explorer page</small>"
        )
        lines.append(
            f"<tr><td>{link}</td><td>{entry.model}</td><td>{entry.epochs}</td>"
            f"<td>{entry.precision}</td><td>{100 * entry.test_acc:.1f}%</td>"
            f"<td>{entry.params / 1e6:.3f}M</td><td>{locality_cell(rows.get(name))}</td></tr>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>sa-conv: shipped models</title>'
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 10px;border-bottom:1px solid #ddd;"
        "vertical-align:top;text-align:left}</style></head><body>\n<h1>sa-conv: the shipped models</h1>\n"
        "<p>CPU-scale models trained on CIFAR-10 (the offline JPEG copy, 2,000 test images: an accuracy "
        "carries about 1 point of sampling error), not the paper's 300-epoch setting. Each name opens its "
        "attention explorer (every head of every layer from any query pixel; one test image per class). "
        "Locality: sharp heads (at least half of their attention on one pixel) and the distinct pixels they "
        "attend to, mean attention distance, median alpha, per layer, as committed in results/.</p>\n"
        "<table><tr><th>model</th><th>kind</th><th>epochs</th><th>precision</th><th>test acc</th>"
        "<th>params</th><th>locality per layer</th></tr>\n" + "\n".join(lines) + "\n</table></body></html>\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Write the gallery."""
    parser = ArgumentParser(prog="python -m experiments.gallery", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir", type=Path, help=f"CIFAR-10 for the test images (default: {DEFAULT_DATA_DIR})"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="the gallery's folder (default: WEIGHTS/gallery)"
    )
    parser.add_argument("--results", type=Path, default=Path("results"), help="the committed results rows")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="redraw only these models' pages")
    parser.add_argument(
        "--screenshot",
        nargs=2,
        metavar=("NAME", "PNG"),
        help="also save NAME's page, as headless Chromium draws it (layer 1, the central query), to PNG",
    )
    args = parser.parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    from experiments.explore import screenshot
    from sa_conv.models.weights import manifest, weights_dir

    if args.data_dir is not None:
        check_data_dir(args.data_dir)
    models = manifest()
    if not models:
        raise UserError(f"no shipped models in {weights_dir()}: nothing to show")
    if args.only and (unknown := sorted(set(args.only) - set(models))):
        raise UserError(f"--only: no shipped model {', '.join(unknown)}")
    if args.screenshot and args.screenshot[0] not in models:
        raise UserError(f"--screenshot: no shipped model {args.screenshot[0]}")
    rows = rows_by_shipped_name(args.results)  # read before any page is written
    out = args.out or weights_dir() / "gallery"
    pages: dict[str, Path | None] = {}
    for name, entry in models.items():
        page = out / f"{name}.html"
        if args.only and name not in args.only:
            pages[name] = page if page.is_file() else None
            continue
        pages[name] = written = model_page(name, entry, args.data_dir or DEFAULT_DATA_DIR, out)
        if written is not None:
            print(f"{written} ({written.stat().st_size / 2**20:.2f} MiB)")
    write_text(out / "index.html", index_page(models, pages, rows, out))
    print(out / "index.html")
    if args.screenshot:
        name, png = args.screenshot
        shown = pages.get(name)
        if shown is None:
            raise UserError(f"--screenshot: {name} has no page in the gallery")
        screenshot(shown, Path(png), layer=1, query=None)
        print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
