import copy

import pytest
import torch

from sa_conv.nn.attention import MultiHeadSelfAttention2d
from sa_conv.nn.encodings import (
    CompositeRelativeEncoding,
    GaussianEncoding,
    LearnedRelativeEncoding,
    QuadraticEncoding,
)
from sa_conv.nn.surgery import prune_layer_heads
from sa_conv.nn.tiled import ShiftTables, tiled_content_attention


def make(kind: str, dim: int = 8, heads: int = 3, **kw) -> MultiHeadSelfAttention2d:
    enc = {
        "quadratic": lambda: QuadraticEncoding(heads),
        "gaussian": lambda: GaussianEncoding(heads),
        "learned": lambda: LearnedRelativeEncoding(heads, dim, max_size=8),
        "content": lambda: LearnedRelativeEncoding(heads, dim, max_size=8),
        "content-only": lambda: None,
        "composite": lambda: CompositeRelativeEncoding(heads, dim, window=2),
        "composite-masked": lambda: CompositeRelativeEncoding(
            heads, dim, window=1, mask=True, query_term=False, init_std=1.0
        ),
        "composite-key": lambda: CompositeRelativeEncoding(heads, dim, window=1, key_term=True, init_std=1.0),
        "composite-masked-key": lambda: CompositeRelativeEncoding(
            heads, dim, window=1, mask=True, key_term=True, init_std=1.0
        ),
        "composite-key-only": lambda: CompositeRelativeEncoding(
            heads, dim, window=2, query_term=False, bias_term=False, key_term=True, init_std=1.0
        ),
    }[kind]()
    content = kind.startswith("content") or kind in (
        "composite",
        "composite-key",
        "composite-masked-key",
        "composite-key-only",
    )
    return MultiHeadSelfAttention2d(dim, heads, encoding=enc, content=content, **kw)


