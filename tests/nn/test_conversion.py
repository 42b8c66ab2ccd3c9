import itertools

import pytest
import torch
from torch import nn

from sa_conv.models import create_model
from sa_conv.nn.conversion import (
    ConvInPlaceOfAttention,
    attention_to_conv,
    conv_likeness,
    conv_to_attention,
    convert_network,
)
from sa_conv.nn.encodings import QuadraticEncoding

MODES = ["zeros", "reflect", "replicate", "circular"]


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def conv2d_cases():
    """A deterministic sweep of 2D convs: kernel 1..5 (non-square), stride, dilation, padding, groups."""
    rng = torch.Generator().manual_seed(0)
    kernels = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (3, 1), (1, 4), (2, 5), (5, 3)]
    paddings = [0, 1, 2, (1, 2), "valid", "same"]
    for i, (kernel, stride, dilation, padding, mode) in enumerate(
        itertools.product(kernels, [1, 2], [1, 2], paddings, MODES)
    ):
        if padding == "same" and stride != 1:
            continue  # torch forbids it
        if i % 5:  # a fifth of the full product keeps the test fast and still covers every axis
            continue
        groups = [1, 2, 4][int(torch.randint(0, 3, (1,), generator=rng))]
        bias = bool(torch.randint(0, 2, (1,), generator=rng))
        yield kernel, stride, dilation, padding, mode, groups, bias


def assert_converts(conv: nn.Module, x: torch.Tensor) -> nn.Module:
    """The attention twin of ``conv`` gives the conv's output shape and values (rel. error <= 1e-5)."""
    attn = conv_to_attention(conv, alpha=46.0)
    expected, got = conv(x), attn(x)
    assert got.shape == expected.shape
    assert rel_error(got, expected) <= 1e-5
    return attn


@pytest.mark.parametrize(
    ("kernel", "stride", "dilation", "padding", "mode", "groups", "bias"), list(conv2d_cases())
)
def test_conv2d_equals_attention(kernel, stride, dilation, padding, mode, groups, bias):
    options = {"stride": stride, "dilation": dilation, "padding": padding, "padding_mode": mode}
    conv = nn.Conv2d(4, 8, kernel, groups=groups, bias=bias, **options)
    attn = assert_converts(conv, torch.randn(2, 4, 11, 12))
    assert attn.attention.heads == kernel[0] * kernel[1]


@pytest.mark.parametrize("impl", ["reference", "separable"])
@pytest.mark.parametrize("mode", MODES)
def test_conv2d_every_impl(impl, mode):
    conv = nn.Conv2d(3, 5, (3, 4), stride=(2, 1), dilation=(1, 2), padding=(2, 3), padding_mode=mode)
    x = torch.randn(2, 3, 9, 10)
    assert rel_error(conv_to_attention(conv, impl=impl)(x), conv(x)) <= 1e-5


def test_depthwise_and_channel_multiplier():
    for conv in (nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.Conv2d(3, 9, 5, padding=2, groups=3)):
        x = torch.randn(2, conv.in_channels, 8, 8)
        assert rel_error(conv_to_attention(conv)(x), conv(x)) <= 1e-5


@pytest.mark.parametrize(
    ("kernel", "stride", "dilation", "padding", "mode", "groups", "bias"),
    [
        (k, s, d, p, m, g, b)
        for i, (k, s, d, p, m, g, b) in enumerate(
            itertools.product(
                [1, 2, 3, 5], [1, 2], [1, 3], [0, 2, "same", "valid"], MODES, [1, 3], [True, False]
            )
        )
        if not (p == "same" and s != 1) and i % 4 == 0
    ],
)
def test_conv1d_equals_attention(kernel, stride, dilation, padding, mode, groups, bias):
    options = {"stride": stride, "dilation": dilation, "padding": padding, "padding_mode": mode}
    conv = nn.Conv1d(3, 6, kernel, groups=groups, bias=bias, **options)
    attn = assert_converts(conv, torch.randn(2, 3, 17))
    assert attn.attention.heads == kernel
    assert attn.centres[:, 0].abs().sum() == 0  # a grid of height 1: all shifts are horizontal


def test_centres_are_the_kernel_taps():
    attn = conv_to_attention(nn.Conv2d(2, 2, 3, dilation=2))
    assert attn.centres.tolist() == [[float(dy), float(dx)] for dy in (-2, 0, 2) for dx in (-2, 0, 2)]
    torch.testing.assert_close(attn.attention.encoding.alpha, torch.full((9,), 46.0))


def test_small_alpha_is_not_a_convolution():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(1, 3, 8, 8)
    assert rel_error(conv_to_attention(conv, alpha=0.5)(x), conv(x)) > 1e-2


def test_converted_layer_is_differentiable():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    attn = conv_to_attention(conv)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    attn(x).square().sum().backward()
    assert attn.attention.proj.weight.grad.abs().sum() > 0
    assert attn.attention.proj.bias.grad.abs().sum() > 0
    # and the gradient equals the conv's (both are the same function of the input)
    x2 = x.detach().clone().requires_grad_(True)
    conv(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)


def test_float64_conv():
    conv = nn.Conv2d(2, 3, 3, padding=1).double()
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    assert rel_error(conv_to_attention(conv, alpha=200.0)(x), conv(x)) <= 1e-12


