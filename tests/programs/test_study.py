"""The study driver: runs read back instead of retrained, the report of finished and unfinished runs, the
tables."""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.rows import study_row

from experiments import study
from experiments.cli import UserError
from experiments.study import STUDIES, Entry
from experiments.study import runs as study_runs
from experiments.study.row import StudyRow
from experiments.study.tables import (
    ResultsTables,
    comparisons,
    flops_of,
    markdown,
    progress_line,
    seed_mean_lines,
)
from experiments.study.unfinished import UnfinishedRun
from sa_conv.analysis.snapshots import LayerSummary
from sa_conv.analysis.statistics import accuracy_stderr as standard_error
from sa_conv.training.summary import RunSummary


def test_standard_error_is_binomial() -> None:
    assert standard_error(0.5, 100) == pytest.approx(0.05)
    assert standard_error(0.9, 2000) == pytest.approx(math.sqrt(0.09 / 2000))
    assert standard_error(1.0, 10) == 0.0


def test_report_trains_nothing_and_lists_every_unfinished_run(tmp_path: Path) -> None:
    out = tmp_path / "results"
    code = study.main(["--scale", "small", "--synthetic", "--out", str(out), "--report", "--no-figures"])
    assert code == 0
    assert not (out / "runs").exists()  # nothing trained
    text = (out / "small.md").read_text()
    for entry in study.STUDIES["small"]:
        for seed in entry.seeds:
            assert f"{entry.name} seed {seed}" in text
    assert json.loads((out / "small.json").read_text()) == []


def test_an_entry_note_is_shown_beside_its_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = Entry("learned-content", "learned-content", (0,), {"epochs": 6}, note="6 epochs (budget)")
    monkeypatch.setitem(study.STUDIES, "small", (budget,))
    out = tmp_path / "results"
    assert study.main(["--scale", "small", "--synthetic", "--out", str(out), "--report", "--no-figures"]) == 0
    assert "6 epochs (budget)" in (out / "small.md").read_text()


@pytest.mark.slow
def test_a_finished_run_is_read_back_not_retrained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quick = {"epochs": 1, "data": {"train_subset": None, "val_size": 16, "batch_size": 16}}
    one = (Entry("quadratic", "quadratic", (0,), quick),)
    monkeypatch.setitem(study.STUDIES, "tiny", one)
    out = tmp_path / "results"
    argv = ["--scale", "tiny", "--synthetic", "--synthetic-size", "64", "--out", str(out)]
    argv += ["--figures", str(tmp_path / "figures")]
    assert study.main(argv) == 0
    rows = json.loads((out / "tiny.json").read_text())
    assert [(r["name"], r["seed"], r["epochs"]) for r in rows] == [("quadratic", 0, 1)]
    row = rows[0]
    assert row["test_acc_stderr"] == pytest.approx(standard_error(row["test_acc"], row["n_test_images"]))
    assert len(row["layers"]) == 2  # the locality of both layers
    assert (tmp_path / "figures" / "tiny_quadratic-seed0_centres.png").stat().st_size > 0
    versions = sorted((out / "runs" / "tiny" / "quadratic-seed0" / "quadratic").glob("version_*"))
    assert len(versions) == 1
    written = (versions[0] / "metrics.json").stat().st_mtime_ns

    assert study.main([*argv, "--no-figures"]) == 0  # read back: no second run folder, the run untouched
    assert sorted((out / "runs" / "tiny" / "quadratic-seed0" / "quadratic").glob("version_*")) == versions
    assert (versions[0] / "metrics.json").stat().st_mtime_ns == written
    assert json.loads((out / "tiny.json").read_text()) == rows

    assert study.main([*argv, "--report", "--no-figures"]) == 0
    assert json.loads((out / "tiny.json").read_text()) == rows
    assert "Not finished" not in (out / "tiny.md").read_text()
    assert "Where the unfinished" not in (out / "tiny.md").read_text()

    # a run without its metrics.json is unfinished; while its committed row stands, it is not drawn over
    (versions[0] / "metrics.json").unlink()
    centres = tmp_path / "figures" / "tiny_quadratic-seed0_centres.png"
    drawn = centres.stat().st_mtime_ns
    assert study.main([*argv, "--report"]) == 0
    assert "Where the unfinished" not in (out / "tiny.md").read_text()
    assert centres.stat().st_mtime_ns == drawn
    # without it, the report says where the run stands, and draws it
    (out / "tiny.json").unlink()
    for png in (tmp_path / "figures").glob("*.png"):
        png.unlink()
    assert study.main([*argv, "--report"]) == 0
    text = (out / "tiny.md").read_text()
    assert "Not finished (no result yet): quadratic seed 0." in text
    steps = row["epochs_history"][-1]["step"]
    line = next(line for line in text.splitlines() if line.startswith("- quadratic seed 0: step"))
    assert line.startswith(f"- quadratic seed 0: step {steps}, 1 of 1 epochs done; validation accuracy ")
    assert f"{100 * row['epochs_history'][-1]['val_acc']:.1f}% after epoch 1" in line
    layer = row["layers"][0]
    assert f"layer 1: {layer['mean_distance']:.2f} px, {layer['sharp_heads']}/{layer['heads']} sharp" in line
    assert json.loads((out / "tiny.json").read_text()) == []
    assert (tmp_path / "figures" / "tiny_quadratic-seed0_centres.png").stat().st_size > 0
    assert (tmp_path / "figures" / "tiny_locality_by_layer.png").stat().st_size > 0  # unfinished runs drawn