def literal(layer: MultiHeadSelfAttention2d, x: torch.Tensor) -> torch.Tensor:
    """The formula written out per head with explicit loops over heads (no shared code path)."""
    b, h, w, d = x.shape
    xs = x.reshape(b, h * w, d)
    outs = []
    for head in range(layer.heads):
        logit = torch.zeros(b, h * w, h * w)
        if layer.encoding is not None:
            logit = logit + layer.encoding.logits(h, w)[head]
        if layer.content:
            wq = layer.query.weight[head * d : (head + 1) * d]
            bq = layer.query.bias[head * d : (head + 1) * d]
            wk = layer.key.weight[head * d : (head + 1) * d]
            bk = layer.key.bias[head * d : (head + 1) * d]
            q, k = xs @ wq.T + bq, xs @ wk.T + bk
            logit = logit + q @ k.transpose(1, 2) / d**0.5
        if layer.encoding is not None and layer.encoding.query_dependent:
            wq = layer.query.weight[head * d : (head + 1) * d]
            q = (xs @ wq.T + layer.query.bias[head * d : (head + 1) * d])[:, None]  # (B, 1, N, D)
            logit = logit + layer.encoding.query_logits(q, h, w)[:, 0]
        if layer.encoding is not None and layer.encoding.key_dependent:  # k_key . w'[clip(query - key)]
            wk = layer.key.weight[head * d : (head + 1) * d]
            keys = xs @ wk.T + layer.key.bias[head * d : (head + 1) * d]  # (B, N, D)
            for qi in range(h * w):
                for ki in range(h * w):
                    dy = max(-1, min(1, qi // w - ki // w)) + 1
                    dx = max(-1, min(1, qi % w - ki % w)) + 1
                    logit[:, qi, ki] += keys[:, ki] @ layer.encoding.rel_key[dy, dx] / d**0.5
        outs.append(torch.softmax(logit, -1) @ xs)  # (B, N, D)
    cat = torch.cat(outs, dim=-1)  # (B, N, heads * D)
    return (cat @ layer.proj.weight.T + layer.proj.bias).reshape(b, h, w, -1)


@pytest.mark.parametrize(
    "kind", ["quadratic", "gaussian", "learned", "content", "content-only", "composite", "composite-key"]
)
def test_reference_equals_literal_formula(kind):
    layer = make(kind, impl="reference").eval()
    x = torch.randn(2, 4, 5, 8)
    torch.testing.assert_close(layer(x), literal(layer, x), rtol=1e-5, atol=1e-5)


FAST = [
    ("quadratic", "shared"),
    ("quadratic", "separable"),
    ("gaussian", "shared"),
    ("learned", "shared"),
    ("learned", "separable"),
    ("content", "sdpa"),
    ("content-only", "sdpa"),
    ("composite", "sdpa"),
    ("composite-key", "sdpa"),
    ("composite-masked", "shared"),
    ("content", "tiled"),
    ("content-only", "tiled"),
    ("composite", "tiled"),
    ("composite-key", "tiled"),
    ("composite-masked-key", "tiled"),
    ("composite-key-only", "tiled"),
]


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize(("kind", "impl"), FAST)
def test_fast_path_equals_reference(kind, impl, training):
    ref = make(kind, dim=16, heads=4, impl="reference").train(training)
    fast = copy.deepcopy(ref)
    fast.impl = impl
    x = torch.randn(3, 6, 7, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    assert_same_outputs_and_gradients(ref, fast, x, x2, ref(x), fast(x2))


def assert_same_outputs_and_gradients(ref, fast, x, x2, y_ref, y_fast) -> None:
    """The two layers' outputs, input gradients and parameter gradients agree (1e-5; 1e-4 relative)."""
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(y_ref)
    y_ref.backward(g)
    y_fast.backward(g)
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-5, atol=1e-5)
    for (name, p_ref), p_fast in zip(ref.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(p_fast.grad, p_ref.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    ("kind", "dropout", "training", "expected"),
    [
        ("quadratic", 0.0, True, "separable"),
        ("quadratic", 0.1, True, "shared"),  # one dropped (heads, N, N) matrix for the batch
        ("quadratic", 0.1, False, "separable"),
        ("learned", 0.1, True, "shared"),
        ("gaussian", 0.0, False, "shared"),
        ("learned", 0.0, False, "separable"),
        ("content", 0.0, True, "tiled"),  # on CPU; "sdpa" on CUDA
        ("content", 0.1, False, "tiled"),
        ("content", 0.1, True, "reference"),  # one dropout mask per image: the dense path
        ("composite", 0.0, True, "reference"),  # tiled reads its tables of shifts: exact, no faster
        ("composite-key", 0.0, False, "reference"),
    ],
)
def test_auto_picks_exact_path(kind, dropout, training, expected):
    layer = make(kind, attn_dropout=dropout).train(training)
    assert layer.resolved_impl() == expected


@pytest.mark.parametrize("training", [False, True])
def test_auto_takes_sdpa_for_content_on_cuda_with_or_without_dropout(training):
    layer = make("content", attn_dropout=0.1).train(training)
    assert layer.resolved_impl("cuda") == "sdpa"
    assert make("quadratic", attn_dropout=0.1).train(training).resolved_impl("cuda") != "sdpa"


@pytest.mark.parametrize("kind", ["content", "composite"])
def test_sdpa_dropout_draws_one_mask_per_image_and_is_unbiased(kind):
    """Equality with the reference under dropout needs the same mask, which SDPA does not expose: its
    statistics instead. One image repeated: every copy gets its own mask; the mean over draws is the
    output without dropout."""
    layer = make(kind, dim=8, heads=2, attn_dropout=0.5, impl="sdpa")
    x = torch.randn(1, 3, 3, 8).expand(400, 3, 3, 8)
    with torch.no_grad():
        expected = layer.eval()(x[:1])
        y = layer.train()(x)  # (400, 3, 3, 8)
    assert not torch.allclose(y[0], y[1])  # another mask for another image
    spread = (y - expected).std(0).max()
    torch.testing.assert_close(y.mean(0), expected[0], rtol=0, atol=float(4 * spread / 20))


def test_output_and_probability_shapes_and_rows_sum_to_one():
    x = torch.randn(2, 4, 4, 8)
    layer = make("quadratic")
    y, p = layer(x), layer.probabilities(x)
    assert y.shape == (2, 4, 4, 8) and p.shape == (1, 3, 16, 16)
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 3, 16))
    layer = make("content", out_dim=5)
    y, p = layer(x), layer.probabilities(x)
    assert y.shape == (2, 4, 4, 5) and p.shape == (2, 3, 16, 16)
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, 16))


