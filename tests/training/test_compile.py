"""``--compile`` on a CPU: the compiled backbone trains, evaluates and resumes, its checkpoints keep the
module's names."""

import json

import pytest
from helpers import TEN_STEPS, run_cli, weights

from sa_conv.training.checkpoints import module_from_checkpoint


@pytest.mark.slow
def test_compile_trains_and_evaluates_with_partial_batches(tmp_path):
    """--compile on a CPU: the backbone is compiled in place (checkpoints keep their names); training,
    evaluation (another graph) and the last partial batch of each split all run, and the run resumes."""
    argv = ["quadratic", *TEN_STEPS, "--epochs", "1", "--synthetic-size", "150", "--batch-size", "32"]
    argv += ["--compile"]
    proc = run_cli([*argv, "--output-dir", str(tmp_path)])
    assert proc.wait(timeout=900) == 0, proc.stderr.read().decode()[-3000:]
    metrics = json.loads((tmp_path / "quadratic/version_0/metrics.json").read_text())
    assert metrics["n_train_images"] % 32 and metrics["n_test_images"] % 256  # partial last batches
    state = weights(tmp_path / "quadratic/version_0/checkpoints/last.ckpt")
    assert "backbone.blocks.0.attention.proj.weight" in state  # no _orig_mod in the names
    module = module_from_checkpoint(tmp_path / "quadratic/version_0/checkpoints/last.ckpt")
    assert module.hparams.model == "quadratic"
