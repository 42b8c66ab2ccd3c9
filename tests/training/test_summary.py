"""The typed records a run leaves: ``RunSummary`` is metrics.json (its layout kept, older files read), and a
checkpoint of any earlier layout rebuilds its module (``module_from_checkpoint``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers.summaries import LAYER, metrics

from sa_conv.analysis.snapshots import LayerSummary
from sa_conv.training.checkpoints import module_from_checkpoint
from sa_conv.training.module import ImageClassifier
from sa_conv.training.summary import RunSummary
from sa_conv.utils.safe_load import CheckpointError


@pytest.mark.parametrize("protocol", ["clean", "paper"])
def test_metrics_json_keeps_its_layout(protocol: str) -> None:
    data = metrics(protocol)
    summary = RunSummary.from_dict(data)
    assert summary.to_dict() == data
    assert list(summary.to_dict()) == list(data)  # the same keys, in the same order
    assert summary.test_acc == data["test_acc"] and summary.layers == [LayerSummary(**LAYER)]
    assert summary.locality_history is None and "locality_history" not in summary.to_dict()


def test_an_older_metrics_json_is_read_and_written_back_without_new_keys(tmp_path) -> None:
    old = {
        k: v for k, v in metrics("clean").items() if k not in ("train_step_seconds", "commit", "test_correct")
    }
    old["flops_per_image"] = 123  # a key of older versions
    summary = RunSummary.from_dict(old)
    assert summary.train_step_seconds is None and summary.commit is None and summary.test_correct is None
    assert summary.extra == {"flops_per_image": 123}
    assert summary.to_dict() == old  # nothing added, the unknown key kept
    path = tmp_path / "metrics.json"
    dataclasses.replace(summary, test_correct="1010").write(path)
    assert RunSummary.read(path).to_dict() == {**old, "test_correct": "1010"}  # what was set is written


def test_a_summary_without_the_keys_every_run_wrote_is_an_error() -> None:
    data = metrics("clean")
    del data["test_acc"], data["global_steps"]
    with pytest.raises(ValueError, match="a run summary needs global_steps, test_acc"):
        RunSummary.from_dict(data)


def test_a_checkpoint_from_before_optim_config_is_migrated_as_it_is_read() -> None:
    small = {"layers": 1, "hidden": 16, "heads": 2, "ffn": 8}
    trained = ImageClassifier(model="quadratic", model_config=small)
    legacy = {"model": "quadratic", "model_config": small, "val_name": "val", "num_classes": 10}
    legacy |= {"lr": 0.05, "momentum": 0.8, "schedule": "multistep"}  # the optimizer's fields, flat
    record = {"hyper_parameters": legacy, "state_dict": trained.state_dict()}
    module = module_from_checkpoint(record)
    assert (module.optim.lr, module.optim.momentum, module.optim.schedule) == (0.05, 0.8, "multistep")
    assert module.optim.weight_decay == 1e-4  # a field it did not hold: the default
    for key, tensor in trained.state_dict().items():
        assert torch.equal(module.state_dict()[key], tensor), key
    record["state_dict"]["backbone.head.bias"] = torch.full((10,), float("nan"))
    with pytest.raises(CheckpointError, match="NaN or infinity"):
        module_from_checkpoint(record)