def test_positional_layer_is_translation_equivariant_inside():
    layer = make("quadratic", dim=4, heads=2, impl="reference").eval()
    layer.encoding.set_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]), 5.0)
    x = torch.randn(1, 12, 12, 4)
    shifted = torch.roll(x, shifts=(2, 3), dims=(1, 2))
    y, y_shift = layer(x), layer(shifted)
    # away from the border (and the wrap-around seam) the output moves with the input
    torch.testing.assert_close(y_shift[:, 2 + 4 : 2 + 8, 3 + 4 : 3 + 8], y[:, 4:8, 4:8], rtol=0, atol=1e-5)
    assert not torch.allclose(y_shift[:, 6:10, 7:11], y[:, 6:10, 7:11], atol=1e-3)


@pytest.mark.parametrize("kind", ["quadratic", "gaussian", "learned", "content"])
def test_every_parameter_gets_a_gradient(kind):
    layer = make(kind)
    layer(torch.randn(2, 4, 4, 8)).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", ["quadratic", "gaussian", "learned", "content"])
@pytest.mark.parametrize("impl", ["reference", "auto"])
def test_no_nan_float32_and_bf16(kind, impl):
    layer = make(kind, impl=impl)
    if isinstance(layer.encoding, QuadraticEncoding | GaussianEncoding):
        with torch.no_grad():
            layer.encoding.centres.mul_(10)  # far-away centres: large logits
    x = torch.randn(2, 6, 6, 8) * 30
    assert torch.isfinite(layer(x)).all()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"heads": 0}, "heads"),
        ({"heads": -1}, "heads"),
        ({"dim": 0}, "dim"),
        ({"encoding": None, "content": False}, "no logits"),
        ({"encoding": QuadraticEncoding(2)}, "heads=3"),
        ({"impl": "fast"}, "impl"),
        ({"impl": "sdpa"}, "impl='sdpa'"),
        ({"encoding": GaussianEncoding(3), "impl": "separable"}, "separable"),
    ],
)
def test_bad_construction(kwargs, match):
    args = {"dim": 8, "heads": 3, "encoding": QuadraticEncoding(3), **kwargs}
    dim, heads = args.pop("dim"), args.pop("heads")
    with pytest.raises(ValueError, match=match):
        MultiHeadSelfAttention2d(dim, heads, **args)


def test_bad_input():
    layer = make("quadratic")
    with pytest.raises(ValueError, match=r"\(B, H, W, dim\)"):
        layer(torch.randn(4, 4, 8))
    with pytest.raises(ValueError, match="dim=8"):
        layer(torch.randn(1, 4, 4, 7))
    with pytest.raises(ValueError, match="max_size"):
        make("learned")(torch.randn(1, 9, 4, 8))


@pytest.mark.parametrize("kind", ["quadratic", "gaussian", "learned"])
@pytest.mark.parametrize("impl", ["auto", "reference", "shared"])
def test_positional_dropout_is_one_mask_for_the_batch(kind, impl):
    layer = make(kind, dim=8, heads=3, attn_dropout=0.5, impl=impl).train()
    image = torch.randn(1, 4, 4, 8)
    x = torch.cat([image, torch.randn(1, 4, 4, 8), image])  # images 0 and 2 are the same
    y = layer(x)
    torch.testing.assert_close(y[0], y[2], rtol=0, atol=0)  # the same mask: the same output
    assert not torch.allclose(y[0], layer.eval()(x)[0], atol=1e-3)  # and dropout did act


def test_content_dropout_is_one_mask_per_image():
    layer = make("content", dim=8, heads=3, attn_dropout=0.5).train()
    image = torch.randn(1, 4, 4, 8)
    y = layer(torch.cat([image, image]))
    assert not torch.allclose(y[0], y[1], atol=1e-3)


