"""A resumable checkpoint written before the package moved into folders (commit 46490ac, a run stopped by
SIGTERM at step 28 of 78, its best model carried with it) resumes with today's code and ends with the
weights of an unbroken run of today's code: old checkpoints keep working, and the move changed no number.

The fixture's first 28 steps ran on the CPU that wrote it; a CPU with other vector units rounds them
differently (``ATEN_CPU_CAPABILITY=default`` here: at most 6e-5 of a tensor's largest entry after 78
steps), so weights are compared to 1e-3 of each tensor's largest entry. A resume that loses the SGD
momentum lands 0.54 away, one that restarts the learning-rate schedule 1.69."""

from pathlib import Path

import pytest
import torch

from experiments import run
from experiments.cli import main_guard
from sa_conv.utils.safe_load import read_checkpoint

FIXTURE = Path(__file__).parent / "fixtures" / "pre_move_interrupted.ckpt"
ARGV = ["quadratic", "--scale", "tiny", "--layers", "2", "--hidden", "16", "--heads", "4", "--ffn", "16"]
ARGV += [
    "--synthetic",
    "--synthetic-size",
    "512",
    "--batch-size",
    "16",
    "--epochs",
    "3",
    "--figures-every",
    "1",
]
ARGV += ["--history-every", "5", "--snapshot-minutes", "0", "--accelerator", "cpu", "--no-explore"]


@pytest.mark.slow
def test_a_checkpoint_written_before_the_move_resumes_to_an_unbroken_runs_weights(tmp_path: Path) -> None:
    assert read_checkpoint(FIXTURE)["global_step"] == 28
    assert main_guard(run.main)([*ARGV, "--output-dir", str(tmp_path / "whole")]) == 0
    assert (
        main_guard(run.main)([*ARGV, "--output-dir", str(tmp_path / "resumed"), "--resume", str(FIXTURE)])
        == 0
    )
    whole = read_checkpoint(tmp_path / "whole/quadratic/version_0/checkpoints/last.ckpt")
    resumed = read_checkpoint(tmp_path / "resumed/quadratic/version_0/checkpoints/last.ckpt")
    assert whole["global_step"] == resumed["global_step"] == 78
    first_epoch = read_checkpoint(FIXTURE)["callbacks"]["TrainingProgress"]["history"][0]
    assert resumed["callbacks"]["TrainingProgress"]["history"][0] == first_epoch  # continued, not restarted
    for key, tensor in whole["state_dict"].items():
        scale = tensor.abs().max().item() if tensor.is_floating_point() else 0.0
        torch.testing.assert_close(resumed["state_dict"][key], tensor, rtol=0.0, atol=1e-3 * scale, msg=key)
