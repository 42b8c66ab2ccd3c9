"""A full disk or quota at every kind of write: one line naming the file, what it held and the free space;
no half-written file; the previous checkpoint readable and the run resumable once space is freed."""

from __future__ import annotations

import errno
import json
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny
from matplotlib.figure import Figure

from experiments import figures, run, study
from experiments.cli import main_guard

# two epochs of 96 synthetic images in batches of 32, a narrow feed-forward layer
QUADRATIC = ["quadratic", *tiny(epochs=2), "--ffn", "16", "--synthetic", "--synthetic-size", "96"]
QUADRATIC += ["--batch-size", "32", "--snapshot-minutes", "0"]


def full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def one_line(code: int, err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "no space left" in lines[0] and " free" in lines[0] and "--resume" in lines[0], lines[0]
    return lines[0]


def no_temporary_files(root: Path) -> None:
    assert not [p for p in root.rglob("*.tmp")], "a half-written file was left"


def fail_writes(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    """``Path.write_text`` of a temporary file named ``prefix...`` finds the disk full (after a partial
    write, as a real one would)."""
    real = pathlib.Path.write_text

    def write_text(self: Path, text: str, *args, **kwargs) -> int:
        if self.name.startswith(prefix):
            real(self, text[: len(text) // 2])
            raise full()
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)


@pytest.mark.parametrize(
    ("prefix", "named"), [(".config.yaml", "config config.yaml"), (".metrics.json", "results")]
)
def test_config_and_metrics(tmp_path, monkeypatch, capsys, prefix, named):
    fail_writes(monkeypatch, prefix)
    code = main_guard(run.main)([*QUADRATIC, "--output-dir", str(tmp_path)])
    line = one_line(code, capsys.readouterr().err)
    assert named.split()[0] in line and prefix[1:] in line
    no_temporary_files(tmp_path)


def test_a_checkpoint_leaves_the_previous_one_readable_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    real, saved = torch.save, []

    def save(obj, f, *args, **kwargs):
        if str(f).endswith(".tmp") and ".last.ckpt." in str(f) and saved:  # the second epoch's last.ckpt
            Path(f).write_bytes(b"PK partial")
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 512")
        if ".last.ckpt." in str(f):
            saved.append(f)
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(
        "sa_conv.utils.files.free_bytes", lambda path: 0
    )  # the disk is full: torch.save's pos error
    monkeypatch.setattr(
        "sa_conv.training.checkpoints.free_bytes", lambda path: 1 << 40
    )  # (no early refusal here)
    argv = [*QUADRATIC, "--output-dir", str(tmp_path)]
    line = one_line(main_guard(run.main)(argv), capsys.readouterr().err)
    assert "checkpoint" in line and "last.ckpt" in line
    no_temporary_files(tmp_path)
    last = tmp_path / "quadratic/version_0/checkpoints/last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == 0  # the first epoch's, intact
    monkeypatch.undo()  # space freed
    assert main_guard(run.main)([*argv, "--resume"]) == 0
    assert json.loads((last.parent.parent / "metrics.json").read_text())["epochs_completed"] == 2


def test_a_checkpoint_that_will_not_fit_is_refused_before_it_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        "sa_conv.training.checkpoints.free_bytes", lambda path: 1000
    )  # less than the last one
    code = main_guard(run.main)([*QUADRATIC, "--output-dir", str(tmp_path)])
    line = one_line(code, capsys.readouterr().err)
    assert "will not fit" in line and "the last one took" in line
    no_temporary_files(tmp_path)


def test_a_figure(tmp_path, monkeypatch, capsys):
    def savefig(self, fname, *args, **kwargs):
        raise full()

    monkeypatch.setattr(Figure, "savefig", savefig)
    ckpt = _one_run(tmp_path, monkeypatch)
    code = main_guard(figures.main)([str(ckpt), "--out", str(tmp_path / "figs")])
    line = one_line(code, capsys.readouterr().err)
    assert "figure" in line and ".png" in line
    no_temporary_files(tmp_path)


def _one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "one"
    argv = [*QUADRATIC, "--epochs", "1", "--output-dir", str(out), "--no-explore", "--figures-every", "none"]
    assert main_guard(run.main)(argv) == 0
    return out / "quadratic/version_0/checkpoints/last.ckpt"


def test_tensorboard_events(tmp_path, monkeypatch, capsys):
    from tensorboard.summary.writer import record_writer

    real, calls = record_writer.RecordWriter.write, {"n": 0}

    def write(self, data):
        calls["n"] += 1
        if calls["n"] > 3:
            raise full()
        return real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)
    code = main_guard(run.main)([*QUADRATIC, "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    line = one_line(code, err)
    assert "TensorBoard events" in line and "Exception in thread" not in err
    no_temporary_files(tmp_path)


def test_the_explorer_page(tmp_path, monkeypatch, capsys):
    fail_writes(monkeypatch, ".explorer.html")
    code = main_guard(run.main)([*QUADRATIC, "--output-dir", str(tmp_path)])
    assert "explorer.html" in one_line(code, capsys.readouterr().err)
    no_temporary_files(tmp_path)


def test_the_study_tables(tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny.json").write_text("[]")
    fail_writes(monkeypatch, ".tiny.json")
    code = main_guard(study.main)(["--scale", "tiny", "--synthetic", "--out", str(tmp_path), "--report"])
    assert "tiny.json" in one_line(code, capsys.readouterr().err)
    assert (tmp_path / "tiny.json").read_text() == "[]"  # the previous table, intact
    no_temporary_files(tmp_path)


@pytest.mark.slow
def test_a_real_small_file_system(tmp_path):
    """A 1.1 MB tmpfs (checkpoints of about 0.4 MB): the run stops with one line when it fills; remounted
    larger, --resume finishes."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {made.stderr.decode().strip()[:120]}")
    try:
        argv = [*QUADRATIC, "--hidden", "64", "--epochs", "6", "--figures-every", "none", "--no-explore"]
        argv += ["--output-dir", str(mount)]
        cmd = [sys.executable, "-m", "experiments.run", *argv]
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        one_line(first.returncode, first.stderr)
        no_temporary_files(mount)
        checkpoints = sorted((mount / "quadratic/version_0/checkpoints").glob("*.ckpt"))
        for path in checkpoints:
            torch.load(path, weights_only=True)  # every checkpoint left is whole
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        again = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-2000:]
        metrics = json.loads((mount / "quadratic/version_0/metrics.json").read_text())
        assert metrics["epochs_completed"] == 6
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
