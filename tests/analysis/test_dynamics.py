"""The heads' dynamics: the loss gradient on each centre, averaged between two locality snapshots (equal to
the gradients the steps saw, recorded by a run and resumed exactly), the lock-in test's frozen spreads
(their initial value through the frozen epochs, trained after), and when each head became sharp for good
and how far its centre moved before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from helpers import BATCHES_OF_41, StepCounter, with_callback

import sa_conv
from experiments import run
from experiments.cli import main_guard
from sa_conv.analysis.dynamics import CentreGradients, HeadSharpening, sharpening
from sa_conv.analysis.maps import layer_summary
from sa_conv.analysis.snapshots import LocalitySnapshot, read_history
from sa_conv.utils.safe_load import CheckpointError, read_checkpoint

RECORDED = ["quadratic", *BATCHES_OF_41, "--synthetic", "--snapshot-minutes", "0", "--no-explore"]
RECORDED += ["--figures-every", "1", "--history-every", "3", "--epochs", "2"]


def test_the_mean_is_of_the_gradients_the_steps_saw() -> None:
    model = sa_conv.create_model("quadratic", layers=2, hidden=16, heads=4, ffn=16, attn_dropout=0.0)
    encodings = model.encodings()
    meter, seen = CentreGradients(), []
    for _ in range(3):
        model.zero_grad()
        loss = F.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.randint(0, 10, (4,)))
        centres = [e.centres for e in encodings]
        grads = torch.autograd.grad(loss, centres, retain_graph=True)  # the oracle: (heads, 2) per layer
        seen.append(torch.stack([g.norm(dim=-1) for g in grads]))  # (layers, heads)
        loss.backward()
        meter.add(encodings)
    means = meter.take()
    expected = torch.stack(seen).mean(0)
    torch.testing.assert_close(torch.tensor(means), expected, rtol=1e-6, atol=0)
    assert meter.take() == [None, None]  # a take starts again


def test_layers_without_centres_record_none() -> None:
    model = sa_conv.create_model("learned", layers=1, hidden=16, heads=4, ffn=16)
    meter = CentreGradients()
    F.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 2])).backward()
    meter.add(model.encodings())
    assert meter.take() == [None]


def recorded_history(path: Path) -> list[dict]:
    """The locality history a run's checkpoint holds."""
    return read_checkpoint(path)["callbacks"]["AttentionFigures"]["history"]


def test_a_run_records_each_centres_gradient_and_a_resume_continues_it(tmp_path, monkeypatch) -> None:
    assert main_guard(run.main)([*RECORDED, "--output-dir", str(tmp_path / "straight")]) == 0
    straight = recorded_history(tmp_path / "straight/quadratic/version_0/checkpoints/last.ckpt")
    assert "centre_grad_norm" not in straight[0]["layers"][0]  # step 0: no step yet
    norms = [s["layers"][0]["centre_grad_norm"] for s in straight[1:]]
    assert len(norms) >= 7 and all(len(n) == 4 and min(n) > 0 for n in norms)
    history = read_history(straight, "the checkpoint")
    summary = layer_summary(history[-1], history[0])[0]
    assert summary.centre_grad_norm == norms[-1] and summary.alpha is not None and len(summary.alpha) == 4
    crashed = [*RECORDED, "--output-dir", str(tmp_path / "resumed"), "--snapshot-minutes", "1e-9"]
    with monkeypatch.context() as patch:  # a checkpoint every step: the newest mid-way between two snapshots
        with_callback(patch, StepCounter(14, "crash"))
        with pytest.raises(RuntimeError, match="went away"):
            run.main(crashed)
    assert (
        read_checkpoint(tmp_path / "resumed/quadratic/version_0/checkpoints/snapshot.ckpt")["global_step"]
        == 14
    )
    assert main_guard(run.main)([*crashed, "--resume"]) == 0
    resumed = recorded_history(tmp_path / "resumed/quadratic/version_0/checkpoints/last.ckpt")
    assert resumed == straight