@pytest.mark.parametrize("report", [True, False], ids=["report", "train"])
def test_an_only_run_keeps_the_other_entries_finished_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: bool
) -> None:
    """``--only NAME`` rewrites the whole scale's tables: the other entries' finished runs stay."""
    entries = study.STUDIES["small"]
    done = {(e.name, s): i for i, (e, s) in enumerate((e, s) for e in entries for s in e.seeds)}
    only = entries[2].name

    def metrics(entry: Entry, seed: int) -> RunSummary:
        i = done[(entry.name, seed)]
        return RunSummary.from_dict(
            {
                "protocol": "clean",
                "model": entry.model,
                "config": study.entry_config(entry, "small", seed).to_dict(),
                "params": 1000 + i,
                "test_acc": 0.5 + i / 100,
                "n_test_images": 2000,
                "epochs_completed": 15,
                "global_steps": 1000,
                "train_images_per_s": 100.0,
                "train_step_seconds": 60.0,
                "run_dir": f"/runs/{entry.name}-{seed}",
            }
        )

    unfinished = entries[-1].name  # another entry without a result: listed as not finished

    def fake_finished(entry: Entry, seed: int, settings: object) -> RunSummary | None:
        if entry.name == unfinished or (entry.name == only and not report):  # only: yet to train
            return None
        return metrics(entry, seed)

    trained: list[tuple[str, int]] = []

    def fake_run(entry: Entry, seed: int, settings: object) -> RunSummary:
        trained.append((entry.name, seed))
        return dataclasses.replace(metrics(entry, seed), test_acc=0.99)

    monkeypatch.setattr(study_runs, "finished", fake_finished)
    monkeypatch.setattr(study_runs, "run_entry", fake_run)
    out = tmp_path / "results"
    argv = ["--scale", "small", "--synthetic", "--out", str(out), "--only", only, "--no-figures"]
    assert study.main(argv + (["--report"] if report else [])) == 0

    rows = json.loads((out / "small.json").read_text())
    expected_rows = [key for key in done if key[0] != unfinished]  # every finished entry, in order
    assert [(r["name"], r["seed"]) for r in rows] == expected_rows
    assert trained == ([] if report else [(only, s) for s in entries[2].seeds])
    for r in rows:
        i = done[(r["name"], r["seed"])]
        expected = 0.99 if (r["name"] == only and not report) else 0.5 + i / 100
        assert r["test_acc"] == pytest.approx(expected)
    text = (out / "small.md").read_text()
    assert f"Not finished (no result yet): {unfinished} seed 0" in text
    assert sum(line.startswith("| ") for line in text.splitlines()) == 2 + len(expected_rows)


