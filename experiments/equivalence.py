"""Chang et al.'s reading, checked: relative-position attention is a lightweight or dynamic convolution.

    python -m experiments.equivalence [--trials 5] [--tolerance 1e-5]

Composite attention without content: the bias term alone is ``LightweightConv2d`` with kernel
softmax(b), the query term (with or without the bias) ``DynamicConv2d`` with kernel softmax(b + q . w).
Masked to a K x K window the kernel is K x K; clipped (the composite default) it covers the whole grid,
the edge entries repeated outward. Exact wherever the window is inside the image, and everywhere once the
convolution renormalizes by its in-image kernel mass. With content attention (the default composite
model) there is no such convolution: the logit q . k depends on the key pixel's features.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from experiments.cli import ArgumentParser, computing, main_guard, positive_float, positive_int, seed_int
from sa_conv.models import SAConfig, model_config

TERMS = {"bias": (False, True), "q.w": (True, False), "both": (True, True)}  # (query term, bias term)


def max_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Max |diff| relative to max |expected|."""
    return ((got - expected).abs().max() / expected.abs().max()).item()


def check(term: str, mask: bool, window: int, gen: torch.Generator, trials: int) -> tuple[float, float]:
    """Worst interior (masked layers) and renormalized errors over ``trials`` random layers."""
    import torch

    from sa_conv.nn.attention import MultiHeadSelfAttention2d
    from sa_conv.nn.conversion import local_attention_as_conv
    from sa_conv.nn.encodings import CompositeRelativeEncoding

    query_term, bias_term = TERMS[term]
    interior = everywhere = 0.0
    for _ in range(trials):
        heads = int(torch.randint(1, 5, (1,), generator=gen))
        dim = int(torch.randint(2, 9, (1,), generator=gen))
        height, width = (int(v) for v in torch.randint(2 * window + 2, 12, (2,), generator=gen))
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
        enc = CompositeRelativeEncoding(
            heads, dim, window=window, mask=mask, query_term=query_term, bias_term=bias_term, init_std=1.0
        )
        layer = MultiHeadSelfAttention2d(dim, heads, encoding=enc, impl="reference").eval()
        x = torch.randn(2, height, width, dim)
        with torch.no_grad():
            attn = layer(x)
            plain = local_attention_as_conv(layer, size=(height, width), renormalize=False)
            renorm = local_attention_as_conv(layer, size=(height, width), renormalize=True)
            if mask:  # a clipped layer's full-grid kernel always hangs over the border: renormalized only
                r = window
                inside = (slice(None), slice(r, height - r), slice(r, width - r))
                interior = max(interior, max_error(plain(x)[inside], attn[inside]))
            everywhere = max(everywhere, max_error(renorm(x), attn))
    return interior, everywhere


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.equivalence", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_int, default=5, help="random instances per case")
    parser.add_argument("--tolerance", type=positive_float, default=1e-5)
    parser.add_argument("--seed", type=seed_int, default=0)
    args = parser.parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    import torch

    from sa_conv.nn.attention import MultiHeadSelfAttention2d
    from sa_conv.nn.conversion import local_attention_as_conv
    from sa_conv.nn.encodings import CompositeRelativeEncoding

    gen = torch.Generator().manual_seed(args.seed)
    print(f"{'term':6} {'window':8} {'conv':18} {'interior error':>15} {'renormalized error':>19}  result")
    worst = 0.0
    for mask in (True, False):
        for term in TERMS:
            for window in (1, 2):
                interior, everywhere = check(term, mask, window, gen, args.trials)
                conv = "LightweightConv2d" if term == "bias" else "DynamicConv2d"
                shape = f"{'masked' if mask else 'clipped'} {window}"
                inner = f"{interior:>15.3e}" if mask else f"{'-':>15}"
                ok = max(interior, everywhere) <= args.tolerance
                worst = max(worst, interior, everywhere)
                print(f"{term:6} {shape:8} {conv:18} {inner} {everywhere:>19.3e}  {'PASS' if ok else 'FAIL'}")
    default = model_config("composite")
    assert isinstance(default, SAConfig)  # the composite model is an SA model
    print(
        f"\nthe composite model's default (content on, both terms, clipped, window {default.window}): no "
        "convolution computes it: its content logit q . k depends on the key pixel's features, a "
        "convolution's weights only on the shift (and, dynamically, the query pixel)."
    )
    gen_default = torch.Generator().manual_seed(args.seed + 1)
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen_default)))
    enc = CompositeRelativeEncoding(2, 8, window=default.window, init_std=1.0)  # clipped, both terms
    layer = MultiHeadSelfAttention2d(8, 2, encoding=enc, impl="reference").eval()
    x = torch.randn(2, default.grid, default.grid, 8)
    with torch.no_grad():
        err = max_error(local_attention_as_conv(layer, size=(default.grid, default.grid))(x), layer(x))
    worst = max(worst, err)
    print(
        f"without content, its relative terms on the {default.grid}x{default.grid} grid = DynamicConv2d "
        f"with a "
        f"{2 * default.grid - 1}x{2 * default.grid - 1} kernel, renormalized: error {err:.3e} "
        f"({'PASS' if err <= args.tolerance else 'FAIL'})"
    )
    passed = worst <= args.tolerance
    print(f"worst relative error {worst:.3e} (tolerance {args.tolerance:g}): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main_guard(main)())