@pytest.mark.parametrize("kind", ["quadratic", "gaussian", "learned"])
def test_shared_path_equals_reference_with_the_same_mask(kind):
    ref = make(kind, dim=8, heads=3, attn_dropout=0.3, impl="reference").train()
    fast = copy.deepcopy(ref)
    fast.impl = "shared"
    x = torch.randn(3, 5, 4, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    torch.manual_seed(7)
    y_ref = ref(x)
    torch.manual_seed(7)
    y_fast = fast(x2)
    with torch.no_grad():
        assert not torch.allclose(y_ref, copy.deepcopy(ref).eval()(x), atol=1e-3)  # dropout did act
    assert_same_outputs_and_gradients(ref, fast, x, x2, y_ref, y_fast)


@pytest.mark.parametrize("kind", ["content", "composite"])
def test_tiled_path_without_gradients_equals_reference(kind):
    ref = make(kind, dim=16, heads=4, impl="reference").eval()
    fast = copy.deepcopy(ref)
    fast.impl = "tiled"
    x = torch.randn(3, 6, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("batch", "heads"), [(1, 1), (2, 2), (3, 1)])
@pytest.mark.parametrize("bias", ["none", "shared", "per-image"])
def test_tiled_kernel_gradients_pass_gradcheck(batch, heads, bias):
    """The kernel alone, in float64, against finite differences (every input that has a gradient)."""
    n, d = 5, 3
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(batch, n, heads, d, generator=g, dtype=torch.float64) for _ in range(2))
    x = torch.randn(batch, n, d, generator=g, dtype=torch.float64)
    b = {"none": None, "shared": 1, "per-image": batch}[bias]
    logits = None if b is None else torch.randn(b, heads, n, n, generator=g, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (q, k, x, logits) if t is not None]

    def kernel(*args):
        return tiled_content_attention(*args[:3], args[3] if len(args) > 3 else None, 0.7)

    assert torch.autograd.gradcheck(kernel, inputs)


def shift_index(height: int, width: int, window: int) -> torch.Tensor:
    """The composite table's row of every clipped shift, written out with loops: ``(N, N)``."""
    n, size = height * width, 2 * window + 1
    index = torch.empty(n, n, dtype=torch.long)
    for q in range(n):
        for k in range(n):
            dy = max(-window, min(window, k // width - q // width)) + window
            dx = max(-window, min(window, k % width - q % width)) + window
            index[q, k] = dy * size + dx
    return index


@pytest.mark.parametrize("terms", ["query", "key", "both"])
@pytest.mark.parametrize("bias", ["none", "shared", "per-image"])
def test_tiled_kernel_with_shift_tables_passes_gradcheck(terms, bias):
    """The kernel with tables of shifts, in float64, against finite differences: queries, keys, values,
    the bias and both tables."""
    batch, heads, d, (height, width), window = 2, 2, 3, (2, 3), 1
    n, size = height * width, (2 * window + 1) ** 2
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(batch, n, heads, d, generator=g, dtype=torch.float64) for _ in range(2))
    x = torch.randn(batch, n, d, generator=g, dtype=torch.float64)
    b = {"none": None, "shared": 1, "per-image": batch}[bias]
    logits = None if b is None else torch.randn(b, heads, n, n, generator=g, dtype=torch.float64)
    tq = torch.randn(size, d, generator=g, dtype=torch.float64) if terms in ("query", "both") else None
    tk = torch.randn(size, d, generator=g, dtype=torch.float64) if terms in ("key", "both") else None
    index = shift_index(height, width, window)
    tensors = [q, k, x, logits, tq, tk]
    inputs = [t.requires_grad_() for t in tensors if t is not None]

    def kernel(*args):
        it = iter(args)
        q_, k_, x_, b_, tq_, tk_ = (next(it) if t is not None else None for t in tensors)
        return tiled_content_attention(q_, k_, x_, b_, 0.7, ShiftTables(index, tq_, tk_, 0.3))

    assert torch.autograd.gradcheck(kernel, inputs)


def test_tiled_kernel_shift_terms_equal_the_written_out_sum():
    """The kernel's logits with a query term: softmax(0.7 q.k + 0.3 q . table[index]) x, per head."""
    g = torch.Generator().manual_seed(2)
    batch, heads, d, (height, width), window = 2, 3, 4, (3, 4), 1
    n = height * width
    q, k = (torch.randn(batch, n, heads, d, generator=g) for _ in range(2))
    x = torch.randn(batch, n, d, generator=g)
    table = torch.randn((2 * window + 1) ** 2, d, generator=g)
    index = shift_index(height, width, window)
    y = tiled_content_attention(q, k, x, None, 0.7, ShiftTables(index, table, None, 0.3))
    for image in range(batch):
        for head in range(heads):
            qh, kh = q[image, :, head], k[image, :, head]  # (N, D)
            logit = 0.7 * qh @ kh.T + 0.3 * torch.einsum("qd,qkd->qk", qh, table[index])
            expected = logit.softmax(-1) @ x[image]
            torch.testing.assert_close(y[image, :, head], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"bias": torch.zeros(1, 2, 6, 5)}, "bias must be"),
        ({"bias": torch.zeros(1, 2, 6, 6, dtype=torch.float64)}, "bias must be"),
        ({"q": torch.zeros(2, 6, 2, 4, dtype=torch.bfloat16)}, "float32 or float64"),
        ({"x": torch.zeros(2, 5, 4)}, "x must be"),
        ({"index": torch.zeros(6, 6, dtype=torch.int32)}, "shift index"),
        ({"index": torch.full((6, 6), 9)}, r"lie in \[0, 9\)"),
        ({"table": torch.zeros(9, 3)}, "query table"),
    ],
)
def test_tiled_kernel_refuses_bad_arguments_in_one_line(change, match):
    args = {
        "q": torch.zeros(2, 6, 2, 4),
        "k": torch.zeros(2, 6, 2, 4),
        "x": torch.zeros(2, 6, 4),
        "bias": None,
        "index": torch.zeros(6, 6, dtype=torch.long),
        "table": torch.zeros(9, 4),
        **change,
    }
    shifts = ShiftTables(args["index"], args["table"], None, 0.5)
    with pytest.raises(ValueError, match=match):
        tiled_content_attention(args["q"], args["k"], args["x"], args["bias"], 0.5, shifts)


