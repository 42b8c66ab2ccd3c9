"""The seed decides a run: the same run with another seed trains other weights and other results."""

import json

import torch
from helpers import TEN_STEPS, weights

from experiments import run
from experiments.cli import main_guard


def test_different_seeds_give_different_metrics(tmp_path):
    for seed in ("0", "1"):
        argv = ["quadratic", *TEN_STEPS, "--epochs", "1", "--seed", seed]
        argv += ["--output-dir", str(tmp_path / seed)]
        assert main_guard(run.main)(argv) == 0
    a, b = (json.loads((tmp_path / s / "quadratic/version_0/metrics.json").read_text()) for s in ("0", "1"))
    wa = weights(tmp_path / "0/quadratic/version_0/checkpoints/last.ckpt")
    wb = weights(tmp_path / "1/quadratic/version_0/checkpoints/last.ckpt")
    assert not all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["global_steps"] == b["global_steps"]  # the same run, only the seed differs ...
    assert (a["best_val_acc"], a["test_acc"]) != (b["best_val_acc"], b["test_acc"])  # ... and so the results
