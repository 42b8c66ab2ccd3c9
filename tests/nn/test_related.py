"""Composite attention, lightweight/dynamic convolution equivalences, ConvBERT mixed attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from sa_conv.models import create_model
from sa_conv.nn.attention import MultiHeadSelfAttention2d
from sa_conv.nn.conversion import local_attention_as_conv
from sa_conv.nn.encodings import CompositeRelativeEncoding
from sa_conv.nn.lightconv import DynamicConv2d, LightweightConv2d
from sa_conv.nn.mixed import MixedAttention2d


@pytest.mark.parametrize("mask", [False, True])
def test_composite_logits_term_by_term(mask):
    heads, d, window, hh, ww = 2, 4, 1, 3, 4
    enc = CompositeRelativeEncoding(heads, d, window=window, mask=mask, init_std=1.0)
    layer = MultiHeadSelfAttention2d(d, heads, encoding=enc, content=True, impl="reference")
    x = torch.randn(1, hh, ww, d)
    got = layer.logits(x)[0]  # (heads, N, N)
    xs = x.reshape(hh * ww, d)
    for h in range(heads):
        wq, bq = layer.query.weight[h * d : (h + 1) * d], layer.query.bias[h * d : (h + 1) * d]
        wk, bk = layer.key.weight[h * d : (h + 1) * d], layer.key.bias[h * d : (h + 1) * d]
        for i in range(hh * ww):
            for j in range(hh * ww):
                dy, dx = j // ww - i // ww, j % ww - i % ww
                if mask and (abs(dy) > window or abs(dx) > window):
                    assert got[h, i, j] == float("-inf")
                    continue
                cy, cx = max(-window, min(window, dy)) + window, max(-window, min(window, dx)) + window
                q, k = xs[i] @ wq.T + bq, xs[j] @ wk.T + bk
                expected = q @ k / math.sqrt(d) + q @ enc.rel[cy, cx] / math.sqrt(d) + enc.bias[h, cy, cx]
                torch.testing.assert_close(got[h, i, j], expected, rtol=1e-5, atol=1e-5)


def test_composite_clips_to_the_edge_value():
    enc = CompositeRelativeEncoding(1, 2, window=1, query_term=False, init_std=1.0)
    logits = enc.logits(1, 5)[0]  # one row of 5 pixels
    assert logits[0, 4] == logits[0, 2] == enc.bias[0, 1, 2]  # shifts +4 and +2 clip to +1


def local_layer(query_term: bool, window: int = 1, heads: int = 3, dim: int = 8) -> MultiHeadSelfAttention2d:
    enc = CompositeRelativeEncoding(
        heads, dim, window=window, mask=True, query_term=query_term, bias_term=not query_term, init_std=1.0
    )
    return MultiHeadSelfAttention2d(dim, heads, encoding=enc, impl="reference").eval()


@pytest.mark.parametrize("query_term", [False, True], ids=["lightweight", "dynamic"])
@pytest.mark.parametrize("window", [1, 2])
def test_local_attention_equals_lightweight_or_dynamic_conv(query_term, window):
    layer = local_layer(query_term, window)
    x = torch.randn(2, 7, 8, 8)
    attn = layer(x)
    renormalized = local_attention_as_conv(layer, renormalize=True)
    assert isinstance(renormalized.conv, DynamicConv2d if query_term else LightweightConv2d)
    torch.testing.assert_close(renormalized(x), attn, rtol=1e-5, atol=1e-5)  # everywhere
    plain = local_attention_as_conv(layer, renormalize=False)(x)
    w = window
    torch.testing.assert_close(plain[:, w:-w, w:-w], attn[:, w:-w, w:-w], rtol=1e-5, atol=1e-5)  # interior
    assert (plain - attn).abs().max() > 1e-3  # and only there


def test_lightweight_conv_is_a_normalized_depthwise_conv():
    conv = LightweightConv2d(6, 3, 3)
    torch.testing.assert_close(conv.kernel().sum(dim=(1, 2)), torch.ones(3))
    x = torch.randn(1, 6, 5, 5)
    y = conv(x)
    k = conv.kernel()
    # channel 3 belongs to head 1: its output at (2, 2) is the kernel-weighted 3x3 neighbourhood
    torch.testing.assert_close(y[0, 3, 2, 2], (x[0, 3, 1:4, 1:4] * k[1]).sum())


def test_mixed_conv_branch_equals_a_per_pixel_loop():
    torch.manual_seed(0)
    layer = MixedAttention2d(8, 4, head_ratio=2, kernel_size=3)  # 2 attention + 2 conv heads of 2 channels
    x = torch.randn(1, 4, 5, 8)
    y = layer(x)[..., 4:]  # the conv heads' half
    hh, ww, k, r = 4, 5, 3, 1
    xc = x[0].permute(2, 0, 1)  # (D, H, W)
    depth = F.conv2d(xc[None], layer.key_depthwise.weight, padding=r, groups=8)[0]
    for i in range(hh):
        for j in range(ww):
            ks = layer.key_pointwise.weight[:, :, 0, 0] @ depth[:, i, j] + layer.key_pointwise.bias  # (4,)
            q = layer.query.weight @ x[0, i, j] + layer.query.bias  # (4,)
            logits = layer.conv.predictor.weight @ (ks * q) + layer.conv.predictor.bias  # (2 heads * 9 taps)
            kernel = logits.view(2, k * k).softmax(-1)
            out = torch.zeros(4)
            for t in range(k * k):
                yi, xj = i + t // k - r, j + t % k - r
                if 0 <= yi < hh and 0 <= xj < ww:  # zero padding outside
                    v = layer.conv_value.weight @ x[0, yi, xj] + layer.conv_value.bias  # (4,)
                    out += kernel.repeat_interleave(2, dim=0)[:, t] * v
            torch.testing.assert_close(y[0, i, j], out, rtol=1e-5, atol=1e-6)


def test_mixed_attention_half_is_softmax_attention():
    layer = MixedAttention2d(8, 4, head_ratio=2).eval()
    x = torch.randn(2, 3, 3, 8)
    y, probs = layer(x), layer.probabilities(x)
    assert probs.shape == (2, 2, 9, 9)
    v = layer.value(x).reshape(2, 9, 2, 2).transpose(1, 2)  # (B, n, N, hs)
    expected = (probs @ v).transpose(1, 2).reshape(2, 3, 3, 4)
    torch.testing.assert_close(y[..., :4], expected)


@pytest.mark.parametrize("name", ["composite", "mixed"])
def test_related_models_train_every_parameter(name):
    model = create_model(name, layers=1, hidden=16, heads=4, ffn=16)
    model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_related_parameter_counts():
    counts = {n: sum(p.numel() for p in create_model(n).parameters()) for n in ("composite", "mixed")}
    # mixed: ConvBERT's layout plus a 16 x 16 x 400 absolute position embedding
    assert counts == {"composite": 29_962_032, "mixed": 5_915_298 + 16 * 16 * 400}


def test_bad_related_configs():
    with pytest.raises(ValueError, match="head_ratio"):
        create_model("mixed", heads=9)
    with pytest.raises(ValueError, match=r"pass size=\(H, W\)"):
        local_attention_as_conv(MultiHeadSelfAttention2d(4, 2, encoding=CompositeRelativeEncoding(2, 4)))
    content = MultiHeadSelfAttention2d(4, 2, encoding=CompositeRelativeEncoding(2, 4), content=True)
    with pytest.raises(ValueError, match="no convolution computes attention with content"):
        local_attention_as_conv(content, size=(4, 4))
    with pytest.raises(ValueError, match="multiple of heads"):
        LightweightConv2d(5, 2, 3)


@pytest.mark.parametrize(("query_term", "bias_term"), [(False, True), (True, False), (True, True)])
def test_clipped_relative_attention_is_a_full_grid_convolution(query_term, bias_term):
    """The composite default clips shifts to the window: every key is attended, the edge entries repeated
    outward, and the layer is a (dynamic) convolution whose kernel covers the whole grid."""
    enc = CompositeRelativeEncoding(
        3, 6, window=1, mask=False, query_term=query_term, bias_term=bias_term, init_std=1.0
    )
    layer = MultiHeadSelfAttention2d(6, 3, encoding=enc, impl="reference").eval()
    x = torch.randn(2, 5, 7, 6)
    conv = local_attention_as_conv(layer, size=(5, 7))
    assert conv.conv.kernel_size == 13  # 2 * max(5, 7) - 1
    torch.testing.assert_close(conv(x), layer(x), rtol=1e-5, atol=1e-5)


def test_composite_key_term_reads_the_reversed_shift():
    enc = CompositeRelativeEncoding(
        1, 2, window=1, query_term=False, bias_term=False, key_term=True, init_std=1.0
    )
    k = torch.randn(1, 1, 3, 2)  # a 1x3 grid: keys at x = 0, 1, 2
    logits = enc.key_logits(k, 1, 3)[0, 0]  # (N_q, N_k)
    # query 0, key 2: shift +2 clips to +1; the key term reads w'[clip(q - k)] = w'[-1] (row 1, column 0)
    torch.testing.assert_close(logits[0, 2], k[0, 0, 2] @ enc.rel_key[1, 0] / 2**0.5)
    torch.testing.assert_close(logits[2, 0], k[0, 0, 0] @ enc.rel_key[1, 2] / 2**0.5)
