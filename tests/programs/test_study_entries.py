"""The CPU studies' entries rebuild their committed runs: every row's precision, and every shipped run's
full config, equal what its entry builds now, so a re-run on any machine trains the run the row reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.study import STUDIES
from experiments.study.entries import Entry, entry_config
from experiments.study.runs import StudySettings, alone_command
from sa_conv.training.config import config_difference

REPO = Path(__file__).resolve().parents[2]
CPU_SCALES = ("small", "small6")


def entry_named(scale: str, name: str) -> Entry:
    """The study entry of this name at this scale."""
    return next(e for e in STUDIES[scale] if e.name == name)


def results_rows(scale: str) -> list[dict[str, Any]]:
    """The committed rows of ``results/<scale>.json``."""
    return json.loads((REPO / "results" / f"{scale}.json").read_text())


@pytest.mark.parametrize("scale", CPU_SCALES)
def test_every_entry_names_the_precision_its_rows_trained_in(scale: str) -> None:
    rows = results_rows(scale)
    assert rows
    for row in rows:
        config = entry_config(entry_named(scale, row["name"]), scale, row["seed"])
        assert config.precision == row["precision"], (row["name"], row["seed"])
    for entry in STUDIES[scale]:  # no run left to the machine's choice
        assert all(entry_config(entry, scale, seed).precision != "auto" for seed in entry.seeds), entry.name


def test_every_shipped_study_run_is_its_entrys_config() -> None:
    manifest = json.loads((REPO / "weights" / "manifest.json").read_text())
    studied = {n: shipped for n, shipped in manifest.items() if n.split("/")[0] in CPU_SCALES}
    assert studied
    for name, shipped in studied.items():
        scale, run = name.split("/")
        entry_name, seed = run.rsplit("-seed", 1)
        wanted = entry_config(entry_named(scale, entry_name), scale, int(seed)).to_dict()
        assert config_difference(shipped["config"], wanted) == [], name


def test_a_seed_of_its_own_overrides_its_entry() -> None:
    entry = Entry(
        "e",
        "quadratic",
        (0, 1),
        {"precision": "32-true", "epochs": 3},
        seed_overrides={1: {"precision": "bf16-mixed"}},
    )
    assert entry_config(entry, "small", 0).precision == "32-true"
    assert (entry_config(entry, "small", 1).precision, entry_config(entry, "small", 1).epochs) == (
        "bf16-mixed",
        3,
    )
    settings = StudySettings(scale="small", data_dir=Path("D"))
    assert "--precision bf16-mixed" in alone_command(entry, 1, settings)
    assert "--precision 32-true" in alone_command(entry, 0, settings)


def test_an_override_for_a_seed_the_entry_does_not_train_is_refused() -> None:
    with pytest.raises(ValueError, match=r"entry e: overrides for seeds \[2\], which it does not train"):
        Entry("e", "quadratic", (0, 1), seed_overrides={2: {"precision": "bf16-mixed"}})
