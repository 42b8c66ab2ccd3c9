"""The paper's degenerate-head pruning experiment: experiments.prune."""

import json

import pytest
import torch
from helpers import tiny, train

from experiments import prune
from experiments.cli import main_guard


def trained(tmp_path, model: str):
    """The last checkpoint of a two-layer run of ``model``."""
    flags = [*tiny(layers=2), "--synthetic", "--figures-every", "none"]
    return train(tmp_path / "runs", model, *flags) / "checkpoints" / "last.ckpt"


def test_degenerate_heads_are_pruned_and_fine_tuned(tmp_path, capsys):
    path = trained(tmp_path, "gaussian")
    ckpt = torch.load(path, weights_only=True)
    scale = ckpt["state_dict"]["backbone.blocks.0.attention.encoding.scale"]
    scale[2] = torch.diag(torch.tensor([1.0, 1e-3]))  # condition number 1e6: a stripe
    ckpt["state_dict"]["backbone.blocks.1.attention.encoding.scale"][0] = (
        torch.eye(2) * 1e-3
    )  # eigenvalues 1e-6
    forced = tmp_path / "forced.ckpt"
    torch.save(ckpt, forced)
    capsys.readouterr()
    report_path = tmp_path / "prune.json"
    argv = [str(forced), "--epochs", "1", "--limit-train-batches", "2", "--output-dir", str(tmp_path / "ft")]
    assert main_guard(prune.main)([*argv, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["pruned"] == {"1": [3], "2": [1]}  # numbered from 1, as in the figures
    assert report["rule"].startswith("condition number > 1000")  # the generalized Gaussian's rule
    nearest = report["nearest_to_degenerate"]  # the forced heads are each layer's nearest to the rule
    assert nearest["1"]["max_condition"] == pytest.approx(1e6, rel=1e-6)
    assert nearest["2"]["min_largest_eigenvalue"] == pytest.approx(1e-6, rel=1e-6)
    assert report["heads_before"] == [4, 4] and report["heads_after"] == [3, 3]
    assert report["params_before"] - report["params_after"] == 2 * (
        16 * 16 + 2 + 4
    )  # proj blocks + centres + S
    assert set(report["accuracy"]) == {"before", "pruned", "finetuned"}
    assert all(0 <= a <= 1 for a in report["accuracy"].values())
    run_dir = tmp_path / "ft" / "gaussian" / "version_0"
    config = json.loads((run_dir / "metrics.json").read_text())["config"]
    assert config["optim"]["lr"] == 0.01 and config["model_config"]["layer_heads"] == [3, 3]


def test_no_degenerate_head_says_so(tmp_path, capsys):
    path = trained(tmp_path, "quadratic")
    capsys.readouterr()
    report_path = tmp_path / "prune.json"
    assert main_guard(prune.main)([str(path), "--json", str(report_path)]) == 0
    assert "no degenerate head" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["pruned"] == {} and report["rule"].startswith("s^2 < 1e-5")  # the quadratic's own rule
    ckpt = torch.load(path, weights_only=True)
    for layer in ("1", "2"):  # isotropic heads: condition 1, the rule's eigenvalue the smallest s^2
        spread = ckpt["state_dict"][f"backbone.blocks.{int(layer) - 1}.attention.encoding.spread"]
        nearest = report["nearest_to_degenerate"][layer]
        assert nearest["max_condition"] == pytest.approx(1.0)
        assert nearest["min_largest_eigenvalue"] == pytest.approx(float(spread.square().min()), rel=1e-6)


def test_an_encoding_without_a_rule_is_one_line(tmp_path, capsys):
    path = trained(tmp_path, "learned")
    capsys.readouterr()
    code = main_guard(prune.main)([str(path)])
    err = capsys.readouterr().err
    assert code == 1 and "has no degenerate-head rule" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("extra", "match"),
    [(["--lr", "inf"], "--lr: must be a finite number > 0"), (["--epochs", "0"], "positive")],
)
def test_prune_bad_options(tmp_path, capsys, extra, match):
    code = main_guard(prune.main)([str(tmp_path / "x.ckpt"), *extra])
    assert code != 0 and match in capsys.readouterr().err


def test_the_control_prunes_as_many_healthy_heads_and_is_compared_on_the_same_images(tmp_path, capsys):
    path = trained(tmp_path, "gaussian")
    ckpt = torch.load(path, weights_only=True)
    ckpt["state_dict"]["backbone.blocks.0.attention.encoding.scale"][2] = torch.diag(
        torch.tensor([1.0, 1e-3])
    )
    forced = tmp_path / "forced.ckpt"
    torch.save(ckpt, forced)
    report_path = tmp_path / "prune.json"
    argv = [str(forced), "--epochs", "1", "--limit-train-batches", "2", "--output-dir", str(tmp_path / "ft")]
    assert main_guard(prune.main)([*argv, "--control", "5", "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    control = report["control"]
    assert report["pruned"] == {"1": [3]} and control["seed"] == 5
    (removed,) = control["pruned"]["1"]
    assert removed != 3 and 1 <= removed <= 4 and list(control["pruned"]) == ["1"]  # one healthy head
    assert control["heads_after"] == report["heads_after"] == [3, 4]
    assert control["params_after"] == report["params_after"]
    assert set(control["accuracy"]) == {"before", "pruned", "finetuned"}
    assert control["accuracy"]["before"] == report["accuracy"]["before"]  # the same checkpoint
    runs = sorted(p.name for p in (tmp_path / "ft" / "gaussian").iterdir())
    assert runs == ["version_0", "version_1"]  # each fine-tuned in a run of its own
    pruned_correct = json.loads((tmp_path / "ft/gaussian/version_0/metrics.json").read_text())["test_correct"]
    control_correct = json.loads((tmp_path / "ft/gaussian/version_1/metrics.json").read_text())[
        "test_correct"
    ]
    only_pruned = sum(a == "1" and b == "0" for a, b in zip(pruned_correct, control_correct, strict=True))
    only_control = sum(a == "0" and b == "1" for a, b in zip(pruned_correct, control_correct, strict=True))
    assert (
        control["mcnemar"]["only_pruned"] == only_pruned
        and control["mcnemar"]["only_control"] == only_control
    )
    assert 0 < control["mcnemar"]["p"] <= 1
    assert "test_correct" not in report and "test_correct" not in control
