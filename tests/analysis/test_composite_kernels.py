"""Composite attention's bias term drawn as the lightweight convolution it is: the kernel over every shift,
checked against the attention the bias alone gives at every query (clipped and masked windows), and drawn
for composite models only."""

import pytest
import torch

from sa_conv.analysis.composite_kernels import lightweight_kernel
from sa_conv.analysis.maps import figures_of
from sa_conv.models import create_model
from sa_conv.nn.encodings import CompositeRelativeEncoding


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize(("side", "window"), [(8, 3), (5, 7), (6, 0)])
def test_the_kernel_is_the_bias_only_attention_at_every_query(side, window, mask):
    encoding = CompositeRelativeEncoding(3, 4, window=window, mask=mask, query_term=False, init_std=1.0)
    kernel = lightweight_kernel(encoding, side)  # (heads, 2 side - 1, 2 side - 1)
    assert kernel.shape == (3, 2 * side - 1, 2 * side - 1)
    torch.testing.assert_close(kernel.sum((1, 2)), torch.ones(3))
    attention = encoding.logits(side, side).softmax(-1)  # (heads, N, N): the literal computation
    n = side * side
    for query in range(n):  # a convolution: the kernel at the shift to each key, renormalized in-image
        qy, qx = divmod(query, side)
        weights = torch.stack(
            [kernel[:, key // side - qy + side - 1, key % side - qx + side - 1] for key in range(n)], dim=-1
        )
        torch.testing.assert_close(weights / weights.sum(-1, keepdim=True), attention[:, query])


def test_clipped_shifts_repeat_the_windows_edge_and_masked_ones_are_zero():
    encoding = CompositeRelativeEncoding(1, 4, window=1, query_term=False, init_std=1.0)
    kernel = lightweight_kernel(encoding, 4)[0]  # shifts -3..3, the window -1..1 at indices 2..4
    assert torch.equal(kernel[0, 0], kernel[1, 1]) and torch.equal(kernel[1, 1], kernel[2, 2])  # up-left
    assert torch.equal(kernel[3, 6], kernel[3, 4])  # right of the window: its right edge
    encoding.mask = True
    masked = lightweight_kernel(encoding, 4)[0]
    assert masked[2:5, 2:5].sum().item() == pytest.approx(1.0) and masked[0].abs().sum().item() == 0.0


def test_only_composite_models_draw_their_kernels():
    torch.manual_seed(0)
    images = torch.zeros(1, 3, 32, 32)
    composite = create_model("composite", layers=2, hidden=16, heads=2, ffn=8)
    tags = [tag for tag, _ in figures_of(composite, images)]
    assert "attention/composite_kernels" in tags
    quadratic = create_model("quadratic", layers=1, hidden=16, heads=4, ffn=8)
    assert "attention/composite_kernels" not in [tag for tag, _ in figures_of(quadratic, images)]
    with pytest.raises(ValueError, match="no bias term"):
        lightweight_kernel(CompositeRelativeEncoding(2, 4, bias_term=False), 4)