class Spreads(pl.Callback):
    """Every layer's spread parameter at the start of training and at each epoch end."""

    def __init__(self) -> None:
        self.seen: list[list[torch.Tensor]] = []

    def snap(self, module: pl.LightningModule) -> None:
        encodings = module.backbone.encodings()
        self.seen.append([getattr(e, e.spread_parameter).detach().clone() for e in encodings])

    def on_train_start(self, trainer, pl_module) -> None:
        self.snap(pl_module)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.snap(pl_module)


@pytest.mark.parametrize("model", ["quadratic", "gaussian"])
def test_frozen_spreads_keep_their_initial_value_then_train(tmp_path, monkeypatch, model) -> None:
    spreads = Spreads()
    with_callback(monkeypatch, spreads)
    argv = [model, *BATCHES_OF_41, "--synthetic", "--figures-every", "none", "--snapshot-minutes", "0"]
    argv += ["--epochs", "3", "--freeze-spreads", "2", "--no-explore", "--output-dir", str(tmp_path)]
    assert main_guard(run.main)(argv) == 0
    start, first, second, third = spreads.seen
    for layer in range(len(start)):
        assert torch.equal(first[layer], start[layer]) and torch.equal(second[layer], start[layer])
        assert not torch.equal(third[layer], start[layer])  # trained from the third epoch on


def history_of_masses(masses: list[list[float]], centres: list[list[list[float]]]) -> list[LocalitySnapshot]:
    """A one-layer locality history: per snapshot each head's peak mass and centre (steps 0, 10, ...)."""
    snapshots = []
    for t, (mass, centre) in enumerate(zip(masses, centres, strict=True)):
        layer = {"mean_distance": [1.0] * len(mass), "peak_mass": mass, "centres": centre}
        snapshots.append({"step": 10 * t, "layers": [layer]})
    return read_history(snapshots, "a history")


def test_sharpening_takes_each_heads_last_sharp_stretch() -> None:
    # head 1 sharp from step 20; head 2 sharp at 10, not at 20, sharp again from 30; head 3 never
    masses = [[0.1, 0.1, 0.1], [0.2, 0.6, 0.2], [0.7, 0.3, 0.2], [0.8, 0.9, 0.3]]
    path = [[0.0, 0.0], [1.0, 0.0], [1.0, 3.0], [4.0, 7.0]]  # each head walks this path
    centres = [[p, p, p] for p in path]
    events = sharpening(history_of_masses(masses, centres))
    assert events == [
        HeadSharpening(layer=1, head=1, step=20, moved_before=pytest.approx(10**0.5), moved_after=5.0),
        HeadSharpening(layer=1, head=2, step=30, moved_before=pytest.approx(65**0.5), moved_after=0.0),
    ]
    assert sharpening(history_of_masses(masses, centres)[1:]) == []  # no step 0: no start to measure from


def test_a_malformed_gradient_record_is_refused() -> None:
    layer = {"mean_distance": [1.0, 1.0], "peak_mass": [0.5, 0.5], "centres": [[0.0, 0.0], [1.0, 1.0]]}
    history = [{"step": 0, "layers": [{**layer, "centre_grad_norm": [0.1, 0.2]}]}]
    assert read_history(history, "f")[0].layers[0].centre_grad_norm == (0.1, 0.2)
    for bad in ([0.1], [0.1, "x"], [0.1, float("nan")]):
        history = [{"step": 0, "layers": [{**layer, "centre_grad_norm": bad}]}]
        with pytest.raises(CheckpointError, match="'centre_grad_norm'"):
            read_history(history, "f")


def test_the_benchmark_times_the_recording_against_plain_steps(tmp_path, capsys) -> None:
    from helpers import call

    from experiments import benchmark

    report = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--sections", "recording", "--models-scale", "tiny", "--step-batch", "4"]
    code, out, _ = call(benchmark, [*argv, "--repeats", "1", "--json", str(report)], capsys)
    measured = json.loads(report.read_text())["recording"]
    assert code == 0 and "recording the heads' dynamics" in out
    assert measured["plain_images_per_s"] > 0 and measured["recording_images_per_s"] > 0
    assert measured["cost"] == pytest.approx(
        measured["plain_images_per_s"] / measured["recording_images_per_s"] - 1
    )
