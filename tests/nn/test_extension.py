"""Extending the suite: a new encoding is one class and one registry line."""

import json

import pytorch_lightning as pl
import torch
from helpers import tiny
from torch import nn

from experiments import figures, run
from experiments.cli import main_guard
from sa_conv.models import create_model
from sa_conv.nn.encodings import ENCODINGS, EncodingEntry, PositionalEncoding, relative_shifts
from sa_conv.training.config import RunConfig
from sa_conv.training.run import module_for


class ManhattanEncoding(PositionalEncoding):
    """A toy: logit = -beta_h (|dy| + |dx|), one learned beta per head."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.beta = nn.Parameter(torch.rand(heads))

    def logits(self, height: int, width: int) -> torch.Tensor:
        delta = relative_shifts(height, width, self.beta.device).abs().sum(-1).to(self.beta.dtype)  # (N, N)
        return -self.beta[:, None, None] * delta  # (heads, N, N)


def test_a_new_encoding_is_one_class_and_one_registry_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(ENCODINGS, "manhattan", EncodingEntry(ManhattanEncoding))  # the registry line
    model = create_model("quadratic", encoding="manhattan", layers=1, hidden=16, heads=3, ffn=8)
    encoding = model.blocks[0].attention.encoding
    assert isinstance(encoding, ManhattanEncoding) and model.blocks[0].attention.resolved_impl() == "shared"
    out = tmp_path / "runs"
    argv = ["quadratic", "--encoding", "manhattan", *tiny(heads=3), "--synthetic", "--output-dir", str(out)]
    assert main_guard(run.main)(argv) == 0
    metrics = json.loads((out / "quadratic/version_0/metrics.json").read_text())
    assert metrics["config"]["model_config"]["encoding"] == "manhattan" and metrics["layers"][0]["heads"] == 3
    ckpt = out / "quadratic/version_0/checkpoints/last.ckpt"
    assert main_guard(figures.main)([str(ckpt), "--out", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig" / "tiny_quadratic-seed0_layer1.png").is_file()
    trained = torch.load(ckpt, weights_only=True)["state_dict"]["backbone.blocks.0.attention.encoding.beta"]
    config = RunConfig.from_dict(metrics["config"])
    pl.seed_everything(config.seed, verbose=False)  # the run's initial weights, again
    initial = module_for(config).backbone.blocks[0].attention.encoding.beta
    assert trained.shape == (3,) and not torch.allclose(trained, initial)  # it trained as any other
