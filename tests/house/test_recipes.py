"""docs/library.md's recipes, each followed with a toy: a model, a figure and a command are their own new
files plus the one registration point the recipe names (the encoding's recipe: tests/nn/test_extension.py).
The toys' files are written to a temporary folder on the path; the registration is the registry's line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import QUIET

from experiments import run, study
from experiments.__main__ import main as experiments_main
from experiments.cli import main_guard
from experiments.commands import COMMANDS, Command
from sa_conv.analysis.figure_registry import FIGURES
from sa_conv.models import MODELS, ModelEntry, create_model

# the toy model's config (torch-free: command lines read it before torch) and its layers, two new files
TOY_CONFIG = '''
from dataclasses import dataclass

from sa_conv.utils.config import option


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    """A linear classifier of mean-pooled pixels through one hidden layer."""

    num_classes: int = option(10, "classes of the classifier")
    in_channels: int = option(3, "channels of the input images")
    toy_width: int = option(8, "hidden units")
'''
TOY_LAYERS = '''
import torch
from torch import nn

from sa_conv.models.base import Backbone


class ToyNet(Backbone):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.hidden = nn.Linear(config.in_channels, config.toy_width)
        self.head = nn.Linear(config.toy_width, config.num_classes)

    def forward(self, images):
        return self.head(torch.relu(self.hidden(images.mean((2, 3)))))


def toy_activations(config):
    """Values one image keeps for backward: the hidden layer's input and output."""
    return config.in_channels + 2 * config.toy_width


def toy_flops(config, training):
    """Forward FLOPs, those of the product whose input is the image, none recomputed."""
    first = 2 * config.in_channels * config.toy_width
    return first + 2 * config.toy_width * config.num_classes, first, 0
'''


def _files(folder: Path, monkeypatch: pytest.MonkeyPatch, **sources: str) -> None:
    """Write each module's source to ``folder`` and put the folder on the import path."""
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(folder))


def test_a_new_model_is_its_files_and_one_registry_entry(tmp_path, monkeypatch) -> None:
    _files(tmp_path, monkeypatch, toy_config=TOY_CONFIG, toy_layers=TOY_LAYERS)
    from toy_config import ToyConfig  # type: ignore[import-not-found]

    entry = ModelEntry(
        ToyConfig,
        builder="toy_layers:ToyNet",
        flops="toy_layers:toy_flops",
        activations="toy_layers:toy_activations",
        scales={"tiny": {"toy_width": 6}},
    )
    monkeypatch.setitem(MODELS, "toy", entry)  # the registration point
    from sa_conv.analysis.flops import analytic_flops, counted_flops
    from sa_conv.training.presets import preset

    config = preset("toy", "tiny").resolved_model_config
    assert config == ToyConfig(toy_width=6)  # the preset: the entry's own options at that scale
    model = create_model("toy", toy_width=6)
    for training in (True, False):
        for passes in ("forward", "forward+backward"):
            counted = counted_flops(model, training=training, passes=passes)  # type: ignore[arg-type]
            assert counted == analytic_flops("toy", config, training=training, passes=passes)  # type: ignore[arg-type]
    out = tmp_path / "runs"
    argv = ["toy", "--scale", "tiny", "--epochs", "1", "--toy-width", "4", "--synthetic", *QUIET]
    assert main_guard(run.main)([*argv, "--synthetic-size", "64", "--output-dir", str(out)]) == 0
    metrics = json.loads((out / "toy/version_0/metrics.json").read_text())
    assert metrics["config"]["model_config"] == {"num_classes": 10, "in_channels": 3, "toy_width": 4}
    assert metrics["params"] == (3 * 4 + 4) + (4 * 10 + 10) and 0.0 <= metrics["test_acc"] <= 1.0


def test_a_new_figure_is_its_function_and_one_registry_line(tmp_path, monkeypatch) -> None:
    _files(
        tmp_path,
        monkeypatch,
        toy_figure='''
        from matplotlib.figure import Figure


        def heads_per_layer(inputs):
            """A bar per layer: its number of heads (None for a model without attention maps)."""
            if not inputs.maps:
                return None
            figure = Figure()
            figure.subplots().bar(range(len(inputs.maps)), [m.shape[1] for m in inputs.maps])
            return figure
        ''',
    )
    monkeypatch.setitem(FIGURES, "attention/heads_per_layer", "toy_figure:heads_per_layer")  # the line
    out = tmp_path / "runs"
    flags = ["--layers", "2", "--hidden", "16", "--heads", "3", "--epochs", "1", "--synthetic"]
    argv = ["quadratic", "--scale", "tiny", *flags, "--synthetic-size", "64", "--output-dir", str(out)]
    assert main_guard(run.main)([*argv, "--figures-every", "none"]) == 0
    from experiments import figures

    ckpt = out / "quadratic/version_0/checkpoints/last.ckpt"
    assert main_guard(figures.main)([str(ckpt), "--out", str(tmp_path / "fig"), "--name", "toy"]) == 0
    drawn = tmp_path / "fig" / "toy_heads_per_layer.png"
    assert drawn.stat().st_size > 1000  # the figures command drew it, as training and the study do
    assert study is not None  # the study draws through the same function (experiments.study.figures)


def test_a_new_command_is_its_module_and_one_registry_line(tmp_path, monkeypatch, capsys) -> None:
    _files(
        tmp_path,
        monkeypatch,
        toy_command="""
        from experiments.cli import ArgumentParser, UserError


        def main(argv=None):
            args = ArgumentParser(prog="python -m experiments toy").parse_known_args(argv)[1]
            if args == ["fail"]:
                raise UserError("the toy was asked to fail")
            print("toy ran with", args)
            return 0
        """,
    )
    monkeypatch.setitem(COMMANDS, "toy", Command("toy_command", "a toy command"))  # the registry line
    assert experiments_main([]) == 0
    assert "  toy" in capsys.readouterr().out  # listed with its summary
    assert experiments_main(["toy", "a", "b"]) == 0
    assert capsys.readouterr().out == "toy ran with ['a', 'b']\n"
    assert experiments_main(["toy", "fail"]) == 1  # its errors through the suite's guard: one line
    assert capsys.readouterr().err.strip() == "error: the toy was asked to fail"


def test_the_command_list_runs_as_a_module() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "experiments"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert all(f"  {name}" in listed for name in COMMANDS)
