import pytest
import pytorch_lightning as pl
import torch

from sa_conv.data.config import DataConfig
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.models import MODELS
from sa_conv.training.module import ImageClassifier
from sa_conv.utils.schedule import OptimConfig, lr_factor

COSINE, STEPS = OptimConfig(schedule="warmup-cosine"), OptimConfig(schedule="multistep")

SMALL = {
    "resnet18": {"width": 8},
    **{
        name: {"layers": 1, "hidden": 32, "heads": 4, "ffn": 64, "attn_dropout": 0.0}
        for name in MODELS
        if name != "resnet18"
    },
}


def test_warmup_cosine_schedule():
    total = 1000
    assert lr_factor(0, total, COSINE) == pytest.approx(1 / 50)
    assert lr_factor(24, total, COSINE) == pytest.approx(0.5)
    assert lr_factor(49, total, COSINE) == pytest.approx(1.0)
    assert lr_factor(50, total, COSINE) == pytest.approx(1.0)
    assert lr_factor(525, total, COSINE) == pytest.approx(0.5)
    assert lr_factor(999, total, COSINE) == pytest.approx(0.0, abs=1e-4)


def test_multistep_schedule_matches_paper_epochs():
    steps_per_epoch, total = 500, 300 * 500  # batch 100 on 50k images, 300 epochs
    factor = [lr_factor(e * steps_per_epoch, total, STEPS) for e in (0, 79, 80, 149, 150, 249, 250)]
    assert factor == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01, 0.001])


def test_centres_and_spreads_are_exempt_from_weight_decay():
    module = ImageClassifier(model="quadratic", model_config=SMALL["quadratic"])
    decay, no_decay = module.parameter_groups()
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 1e-4
    enc = module.backbone.blocks[0].attention.encoding
    assert {id(p) for p in no_decay["params"]} == {id(enc.centres), id(enc.spread)}
    n_all = sum(1 for _ in module.backbone.parameters())
    assert len(decay["params"]) + len(no_decay["params"]) == n_all
    assert len(ImageClassifier(model="resnet18", model_config={"width": 8}).parameter_groups()) == 1


class LossRecorder(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_trains_and_its_loss_falls(name):
    pl.seed_everything(0, verbose=False)
    module = ImageClassifier(model=name, model_config=SMALL[name], optim=OptimConfig(lr=0.1))
    # 40 images: 8 for validation, the other 32 are one batch, the same images every step
    dm = CIFAR10DataModule(DataConfig(batch_size=32, augment=False), source="synthetic", synthetic_size=40)
    recorder = LossRecorder()
    trainer = pl.Trainer(
        max_steps=30,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    trainer.fit(module, datamodule=dm)
    first, last = recorder.losses[0], sum(recorder.losses[-3:]) / 3
    assert first == pytest.approx(2.3, abs=0.3)  # chance level at init
    assert last < first - 0.1, recorder.losses  # 30 SGD steps on the same 32 images


def test_nan_loss_stops_with_the_step():
    module = ImageClassifier(model="quadratic", model_config=SMALL["quadratic"])
    with torch.no_grad():
        module.backbone.head.bias.fill_(float("nan"))
    dm = CIFAR10DataModule(DataConfig(batch_size=16), source="synthetic", synthetic_size=64)
    trainer = pl.Trainer(
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    with pytest.raises(FloatingPointError, match="at step 0"):
        trainer.fit(module, datamodule=dm)


@pytest.mark.parametrize(
    ("epochs", "max_steps", "limit"), [(3, -1, 1.0), (2, 5, 1.0), (4, -1, 2), (3, -1, 0.5)]
)
def test_total_steps_equals_lightnings_estimate(epochs, max_steps, limit):
    dm = CIFAR10DataModule(DataConfig(batch_size=32), source="synthetic", synthetic_size=200)
    module = ImageClassifier(model="resnet18", model_config={"width": 8}, epoch_batches=dm.train_batches)
    trainer = pl.Trainer(max_epochs=epochs, max_steps=max_steps, limit_train_batches=limit, logger=False)
    trainer.strategy.connect(module)
    trainer._data_connector.attach_data(module, datamodule=dm)  # what fit() does first
    dm.setup()
    assert module.total_steps() == trainer.estimated_stepping_batches
