"""The gallery: one explorer page per shipped model and an index, rendered in headless Chromium without a
script error, every link of the index resolving; the committed gallery too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import call
from helpers.browser import FLAGS, chromium
from helpers.rows import study_row

from experiments import gallery, run
from experiments.cli import main_guard
from experiments.study.weights import ship
from sa_conv.models.manifest_entry import ManifestEntry
from sa_conv.utils.safe_load import read_checkpoint

REPO = Path(__file__).resolve().parents[1]
TINY = ["--scale", "tiny", "--layers", "2", "--hidden", "16", "--heads", "4", "--epochs", "1", "--synthetic"]
TINY += ["--synthetic-size", "64", "--limit-train-batches", "2", "--no-explore", "--figures-every", "none"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A positional and a content model, each trained one step."""
    out = tmp_path_factory.mktemp("runs")
    done = {}
    for model in ("quadratic", "learned-content"):
        assert main_guard(run.main)([model, *TINY, "--output-dir", str(out)]) == 0
        done[model] = out / model / "version_0"
    return done


@pytest.fixture
def shipped(runs: dict[str, Path]) -> list[str]:
    names = []
    for model, run_dir in runs.items():
        metrics = json.loads((run_dir / "metrics.json").read_text())
        row = study_row(
            {"name": model, "model": model, "seed": 0, "epochs": 1, "test_acc": metrics["test_acc"]}
            | {"n_test_images": 64}
        )
        name = f"tiny/{model}-seed0"
        ship(name, read_checkpoint(metrics["best_checkpoint"]), row=row, history=None, commit=None)
        names.append(name)
    return names


def links_of(index: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', index.read_text())


def test_the_gallery_has_a_page_per_model_and_an_index_linking_them(shipped, tmp_path, capsys) -> None:
    out = tmp_path / "gallery"
    results = tmp_path / "results"
    results.mkdir()
    layer = {"sharp_heads": 3, "heads": 4, "sharp_distinct_taps": 1, "mean_distance": 1.25}
    row = {"name": "quadratic", "seed": 0, "layers": [layer]}
    (results / "tiny.json").write_text(json.dumps([row]))
    code, _, err = call(gallery, ["--out", str(out), "--results", str(results)], capsys)
    assert code == 0, err
    pages = sorted(str(p.relative_to(out)) for p in out.rglob("*.html"))
    assert pages == ["index.html", "tiny/learned-content-seed0.html", "tiny/quadratic-seed0.html"]
    assert sorted(links_of(out / "index.html")) == pages[1:]
    index = (out / "index.html").read_text()
    assert "L1: 3/4 sharp on 1 tap, 1.25 px" in index  # the committed locality row, beside its model
    page = (out / "tiny/quadratic-seed0.html").read_text()
    assert '"back":"../index.html"' in page  # the page links back to the index beside it
    assert "synthetic images (CIFAR-10 is not here" in page  # no data here: said on the page
    assert (out / "tiny/quadratic-seed0.html").stat().st_size < 0.3 * 2**20  # positional: small
    assert (out / "tiny/learned-content-seed0.html").stat().st_size < 2.5 * 2**20  # content: a budget


def test_a_model_without_attention_is_named_in_the_index_with_why_it_has_no_page(tmp_path) -> None:
    entry = ManifestEntry("resnet18", "small", 0, "32-true", 15, 0.8, 2000, 10**6, "f", 1, "0", config={})
    index = gallery.index_page({"small/resnet18-seed0": entry}, {"small/resnet18-seed0": None}, {}, tmp_path)
    assert "small/resnet18-seed0<br><small>no attention: no explorer page</small>" in index
    assert "href" not in index


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--screenshot", "tiny/absent-seed0", "x.png"], "--screenshot: no shipped model tiny/absent-seed0"),
        (["--results", "{broken}"], "tiny.json is not a readable results file"),
    ],
)
def test_a_bad_gallery_request_is_one_line_and_writes_nothing(shipped, tmp_path, capsys, argv, said) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tiny.json").write_text('[{"name": "quadratic"')  # cut short
    out = tmp_path / "gallery"
    argv = [a.replace("{broken}", str(broken)) for a in argv]
    code, _, err = call(gallery, ["--out", str(out), *argv], capsys)
    assert code != 0 and said in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def render_all(index: Path, models: int) -> list[str]:
    """Open the index (a row per model, ``models`` of them) and every page it links in headless Chromium;
    the script errors met."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser_path = chromium()
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=FLAGS)
        view = browser.new_page()
        view.on("pageerror", lambda e: errors.append(f"{view.url}: {e}"))
        view.goto(index.resolve().as_uri())
        assert view.locator("table tr").count() == models + 1  # the header, a row per model
        assert view.locator("table tr a").count() == len(links_of(index))
        for link in links_of(index):
            view.goto((index.parent / link).resolve().as_uri())
            view.wait_for_selector("body[data-rendered]", state="attached", timeout=60_000)
            view.get_by_text("every shipped model").click()  # the way back
            assert view.url == index.resolve().as_uri()
        browser.close()
    return errors


@pytest.mark.slow
def test_the_gallerys_pages_render_in_chromium(shipped, tmp_path, capsys) -> None:
    out = tmp_path / "gallery"
    assert call(gallery, ["--out", str(out), "--results", str(tmp_path)], capsys)[0] == 0
    assert render_all(out / "index.html", len(shipped)) == []


def test_the_committed_gallery_links_every_shipped_model() -> None:
    index = REPO / "weights" / "gallery" / "index.html"
    if not index.is_file():
        pytest.skip("no gallery committed")
    manifest = json.loads((REPO / "weights" / "manifest.json").read_text())
    links = links_of(index)
    assert all((index.parent / link).is_file() for link in links)
    names = [link.removesuffix(".html") for link in links]
    with_attention = [n for n, e in manifest.items() if e["model"] != "resnet18"]
    assert sorted(names) == sorted(with_attention)
    text = index.read_text()
    rows = [
        f"<td>{name}<br><small>no attention" if name not in with_attention else f">{name}</a></td>"
        for name in manifest
    ]
    assert all(row in text for row in rows)  # a row for every model, with a page or not


@pytest.mark.slow
def test_the_committed_gallery_renders_in_chromium() -> None:
    index = REPO / "weights" / "gallery" / "index.html"
    if not index.is_file():
        pytest.skip("no gallery committed")
    assert render_all(index, len(json.loads((REPO / "weights" / "manifest.json").read_text()))) == []
