"""A resumed checkpoint acts only inside its run: file paths in its callbacks' records that lead outside the
run's checkpoint folder (``..``, an absolute path, a symlinked folder, a URL) are dropped with one warning
line, so Lightning neither removes them as stale nor writes a carried best model there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import TEN_STEPS, StepCounter, call, with_callback

from experiments import run
from sa_conv.training.checkpoints import confine_paths

ARGV = ["quadratic", *TEN_STEPS, "--epochs", "2"]


def files_around(root: Path, run_dir: Path) -> dict[str, bytes]:
    """Every file under ``root`` but those of the run folder, with its bytes (symlinks as their target)."""
    found = {}
    for path in root.rglob("*"):
        if run_dir in path.parents or path == run_dir:
            continue
        if path.is_symlink():
            found[str(path)] = os.readlink(path).encode()
        elif path.is_file():
            found[str(path)] = path.read_bytes()
    return found


def crashed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A two-epoch run crashed at the first step of its second epoch: its checkpoints folder."""
    with monkeypatch.context() as patch:
        with_callback(patch, StepCounter(10, "crash"))
        with pytest.raises(RuntimeError, match="went away"):
            run.main([*ARGV, "--output-dir", str(tmp_path / "runs")])
    return tmp_path / "runs/quadratic/version_0/checkpoints"


def outside_paths(tmp_path: Path, ckpts: Path, how: str) -> Path:
    """A path in the run's records that leads outside its checkpoint folder, ``how``: through ``..``, as an
    absolute path, or through a symlinked folder inside it."""
    if how == "dotdot":
        return ckpts / ".." / ".." / ".." / ".." / "victim.txt"
    if how == "absolute":
        return tmp_path / "victim.txt"
    (ckpts / "escape").symlink_to(tmp_path, target_is_directory=True)
    return ckpts / "escape" / "victim.txt"


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_crafted_resume_deletes_nothing_outside_its_run(tmp_path, monkeypatch, capsys, how):
    ckpts = crashed_run(tmp_path, monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = str(outside_paths(tmp_path, ckpts, how))
    ckpt = torch.load(ckpts / "last.ckpt", weights_only=True)
    for key, state in ckpt["callbacks"].items():
        if key.startswith("ModelCheckpoint"):  # every record a stale-file removal reads
            state.update(best_model_path=target, kth_best_model_path=target, last_model_path=target)
            state["best_k_models"] = {target: torch.tensor(0.0)}  # beaten by the next epoch: "stale"
            state["best_model_score"] = torch.tensor(0.0)
    crafted = ckpts / "crafted.ckpt"
    torch.save(ckpt, crafted)
    before = files_around(tmp_path, ckpts.parent)
    code, _, err = call(
        run, [*ARGV, "--output-dir", str(tmp_path / "runs"), "--resume", str(crafted)], capsys
    )
    assert code == 0
    assert files_around(tmp_path, ckpts.parent) == before  # the victim kept, nothing new outside the run
    lines = [line for line in err.splitlines() if "outside this run's checkpoint folder" in line]
    assert len(lines) == 1 and "victim.txt" in lines[0] and "Traceback" not in err, err
    assert (ckpts.parent / "metrics.json").is_file()  # the run finished as any resume does


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_a_carried_best_model_is_written_nowhere_outside_the_run(tmp_path, monkeypatch, capsys, where):
    ckpts = crashed_run(tmp_path, monkeypatch)
    planted = tmp_path / "elsewhere" / "deep" / "planted.ckpt"
    target = (
        planted if where == "absolute" else ckpts / ".." / ".." / ".." / ".." / "elsewhere" / "planted.ckpt"
    )
    ckpt = torch.load(ckpts / "last.ckpt", weights_only=True)
    for key, state in ckpt["callbacks"].items():
        if key.startswith("ModelCheckpoint"):
            state["best_model_path"] = str(target)
    ckpt["carried_best"] = {"file": target.name, "checkpoint": {"state_dict": {}}}
    carried = tmp_path / "carried.ckpt"  # from elsewhere: its training goes on in a new run folder
    torch.save(ckpt, carried)
    before = files_around(tmp_path, tmp_path / "runs/quadratic/version_1")
    code, _, err = call(
        run, [*ARGV, "--output-dir", str(tmp_path / "runs"), "--resume", str(carried)], capsys
    )
    assert code == 0 and "outside this run's checkpoint folder" in err, err
    assert not (tmp_path / "elsewhere").exists()
    assert files_around(tmp_path, tmp_path / "runs/quadratic/version_1") == before


@pytest.mark.parametrize(
    "bad",
    [
        "/etc/passwd",
        "s3://bucket/best.ckpt",
        "file:///etc/passwd",
        "{}/../x.ckpt",
        "{}/sub/../../x.ckpt",
        7,
        "",
    ],
)
def test_only_paths_inside_the_folder_survive(tmp_path, bad):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    good = str(folder / "best-epoch001.ckpt")
    bad = bad.format(folder) if isinstance(bad, str) else bad
    state = {
        "best_model_path": bad,
        "kth_best_model_path": bad,
        "last_model_path": good,
        "best_model_score": torch.tensor(0.9),
        "best_k_models": {bad: torch.tensor(0.9), good: torch.tensor(0.5)},
        "kth_value": torch.tensor(0.5),
    }
    dropped = confine_paths(state, folder, "max")
    assert dropped
    assert state["best_k_models"] == {good: torch.tensor(0.5)}
    assert state["best_model_path"] == state["kth_best_model_path"] == state["last_model_path"] == good
    assert state["best_model_score"] == state["kth_value"] == torch.tensor(0.5)


def test_the_resumed_checkpoints_own_folder_is_read_not_written(tmp_path):
    """A checkpoint resumed from another run keeps that run's best model (a file beside it, only read); a
    missing file there, or one in a folder below it, is dropped."""
    folder, source = tmp_path / "new/checkpoints", tmp_path / "old/checkpoints"
    (source / "sub").mkdir(parents=True)
    best = source / "best-epoch003.ckpt"
    best.write_bytes(b"x")
    (source / "sub" / "deeper.ckpt").write_bytes(b"x")
    state = {"best_model_path": str(folder / ".." / ".." / "old/checkpoints/best-epoch003.ckpt")}
    assert confine_paths(state, folder, "max", source) == [] and state["best_model_path"] == str(
        best.resolve()
    )
    for gone in (source / "best-epoch009.ckpt", source / "sub" / "deeper.ckpt"):
        state = {"best_model_path": str(gone), "best_model_score": torch.tensor(0.5)}
        assert confine_paths(state, folder, "max", source) and state["best_model_path"] == ""
        assert state["best_model_score"] is None
