"""Untrusted structure and numbers are bounded before use: an alias bomb, nesting thousands deep (or a
list that holds itself), numbers out of range and models larger than the machine are each one short
error line and a non-zero exit, refused before anything is built from them; nothing is half-written."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import QUICK, call, one_line_error
from safetensors.torch import save_file

import sa_conv.training.run as training
from experiments import convert, evaluate, explore, models, prune, run, study
from sa_conv.utils.untrusted import MAX_DEPTH, UntrustedInputError, check_bounds, load_json, load_yaml


def alias_bomb(levels: int) -> str:
    """A YAML config of under 1 KB whose ``heads`` refers, through aliases, to 9^levels strings."""
    lines = ["model: quadratic", "scratch:", "  - &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    lines += ["model_config:", f"  heads: *a{levels - 1}"]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def in_itself() -> list[Any]:
    """A list that holds itself: infinitely deep to anything that walks it."""
    value: list[Any] = []
    value.append(value)
    return value


def test_an_alias_bomb_is_one_short_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "bomb.yaml"
    config.write_text(alias_bomb(10))
    assert len(config.read_bytes()) < 1024
    code, _, err = call(run, ["quadratic", "--config", str(config)], capsys)
    line = one_line_error(code, err)
    assert "holds over" in line and len(err) < 300


@pytest.mark.parametrize(
    "text",
    ["heads: " + "[" * 100_000 + "]" * 100_000, "a:\n" + "".join(f"{' ' * i}- \n" for i in range(1, 3000))],
)
def test_yaml_nested_deep_is_refused(text: str) -> None:
    with pytest.raises(UntrustedInputError, match="nested"):
        load_yaml(text, "config file x.yaml")


@pytest.mark.parametrize("value", [nested(MAX_DEPTH + 1), nested(100_000), in_itself(), {"a": nested(70)}])
def test_deep_structure_is_refused_without_recursion(value: Any) -> None:
    with pytest.raises(UntrustedInputError, match=f"nested over {MAX_DEPTH} levels"):
        check_bounds(value, "x")


def test_wide_and_shared_structure_is_counted_by_reference() -> None:
    level: list[Any] = ["x"] * 9
    for _ in range(9):
        level = [level] * 9  # 9^10 references, a few hundred objects
    with pytest.raises(UntrustedInputError, match="over 2,000,000 values"):
        check_bounds(level, "x")
    check_bounds(nested(MAX_DEPTH - 1), "x")  # within the bound: accepted


def test_json_nested_deep_is_refused() -> None:
    with pytest.raises(UntrustedInputError, match="nested too deeply"):
        load_json("[" * 100_000 + "]" * 100_000, "x.json")
    with pytest.raises(UntrustedInputError, match="nested over"):
        load_json("[" * 100 + "]" * 100, "x.json")


def save_deep(ckpt: dict[str, Any], path: Path) -> Path:
    """``torch.save`` of a checkpoint holding a structure deeper than pickle's default recursion allows."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        torch.save(ckpt, path)
    finally:
        sys.setrecursionlimit(limit)
    return path


@pytest.fixture(params=["deep", "itself"])
def deep_checkpoint(request, quick_checkpoint: Path, tmp_path: Path) -> Path:
    """The quick run's checkpoint with its run config's ``heads`` nested 5,000 deep, or holding itself."""
    ckpt = torch.load(quick_checkpoint, weights_only=True)
    ckpt["run_config"]["model_config"]["heads"] = nested(5000) if request.param == "deep" else in_itself()
    return save_deep(ckpt, tmp_path / "deep.ckpt")


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (evaluate, ["{ckpt}", "--synthetic"]),
        (explore, ["{ckpt}", "--out", "{tmp}/page.html", "--synthetic"]),
        (convert, ["--checkpoint", "{ckpt}", "--to-conv", "--synthetic"]),
        (prune, ["{ckpt}", "--synthetic", "--epochs", "1"]),
        (run, ["quadratic", *QUICK, "--resume", "{ckpt}", "--output-dir", "{tmp}/runs"]),
    ],
    ids=["evaluate", "explore", "convert", "prune", "resume"],
)
def test_a_checkpoint_nested_deep_is_one_line_everywhere(
    deep_checkpoint, tmp_path, capsys, command, argv
) -> None:
    argv = [a.format(ckpt=deep_checkpoint, tmp=tmp_path) for a in argv]
    code, _, err = call(command, argv, capsys)
    assert "nested over" in one_line_error(code, err) and len(err) < 400
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "runs").exists()


def test_safetensors_metadata_nested_deep_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "w.safetensors"
    save_file(
        {"x": torch.zeros(1)},
        str(path),
        metadata={"format": "sa-conv weights 1", "hyper_parameters": "[" * 100_000 + "]" * 100_000},
    )
    code, _, err = call(evaluate, [str(path), "--synthetic"], capsys)
    assert "nested too deeply" in one_line_error(code, err)


@pytest.mark.parametrize("manifest", ["[" * 100_000 + "]" * 100_000, json.dumps({"a/b-seed0": nested(200)})])
@pytest.mark.parametrize("command", [models, explore])
def test_a_manifest_nested_deep_is_one_line(tmp_path: Path, capsys, manifest: str, command) -> None:
    from sa_conv.models.weights import weights_dir

    (weights_dir() / "manifest.json").write_text(manifest)
    argv = [] if command is models else ["small/quadratic-seed0", "--out", str(tmp_path / "p.html")]
    code, _, err = call(command, argv, capsys)
    assert "nested" in one_line_error(code, err) and not (tmp_path / "p.html").exists()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda row: row.update(test_acc=10**400), "'test_acc' is 1000"),
        (lambda row: row.update(test_acc="abc"), "'test_acc' is 'abc', not a number"),
        (lambda row: row.update(test_acc=float("inf")), "'test_acc' is inf"),
        (lambda row: row.update(train_time_s=-5), "'train_time_s' is -5"),
        (lambda row: row.update(layers="x"), "its 'layers' is 'x', not a list of objects"),
        (lambda row: row.update(layers=nested(100)), "nested over"),
    ],
)
def test_results_rows_out_of_range_are_named_and_left_as_they_are(
    tmp_path: Path, capsys, change, named
) -> None:
    from helpers import REPO

    rows = json.loads((REPO / "results" / "small.json").read_text())
    change(rows[1])
    out = tmp_path / "results"
    out.mkdir()
    text = json.dumps(rows)
    (out / "small.json").write_text(text)
    argv = ["--scale", "small", "--synthetic", "--out", str(out), "--report", "--no-figures"]
    code, _, err = call(study, argv, capsys)
    line = one_line_error(code, err)
    assert named in line and len(line) < 400 and (out / "small.json").read_text() == text


def test_a_model_larger_than_the_machine_is_refused_with_its_estimate(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(training, "available_memory", lambda device: 2**20)  # a machine of 1 MiB
    built: list[str] = []
    monkeypatch.setattr(training, "module_for", lambda config: built.append(config.model))
    argv = ["quadratic", *QUICK, "--output-dir", str(tmp_path / "runs")]
    code, _, err = call(run, argv, capsys)
    line = one_line_error(code, err)
    assert "the quadratic model needs about" in line and "parameters" in line and "--allow-large" in line
    assert built == [] and not (tmp_path / "runs").exists()  # refused before the model was built


def test_allow_large_lifts_the_bound(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(training, "available_memory", lambda device: 2**20)
    argv = ["quadratic", *QUICK, "--output-dir", str(tmp_path / "runs"), "--allow-large"]
    assert call(run, argv, capsys)[0] == 0