def test_swap_conv_inside_resnet18_gives_same_logits():
    model = create_model("resnet18", width=8).eval()
    images = torch.randn(2, 3, 32, 32)
    expected = model(images)
    block = model.layers[2]  # first block of stage 2: stride-2 3x3 conv and 1x1 stride-2 shortcut
    block.conv1 = conv_to_attention(block.conv1)
    block.shortcut[0] = conv_to_attention(block.shortcut[0])
    model.stem[0] = conv_to_attention(model.stem[0])
    got = model(images)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("layer", "error", "match"),
    [
        (nn.Conv3d(2, 2, 3), TypeError, "Conv3d"),
        (nn.ConvTranspose2d(2, 2, 3), TypeError, "ConvTranspose2d"),
        (nn.Linear(2, 2), TypeError, "Linear"),
    ],
)
def test_unsupported_layers(layer, error, match):
    with pytest.raises(error, match=match):
        conv_to_attention(layer)


def test_non_float_and_head_budget_and_alpha():
    conv = nn.Conv2d(2, 2, 3)
    with pytest.raises(TypeError, match="floating point"):
        conv_to_attention(_int_conv())
    with pytest.raises(ValueError, match="needs 25 heads, more than max_heads=16"):
        conv_to_attention(nn.Conv2d(2, 2, 5), max_heads=16)
    with pytest.raises(ValueError, match="alpha"):
        conv_to_attention(conv, alpha=0.0)
    with pytest.raises(ValueError, match="C=2"):
        conv_to_attention(conv)(torch.randn(1, 3, 8, 8))


def _int_conv() -> nn.Conv2d:
    conv = nn.Conv2d(2, 2, 3)
    conv.weight = nn.Parameter(torch.ones(2, 2, 3, 3, dtype=torch.int64), requires_grad=False)
    return conv


def test_a_whole_resnet18_as_attention_gives_the_same_logits():
    model = create_model("resnet18", width=8).eval()
    twin, converted = convert_network(model)
    assert converted == 20  # the stem, 16 convolutions of the blocks, 3 projection shortcuts
    assert not any(type(m) is nn.Conv2d for m in twin.modules())
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(twin(images), model(images), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("kernel", "bias"), [(3, True), (5, False), ((3, 5), True), (1, True)])
def test_attention_to_conv_gives_back_the_kernel(kernel, bias):
    conv = nn.Conv2d(4, 6, kernel, bias=bias)
    back = attention_to_conv(conv_to_attention(conv).attention)
    torch.testing.assert_close(back.weight, conv.weight, rtol=0, atol=1e-5)
    if bias:
        torch.testing.assert_close(back.bias, conv.bias)
    assert back.bias is None if not bias else True


def test_conv_likeness_sharp_against_blurred_heads():
    twin = conv_to_attention(nn.Conv2d(2, 2, 3)).attention
    assert (conv_likeness(twin, 10, 10) >= 0.99).all()  # alpha 46: one pixel
    blurred = conv_to_attention(nn.Conv2d(2, 2, 3), alpha=0.5).attention
    likeness = conv_likeness(blurred, 10, 10)
    assert (likeness < 0.5).all() and (likeness > 0.05).all()
    mixed = conv_to_attention(nn.Conv2d(2, 2, 3)).attention
    mixed.encoding.set_(mixed.encoding.centres, torch.tensor([46.0] * 4 + [0.3] * 5))
    ranks = conv_likeness(mixed, 10, 10)
    assert ranks[:4].min() > 0.99 > 0.5 > ranks[4:].max()


@pytest.mark.parametrize("impl", ["reference", "separable"])
def test_a_sharp_trained_layer_swaps_for_its_convolution(impl):
    """Heads forced sharp (fractional centres, alpha 46): the layer is its convolution, border included
    (replicate padding), and the model's logits do not change."""
    model = create_model("quadratic", layers=2, hidden=16, heads=9, ffn=32, impl=impl).eval()
    layer = model.blocks[0].attention
    taps = torch.tensor([[dy, dx] for dy in (-2, 0, 1) for dx in (-1, 0, 3)], dtype=torch.float)
    layer.encoding.set_(taps + 0.2, 46.0)
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = model(images)
        tokens = model.tokens(images)
        conv = attention_to_conv(layer)
        torch.testing.assert_close(ConvInPlaceOfAttention(conv)(tokens), layer(tokens), rtol=1e-5, atol=1e-5)
        model.blocks[0].attention = ConvInPlaceOfAttention(conv)
        torch.testing.assert_close(model(images), expected, rtol=1e-4, atol=1e-5)
    assert conv.kernel_size == (5, 7) and conv.padding_mode == "replicate"


def test_attention_to_conv_refuses_other_layers():
    from sa_conv.nn.attention import MultiHeadSelfAttention2d
    from sa_conv.nn.encodings import LearnedRelativeEncoding

    with pytest.raises(ValueError, match="needs Gaussian heads"):
        attention_to_conv(MultiHeadSelfAttention2d(4, 2, encoding=LearnedRelativeEncoding(2, 4, max_size=4)))
    with pytest.raises(ValueError, match="needs Gaussian heads"):
        attention_to_conv(MultiHeadSelfAttention2d(4, 2, encoding=QuadraticEncoding(2), content=True))


def test_dilation_zero_and_infinite_alpha_are_refused():
    conv = nn.Conv2d(2, 2, 3)
    conv.dilation = (0, 1)
    with pytest.raises(ValueError, match="dilation must be >= 1"):
        conv_to_attention(conv)
    with pytest.raises(ValueError, match="alpha must be positive and finite"):
        conv_to_attention(nn.Conv2d(2, 2, 3), alpha=float("inf"))
    with pytest.raises(ValueError, match="alpha must be positive and finite"):
        QuadraticEncoding(2).set_(torch.zeros(2, 2), float("nan"))
