"""Out of memory, on a GPU or a CPU, in training or evaluation: one line naming the batch size and the flag
that lowers it (and how to resume where a checkpoint exists), exit code 1; the lower batch it names then
works. The memory limit is simulated: the model's forward raises PyTorch's own error above a batch size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import QUIET, TINY, call, one_line_error, train

from experiments import convert, evaluate, explore, figures, prune, run, study
from experiments.cli import main_guard
from experiments.study import runs as study_runs
from sa_conv.analysis import explorer as explorer_module
from sa_conv.analysis import maps as maps_module
from sa_conv.models.sa_classifier import SAClassifier
from sa_conv.nn import conversion as conversion_module
from sa_conv.training.module import ImageClassifier
from sa_conv.training.resume import Resume


def cuda_error() -> BaseException:
    return torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
        "1.06 GiB is free."
    )


def cpu_error() -> BaseException:
    return RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"
    )


def memory_limit(
    monkeypatch: pytest.MonkeyPatch,
    *,
    training: int | None = None,
    evaluation: int | None = None,
    error: Callable[[], BaseException] = cuda_error,
) -> None:
    """Every SA model's forward fails with ``error`` on a batch larger than the limit of its mode."""
    forward = SAClassifier.forward

    def limited(self: SAClassifier, images: torch.Tensor) -> torch.Tensor:
        limit = training if self.training else evaluation
        if limit is not None and images.shape[0] > limit:
            raise error()
        return forward(self, images)

    monkeypatch.setattr(SAClassifier, "forward", limited)


