import json
import math
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from experiments import figures, run
from experiments.cli import main_guard
from sa_conv.encodings import QuadraticEncoding
from sa_conv.metrics import locality
from sa_conv.viz import attention_grid, centre_trajectories, conversion_figure, locality_summary, mass_levels

TINY = ["--scale", "tiny", "--layers", "2", "--hidden", "16", "--heads", "4", "--epochs", "2", "--synthetic"]


def interior(height: int, width: int, margin: int) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    keep = (ys >= margin) & (ys < height - margin) & (xs >= margin) & (xs < width - margin)
    return (ys * width + xs)[keep]


def test_metrics_exact_on_one_hot_shift():
    enc = QuadraticEncoding(1).set_(torch.tensor([[1.0, 2.0]]), 1000.0)
    probs = enc.logits(8, 8).softmax(-1)[None]  # one-hot on query + (1, 2) inside the image
    m = locality(probs, 8, 8, queries=interior(8, 8, 2))
    assert m.mean_distance.item() == pytest.approx(math.sqrt(5), abs=1e-6)
    assert m.radius90.item() == pytest.approx(math.sqrt(5), abs=1e-6)
    assert m.entropy.item() == pytest.approx(0.0, abs=1e-6)
    assert m.spread.item() == pytest.approx(0.0, abs=1e-6)
    assert m.localized.tolist() == [True]


def test_metrics_exact_on_uniform_attention():
    probs = torch.full((1, 1, 3, 3), 1 / 3)  # a 1x3 grid, every query attends uniformly
    m = locality(probs, 1, 3)
    assert m.mean_distance.item() == pytest.approx(8 / 9)
    assert m.radius90.item() == pytest.approx(5 / 3)
    assert m.entropy.item() == pytest.approx(math.log(3))
    # centroid of query 0 is shift 1 -> spread sqrt(2/3); query 1: 0 -> sqrt(2/3); query 2: -1 -> sqrt(2/3)
    assert m.spread.item() == pytest.approx(math.sqrt(2 / 3))
    wide = locality(torch.full((1, 2, 64, 64), 1 / 64), 8, 8)  # uniform over an 8x8 grid
    assert wide.localized.tolist() == [False, False] and wide.entropy[0].item() == pytest.approx(math.log(64))


def test_mass_levels():
    p = torch.tensor([[0.6, 0.3], [0.1, 0.0]]).numpy()
    assert mass_levels(p) == pytest.approx([0.3, 0.6])  # >= 0.6 holds 60% (>= 50%); >= 0.3 holds 90%


def test_figure_panels():
    maps = [torch.rand(1, 3, 16, 16).softmax(-1) for _ in range(2)]
    fig = attention_grid(maps, 4, 4, (1, 2))
    assert len(fig.axes) == 2 * 3
    history = torch.randn(5, 3, 4, 2)
    fig = centre_trajectories(history, inverse_covariance=torch.eye(2).expand(3, 4, 2, 2))
    assert sum(ax.get_visible() for ax in fig.axes) == 3
    assert len(fig.axes[0].patches) == 4  # one covariance ellipse per head
    assert len(locality_summary(torch.rand(3, 4)).axes) == 1
    fig = conversion_figure(
        torch.randn(2, 2, 3, 3), torch.zeros(9, 2), torch.rand(1, 9, 25, 25), 5, 5, (2, 2)
    )
    assert len(fig.axes) == 3


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tb")
    assert main_guard(run.main)(["quadratic", *TINY, "--figures-every", "1", "--output-dir", str(out)]) == 0
    return out / "quadratic" / "version_0"


def test_callback_writes_tensorboard_images_for_every_layer(logged_run):
    acc = EventAccumulator(str(logged_run), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    images = set(acc.Tags()["images"])
    assert {
        "attention/layer1",
        "attention/layer2",
        "attention/grid",
        "attention/centres",
        "attention/locality",
    } <= images
    assert len(acc.Images("attention/grid")) == 3  # epochs 1 and 2, and the end of training
    scalars = set(acc.Tags()["scalars"])
    assert {
        "locality/layer1/mean_distance",
        "locality/layer2/radius90",
        "train/loss_step",
        "val/acc",
    } <= scalars


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tensorboard_server_serves_attention_images(logged_run):
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logged_run),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        tags = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/data/plugin/images/tags", timeout=2) as r:
                    tags = json.load(r)
                if any("attention/grid" in t for t in tags.values()):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert tags is not None, "tensorboard did not answer"
        run_name, run_tags = next(iter(tags.items()))
        assert {"attention/layer1", "attention/layer2", "attention/grid"} <= set(run_tags)
        query = urllib.parse.urlencode({"run": run_name, "tag": "attention/grid", "sample": 0})
        with urllib.request.urlopen(f"{base}/data/plugin/images/images?{query}", timeout=5) as r:
            entries = json.load(r)
        with urllib.request.urlopen(
            f"{base}/data/plugin/images/individualImage?{entries[-1]['query']}", timeout=5
        ) as r:
            png = r.read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_figures_cli_renders_pngs(logged_run, tmp_path, capsys):
    ckpt = logged_run / "checkpoints" / "last.ckpt"
    assert (
        main_guard(figures.main)([str(ckpt), "--out", str(tmp_path), "--synthetic", "--query", "3", "4"]) == 0
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert {
        "quadratic_grid.png",
        "quadratic_layer1.png",
        "quadratic_layer2.png",
        "quadratic_centres.png",
        "quadratic_locality.png",
        "quadratic_locality.json",
    } <= names
    scalars = json.loads((tmp_path / "quadratic_locality.json").read_text())
    assert 0 <= scalars["locality/layer1/localized_fraction"] <= 1


def test_figures_cli_rejects_a_resnet(tmp_path, capsys):
    argv = ["resnet18", "--scale", "tiny", "--epochs", "1", "--synthetic", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(argv) == 0
    capsys.readouterr()
    code = main_guard(figures.main)(
        [str(tmp_path / "resnet18/version_0/checkpoints/last.ckpt"), "--synthetic"]
    )
    err = capsys.readouterr().err
    assert code != 0 and "has no attention maps" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
