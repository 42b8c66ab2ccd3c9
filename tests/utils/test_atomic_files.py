"""Files written whole or not at all: a checkpoint killed mid-write leaves the previous one, a run's files
are readable like the rest of its folder, and folders made for a failed run are removed only when empty."""

import os
import stat
from pathlib import Path

import pytest
import torch
from helpers import BATCHES_OF_41

from experiments import run
from experiments.cli import main_guard
from sa_conv.training.checkpoints import AtomicCheckpointIO


def test_atomic_checkpoint_keeps_the_previous_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)

    def dies_midway(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # the process is killed while writing

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, path)
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary left behind


def test_files_are_readable_like_the_rest_of_the_run(tmp_path):
    old = os.umask(0o022)
    try:
        argv = [
            "quadratic",
            *BATCHES_OF_41,
            "--synthetic",
            "--epochs",
            "1",
            "--figures-every",
            "1",
            "--output-dir",
            str(tmp_path),
        ]
        assert main_guard(run.main)(argv) == 0
    finally:
        os.umask(old)
    run_dir = tmp_path / "quadratic/version_0"
    files = [run_dir / "metrics.json", run_dir / "config.yaml", *(run_dir / "checkpoints").iterdir()]
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_new_folders_are_removed_on_error_only_when_empty(tmp_path):
    from sa_conv.utils.files import new_folders_removed_on_error

    (tmp_path / "old").mkdir()
    with pytest.raises(RuntimeError), new_folders_removed_on_error(tmp_path / "old" / "a" / "b"):
        (tmp_path / "old" / "a" / "b").mkdir(parents=True)
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["old"]  # the folder that was there stays
    with pytest.raises(RuntimeError), new_folders_removed_on_error(tmp_path / "new" / "run"):
        (tmp_path / "new" / "run").mkdir(parents=True)
        (tmp_path / "new" / "run" / "last.ckpt").write_text("x")
        raise RuntimeError
    assert (tmp_path / "new" / "run" / "last.ckpt").is_file()  # a file written: everything kept
    with new_folders_removed_on_error(tmp_path / "ok"):
        (tmp_path / "ok").mkdir()
    assert (tmp_path / "ok").is_dir()  # no error: nothing removed
