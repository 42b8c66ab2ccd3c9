"""The committed claims, recomputed from the shipped weights: each positional model's locality per layer
(sharp heads, distinct taps, mean distance, median alpha, overlap, coverage, displacement, outward) equals
its row in results/<scale>.json, README's first caption describes the heads its model has, and (slow, real
data) each model's test accuracy and per-image results equal the committed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sa_conv.analysis.figures import peak_text
from sa_conv.analysis.locality import SHARP_MASS
from sa_conv.analysis.maps import attention_maps_of, initial_of, layer_summary, locality_snapshot
from sa_conv.models.weights import backbone_of, read_weights, sha256_of
from sa_conv.training.trained import load_trained

REPO = Path(__file__).resolve().parents[1]
WEIGHTS = REPO / "weights"
MANIFEST = (
    json.loads((WEIGHTS / "manifest.json").read_text()) if (WEIGHTS / "manifest.json").is_file() else {}
)


def committed_row(name: str) -> dict | None:
    """The results row a shipped model's claims come from (``<scale>/<entry>-seed<k>``)."""
    scale, run = name.split("/")
    entry, seed = run.rsplit("-seed", 1)
    path = REPO / "results" / f"{scale}.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    return next((r for r in rows if r["name"] == entry and r["seed"] == int(seed)), None)


def positional(name: str) -> bool:
    config = MANIFEST[name]["config"]["model_config"]
    return (
        MANIFEST[name]["model"] != "resnet18"
        and not config.get("content")
        and config.get("attention") == "mhsa"
    )


def final_weights(name: str) -> bool:
    """The shipped weights are the final epoch's (where the locality row was recorded)."""
    return MANIFEST[name]["epoch_of_weights"] == MANIFEST[name]["epochs"]


CHECKED = sorted(n for n in MANIFEST if positional(n) and final_weights(n))


def assert_layers_equal(recomputed: list[dict], committed: list[dict]) -> None:
    assert len(recomputed) == len(committed)
    for mine, theirs in zip(recomputed, committed, strict=True):
        for key in ("heads", "sharp_heads", "sharp_distinct_taps", "sharp_taps", "coverage"):
            if key in theirs:
                assert mine[key] == theirs[key], key
        for key in (
            "mean_distance",
            "median_alpha",
            "conv_likeness",
            "overlap",
            "median_displacement",
            "median_outward",
        ):
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-7), key
        for key in ("displacement", "outward"):
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], abs=2e-4), key


def test_every_shipped_model_has_its_results_row() -> None:
    for name, entry in MANIFEST.items():
        row = committed_row(name)
        assert row is not None, f"{name} ships without its results row"
        assert row["test_acc"] == entry["test_acc"] and row["epochs"] == entry["epochs"]
        assert sha256_of(WEIGHTS / entry["file"]) == entry["sha256"]


@pytest.mark.parametrize("name", CHECKED or [pytest.param(None, marks=pytest.mark.skip("no model ships"))])
def test_the_committed_locality_is_recomputed_from_the_weights(name: str) -> None:
    record = read_weights(WEIGHTS / MANIFEST[name]["file"])
    backbone = backbone_of(record).eval()
    history = load_trained(WEIGHTS / MANIFEST[name]["file"]).history or []
    snapshot = locality_snapshot(backbone, torch.zeros(1, 3, 32, 32), history[-1].step)
    recomputed = [r.to_json() for r in layer_summary(snapshot, initial_of(history))]
    assert_layers_equal(recomputed, committed_row(name)["layers"])


def test_a_changed_committed_number_is_caught() -> None:
    """The comparison is not vacuous: one number changed by a little fails it."""
    if not CHECKED:
        pytest.skip("no positional model ships")
    name = CHECKED[0]
    record = read_weights(WEIGHTS / MANIFEST[name]["file"])
    history = load_trained(WEIGHTS / MANIFEST[name]["file"]).history or []
    snapshot = locality_snapshot(backbone_of(record).eval(), torch.zeros(1, 3, 32, 32), 0)
    recomputed = [r.to_json() for r in layer_summary(snapshot, initial_of(history))]
    changed = json.loads(json.dumps(committed_row(name)["layers"]))
    changed[0]["mean_distance"] += 0.01
    with pytest.raises(AssertionError):
        assert_layers_equal(recomputed, changed)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", sorted(MANIFEST) or [pytest.param(None, marks=pytest.mark.skip("no model ships"))]
)
def test_the_committed_accuracy_is_recomputed_from_the_weights(name: str, cifar_dir: Path) -> None:
    from sa_conv.training.config import RunConfig
    from sa_conv.training.evaluation import correct_on_test
    from sa_conv.training.run import datamodule_for

    entry = MANIFEST[name]
    backbone = backbone_of(read_weights(WEIGHTS / entry["file"])).eval()
    config = RunConfig.from_dict(entry["config"])
    correct = correct_on_test(backbone, datamodule_for(config, data_dir=cifar_dir), entry["precision"])
    committed = committed_row(name)["test_correct"]
    flips = sum(a != b for a, b in zip(correct, committed, strict=True))
    allowed = 0 if entry["precision"] == "32-true" else 2  # bf16 on other hardware may round otherwise
    assert flips <= allowed, f"{name}: {flips} test images classified otherwise than committed"
    # the committed accuracy is a float32 mean (0.6955 reads 0.6955000162124634): equal to float32 precision
    assert correct.count("1") / len(correct) == pytest.approx(
        entry["test_acc"], abs=allowed / len(correct) + 1e-7
    )


