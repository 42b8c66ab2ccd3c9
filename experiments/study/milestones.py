"""A long run's locality at every multiple of the study's budget (15, 30, 45, 60 epochs of a 60-epoch run),
read from its locality record: the curves of sharp heads, distinct taps, overlap, coverage and motion per
layer, to set beside the runs of the budget itself."""

from __future__ import annotations

from collections.abc import Sequence

from experiments.study.row import LocalityPoint, StudyRow

__all__ = ["at_milestones", "milestone_lines"]

# what a milestone line shows of each layer: (label, key of a layer_summary row, format)
_MEASURES = (
    ("sharp heads", "sharp_heads", "{}"),
    ("distinct taps", "sharp_distinct_taps", "{}"),
    ("overlap", "overlap", "{:.2f}"),
    ("coverage (px)", "coverage", "{}"),
    ("centres moved (median px)", "median_displacement", "{:.2f}"),
    ("outward (median px)", "median_outward", "{:+.2f}"),
    ("median alpha", "median_alpha", "{:.2f}"),
)


def at_milestones(row: StudyRow, every: int) -> list[tuple[int, LocalityPoint]]:
    """(epoch, locality snapshot) at each multiple of ``every`` epochs of a run longer than ``every``: the
    recorded snapshot nearest the step that ended that epoch; empty for a run of ``every`` epochs or fewer."""
    history, total = row.locality_history, row.epochs or 0
    if not history or total <= every:
        return []
    ends = {e.epoch: e.step for e in row.epochs_history}
    return [
        (epoch, min(history, key=lambda snapshot: abs(snapshot.step - ends[epoch])))
        for epoch in range(every, total + 1, every)
        if epoch in ends
    ]


def milestone_lines(rows: Sequence[StudyRow], every: int) -> list[str]:
    """Per long run and layer, each measure at every ``every`` epochs ("5 / 7 / 8 / 8"), in one list item."""
    lines: list[str] = []
    for row in rows:
        if len(points := at_milestones(row, every)) < 2:
            continue
        epochs = "/".join(str(epoch) for epoch, _ in points)
        steps = ", ".join(str(snapshot.step) for _, snapshot in points)
        lines.append(f"- {row.name} seed {row.seed}, at {epochs} epochs (recorded steps {steps}):")
        for i in range(len(points[0][1].layers)):
            cells = []
            for label, key, form in _MEASURES:
                values = [getattr(snapshot.layers[i], key) for _, snapshot in points]
                if all(v is not None for v in values):
                    cells.append(f"{label} " + " / ".join(form.format(v) for v in values))
            lines.append(f"  - layer {i + 1}: " + "; ".join(cells))
    if not lines:
        return []
    head = (
        f"Runs longer than {every} epochs, each layer at every {every} epochs of training (from their "
        "locality record; the overlap is the mean pairwise Jaccard index of the heads' half-mass regions):"
    )
    return ["", head, "", *lines]