def row_without_outward(tmp_path: Path) -> tuple[dict[str, Any], Path, Path]:
    """The committed `small` quadratic seed-0 row as it was before ``outward`` (written as the only row of
    ``tmp_path/results/small.json``), and a weights folder holding its shipped file and manifest record."""
    repo = Path(__file__).resolve().parents[2]
    checkout = json.loads((repo / "results" / "small.json").read_text())
    (shipped,) = (r for r in checkout if r["name"] == "quadratic" and r["seed"] == 0)
    old = json.loads(json.dumps(shipped))
    for snapshot in [old, *old["locality_history"]]:
        for layer in snapshot["layers"]:
            del layer["outward"], layer["median_outward"]
    out, weights = tmp_path / "results", tmp_path / "weights"
    out.mkdir()
    (out / "small.json").write_text(json.dumps([old]))
    name = "small/quadratic-seed0"
    record = json.loads((repo / "weights" / "manifest.json").read_text())[name]
    (weights / "small").mkdir(parents=True)
    shutil.copy(repo / "weights" / record["file"], weights / record["file"])
    (weights / "manifest.json").write_text(json.dumps({name: record}))
    return shipped, out, weights


REPORT = ["--scale", "small", "--synthetic", "--report", "--no-figures"]


def test_report_recomputes_a_shipped_runs_locality_from_its_weights(tmp_path: Path) -> None:
    """A committed row whose run ships: its locality columns are rebuilt from the record in its weights, so
    a measure added later (here: the rows as they were before ``outward``) reaches runs whose folders are
    gone; every other column is kept."""
    shipped, out, weights = row_without_outward(tmp_path)
    assert study.main([*REPORT, "--out", str(out), "--weights", str(weights)]) == 0
    (row,) = json.loads((out / "small.json").read_text())
    assert row["layers"] == shipped["layers"] and row["locality_history"] == shipped["locality_history"]
    assert row["layers"][0]["median_outward"] < 0 < row["layers"][1]["median_outward"]
    assert row["test_correct"] == shipped["test_correct"] and row["rechecked"] is False