FIRST_FIGURE = "small/quadratic-seed0"  # README's first figure and its caption
UNIFORM = 1.001  # a head whose peak is within 0.1% of 1/N attends uniformly
WIDE = 0.05  # a head whose peak is under this spreads its attention over many pixels


def caption() -> str:
    """README's caption of its first figure (the italic paragraph under it)."""
    text = (REPO / "README.md").read_text()
    return " ".join(text.split("figures/small_quadratic-seed0_layer1.png)", 1)[1].split("*")[1].split())


def caption_texts(peaks: list[float], taps: list[tuple[int, int]], pixels: int) -> list[str]:
    """What the caption must say of layer 1's heads at the figure's query: how many are sharp, on how many
    distinct pixels, the head just under the threshold with its titled peak, the wide and the uniform ones."""
    sharp = [p >= SHARP_MASS for p in peaks]
    texts = [
        f"{sum(sharp)} of the {len(peaks)} heads put at least half of their attention on one pixel",
        f"({len({t for t, s in zip(taps, sharp, strict=True) if s})} distinct pixels",
    ]
    under = max((p, h) for h, p in enumerate(peaks) if p < SHARP_MASS)
    texts.append(f"head {under[1] + 1} peaks just under the threshold ({peak_text(under[0])})")
    for h, p in enumerate(peaks):
        if p <= UNIFORM / pixels:
            texts.append(f"head {h + 1} is uniform")
        elif p < WIDE:
            texts.append(f"head {h + 1} stays wide")
    return texts


def first_figure_heads() -> tuple[list[float], list[tuple[int, int]], int]:
    """Layer 1's heads of README's first model at the figure's (default) query: peak and its offset."""
    backbone = backbone_of(read_weights(WEIGHTS / MANIFEST[FIRST_FIGURE]["file"])).eval()
    side = backbone.config.grid
    size = backbone.config.image_size
    images = torch.zeros(1, backbone.config.in_channels, size, size)  # positional: no image needed
    maps = attention_maps_of(backbone, images)[0][0, :, (side // 2) * side + side // 2]  # (heads, N)
    peaks = [float(m.max()) for m in maps]
    taps = [divmod(int(m.argmax()), side) for m in maps]
    return peaks, [(y - side // 2, x - side // 2) for y, x in taps], side * side


def test_the_first_figures_caption_equals_its_model() -> None:
    if FIRST_FIGURE not in MANIFEST:
        pytest.skip(f"{FIRST_FIGURE} does not ship")
    said = caption()
    for text in caption_texts(*first_figure_heads()):
        assert text in said, f"README's first caption should say {text!r}: {said!r}"


def test_the_caption_texts_follow_the_heads() -> None:
    """A head moved across the threshold, or made uniform, changes what the caption must say."""
    peaks, taps, pixels = [0.9, 0.8, 0.49, 0.02, 1 / 256], [(0, 1), (0, 1), (1, 1), (3, 3), (0, 0)], 256
    assert caption_texts(peaks, taps, pixels) == [
        "2 of the 5 heads put at least half of their attention on one pixel",
        "(1 distinct pixels",
        "head 3 peaks just under the threshold (0.49)",
        "head 4 stays wide",
        "head 5 is uniform",
    ]
    assert caption_texts([0.9, 0.8, 0.51, 0.3, 1 / 256], taps, pixels)[:3] == [
        "3 of the 5 heads put at least half of their attention on one pixel",
        "(2 distinct pixels",
        "head 4 peaks just under the threshold (0.30)",
    ]
