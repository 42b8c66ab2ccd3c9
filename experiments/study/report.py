"""``--report``'s view of the runs still training: where each stands at its newest checkpoint (step,
epochs, accuracy, locality per layer), its figures drawn from that checkpoint, marked unfinished."""

from __future__ import annotations

from collections.abc import Mapping

from experiments.study.entries import Entry, entry_config
from experiments.study.figures import draw_figures
from experiments.study.row import StudyRow
from experiments.study.runs import StudySettings, newest_resume
from experiments.study.tables import final_layers
from experiments.study.unfinished import UnfinishedRun
from sa_conv.training.trained import TrainedModel, load_trained

__all__ = ["in_progress", "report_unfinished"]


def in_progress(
    entry: Entry, seed: int, settings: StudySettings
) -> tuple[UnfinishedRun, TrainedModel] | None:
    """An unfinished run at its newest checkpoint (epochs done, its last per-epoch accuracy, the locality
    of its last snapshot) and that checkpoint, or None when it has none: a state of training, not a result."""
    config = entry_config(entry, settings.scale, seed)
    resume = newest_resume(entry, seed, settings)  # its own, or the one carried here
    if resume is None:
        return None
    record = load_trained(resume.path)
    epochs = record.epochs or []
    snapshots = record.history or []
    split = "validation" if config.data.protocol == "clean" else "test"  # what each epoch evaluates
    state = UnfinishedRun(
        name=entry.name,
        seed=seed,
        config=config.to_dict(),
        step=record.step,
        epochs_completed=len(epochs),
        epochs=config.epochs,
        epoch_split=split,
        epoch_acc=epochs[-1].evaluated_acc if epochs else None,
        snapshot_step=snapshots[-1].step if snapshots else None,
        layers=final_layers(snapshots),
        locality_history=tuple(snapshots),
    )
    return state, record


def report_unfinished(
    table: list[tuple[Entry, int]],
    order: list[tuple[Entry, int]],
    results: Mapping[tuple[str, int], StudyRow],
    settings: StudySettings,
) -> list[UnfinishedRun]:
    """Where every run of the study without a result stands, drawing the figures of those in ``order``
    (a run with a result, committed or read back, is never drawn over)."""
    states = []
    for entry, seed in table:
        if (entry.name, seed) in results or (found := in_progress(entry, seed, settings)) is None:
            continue
        state, record = found
        states.append(state)
        if not settings.no_figures and state.layers and (entry, seed) in order:
            prefix = f"{settings.scale}_{entry.run_name(seed)}"
            at = f"epoch {state.epochs_completed} of {state.epochs}, unfinished"
            history = list(state.locality_history)
            draw_figures(record, state.config, prefix, settings, history=history, title=f"{prefix} ({at})")
    return states
