"""Bad input is refused before any work, in one line: weights that do not fit, diverged weights, numbers
out of range, seeds a study does not have, output paths that cannot be written, two sources of data."""

import json

import pytest
import torch
from helpers import QUICK, TINY, call, one_line_error

from experiments import benchmark, convert, equivalence, evaluate, explore, prune, run, study
from sa_conv.utils.files import can_write_in, write_text


def edited(checkpoint, tmp_path, edit):
    """A copy of the checkpoint with ``edit(state_dict)`` applied."""
    ckpt = torch.load(checkpoint, weights_only=True)
    edit(ckpt["state_dict"])
    path = tmp_path / "edited.ckpt"
    torch.save(ckpt, path)
    return path


def test_resume_from_weights_that_do_not_fit_is_one_line_and_makes_no_run_folder(
    quick_checkpoint, tmp_path, capsys
):
    def shrink(state):  # weights of a model with another width of its first projection
        name = next(k for k in state if k.endswith("proj.weight"))
        state[name] = state[name][:, :-4]

    path = edited(quick_checkpoint, tmp_path, shrink)
    out = tmp_path / "resumed"
    argv = ["quadratic", *QUICK, "--resume", str(path), "--output-dir", str(out)]
    line = one_line_error(*call(run, argv, capsys)[::2])
    assert "does not match its model" in line and "proj.weight" in line and "size mismatch" in line
    assert not out.exists()