@pytest.mark.parametrize("change", ["test_acc", "config", "missing file", "unreadable file"])
def test_report_keeps_a_rows_locality_unless_its_weights_are_that_run(
    tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Weights of another run under the row's name (another accuracy or config), or a shipped file missing
    or broken: the committed locality stays as it is (a warning names a file it could not read)."""
    _, out, weights = row_without_outward(tmp_path)
    before = json.loads((out / "small.json").read_text())[0]
    manifest = json.loads((weights / "manifest.json").read_text())
    record = manifest["small/quadratic-seed0"]
    if change == "test_acc":
        record["test_acc"] += 0.001
    elif change == "config":
        record["config"]["optim"]["lr"] *= 2
    elif change == "missing file":
        (weights / record["file"]).unlink()
    else:
        (weights / record["file"]).write_bytes(b"not a safetensors file")
    (weights / "manifest.json").write_text(json.dumps(manifest))
    assert study.main([*REPORT, "--out", str(out), "--weights", str(weights)]) == 0
    (row,) = json.loads((out / "small.json").read_text())
    assert row["layers"] == before["layers"] and row["locality_history"] == before["locality_history"]
    assert "median_outward" not in row["layers"][0]
    warning = capsys.readouterr().err
    assert "warning:" in warning and "keeps its committed locality" in warning
    said = {"test_acc": "test_acc=", "config": "lr=", "missing file": record["file"]}
    assert said.get(change, record["file"]) in warning


def test_report_without_runs_keeps_the_committed_rows(tmp_path: Path) -> None:
    """A fresh clone has no run folders: --report must not replace the committed results with nothing."""
    out = tmp_path / "results"
    out.mkdir()
    committed = [
        {
            "name": "quadratic",
            "model": "quadratic",
            "seed": 1,
            "note": "",
            "test_acc": 0.7135,
            "test_acc_stderr": 0.0101,
            "params": 117376,
            "flops_per_image": 44434688,  # an undercount from before the counter's fix
            "train_time_s": 3000.0,
            "train_images_per_s": 200.0,
            "layers": [],
        }
    ]
    (out / "small.json").write_text(json.dumps(committed))
    argv = ["--scale", "small", "--synthetic", "--out", str(out), "--report", "--no-figures"]
    assert study.main(argv) == 0
    rows = json.loads((out / "small.json").read_text())
    assert [(r["name"], r["seed"], r["test_acc"]) for r in rows] == [("quadratic", 1, 0.7135)]
    assert rows[0]["rechecked"] is False and "flops_per_image" not in rows[0]
    del committed[0]["train_time_s"]  # a row cut by hand: named, in one line, the file left as it is
    (out / "small.json").write_text(json.dumps(committed))
    with pytest.raises(UserError, match=r"small.json: row 1 \('quadratic' seed 1\) lacks train_time_s"):
        study.main(argv)
    assert json.loads((out / "small.json").read_text()) == committed
    expected = flops_of(study.entry_config(study.STUDIES["small"][0], "small", 1))
    assert rows[0]["train_flops_per_image"] == expected.train > 44434688
    text = (out / "small.md").read_text()
    assert "| quadratic* | 1 |" in text and "71.4 +- 1.0%" in text
    assert "quadratic seed 0" in text  # still listed as not finished


def test_an_unfinished_run_is_reported_with_its_step_epochs_accuracy_and_locality() -> None:
    layer = LayerSummary(
        heads=9,
        mean_distance=2.5,
        sharp_heads=3,
        conv_likeness=0.5,
        sharp_distinct_taps=2,
        sharp_taps=[[-1, 1], [0, 0], [0, 0]],
        median_alpha=1.25,
    )
    state = UnfinishedRun(
        name="quadratic",
        seed=1,
        config={},
        step=4321,
        epochs_completed=9,
        epochs=15,
        epoch_split="validation",
        epoch_acc=0.6875,
        snapshot_step=4200,
        layers=(
            layer,
            replace(layer, sharp_heads=0, sharp_distinct_taps=0, sharp_taps=[], mean_distance=3.75),
        ),
        locality_history=(),
    )
    expected = (
        "- quadratic seed 1: step 4321, 9 of 15 epochs done; validation accuracy 68.8% after epoch 9; "
        "locality at step 4200: layer 1: 2.50 px, 3/9 sharp on 2 distinct taps [(-1, 1), (0, 0) x2], "
        "alpha 1.25; layer 2: 3.75 px, 0/9 sharp on 0 distinct taps, alpha 1.25"
    )
    assert progress_line(state) == expected
    early = replace(state, epochs_completed=0, epoch_acc=None, layers=(), snapshot_step=None)
    assert progress_line(early) == "- quadratic seed 1: step 4321, 0 of 15 epochs done"
    text = markdown([], "small6", ["quadratic seed 1"], [state])
    assert "Not finished (no result yet): quadratic seed 1." in text
    assert expected in text.splitlines()
    assert "Where the unfinished" not in markdown([], "small6", ["quadratic seed 1"])


def test_an_ordering_is_claimed_only_with_every_test_and_two_seeds_each() -> None:
    """A: right on 1,900 of 2,000 test images, B on 1,700 of them (the same images, B's a subset)."""
    good, poor = "1" * 1900 + "0" * 100, "1" * 1700 + "0" * 300

    def row(name: str, seed: int, correct: str) -> StudyRow:
        return study_row(
            {"name": name, "seed": seed, "test_acc": correct.count("1") / 2000, "test_correct": correct}
        )

    one_seed = comparisons([row("a", 0, good), row("b", 0, poor)])
    assert one_seed[-1].startswith("- a (95.0%) vs b (85.0%): difference of means +10.0 points")
    assert "no ordering claimed (the tests clear it; with under 2 seeds the seed spread" in one_seed[-1]
    two_seeds = comparisons([row("a", 0, good), row("a", 1, good), row("b", 0, poor), row("b", 1, poor)])
    assert two_seeds[-1].endswith("**a above b**")
    swapped = [row("a", 0, good), row("a", 1, poor), row("b", 0, poor), row("b", 1, good)]
    assert comparisons(swapped)[-1].endswith(": no ordering claimed")  # not every seed above
    assert comparisons([row("a", 0, good), replace(row("b", 0, poor), test_correct="")]) == []  # no per-image
    other_set = comparisons(
        [row("a", 0, good), row("b", 0, poor[:1000])]
    )  # e.g. full CIFAR-10 against a copy
    assert other_set[-1] == "- a vs b: tested on different test sets (1000, 2000 images): not paired"


def test_the_mean_over_seeds_averages_every_seed_per_layer() -> None:
    def layer(distance: float, sharp: int, alpha: float) -> dict:
        return {"heads": 9, "mean_distance": distance, "sharp_heads": sharp, "median_alpha": alpha} | {
            "conv_likeness": 0.5
        }

    def run(seed: int, acc: float, first: tuple, second: tuple) -> StudyRow:
        layers = [layer(*first), layer(*second)]
        return study_row({"name": "quadratic", "seed": seed, "test_acc": acc, "layers": layers})

    rows = [
        run(0, 0.70, (2.0, 5, 1.5), (3.0, 0, 0.5)),
        run(1, 0.73, (1.5, 8, 2.5), (3.5, 1, 0.25)),
        run(2, 0.76, (1.0, 2, 2.0), (4.0, 2, 0.75)),
        study_row({"name": "learned", "seed": 0, "test_acc": 0.60, "layers": []}),  # one seed: no mean
        study_row({"name": "resnet18", "seed": 0, "test_acc": 0.80, "layers": []}),
        study_row({"name": "resnet18", "seed": 1, "test_acc": 0.84, "layers": []}),
    ]
    lines = seed_mean_lines(rows)
    assert lines[-2:] == [
        "- quadratic (seeds 0, 1, 2): test accuracy 73.0% (seeds 70.0 to 76.0); "
        "layer 1: 1.50 px, 5.0/9 sharp, alpha 2.00; layer 2: 3.50 px, 1.0/9 sharp, alpha 0.50",
        "- resnet18 (seeds 0, 1): test accuracy 82.0% (seeds 80.0 to 84.0)",
    ]
    assert seed_mean_lines(rows[3:5]) == []  # no model with two seeds
    assert lines[-1] in markdown(rows, "small6").splitlines()


def _fake_metrics(entry: Entry, seed: int, scale: str, acc: float) -> RunSummary:
    """What a finished run's metrics.json holds, as far as the study's row needs it."""
    return RunSummary.from_dict(
        {
            "protocol": "clean",
            "model": entry.model,
            "config": study.entry_config(entry, scale, seed).to_dict(),
            "params": 1000,
            "test_acc": acc,
            "n_test_images": 2000,
            "epochs_completed": 1,
            "global_steps": 10,
            "train_images_per_s": 100.0,
            "train_step_seconds": 60.0,
            "run_dir": f"/runs/{entry.name}-{seed}",
        }
    )


def _exit_with(work, *args) -> None:
    """A child process's whole life: ``work(*args)``, its return value as the exit code (1 on an error)."""
    try:
        code = work(*args)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    os._exit(code or 0)


def test_two_studies_of_a_scale_at_once_keep_each_others_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--only quadratic`` and ``--only learned`` in two processes: both read the empty tables before
    either finishes a run (a barrier), then write in turn; the tables end with both entries' rows."""
    ctx = multiprocessing.get_context("fork")
    both_started = ctx.Barrier(2)

    def fake_run(entry: Entry, seed: int, settings: object) -> RunSummary:
        if seed == 0:
            both_started.wait(timeout=60)
        return _fake_metrics(entry, seed, "small", 0.5 + seed / 10)

    monkeypatch.setattr(study_runs, "finished", lambda entry, seed, args: None)
    monkeypatch.setattr(study_runs, "run_entry", fake_run)
    out = tmp_path / "results"
    argv = ["--scale", "small", "--synthetic", "--out", str(out), "--no-figures", "--only"]
    procs = [ctx.Process(target=_exit_with, args=(study.main, [*argv, n])) for n in ("quadratic", "learned")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = json.loads((out / "small.json").read_text())
    assert [(r["name"], r["seed"], r["test_acc"], r["rechecked"]) for r in rows] == [
        ("quadratic", 0, 0.5, True),
        ("quadratic", 1, 0.6, True),
        ("learned", 0, 0.5, True),
        ("learned", 1, 0.6, True),
    ]
    text = (out / "small.md").read_text()
    assert "| quadratic | 1 |" in text and "| learned | 1 |" in text and "*" not in text.split("| --- |")[1]
    others = [
        f"{e.name} seed {s}"
        for e in STUDIES["small"]
        if e.name not in ("quadratic", "learned")
        for s in e.seeds
    ]
    assert f"Not finished (no result yet): {', '.join(others)}." in text
    assert (out / ".small.lock").is_file() and not list(out.glob(".small.*.tmp"))


HAMMER_WRITERS, HAMMER_WRITES = 3, 15
HAMMER_TABLE = [
    (Entry(f"w{w}", "quadratic", tuple(range(HAMMER_WRITES))), i)
    for w in range(HAMMER_WRITERS)
    for i in range(HAMMER_WRITES)
]


def _one_run_written(out: Path, writer: int, i: int) -> None:
    """One study process's life in brief: read the tables, add one run's row, write them."""
    tables = ResultsTables.load(out=out, scale="small", table=HAMMER_TABLE)
    entry = HAMMER_TABLE[writer * HAMMER_WRITES][0]
    tables.add(entry, i, _fake_metrics(entry, i, "small", i / 100))
    tables.write()


def _hammer(out: Path, writer: int) -> int:
    for i in range(HAMMER_WRITES):
        _one_run_written(out, writer, i)
    return 0


def test_writers_hammering_one_results_file_lose_no_row(tmp_path: Path) -> None:
    """Three processes, each writing 15 runs' rows one at a time, each write a fresh read of the tables:
    every row of every writer is in the file at the end (no write lost to another's)."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_exit_with, args=(_hammer, tmp_path, w)) for w in range(HAMMER_WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * HAMMER_WRITERS
    rows = json.loads((tmp_path / "small.json").read_text())
    assert [(r["name"], r["seed"], r["test_acc"]) for r in rows] == [
        (entry.name, i, i / 100) for entry, i in HAMMER_TABLE
    ]
    assert "Not finished" not in (tmp_path / "small.md").read_text()


def _killed_mid_write(out: Path, halfway: object) -> int:
    """Writes one run's row, then a second one whose JSON stops halfway (the process is then killed)."""
    _one_run_written(out, 0, 0)
    text_writer = Path.write_text

    def half_then_wait(self: Path, text: str, *args: object, **kwargs: object) -> int:
        text_writer(self, text[: len(text) // 2])
        halfway.set()
        time.sleep(120)
        return 0

    Path.write_text = half_then_wait  # type: ignore[method-assign]
    _one_run_written(out, 0, 1)
    return 1


def test_a_writer_killed_mid_write_leaves_complete_tables_and_the_lock(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    halfway = ctx.Event()
    writer = ctx.Process(target=_exit_with, args=(_killed_mid_write, tmp_path, halfway))
    writer.start()
    assert halfway.wait(timeout=120), "the writer never reached its second write"
    assert list(tmp_path.glob(".small.json.*.tmp"))  # half of the new table, not yet renamed
    os.kill(writer.pid, signal.SIGKILL)  # while it holds the lock
    writer.join(timeout=60)
    assert writer.exitcode == -signal.SIGKILL
    rows = json.loads((tmp_path / "small.json").read_text())  # the previous table, whole
    assert [(r["name"], r["seed"]) for r in rows] == [("w0", 0)]

    # the next writer is not blocked by the dead one's lock, and clears its half-written file
    after = ctx.Process(target=_exit_with, args=(_one_run_written, tmp_path, 1, 0))
    after.start()
    after.join(timeout=120)
    assert after.exitcode == 0
    rows = json.loads((tmp_path / "small.json").read_text())
    assert [(r["name"], r["seed"]) for r in rows] == [("w0", 0), ("w1", 0)]
    assert (tmp_path / "small.md").read_text().count("| w") == 2
    assert not list(tmp_path.glob(".small.*.tmp"))
