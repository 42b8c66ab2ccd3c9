"""Runs that move between machines: the study resumes whichever checkpoint is further along, its own or the
carried one, carries without overwriting newer steps, and reads a finished run back where it lies now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.summaries import metrics

from experiments.cli import UserError
from experiments.study.entries import Entry, entry_config
from experiments.study.runs import StudySettings, finished, newest_resume, run_root
from experiments.study.weights import carried_checkpoint, carry
from sa_conv import __version__
from sa_conv.training.resume import find_resume
from sa_conv.training.run import module_for
from sa_conv.utils.safe_load import read_checkpoint

ENTRY = Entry("quadratic", "quadratic", (0,))


@pytest.fixture
def settings(tmp_path: Path) -> StudySettings:
    return StudySettings(
        scale="tiny", data_dir=tmp_path, out=tmp_path / "results", weights=tmp_path / "weights"
    )


def checkpoint(step: int, **config_changes: Any) -> dict[str, Any]:
    """A resumable checkpoint of the entry's run at ``step`` (the fields a resume reads)."""
    config = entry_config(ENTRY, "tiny", 0).replace(**config_changes)
    module = module_for(config)
    return {
        "hyper_parameters": dict(module.hparams),
        "state_dict": module.state_dict(),
        "sa_conv_version": __version__,
        "run_config": config.to_dict(),
        "global_step": step,
        "epoch": 0,
    }


def own(settings: StudySettings, step: int) -> Path:
    """The run's own newest checkpoint, at ``step``, in its run folder on this machine."""
    path = settings.out / "runs" / "tiny" / "quadratic-seed0" / "quadratic" / "version_0" / "checkpoints"
    path.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint(step), path / "last.ckpt")
    return path / "last.ckpt"


def carried(settings: StudySettings, step: int, **config_changes: Any) -> Path:
    """The checkpoint another machine carried, at ``step``."""
    path = carried_checkpoint("tiny", "quadratic-seed0", settings.weights)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint(step, **config_changes), path)
    return path


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        (None, 8, "carried"),
        (4, None, "own"),
        (4, 8, "carried"),
        (8, 4, "own"),
        (8, 8, "own"),
        (None, None, None),
    ],
)
def test_the_run_resumes_the_checkpoint_further_along(
    settings: StudySettings, mine: int | None, theirs: int | None, expected: str | None
) -> None:
    paths = {
        "own": own(settings, mine) if mine is not None else None,
        "carried": carried(settings, theirs) if theirs is not None else None,
    }
    resume = newest_resume(ENTRY, 0, settings)
    if expected is None:
        assert resume is None
        return
    assert resume is not None and resume.path == paths[expected]
    assert resume.step == (mine if expected == "own" else theirs)
    assert (resume.version is None) == (expected == "carried")  # carried: continues in a new run folder


def test_a_carried_checkpoint_of_another_config_is_left_alone_with_a_warning(settings: StudySettings) -> None:
    path = carried(settings, 8, epochs=99)
    mine = own(settings, 4)
    warned: list[str] = []
    resume = newest_resume(ENTRY, 0, settings, warn=warned.append)
    assert resume is not None and resume.path == mine
    assert len(warned) == 1 and "left alone" in warned[0] and "epochs" in warned[0] and path.is_file()


def test_carrying_never_replaces_a_checkpoint_further_along(settings: StudySettings) -> None:
    target = carried(settings, 8)
    older = newest_resume(ENTRY, 0, settings)  # the carried one itself: nothing to copy
    assert older is not None and carry("tiny", "quadratic-seed0", older, settings.weights) == target
    own(settings, 4)
    behind = find_resume(
        "auto", settings.out / "runs" / "tiny" / "quadratic-seed0", entry_config(ENTRY, "tiny", 0)
    )
    assert behind is not None and behind.step == 4
    carry("tiny", "quadratic-seed0", behind, settings.weights)
    assert read_checkpoint(target)["global_step"] == 8  # another machine's newer steps kept
    ahead = own(settings, 12)
    resume = newest_resume(ENTRY, 0, settings)
    assert resume is not None and resume.path == ahead
    carry("tiny", "quadratic-seed0", resume, settings.weights)
    assert read_checkpoint(target)["global_step"] == 12  # replaced in place


def test_a_finished_run_read_from_another_folder_names_its_files_there(settings: StudySettings) -> None:
    """metrics.json names the run's files where it trained (another working directory or checkout): read
    back from where it lies now, the study uses the files there."""
    folder = run_root(ENTRY, 0, settings) / "quadratic" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    written = {
        **metrics("clean"),
        "config": entry_config(ENTRY, "tiny", 0).to_dict(),
        "run_dir": "elsewhere/quadratic/version_0",
        "best_checkpoint": "/elsewhere/quadratic/version_0/checkpoints/best-epoch002.ckpt",
    }
    (folder / "metrics.json").write_text(json.dumps(written))
    summary = finished(ENTRY, 0, settings)
    assert summary is not None and summary.run_dir == str(folder)
    assert summary.best_checkpoint == str(folder / "checkpoints" / "best-epoch002.ckpt")


def test_a_run_folder_of_another_name_is_passed_over_and_a_broken_summary_named(
    settings: StudySettings,
) -> None:
    runs = run_root(ENTRY, 0, settings) / "quadratic"
    (runs / "version_0_old").mkdir(parents=True)
    (runs / "version_0_old" / "metrics.json").write_text("{}")  # not a version_N folder: not this study's
    assert finished(ENTRY, 0, settings) is None
    (runs / "version_1").mkdir()
    (runs / "version_1" / "metrics.json").write_text('{"run_dir": "x"')  # cut short
    with pytest.raises(UserError, match=r"version_1/metrics.json is not a readable run summary"):
        finished(ENTRY, 0, settings)
