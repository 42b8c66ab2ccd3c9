"""The study's figures: every attention figure of one run (finished, or at its newest checkpoint), and the
figures across a scale's runs (locality layer by layer, learning curves) with its related scales'."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.study.row import StudyRow, readable_rows
from experiments.study.runs import StudySettings
from experiments.study.unfinished import UnfinishedRun
from sa_conv.analysis.curves import learning_curves, locality_by_layer
from sa_conv.analysis.maps import figures_of
from sa_conv.analysis.snapshots import LocalitySnapshot
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.config import RunConfig
from sa_conv.training.epochs import EpochRecord
from sa_conv.training.summary import RunSummary
from sa_conv.training.trained import TrainedModel, load_trained
from sa_conv.utils.files import save_png

__all__ = ["RELATED_SCALES", "draw_figures", "render_figures", "scale_figures"]


def render_figures(summary: RunSummary, prefix: str, settings: StudySettings) -> None:
    """Every attention figure of a finished run, from its last checkpoint and its own locality history."""
    done = summary.epochs_completed == summary.config["epochs"]  # its last step ends the schedule
    draw_figures(
        load_trained(Path(summary.run_dir) / "checkpoints" / "last.ckpt"),
        summary.config,
        prefix,
        settings,
        history=summary.locality_history,
        total_steps=summary.global_steps if done else None,
    )


def draw_figures(
    record: TrainedModel,
    config: dict[str, object],
    prefix: str,
    settings: StudySettings,
    *,
    history: Sequence[LocalitySnapshot] | None,
    total_steps: int | None = None,
    title: str | None = None,
) -> None:
    """The attention figures of one (loaded) checkpoint, written as ``<figures>/<prefix>_<figure>.png``."""
    backbone = module_from_checkpoint(record).backbone.eval()
    images, _ = settings.data(RunConfig.from_dict(config)).evaluation_images(100)
    settings.figures.mkdir(parents=True, exist_ok=True)
    lr = record.lr_schedule(total_steps)
    for tag, value in figures_of(backbone, images, history=history, lr=lr, name=title or prefix):
        if not isinstance(value, float):
            save_png(value, settings.figures / f"{prefix}_{tag.split('/', 1)[1]}.png")


# the studies drawn together in the scale figures: a scale's runs and, beside them, its relatives'
RELATED_SCALES = {"small": ("small", "small6"), "small6": ("small6", "small")}


def scale_figures(settings: StudySettings, unfinished: Sequence[UnfinishedRun] = ()) -> list[Path]:
    """The figures across a scale's runs (and its related scales'), from the committed tables: locality
    layer by layer of every attention run, and the learning curves of every run that recorded them; the
    scale's unfinished runs beside them, labelled with the epoch they stand at."""
    rows: list[tuple[str, StudyRow]] = []
    scale_now, figures = settings.scale, settings.figures
    for scale in RELATED_SCALES.get(scale_now, (scale_now,)):
        path = settings.out / f"{scale}.json"
        if path.is_file():
            rows += [(scale, row) for row in readable_rows(path)]
    written = []

    def label(scale: str, r: StudyRow) -> str:
        depth = f", {len(r.layers)} layers" if r.layers else ""  # attention layers; none in a ResNet
        return f"{r.name} s{r.seed} ({scale}{depth})"

    attention = [(label(sc, r), r.layers) for sc, r in rows if r.layers]
    for u in (u for u in unfinished if u.layers):
        at = f"epoch {u.epochs_completed}/{u.epochs}, unfinished"
        attention.append((f"{u.name} s{u.seed} ({scale_now}, {at})", u.layers))
    if attention:
        path = figures / f"{scale_now}_locality_by_layer.png"
        save_png(
            locality_by_layer(attention, title=f"locality layer by layer, {scale_now} and beside it"), path
        )
        written.append(path)
    curves = [(label(sc, r), _accuracy(r.epochs_history)) for sc, r in rows if r.epochs_history]
    if curves:
        path = figures / f"{scale_now}_learning_curves.png"
        save_png(
            learning_curves(curves, title=f"validation accuracy per epoch, {scale_now} and beside it"), path
        )
        written.append(path)
    return written


def _accuracy(records: Sequence[EpochRecord]) -> list[tuple[int, float]]:
    """A run's per-epoch evaluation accuracy, ``(epoch, accuracy)``, where an epoch was evaluated."""
    return [(r.epoch, acc) for r in records if (acc := r.evaluated_acc) is not None]
