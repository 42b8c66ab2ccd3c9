"""The trained models that ship with the suite: name, accuracy, size, and how each was trained.

    python -m experiments.models [--json]

Any command that takes a checkpoint takes one of these names too, e.g.
``python -m experiments.explore small6/quadratic-seed0 --out page.html``; in Python,
``sa_conv.load_pretrained("small6/quadratic-seed0")``.
"""

from __future__ import annotations

import json
import math
import sys

from experiments.cli import ArgumentParser, computing, main_guard
from sa_conv.utils.json_values import finite_json


def main(argv: list[str] | None = None) -> int:
    """List the shipped models."""
    parser = ArgumentParser(prog="python -m experiments.models", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="the manifest's entries as JSON")
    args = parser.parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    from sa_conv.models.weights import manifest, weights_dir

    models = manifest()
    if args.json:
        entries = {name: entry.to_json() for name, entry in models.items()}
        print(json.dumps(finite_json(entries), indent=1, allow_nan=False))  # NaN as null: strict JSON
        return 0
    if not models:
        print(f"no shipped models in {weights_dir()}")
        return 0
    print(f"{'name':<34} {'test acc':>9} {'params':>8} {'size':>10}  {'precision':<10}  epochs")
    for name, m in models.items():
        acc = f"{100 * m.test_acc:.1f}%" if math.isfinite(m.test_acc) else "-"
        print(
            f"{name:<34} {acc:>9} {m.params / 1e6:7.3f}M {m.bytes / 2**20:7.2f}MiB  "
            f"{m.precision:<10}  {m.epochs}"
        )
    sizes = sorted({m.n_test_images for m in models.values()})
    images = (
        f"{sizes[0]} test images" if len(sizes) == 1 else f"{', '.join(map(str, sizes))} test images by model"
    )
    print(f"({len(models)} models in {weights_dir()}; test accuracy on {images})")
    return 0


if __name__ == "__main__":
    sys.exit(main_guard(main)())
