"""Chang et al.'s reading, checked: windowed relative attention is a lightweight or dynamic convolution.

    python -m experiments.equivalence [--trials 5] [--tolerance 1e-5]

Positional-bias-only attention restricted to a K x K window equals ``LightweightConv2d`` with kernel
softmax(b) where the window is inside the image, and everywhere once the convolution renormalizes by
the in-image kernel mass; the query-dependent term alone equals ``DynamicConv2d`` with kernel
softmax(q . w) in the same way.
"""

from __future__ import annotations

import sys

import torch

from experiments.cli import ArgumentParser, main_guard
from sa_conv.attention import MultiHeadSelfAttention2d
from sa_conv.conversion import local_attention_as_conv
from sa_conv.encodings import CompositeRelativeEncoding


def max_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Max |diff| relative to max |expected|."""
    return ((got - expected).abs().max() / expected.abs().max()).item()


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m experiments.equivalence", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="random instances per case")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    if args.trials <= 0:
        raise ValueError(f"--trials must be positive, got {args.trials}")
    gen = torch.Generator().manual_seed(args.seed)
    print(f"{'term':8} {'conv':16} {'K':>3} {'interior error':>15} {'renormalized error':>19}  result")
    worst = 0.0
    for query_term, conv_name in ((False, "LightweightConv2d"), (True, "DynamicConv2d")):
        for window in (1, 2):
            interior_err = everywhere_err = 0.0
            for _ in range(args.trials):
                heads, dim = (
                    int(torch.randint(1, 5, (1,), generator=gen)),
                    int(torch.randint(2, 9, (1,), generator=gen)),
                )
                height, width = (int(v) for v in torch.randint(2 * window + 2, 12, (2,), generator=gen))
                torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
                enc = CompositeRelativeEncoding(
                    heads,
                    dim,
                    window=window,
                    mask=True,
                    query_term=query_term,
                    bias_term=not query_term,
                    init_std=1.0,
                )
                layer = MultiHeadSelfAttention2d(dim, heads, encoding=enc, impl="reference").eval()
                x = torch.randn(2, height, width, dim)
                with torch.no_grad():
                    attn = layer(x)
                    plain = local_attention_as_conv(layer, renormalize=False)(x)
                    renorm = local_attention_as_conv(layer, renormalize=True)(x)
                w = window
                interior_err = max(interior_err, max_error(plain[:, w:-w, w:-w], attn[:, w:-w, w:-w]))
                everywhere_err = max(everywhere_err, max_error(renorm, attn))
            ok = max(interior_err, everywhere_err) <= args.tolerance
            worst = max(worst, interior_err, everywhere_err)
            term = "q.w" if query_term else "bias"
            print(
                f"{term:8} {conv_name:16} {2 * window + 1:>3} {interior_err:>15.3e} {everywhere_err:>19.3e}  "
                f"{'PASS' if ok else 'FAIL'}"
            )
    passed = worst <= args.tolerance
    print(f"worst relative error {worst:.3e} (tolerance {args.tolerance:g}): {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main_guard(main)())
