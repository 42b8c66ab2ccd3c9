"""What a new user meets first (issue 42): every option of experiments.convert explained in --help with
its default, a mistyped flag answered with the flag it meant, a missing checkpoint answered with the
checkpoints its folder does have."""

import argparse
import re

import pytest
from helpers import call, one_line_error

from experiments import convert, evaluate, run
from experiments.cli import ArgumentParser
from sa_conv.utils.safe_load import SHOWN_NAMES, CheckpointError, read_checkpoint


def squeezed(text: str) -> str:
    """``text`` without whitespace (--help wraps lines, at hyphens too)."""
    return "".join(text.split())


def test_every_convert_option_has_help_and_shows_its_default(capsys):
    parser = convert.build_parser()
    options = [action for action in parser._actions if action.option_strings]
    assert len(options) == 31  # -h, --debug, 12 of the conv, 7 of the check, 10 of a trained network
    code, out, _ = call(convert, ["--help"], capsys)
    assert code == 0
    for action in options:
        name = action.option_strings[-1]
        assert action.help and action.help.strip(), f"{name} has no help text"
        shown = action.help % {**vars(action), "prog": parser.prog}
        assert squeezed(shown) in squeezed(out), f"{name}'s help is not in --help"
        if action.default in (None, False, argparse.SUPPRESS):
            continue
        stated = re.search(r"\(default: ([^,)]+)", action.help)
        assert stated, f"{name} does not show its default {action.default!r}"
        value = action.type(stated[1]) if action.type else stated[1]
        assert value == action.default, f"{name} says default {stated[1]}, is {action.default!r}"


@pytest.mark.parametrize(
    ("module", "argv", "line"),
    [
        (
            run,
            ["quadratic", "--scale", "tiny", "--data_dir", "DIR"],
            "--data_dir (did you mean --data-dir?) DIR",
        ),
        (run, ["quadratic", "--epoch", "2"], "--epoch (did you mean --epochs?) 2"),  # no prefix abbreviation
        (run, ["quadratic", "--Weight_Decay=0"], "--Weight_Decay=0 (did you mean --weight-decay?)"),
        (run, ["quadratic", "--head", "4"], "--head (did you mean --heads?) 4"),
        (
            run,
            ["quadratic", "--wight-decay", "0", "--synthetic_size", "8"],
            "--wight-decay (did you mean --weight-decay?) 0 "
            "--synthetic_size (did you mean --synthetic-size?) 8",
        ),
        (evaluate, ["x.ckpt", "--data_dir", "DIR"], "--data_dir (did you mean --data-dir?) DIR"),
        (evaluate, ["x.ckpt", "--batch", "8"], "--batch (did you mean --batch-size?) 8"),
        (evaluate, ["x.ckpt", "--jsn"], "--jsn (did you mean --json?)"),
    ],
)
def test_a_mistyped_flag_suggests_the_right_one(module, argv, line, capsys):
    code, out, err = call(module, argv, capsys)
    prog = f"python -m experiments.{module.__name__.rsplit('.', 1)[-1]}"
    assert (code, out, err) == (2, "", f"{prog}: error: unrecognized arguments: {line}\n")


def test_what_counts_as_the_same_flag():
    parser = ArgumentParser(prog="p")
    parser.add_argument("--a-b-c")
    parser.add_argument("--epochs")
    parser.add_argument("--epsilon")
    assert parser.suggestion("--a_b_c") == "--a-b-c"  # too far apart for difflib: _ and - are the same
    assert parser.suggestion("--A_B_C=3") == "--a-b-c"
    assert parser.suggestion("---epochs") == "--epochs"
    assert parser.suggestion("--epoch") == "--epochs"  # the only flag it begins
    assert parser.suggestion("--epsilom") == "--epsilon"  # the closest
    assert parser.suggestion("--e") is None  # begins two, close to none
    assert parser.suggestion("--bogus") is None
    assert parser.suggestion("value") is None


@pytest.mark.parametrize(("module", "argv"), [(run, ["quadratic"]), (evaluate, ["x.ckpt"])])
def test_a_flag_like_no_other_gets_no_suggestion(module, argv, capsys):
    code, _, err = call(module, [*argv, "--bogus"], capsys)
    assert code == 2 and err.endswith(": error: unrecognized arguments: --bogus (see --help)\n")


@pytest.fixture
def run_folder(tmp_path):
    """A run folder whose checkpoints/ holds two checkpoints, a text file and a folder named like one."""
    checkpoints = tmp_path / "runs" / "x" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for name in ("last.ckpt", "best-epoch014.ckpt"):
        (checkpoints / name).write_bytes(b"")
    (checkpoints / "notes.txt").write_text("not a checkpoint")
    (checkpoints / "old.ckpt").mkdir()
    return tmp_path / "runs" / "x"


def test_a_missing_checkpoint_names_the_ones_its_folder_has(run_folder, capsys):
    missing = run_folder / "checkpoints" / "lst.ckpt"
    code, _, err = call(evaluate, [str(missing), "--synthetic"], capsys)
    assert one_line_error(code, err) == (
        f"error: checkpoint {missing} does not exist; that folder has: best-epoch014.ckpt, last.ckpt"
    )


@pytest.mark.parametrize(
    ("where", "tail"),
    [
        (
            "last.ckpt",
            "; that folder has no checkpoints, its checkpoints/ folder has: best-epoch014.ckpt, last.ckpt",
        ),
        ("checkpoints/old.ckpt/last.ckpt", "; that folder has no checkpoints (*.ckpt)"),
        ("gone/last.ckpt", " (nor does its folder {run}/gone)"),
    ],
)
def test_a_missing_checkpoints_message_says_what_is_there(run_folder, where, tail):
    path = run_folder / where
    message = f"checkpoint {path} does not exist" + tail.format(run=run_folder)
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        read_checkpoint(path)


def test_a_full_folder_is_named_in_part(tmp_path):
    names = [f"epoch{i:03d}.ckpt" for i in range(SHOWN_NAMES + 3)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    listed = ", ".join(names[:SHOWN_NAMES])
    message = f"checkpoint {tmp_path / 'best.ckpt'} does not exist; that folder has: {listed} and 3 more"
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        read_checkpoint(tmp_path / "best.ckpt")
