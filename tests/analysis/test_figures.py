import copy
import json
import math
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import torch
from helpers import tiny, train
from matplotlib.patches import Ellipse
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from experiments import figures, run
from experiments.cli import main_guard
from sa_conv.analysis.centres import centre_plot, layer_centres
from sa_conv.analysis.curves import (
    learning_curves,
    locality_by_layer,
    locality_over_training,
    locality_summary,
)
from sa_conv.analysis.figures import (
    attention_grid,
    conversion_figure,
    layer_heads,
    mass_levels,
    mass_radius,
)
from sa_conv.analysis.locality import gaussian_alpha, head_table, interior_queries, locality, peak_shift
from sa_conv.analysis.maps import figures_of, layer_summary
from sa_conv.analysis.snapshots import LayerSummary, read_history
from sa_conv.models.hyper_parameters import HyperParameters
from sa_conv.nn.encodings import QuadraticEncoding
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.trained import TrainedModel, load_trained
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint

TWO_LAYERS = [*tiny(layers=2, epochs=2), "--synthetic"]


def test_metrics_exact_on_one_hot_shift():
    enc = QuadraticEncoding(1).set_(torch.tensor([[1.0, 2.0]]), 1000.0)
    probs = enc.logits(8, 8).softmax(-1)[None]  # one-hot on query + (1, 2) inside the image
    m = locality(probs, 8, 8, queries=interior_queries(8, 8, 2))
    assert m.mean_distance.item() == pytest.approx(math.sqrt(5), abs=1e-6)
    assert m.radius90.item() == pytest.approx(math.sqrt(5), abs=1e-6)
    assert m.entropy.item() == pytest.approx(0.0, abs=1e-6)
    assert m.spread.item() == pytest.approx(0.0, abs=1e-6)
    assert m.peak_mass.item() == pytest.approx(1.0) and m.sharp.tolist() == [True]


def test_metrics_exact_on_uniform_attention():
    probs = torch.full((1, 1, 3, 3), 1 / 3)  # a 1x3 grid, every query attends uniformly
    m = locality(probs, 1, 3)
    assert m.mean_distance.item() == pytest.approx(8 / 9)
    assert m.radius90.item() == pytest.approx(5 / 3)
    assert m.entropy.item() == pytest.approx(math.log(3))
    # centroid of query 0 is shift 1 -> spread sqrt(2/3); query 1: 0 -> sqrt(2/3); query 2: -1 -> sqrt(2/3)
    assert m.spread.item() == pytest.approx(math.sqrt(2 / 3))
    assert m.peak_mass.item() == pytest.approx(1 / 3) and m.sharp.tolist() == [False]


def test_peak_mass_of_a_gaussian_head():
    """alpha = 2 centred on a pixel: 1 / sum over shifts of exp(-2 |d|^2) of the mass on that pixel."""
    enc = QuadraticEncoding(1).set_(torch.tensor([[0.0, 1.0]]), 2.0)
    m = locality(enc.logits(16, 16).softmax(-1)[None], 16, 16, queries=interior_queries(16, 16, 4))
    d = torch.arange(-8, 9.0)
    expected = 1 / torch.exp(-2 * (d[:, None] ** 2 + d[None] ** 2)).sum()
    assert m.peak_mass.item() == pytest.approx(expected.item(), rel=1e-4)
    assert gaussian_alpha(torch.eye(2) * 4).item() == pytest.approx(2.0)  # A = s^2 I, alpha = s^2 / 2


