"""FLOP counts: the counter sees every product (in-place, fused CPU attention, grouped convolution
backward), and agrees with the analytic count of every model on the path it trains and evaluates on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sa_conv.analysis.flops import analytic_flops, counted_flops
from sa_conv.models import MODELS, create_model
from sa_conv.models.flop_formulas import attention_path
from sa_conv.training.presets import preset

PASSES = ("forward", "forward+backward")


@pytest.mark.parametrize("scale", ["tiny", "small6", "paper"])
@pytest.mark.parametrize("name", list(MODELS))
def test_counted_equals_analytic_within_2_percent(name: str, scale: str) -> None:
    config = preset(name, scale).model_config
    model = MODELS[name].build(config)
    for training in (True, False):
        for passes in PASSES:
            counted = counted_flops(model, training=training, passes=passes)
            expected = analytic_flops(name, config, training=training, passes=passes)
            assert counted == pytest.approx(expected, rel=0.02), (training, passes)


def test_paper_quadratic_trained_path_is_27_gflop_forward_and_backward() -> None:
    model = create_model("quadratic")  # attention dropout 0.1: training takes the dense shared path
    assert attention_path(model.config, training=True) == "dense"
    assert attention_path(model.config, training=False) == "separable"
    assert counted_flops(model, training=True) / 1e9 == pytest.approx(27.0, rel=0.02)
    assert counted_flops(model, training=True, passes="forward") / 1e9 == pytest.approx(9.0, rel=0.02)
    assert counted_flops(model, training=False, passes="forward") / 1e9 == pytest.approx(6.53, rel=0.02)


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(12, 5))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.flatten(2).transpose(1, 2)[:, :12, :]  # (B, 12, 3)
        y = torch.zeros(x.shape[0], 3, 5, device=x.device)
        y.baddbmm_(x.transpose(1, 2), self.w.expand(x.shape[0], 12, 5))  # (B, 3, 5)
        out = torch.zeros(3, 5, device=x.device)
        return out.addmm_(y[0].T.T, torch.eye(5, device=x.device))[None].expand(x.shape[0], 3, 5)


def test_in_place_products_are_counted() -> None:
    per_image = counted_flops(_InPlace(), passes="forward", batch=4)
    assert per_image == pytest.approx((4 * 2 * 3 * 12 * 5 + 2 * 3 * 5 * 5) / 4)


def test_depthwise_convolution_backward_counts_its_groups() -> None:
    conv = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1, groups=3), nn.Conv2d(3, 8, 3, padding=1))
    forward = 2 * 32 * 32 * (3 * 1 * 9 + 8 * 3 * 9)
    both = counted_flops(conv, batch=2)
    # the image needs no gradient: the first conv's backward is its weight gradient alone
    assert both == pytest.approx(forward + 2 * 32 * 32 * (3 * 9 + 2 * 8 * 3 * 9))


def test_counting_leaves_the_model_untouched() -> None:
    model = create_model("quadratic", layers=1, hidden=16, heads=2, ffn=16).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    counted_flops(model, training=True)
    assert not model.training
    assert all(p.grad is None and p.device.type == "cpu" for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
