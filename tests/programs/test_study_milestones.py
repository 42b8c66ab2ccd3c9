"""A long run's locality at every multiple of the study's budget: the snapshot nearest each milestone's
step, its measures per layer in order, and nothing for a run of the budget itself."""

from __future__ import annotations

from helpers.rows import study_row

from experiments.study.milestones import at_milestones, milestone_lines
from experiments.study.tables import markdown


def _layer(sharp: int, taps: int, overlap: float, moved: float) -> dict:
    return {
        "heads": 9,
        "mean_distance": 2.0,
        "conv_likeness": 0.5,
        "sharp_heads": sharp,
        "sharp_distinct_taps": taps,
        "overlap": overlap,
        "coverage": 10 + sharp,
        "median_displacement": moved,
        "median_alpha": 0.5 + sharp / 10,
    }


def _long_run(epochs: int = 60, per_epoch: int = 450) -> dict:
    # snapshots every 200 steps: the one nearest each milestone's step is taken, not the one before it
    history = [
        {"step": step, "layers": [_layer(step // 1000, step // 2000, 1 - step / 30000, step / 10000)]}
        for step in range(0, epochs * per_epoch + 1, 200)
    ]
    return {
        "name": "quadratic-60ep",
        "seed": 1,
        "epochs": epochs,
        "epochs_history": [{"epoch": e, "step": e * per_epoch} for e in range(1, epochs + 1)],
        "locality_history": history,
        "test_acc": 0.7,
        "layers": history[-1]["layers"],
    }


def test_each_milestone_takes_the_snapshot_nearest_the_step_that_ended_it() -> None:
    points = at_milestones(study_row(_long_run()), every=15)
    # epoch 15 ends at step 6,750: snapshots at 6,600 and 6,800, the nearer is 6,800
    assert [(epoch, snapshot.step) for epoch, snapshot in points] == [
        (15, 6800),
        (30, 13400),
        (45, 20200),
        (60, 27000),
    ]
    assert at_milestones(study_row(_long_run(epochs=15)), every=15) == []
    assert at_milestones(study_row({**_long_run(), "locality_history": []}), every=15) == []


def test_the_milestone_line_gives_every_measure_in_epoch_order() -> None:
    lines = milestone_lines(
        [study_row(_long_run()), study_row({**_long_run(epochs=15), "name": "quadratic"})], every=15
    )
    steps = "recorded steps 6800, 13400, 20200, 27000"
    assert lines[3] == f"- quadratic-60ep seed 1, at 15/30/45/60 epochs ({steps}):"
    assert lines[4] == (
        "  - layer 1: sharp heads 6 / 13 / 20 / 27; distinct taps 3 / 6 / 10 / 13; "
        "overlap 0.77 / 0.55 / 0.33 / 0.10; coverage (px) 16 / 23 / 30 / 37; "
        "centres moved (median px) 0.68 / 1.34 / 2.02 / 2.70; median alpha 1.10 / 1.80 / 2.50 / 3.20"
    )
    assert len(lines) == 5  # the 15-epoch run has no milestone line
    assert milestone_lines([study_row(_long_run(epochs=15))], every=15) == []


def test_the_study_table_shows_the_milestones_of_its_long_runs() -> None:
    text = markdown([study_row(_long_run())], "small").splitlines()
    assert milestone_lines([study_row(_long_run())], every=15)[4] in text