# 410 synthetic training images in batches of 41: 10 steps per epoch
QUADRATIC = ["quadratic", *TINY, "--synthetic", *QUIET, "--no-explore"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The last checkpoint of a run in batches of 41."""
    return train(tmp_path_factory.mktemp("runs"), *QUADRATIC, "--batch-size", "41") / "checkpoints/last.ckpt"


def test_training_out_of_memory_names_the_batch_size_and_the_lower_one_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory_limit(monkeypatch, training=20)
    argv = [*QUADRATIC, "--output-dir", str(tmp_path)]
    code, _, err = call(run, [*argv, "--batch-size", "41"], capsys)
    assert code == 1
    assert (
        one_line_error(code, err)
        == "error: out of memory on the GPU at batch size 41: lower it with --batch-size 20"
    )
    code, out, err = call(run, [*argv, "--batch-size", "20"], capsys)
    assert code == 0 and "done:" in out, err


def test_out_of_memory_after_a_checkpoint_says_how_to_resume_and_the_resume_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ImageClassifier.training_step

    def fails_at_step_5(self: ImageClassifier, batch: object, batch_idx: int) -> torch.Tensor:
        if self.global_step == 5:  # memory another process took meanwhile
            raise cpu_error()
        return step(self, batch, batch_idx)

    monkeypatch.setattr(ImageClassifier, "training_step", fails_at_step_5)
    argv = [*QUADRATIC, "--batch-size", "41", "--checkpoint-every", "3", "--output-dir", str(tmp_path)]
    code, _, err = call(run, argv, capsys)
    saved = tmp_path / "quadratic/version_0/checkpoints/step.ckpt"
    assert one_line_error(code, err) == (
        "error: out of memory on the CPU at batch size 41: lower it with --batch-size 20, or free memory and "
        f"continue from {saved} with the same command and --resume (at the batch size it ran)"
    )
    assert code == 1 and torch.load(saved, weights_only=False)["global_step"] == 3
    monkeypatch.setattr(ImageClassifier, "training_step", step)
    # why the line says "at the batch size it ran": a checkpoint resumes only with its own config
    code, _, err = call(run, [*argv[:-2], "--batch-size", "20", *argv[-2:], "--resume"], capsys)
    assert "batch_size=41 (now: 20)" in one_line_error(code, err)
    code, out, err = call(run, [*argv, "--resume"], capsys)
    assert code == 0 and f"resuming from {saved}" in out, err


@pytest.mark.parametrize("resumable", [False, True], ids=["fresh", "with-checkpoint"])
def test_a_study_run_out_of_memory_names_its_batch_and_the_command_that_lowers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], resumable: bool
) -> None:
    def no_memory(*args: object, **kwargs: object) -> None:
        raise cpu_error()

    saved = tmp_path / "step.ckpt"
    monkeypatch.setattr(study_runs, "train", no_memory)
    found = Resume(saved, 0, {}) if resumable else None
    monkeypatch.setattr(study_runs, "find_resume", lambda *a, **k: found)
    argv = ["--scale", "small6", "--synthetic", "--out", str(tmp_path), "--no-figures"]
    code, _, err = call(study, [*argv, "--only", "quadratic-16heads", "--seeds", "1"], capsys)
    assert one_line_error(code, err) == (
        "error: out of memory on the CPU training quadratic-16heads seed 1 at batch size 100: lower it in a "
        "run of its own (a study trains every model at its preset's batch): python -m experiments.run "
        "quadratic --scale small6 --seed 1 --precision bf16-mixed --heads 16 --synthetic --batch-size 50"
        + (
            f", or free memory and run the same command again (the study resumes from {saved})"
            if resumable
            else ""
        )
    )


def test_evaluation_out_of_memory_names_the_batch_size_and_the_lower_one_evaluates(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory_limit(monkeypatch, evaluation=8, error=cpu_error)
    code, _, err = call(evaluate, [str(checkpoint), "--batch-size", "16"], capsys)
    assert (
        one_line_error(code, err)
        == "error: out of memory on the CPU at batch size 16: lower it with --batch-size 8"
    )
    code, out, err = call(evaluate, [str(checkpoint), "--batch-size", "8"], capsys)
    assert code == 0 and "test accuracy" in out, err


def test_figures_and_explorer_out_of_memory_name_their_images(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    maps, page = maps_module.attention_maps_of, explorer_module.explorer_data

    def at_most(limit: int, work: Callable[..., object]) -> Callable[..., object]:
        def limited(backbone: object, images: torch.Tensor, *args: object, **kwargs: object) -> object:
            if len(images) > limit:
                raise cuda_error()
            return work(backbone, images, *args, **kwargs)

        return limited

    monkeypatch.setattr(explorer_module, "explorer_data", at_most(4, page))
    argv = [str(checkpoint), "--out", str(tmp_path / "page.html")]
    code, _, err = call(explore, argv, capsys)  # 8 images by default
    assert (
        one_line_error(code, err)
        == "error: out of memory on the GPU at batch size 8: lower it with --images 4"
    )
    code, _, err = call(explore, [*argv, "--images", "4"], capsys)
    assert code == 0 and (tmp_path / "page.html").is_file(), err
    # a positional model's maps need one image (a blank one): nothing smaller to ask for
    monkeypatch.setattr(maps_module, "attention_maps_of", at_most(0, maps))
    code, _, err = call(figures, [str(checkpoint), "--out", str(tmp_path / "figures")], capsys)
    assert one_line_error(code, err) == (
        "error: out of memory on the GPU at batch size 1: not even one image fits: free memory or use a "
        "bigger device"
    )


def test_pruning_out_of_memory_names_the_batch_size_and_the_lower_one_fine_tunes(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory_limit(monkeypatch, training=8, error=cpu_error)
    monkeypatch.setattr(prune, "degenerate", lambda backbone: {0: [0]})  # one head to prune
    argv = [str(checkpoint), "--epochs", "1", "--limit-train-batches", "2", "--output-dir", str(tmp_path)]
    code, _, err = call(prune, argv, capsys)  # the run's batch: 41
    assert (
        one_line_error(code, err)
        == "error: out of memory on the CPU at batch size 41: lower it with --batch-size 20"
    )
    code, out, err = call(prune, [*argv, "--batch-size", "8"], capsys)
    assert code == 0 and '"finetuned"' in out, err
    tuned = (tmp_path / "quadratic/version_0/config.yaml").read_text()
    assert "batch_size: 8" in tuned


def test_conversion_out_of_memory_names_its_batch_flag(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    memory_limit(monkeypatch, evaluation=8)
    argv = ["--checkpoint", str(checkpoint), "--to-conv"]
    code, _, err = call(convert, argv, capsys)
    assert one_line_error(code, err) == (
        "error: out of memory on the GPU at batch size 250: lower it with --eval-batch 125"
    )
    code, out, err = call(convert, [*argv, "--eval-batch", "8"], capsys)
    assert code == 0 and "conv-likeness" in out, err

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError()

    monkeypatch.setattr(conversion_module, "conv_to_attention", no_memory)
    code, _, err = call(convert, ["--batch", "6"], capsys)
    assert (
        one_line_error(code, err)
        == "error: out of memory on the CPU at batch size 6: lower it with --batch 3"
    )


def test_out_of_memory_outside_known_work_is_one_line_and_debug_shows_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def main(argv: list[str] | None) -> int:
        raise cuda_error()

    assert main_guard(main)([]) == 1
    _, err = capsys.readouterr()
    assert err == "error: out of memory on the GPU: free memory, or ask for less at once (a smaller batch)\n"
    with pytest.raises(torch.cuda.OutOfMemoryError):
        main_guard(main)(["--debug"])

    def other(argv: list[str] | None) -> int:
        raise RuntimeError("a bug, not memory")

    with pytest.raises(RuntimeError, match="a bug"):  # not mistaken for memory: the traceback shows
        main_guard(other)([])


@pytest.mark.parametrize(
    ("module", "argv", "flag"),
    [
        (prune, ["x.ckpt", "--batch-size", "0"], "--batch-size"),
        (convert, ["--eval-batch", "0"], "--eval-batch"),
    ],
)
def test_the_batch_flags_take_positive_integers(
    module: object, argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = call(module, argv, capsys)
    assert code == 2 and f"argument {flag}: must be a positive integer, got 0" in one_line_error(code, err)