def test_missing_weights_are_named(quick_checkpoint, tmp_path, capsys):
    path = edited(quick_checkpoint, tmp_path, lambda state: state.pop("backbone.embed.weight"))
    line = one_line_error(*call(evaluate, [str(path), "--synthetic"], capsys)[::2])
    assert "Missing key(s)" in line and "backbone.embed.weight" in line


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_diverged_weights_are_refused_by_every_reader(quick_checkpoint, tmp_path, capsys, value):
    path = edited(quick_checkpoint, tmp_path, lambda state: state["backbone.head.bias"].fill_(value))
    for module, argv in [
        (evaluate, [str(path), "--synthetic"]),
        (convert, ["--checkpoint", str(path), "--to-conv"]),
        (explore, [str(path), "--synthetic", "--out", str(tmp_path / "page.html")]),
    ]:
        line = one_line_error(*call(module, argv, capsys)[::2])
        assert "NaN or infinity" in line and "backbone.head.bias" in line
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "x"])
@pytest.mark.parametrize("module", [equivalence, convert])
def test_tolerance_is_a_finite_positive_number(module, value, capsys):
    code, out, err = call(module, ["--tolerance", value], capsys)
    assert code == 2 and "--tolerance" in one_line_error(code, err) and not out


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        (run, ["quadratic", *QUICK, "--seed", "-1"]),
        (run, ["quadratic", *QUICK, "--seed", str(2**32)]),
        (equivalence, ["--seed", "99999999999999999999999"]),
        (convert, ["--seed", "-3"]),
    ],
)
def test_seeds_out_of_range(module, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(*call(module, argv, capsys)[::2])
    assert "seed" in line and "4294967295" in line.replace("2**32 - 1", "4294967295")
    assert not any(tmp_path.iterdir())


def test_study_refuses_seeds_it_does_not_have(tmp_path, capsys):
    argv = ["--scale", "tiny", "--synthetic", "--only", "quadratic", "--seeds", "7", "--out", str(tmp_path)]
    line = one_line_error(*call(study, argv, capsys)[::2])
    assert "--seeds" in line and "7" in line and "quadratic: 0, 1" in line
    assert not any(tmp_path.iterdir())


def test_a_synthetic_study_never_writes_the_committed_results(tmp_path, capsys, monkeypatch):
    """Synthetic rows in results/ would be read back as the study's finished runs: --synthetic needs an
    --out of its own (and ships into OUT/weights unless --weights names a folder)."""
    monkeypatch.chdir(tmp_path)  # the checkout's root, where results/ is the committed folder
    argv = ["--scale", "tiny", "--synthetic", "--only", "quadratic", "--report", "--no-figures"]
    line = one_line_error(*call(study, argv, capsys)[::2])
    assert "--synthetic" in line and "--out" in line
    assert not any(tmp_path.iterdir())
    assert study.main([*argv, "--out", "elsewhere"]) == 0
    assert (tmp_path / "elsewhere" / "tiny.json").is_file() and not (tmp_path / "results").exists()
    assert study.build_parser().parse_args(argv).weights is None  # OUT/weights, never the checkout's


@pytest.mark.parametrize(
    ("module", "argv", "flag"),
    [
        (prune, ["{ckpt}", "--epochs", "1", "--output-dir", "{tmp}/p", "--json", "{tmp}"], "--json"),
        (prune, ["{ckpt}", "--epochs", "1", "--output-dir", "{file}"], "--output-dir"),
        (study, ["--scale", "tiny", "--synthetic", "--out", "{tmp}/o", "--figures", "{file}"], "--figures"),
        (study, ["--scale", "tiny", "--synthetic", "--out", "{file}/o"], "--out"),
        (benchmark, ["--sections", "data", "--json", "{tmp}"], "--json"),
        (convert, ["--checkpoint", "{ckpt}", "--to-conv", "--json", "{file}/r.json"], "--json"),
        (explore, ["{ckpt}", "--synthetic", "--out", "{tmp}"], "--out"),
        (
            explore,
            ["{ckpt}", "--synthetic", "--out", "{tmp}/x.html", "--screenshot", "{tmp}"],
            "--screenshot",
        ),
    ],
)
def test_output_paths_are_checked_before_any_work(module, argv, flag, quick_checkpoint, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    names = {"ckpt": quick_checkpoint, "tmp": tmp_path, "file": tmp_path / "afile"}
    code, _, err = call(module, [a.format(**names) for a in argv], capsys)
    assert code == 2 and flag in one_line_error(code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing trained, drawn or measured


def test_explore_view_is_checked_before_the_page_is_written(quick_checkpoint, tmp_path, capsys):
    page, png = tmp_path / "x.html", tmp_path / "x.png"
    base = [str(quick_checkpoint), "--synthetic", "--out", str(page)]
    assert "--screenshot" in one_line_error(*call(explore, [*base, "--query", "3", "3"], capsys)[::2])
    line = one_line_error(*call(explore, [*base, "--screenshot", str(png), "--layer", "2"], capsys)[::2])
    assert "--layer 2" in line and "1 layers" in line
    line = one_line_error(
        *call(explore, [*base, "--screenshot", str(png), "--query", "8", "16"], capsys)[::2]
    )
    assert "--query 8 16" in line and "16x16" in line
    assert not page.exists() and not png.exists()


@pytest.mark.parametrize("module", [run, evaluate])
def test_one_source_of_images(module, tmp_path, capsys):
    argv = ["quadratic", *TINY] if module is run else [str(tmp_path / "x.ckpt")]
    code, _, err = call(module, [*argv, "--synthetic", "--data-dir", str(tmp_path)], capsys)
    assert code == 2 and "not allowed with" in one_line_error(code, err)


def test_synthetic_size_reaches_evaluation_of_a_checkpoint(quick_checkpoint, capsys):
    code, out, _ = call(evaluate, [str(quick_checkpoint), "--synthetic-size", "256", "--json"], capsys)
    assert code == 0 and json.loads(out)["n_images"] == 64  # a quarter of 256 test images
    code, out, _ = call(evaluate, [str(quick_checkpoint), "--json"], capsys)
    assert code == 0 and json.loads(out)["n_images"] == 16  # the run's own 64: a quarter, at least 16


def test_writes_name_the_file_asked_for_never_a_temporary_one(tmp_path):
    with pytest.raises(IsADirectoryError) as err:
        write_text(tmp_path, "x")
    assert err.value.filename == str(tmp_path)
    (tmp_path / "afile").write_text("")
    with pytest.raises(OSError) as err:
        write_text(tmp_path / "afile" / "r.json", "x")
    assert err.value.filename == str(tmp_path / "afile" / "r.json") or "afile" in str(err.value.filename)
    assert ".tmp" not in str(err.value.filename)


def test_can_write_in(tmp_path):
    (tmp_path / "afile").write_text("")
    assert can_write_in(tmp_path / "new" / "deeper") is None
    assert "is a file" in can_write_in(tmp_path / "afile" / "below")
    assert not (tmp_path / "new").exists()  # the probe makes nothing it does not remove
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