class _UntabulatedComposite(CompositeRelativeEncoding):
    tabulated = False  # a query term the kernel cannot read: the layer's bias must carry it


def test_tiled_makes_query_terms_without_tables_a_dense_bias():
    layer = MultiHeadSelfAttention2d(8, 2, encoding=_UntabulatedComposite(2, 8, window=1), content=True)
    fast = copy.deepcopy(layer)
    fast.impl = "tiled"  # asked for: the per-image bias, made densely, still exact
    x = torch.randn(2, 3, 4, 8, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    layer.impl = "reference"
    assert_same_outputs_and_gradients(layer, fast, x, x2, layer(x), fast(x2))


def test_tiled_saves_the_probabilities_only_for_backward():
    q, k = torch.randn(2, 6, 2, 4), torch.randn(2, 6, 2, 4)
    x = torch.randn(2, 6, 4, requires_grad=True)
    with torch.no_grad():
        y = tiled_content_attention(q, k, x, None, 0.5)
    assert y.grad_fn is None
    y = tiled_content_attention(q, k, x, None, 0.5)
    assert y.grad_fn is not None and y.grad_fn.saved_tensors[3].shape == (2, 2, 6, 6)  # (B, heads, N, N)


def test_auto_leaves_tiled_to_the_cpu_and_out_of_compiled_graphs(monkeypatch):
    layer = make("content").train()
    assert layer.resolved_impl("meta") == "tiled"  # the FLOP count follows the CPU's path
    assert layer.resolved_impl("mps") == "reference"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert layer.resolved_impl("cpu") == "reference"


def test_tiled_refuses_dropout_in_training_and_positional_only_attention():
    layer = make("content", attn_dropout=0.1, impl="tiled").train()
    with pytest.raises(ValueError, match="cannot apply attention dropout"):
        layer(torch.randn(1, 4, 4, 8))
    layer.eval()(torch.randn(1, 4, 4, 8))  # evaluation has no dropout
    with pytest.raises(ValueError, match="needs content attention"):
        make("learned", impl="tiled")


def test_separable_refuses_dropout_in_training():
    layer = make("quadratic", attn_dropout=0.1, impl="separable").train()
    with pytest.raises(ValueError, match="cannot apply attention dropout"):
        layer(torch.randn(1, 4, 4, 8))
    layer.eval()(torch.randn(1, 4, 4, 8))  # evaluation has no dropout


@pytest.mark.parametrize("impl", ["reference", "shared", "separable"])
@pytest.mark.parametrize("alpha", [8.0, 20.0, 46.0])
def test_sharp_heads_keep_float32_probabilities_under_bf16_autocast(impl, alpha):
    heads = 4
    enc = QuadraticEncoding(heads).set_(
        torch.tensor([[0.3, -1.7], [2.5, 0.5], [-0.4, 1.2], [1.5, 1.5]]), alpha
    )
    layer = MultiHeadSelfAttention2d(8, heads, encoding=enc, impl=impl).eval()
    x = torch.randn(2, 6, 7, 8)
    p32 = layer.probabilities(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y16, p16 = layer(x.bfloat16()), layer.probabilities(x.bfloat16())
    assert p16.dtype == torch.float32
    torch.testing.assert_close(p16, p32, rtol=0, atol=1e-3)
    torch.testing.assert_close(y16.float(), layer(x), rtol=0.05, atol=0.05)  # the products in bf16


def test_content_softmax_in_float32_under_autocast():
    layer = make("content", impl="reference").eval()
    with torch.no_grad():
        layer.encoding.row.mul_(40)  # sharp positional logits on top of the content term
    x = torch.randn(2, 4, 4, 8)
    p32 = layer.probabilities(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p16 = layer.probabilities(x)
    assert p16.dtype == torch.float32
    torch.testing.assert_close(p16, p32, rtol=0, atol=0.05)  # the content term is a bf16 product


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_input_dtype_mismatch_is_one_clear_error(dtype):
    layer = make("quadratic")
    x = torch.randn(1, 4, 4, 8).to(dtype)
    with pytest.raises(ValueError, match=r"x is torch|floating-point"):
        layer(x)


@pytest.mark.parametrize("kind", ["quadratic", "gaussian", "learned", "content", "composite"])
def test_pruning_heads_equals_zeroing_their_projection_blocks(kind):
    layer = make(kind, dim=8, heads=4, impl="reference").eval()
    x = torch.randn(2, 4, 5, 8)
    zeroed = copy.deepcopy(layer)
    with torch.no_grad():
        for head in (1, 3):
            zeroed.proj.weight[:, head * 8 : (head + 1) * 8] = 0
    expected = zeroed(x)
    prune_layer_heads(layer, [1, 3])
    assert layer.heads == 2 and layer.proj.in_features == 16 and layer.encoding.heads == 2
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cannot prune all"):
        prune_layer_heads(layer, [0, 1])


@pytest.mark.parametrize(
    ("kind", "impl"),
    [
        ("quadratic", "separable"),
        ("learned", "separable"),
        ("gaussian", "shared"),
        ("content", "tiled"),
        ("composite", "tiled"),
    ],
)
def test_bf16_fast_path_gradients_are_as_close_to_float32_as_the_references(kind, impl):
    """Under bf16 autocast no path is exact: the fast one must be as close to the float32 truth as the
    reference computation is (output, input and parameter gradients)."""
    ref = make(kind, dim=32, heads=4, impl="reference")
    x = torch.randn(4, 8, 8, 32)
    g = torch.randn(4, 8, 8, 32)

    def run(layer, bf16):
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = layer(xx)
        y.float().backward(g)
        return [y.float(), xx.grad, *(p.grad for p in layer.parameters())]

    fast = copy.deepcopy(ref)
    fast.impl = impl
    truth = run(copy.deepcopy(ref), False)
    for got_ref, got_fast, want in zip(run(ref, True), run(fast, True), truth, strict=True):
        if want.norm() < 1e-5:  # the key bias: the softmax over keys is blind to it, its gradient is 0
            assert got_fast.norm() <= max(2 * got_ref.norm(), 1e-3), (got_fast.norm(), got_ref.norm())
            continue
        err_ref = ((got_ref - want).norm() / want.norm()).item()
        err_fast = ((got_fast - want).norm() / want.norm()).item()
        assert err_fast <= max(2 * err_ref, 1e-3) and err_fast < 0.02
