"""What cannot be read is named plainly: a device or pipe given as a checkpoint, a checkpoint the user may
not read; and a run that fails before its first checkpoint leaves no run folder behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import TEN_STEPS, StepCounter, call, one_line_error, with_callback

from experiments import evaluate, explore, run


@pytest.mark.parametrize("command", [evaluate, explore])
def test_a_device_or_pipe_is_not_a_checkpoint(tmp_path: Path, capsys, command) -> None:
    pipe = tmp_path / "pipe.ckpt"
    os.mkfifo(pipe)
    for special in ("/dev/zero", str(pipe)):  # read whole, either would never end
        code, _, err = call(
            command, [special, "--out", str(tmp_path / "p.html")][: 1 if command is evaluate else 3], capsys
        )
        assert "is not a regular file" in one_line_error(code, err)


def test_a_checkpoint_that_cannot_be_opened_says_permission_denied(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_bytes(b"x")
    real_open = Path.open

    def denied(self: Path, *args, **kwargs):  # tests run as root, where chmod 000 denies nothing
        if self == ckpt:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    code, _, err = call(evaluate, [str(ckpt)], capsys)
    assert "cannot read checkpoint" in (line := one_line_error(code, err)) and "permission denied" in line


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_run_folder(tmp_path, monkeypatch) -> None:
    out = tmp_path / "runs"
    out.mkdir()  # an output folder that exists: only the run's own folder is new
    with_callback(monkeypatch, StepCounter(0, "crash"))
    with pytest.raises(RuntimeError, match="went away"):
        run.main(["quadratic", *TEN_STEPS, "--epochs", "1", "--output-dir", str(out)])
    assert out.is_dir() and not any(out.rglob("*")), sorted(out.rglob("*"))