def test_peak_shift_equals_a_literal_count_over_images_and_queries():
    """The most frequent peak shift (ties: the lowest) and its share, against a count by hand."""
    torch.manual_seed(0)
    height, width = 4, 5
    logits = torch.randn(3, 4, height * width, height * width)
    logits[:, :2] = logits[:, :2].round()  # ties between keys
    probs = logits.softmax(-1)
    for queries in (interior_queries(height, width, 1), None):
        shift, constancy = peak_shift(probs, height, width, queries=queries)
        rows = queries.tolist() if queries is not None else list(range(height * width))
        for h in range(probs.shape[1]):
            counts: dict[tuple[int, int], int] = {}
            for b in range(probs.shape[0]):
                for q in rows:
                    k = int(probs[b, h, q].argmax())
                    d = (k // width - q // width, k % width - q % width)
                    counts[d] = counts.get(d, 0) + 1
            best = min(counts, key=lambda d: (-counts[d], d))  # ties between shifts: the smallest
            assert shift[h].tolist() == list(best)
            assert constancy[h].item() == pytest.approx(counts[best] / (probs.shape[0] * len(rows)))
    with pytest.raises(ValueError, match="no \\(image, query\\) pair"):
        peak_shift(probs, height, width, queries=torch.tensor([], dtype=torch.long))


def test_a_head_that_follows_the_query_is_constant_and_a_fixed_pixel_is_not():
    enc = QuadraticEncoding(1).set_(torch.tensor([[-1.0, 2.0]]), 1000.0)
    follows = enc.logits(8, 8).softmax(-1)[None]  # one-hot on query + (-1, 2)
    fixed = torch.zeros(1, 1, 64, 64)
    fixed[..., 27] = 1.0  # every query attends to pixel (3, 3)
    queries = interior_queries(8, 8, 2)  # 16 queries
    shift, constancy = peak_shift(torch.cat([follows, fixed], dim=1), 8, 8, queries=queries)
    assert shift[0].tolist() == [-1, 2] and constancy[0].item() == 1.0
    assert constancy[1].item() == pytest.approx(1 / 16)
    assert shift[1].tolist() == [-2, -2]  # 16 shifts once each: the smallest wins
    rows = head_table(torch.cat([follows, fixed], dim=1), 8, 8, queries=queries)
    assert rows[0]["peak_shift"] == [-1, 2] and rows[0]["shift_constancy"] == 1.0 and rows[0]["sharp"]
    assert rows[0]["mean_distance"] == pytest.approx(math.sqrt(5), abs=1e-6)


def test_mass_levels():
    p = torch.tensor([[0.6, 0.3], [0.1, 0.0]]).numpy()
    assert mass_levels(p) == pytest.approx([0.3, 0.6])  # >= 0.6 holds 60% (>= 50%); >= 0.3 holds 90%


@pytest.mark.parametrize(("heads", "rows", "cols"), [(9, 3, 3), (16, 4, 4), (4, 2, 2), (6, 2, 3)])
def test_layer_figure_is_a_near_square_grid_with_a_colour_bar(heads, rows, cols):
    probs = torch.rand(1, heads, 64, 64).softmax(-1)
    fig = layer_heads(probs, 8, 8, (3, 4))
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == heads
    positions = {(round(ax.get_position().y0, 3), round(ax.get_position().x0, 3)) for ax in panels}
    assert len({y for y, _ in positions}) == rows and len({x for _, x in positions}) == cols
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_contours_white_at_half_the_mass_orange_at_ninety_percent():
    enc = QuadraticEncoding(1).set_(torch.tensor([[0.3, 0.2]]), 0.3)
    probs = enc.logits(9, 9).softmax(-1)[None]
    fig = layer_heads(probs, 9, 9, (4, 4))
    ax = next(ax for ax in fig.axes if ax.images)
    contour = next(c for c in ax.collections if hasattr(c, "levels"))
    colours = [tuple(np.round(c, 3)) for c in contour.get_edgecolor()]
    p = probs[0, 0, 4 * 9 + 4].reshape(9, 9).detach().numpy()
    t90, t50 = mass_levels(p)
    assert list(contour.levels) == pytest.approx([t90, t50])
    assert colours == [(1.0, 0.647, 0.0, 1.0), (1.0, 1.0, 1.0, 1.0)]  # orange at 90%, white at 50%


def test_centre_plot_draws_the_50_and_90_percent_circles():
    t, layers, heads = 5, 2, 3
    centres = torch.randn(t, layers, heads, 2)
    s2 = torch.tensor([0.5, 2.0, 8.0])  # inverse covariance s^2 I
    inv = s2[None, None, :, None, None] * torch.eye(2).expand(t, layers, heads, 2, 2)
    fig = centre_plot(centres, inverse_covariance=inv, steps=[0, 10, 20, 30, 40], points=3)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == (3 + 1) * layers  # 3 points of training + the trajectories, per layer
    circles = panels[0].patches[:-1]  # the last patch is the query square
    widths = sorted(round(e.width, 4) for e in circles)
    expected = sorted(round(2 * mass_radius(m) / math.sqrt(v), 4) for v in s2.tolist() for m in (0.5, 0.9))
    assert widths == expected
    (dy, dx) = centres[0, 0, 0].tolist()
    assert circles[0].center == pytest.approx((dx, dy))


def test_locality_over_training_plots_each_layer_against_the_step():
    steps = [0, 100, 200]
    distance = torch.tensor([[3.0, 4.0], [2.0, 4.5], [1.5, 5.0]])
    sharp = torch.tensor([[0.0, 0.0], [0.5, 0.0], [1.0, 0.25]])
    alpha = torch.tensor([[0.5, 0.5], [1.0, 0.4], [3.0, 0.3]])
    likeness = torch.tensor([[0.2, 0.1], [0.5, 0.1], [0.8, 0.3]])
    fig = locality_over_training(steps, distance, sharp, conv_likeness=likeness, median_alpha=alpha)
    alpha_ax, distance_ax, sharp_ax, likeness_ax = fig.axes
    assert likeness_ax.lines[0].get_ydata().tolist() == pytest.approx([0.2, 0.5, 0.8])
    assert distance_ax.lines[1].get_ydata().tolist() == [4.0, 4.5, 5.0]
    assert sharp_ax.lines[0].get_xdata().tolist() == steps and alpha_ax.get_yscale() == "log"


def test_other_figures():
    maps = [torch.rand(1, 3, 16, 16).softmax(-1) for _ in range(2)]
    assert len([ax for ax in attention_grid(maps, 4, 4, (1, 2)).axes if ax.images]) == 2 * 3
    assert len(locality_summary(torch.rand(3, 4), sharp=torch.rand(3, 4) > 0.5).axes) == 1
    fig = conversion_figure(
        torch.randn(2, 2, 3, 3), torch.zeros(9, 2), torch.rand(1, 9, 25, 25), 5, 5, (2, 2)
    )
    assert len(fig.axes) == 3


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """A run that draws its figures every step and records its locality every 2 steps."""
    flags = [*TWO_LAYERS, "--figures-every", "1", "--history-every", "2"]
    return train(tmp_path_factory.mktemp("tb"), "quadratic", *flags)


def test_the_run_records_its_locality_history(logged_run):
    metrics = json.loads((logged_run / "metrics.json").read_text())
    history = metrics["locality_history"]
    steps = [s["step"] for s in history]
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == metrics["global_steps"]
    assert len(steps) >= 4  # every 2 steps of 8, and the epoch ends
    ckpt = read_checkpoint(logged_run / "checkpoints" / "last.ckpt")
    enc = module_from_checkpoint(ckpt).backbone.blocks[1].attention.encoding
    torch.testing.assert_close(torch.tensor(history[-1]["layers"][1]["centres"]), enc.centres.detach())
    assert [len(layer["mean_distance"]) for layer in history[0]["layers"]] == [4, 4]
    assert metrics["layers"][0]["heads"] == 4 and "median_alpha" in metrics["layers"][0]


def test_centre_and_locality_figures_follow_the_runs_history(logged_run):
    """The figures are drawn from the history given to them: change it and they change."""
    metrics = json.loads((logged_run / "metrics.json").read_text())
    history = metrics["locality_history"]
    backbone = module_from_checkpoint(read_checkpoint(logged_run / "checkpoints/last.ckpt")).backbone
    images = torch.zeros(1, 3, 32, 32)

    def drawn(hist):
        out = dict(figures_of(backbone, images, history=read_history(hist, "metrics.json")))
        centres = out["attention/centres"].axes[-2].lines[0]  # last row (trajectories), layer 1, head 1
        distance = out["attention/locality_over_training"].axes[1].lines[0].get_ydata()
        return centres.get_xdata().tolist(), list(distance)

    xs, distance = drawn(history)
    assert xs == pytest.approx([s["layers"][0]["centres"][0][1] for s in history])  # dx of every snapshot
    assert distance == pytest.approx([sum(s["layers"][0]["mean_distance"]) / 4 for s in history])
    moved = copy.deepcopy(history)
    for snapshot in moved:
        snapshot["layers"][0]["centres"][0][1] += 1.0
        snapshot["layers"][0]["mean_distance"] = [d + 2.0 for d in snapshot["layers"][0]["mean_distance"]]
    xs2, distance2 = drawn(moved)
    assert xs2 == pytest.approx([x + 1.0 for x in xs]) and distance2 == pytest.approx(
        [d + 2 for d in distance]
    )


def test_callback_writes_tensorboard_images_and_scalars(logged_run):
    acc = EventAccumulator(str(logged_run), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    images = set(acc.Tags()["images"])
    expected = {"attention/layer1", "attention/layer2", "attention/grid", "attention/centres"}
    assert expected | {"attention/locality", "attention/locality_over_training"} <= images
    assert len(acc.Images("attention/grid")) == 3  # epochs 1 and 2, and the end of training
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/loss_step", "train/acc", "val/acc", "lr/decay", "lr/no_decay"} <= scalars
    assert {"locality/layer1/mean_distance", "locality/layer2/sharp_fraction"} <= scalars
    assert not any(tag.startswith("lr-SGD") for tag in scalars)


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


def test_figures_cli_renders_pngs_without_data_for_a_positional_model(logged_run, tmp_path, capsys):
    ckpt = logged_run / "checkpoints" / "last.ckpt"
    assert main_guard(figures.main)([str(ckpt), "--out", str(tmp_path), "--query", "3", "4"]) == 0  # no data
    names = {p.name for p in tmp_path.iterdir()}
    figures_of = ("grid", "layer1", "layer2", "centres", "locality", "locality_over_training")
    assert {f"tiny_quadratic-seed0_{f}.png" for f in figures_of} <= names  # named after the run's scale, seed
    scalars = json.loads((tmp_path / "tiny_quadratic-seed0_locality.json").read_text())
    assert 0 <= scalars["locality/layer1/sharp_fraction"] <= 1
    # a quadratic head peaks on the pixel nearest its centre, at every interior query where that is inside
    backbone = module_from_checkpoint(read_checkpoint(ckpt)).backbone
    queries = [divmod(q, 16) for q in interior_queries(16, 16, 4).tolist()]  # (row, col)
    for i in range(2):
        rows = scalars["heads"][f"layer{i + 1}"]
        shifts = backbone.blocks[i].attention.encoding.centres.detach().round().int().tolist()  # (dy, dx)
        assert [r["peak_shift"] for r in rows] == shifts
        inside = [
            sum(0 <= y + dy < 16 and 0 <= x + dx < 16 for y, x in queries) / len(queries) for dy, dx in shifts
        ]
        assert [r["shift_constancy"] for r in rows] == pytest.approx(inside)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--images", "0"], "must be a positive integer"),
        (["--query", "99", "0"], "outside the 16x16 token grid"),
        (["--out", "FILE"], "is a file, not a folder"),
    ],
)
def test_figures_cli_bad_input(logged_run, tmp_path, capsys, extra, match):
    (tmp_path / "FILE").write_text("x")
    extra = [str(tmp_path / "FILE") if a == "FILE" else a for a in extra]
    code = main_guard(figures.main)([str(logged_run / "checkpoints" / "last.ckpt"), *extra])
    err = capsys.readouterr().err
    assert code != 0 and match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_figures_cli_rejects_a_resnet(tmp_path, capsys):
    argv = ["resnet18", "--scale", "tiny", "--epochs", "1", "--synthetic", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(argv) == 0
    capsys.readouterr()
    code = main_guard(figures.main)([str(tmp_path / "resnet18/version_0/checkpoints/last.ckpt")])
    err = capsys.readouterr().err
    assert code != 0 and "has no attention maps" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_layer_summary_counts_sharp_heads_and_their_distinct_taps():
    snapshot = {
        "step": 5,
        "layers": [
            {
                "mean_distance": [1.0, 2.0, 3.0, 2.0],
                "peak_mass": [0.9, 0.6, 0.2, 0.55],
                "centres": [
                    [1.1, 0.0],
                    [0.9, 0.2],
                    [3.0, 3.0],
                    [-1.2, 0.4],
                ],  # heads 1 and 2 share tap (1, 0)
                "inverse_covariance": [[[4.0, 0.0], [0.0, 4.0]]] * 3 + [[[1.0, 0.0], [0.0, 1.0]]],
            }
        ],
    }
    (row,) = layer_summary(read_history([snapshot], "a snapshot")[0])
    assert row.sharp_heads == 3 and row.sharp_distinct_taps == 2 and row.heads == 4
    assert row.sharp_taps == [[-1, 0], [1, 0], [1, 0]]  # one per sharp head, sorted
    assert row.mean_distance == pytest.approx(2.0) and row.conv_likeness == pytest.approx(0.5625)
    assert row.median_alpha == pytest.approx(2.0)  # alphas 2, 2, 2, 0.5


def test_one_colour_scale_for_every_cell_and_a_window_around_the_query():
    sharp = QuadraticEncoding(2).set_(torch.tensor([[0.0, 1.0], [-2.0, 0.0]]), 20.0)
    uniform = torch.full((1, 1, 256, 256), 1 / 256)
    probs = torch.cat([sharp.logits(16, 16).softmax(-1)[None], uniform], dim=1)  # (1, 3, 256, 256)
    fig = layer_heads(probs, 16, 16, (8, 8))
    images = [ax.images[0] for ax in fig.axes if ax.images]
    vmax = {im.norm.vmax for im in images}
    assert len(vmax) == 1 and vmax.pop() == pytest.approx(float(probs[0, :, 8 * 16 + 8].max()))  # one scale
    assert images[0].get_array().shape == (11, 11)  # +-5 pixels around the query
    assert images[0].get_extent() == [-5.5, 5.5, 5.5, -5.5]  # shifts (dy, dx) from the query
    peak = np.unravel_index(np.argmax(images[0].get_array()), (11, 11))
    assert (peak[0] - 5, peak[1] - 5) == (0, 1)  # head 1 attends one pixel right of the query
    assert images[2].get_array().max() == pytest.approx(1 / 256)  # uniform: dark on the shared scale
    edge = layer_heads(probs, 16, 16, (0, 15))  # a query in the corner: the window is clipped
    assert next(ax for ax in edge.axes if ax.images).images[0].get_extent() == [-5.5, 0.5, 5.5, -0.5]


def test_layer_centres_number_every_head_and_mark_uniform_ones():
    centres = torch.tensor([[[0.0, 1.0], [2.0, -1.0], [0.0, 0.0]], [[1.0, 1.0], [-3.0, 4.0], [9.0, 9.0]]])
    s2 = torch.tensor([[2.0, 0.5, 1e-6], [4.0, 1.0, 3.0]])  # layer 1 head 3: uniform (alpha ~ 0)
    inv = s2[..., None, None] * torch.eye(2)
    fig = layer_centres(centres, inverse_covariance=inv)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2
    for ax in panels:
        assert sorted(t.get_text() for t in ax.texts) == ["1", "2", "3"]  # every head numbered
    ellipses = [p for p in panels[0].patches if isinstance(p, Ellipse)]
    assert len(ellipses) == 4  # 2 circles for each of the 2 non-uniform heads, none for the uniform one
    assert any(line.get_marker() == "x" for line in panels[0].lines)
    assert panels[1].get_xlim()[1] >= 9.0  # the axes fit a far centre (and its circles)


def test_locality_by_layer_and_learning_curves_draw_every_run():
    def summary(distance: float, sharp: int, alpha: float | None = None) -> LayerSummary:
        return LayerSummary(
            mean_distance=distance, sharp_heads=sharp, heads=9, conv_likeness=0.5, median_alpha=alpha
        )

    runs = [
        ("six", [summary(1.0 + i, 6 - i) for i in range(6)]),
        ("two", [summary(2.0, 4, alpha=2.5)] * 2),
    ]
    fig = locality_by_layer(runs)
    distance, sharp, _, alpha = fig.axes
    assert distance.lines[0].get_ydata().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert tuple(distance.lines[1].get_color()) == tuple(sharp.lines[1].get_color())  # one colour per run
    assert alpha.lines[0].get_ydata().tolist() == [2.5, 2.5] and alpha.get_yscale() == "log"
    epochs = [(1, 0.3), (2, 0.5)]
    curves = learning_curves([("a", epochs), ("b", epochs[:1])])
    assert curves.axes[0].lines[0].get_ydata().tolist() == [30.0, 50.0]


def record(hyper_parameters: dict, schedule_steps: int | None = None) -> TrainedModel:
    """A trained model's record as ``load_trained`` makes it (its hyper-parameters migrated)."""
    hparams = HyperParameters.read({"model": "quadratic", **hyper_parameters}, "x.ckpt")
    return TrainedModel("x.ckpt", hparams, {}, schedule_steps=schedule_steps)


def test_the_learning_rate_of_a_checkpoint():
    from sa_conv.utils.schedule import OptimConfig, lr_factor

    optim = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "schedule": "warmup-cosine", "warmup": 0.05}
    optim |= {"milestones": [0.5], "gamma": 0.1}
    lr = record({"optim": optim}, 1000).lr_schedule()
    expected = OptimConfig(**{**optim, "milestones": (0.5,)})
    assert [lr(s) for s in (0, 49, 500, 999)] == pytest.approx(
        [0.1 * lr_factor(s, 1000, expected) for s in (0, 49, 500, 999)]
    )
    older = record({"lr": 0.2, "schedule": "multistep", "milestones": [0.5], "gamma": 0.1})
    assert older.lr_schedule() is None  # no schedule length recorded, none given
    assert older.lr_schedule(100)(60) == pytest.approx(0.02)  # a finished run's step count


@pytest.mark.parametrize("total", ["abc", 0, -5, 1.5, 10**13])
def test_a_checkpoints_malformed_schedule_length_is_refused_as_it_is_read(logged_run, tmp_path, total):
    ckpt = torch.load(logged_run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["schedule"] = {"total_steps": total}
    torch.save(ckpt, tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match=r"total_steps .* is not a step count"):
        load_trained(tmp_path / "bad.ckpt")
