"""Statistics for claims between models on the same test images: a paired test, and the standard errors.

An ordering between two models is claimed only where it holds for every seed and the paired test on the
same test images clears it: ``mcnemar`` (exact, two-sided, on the images one model gets right and the
other wrong) for each pair of seeds, and ``paired_bootstrap`` for the difference of the seed means,
resampling test images (the same images for both models) and seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Comparison",
    "accuracy_stderr",
    "compare",
    "difference_stderr",
    "mcnemar",
    "paired_bootstrap",
    "per_image",
]


def per_image(correct: str) -> list[bool]:
    """Recorded per-image test results (``test_correct``: ``"1"`` right, ``"0"`` wrong) as booleans."""
    return [c == "1" for c in correct]


def accuracy_stderr(accuracy: float, n: int) -> float:
    """Binomial standard error of one accuracy measured on ``n`` images."""
    return math.sqrt(max(accuracy * (1 - accuracy), 0.0) / max(n, 1))


def difference_stderr(a: float, b: float, n: int) -> float:
    """Standard error of the difference of two accuracies on ``n`` images each, were they independent
    (an upper bound for a paired comparison on the same images, where errors are correlated)."""
    return math.hypot(accuracy_stderr(a, n), accuracy_stderr(b, n))


def mcnemar(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> tuple[int, int, float]:
    """Exact McNemar test on the same test images: ``(only_a, only_b, p)``, the images only model a gets
    right, only b gets right, and the two-sided p-value of as uneven a split under equal accuracy."""
    if len(correct_a) != len(correct_b):
        raise ValueError(f"the two models were tested on {len(correct_a)} and {len(correct_b)} images")
    only_a = sum(1 for a, b in zip(correct_a, correct_b, strict=True) if a and not b)
    only_b = sum(1 for a, b in zip(correct_a, correct_b, strict=True) if b and not a)
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return only_a, only_b, 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return only_a, only_b, min(1.0, 2 * tail)


def paired_bootstrap(
    runs_a: Sequence[Sequence[bool]],
    runs_b: Sequence[Sequence[bool]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The difference of mean accuracies (a - b) over seeds, and its 95% interval: each resample draws
    test images with replacement (the same for both models) and the seeds of each model with replacement.
    ``runs_a``, ``runs_b``: per seed, per test image, whether the model got it right."""
    a, b = np.asarray(runs_a, dtype=float), np.asarray(runs_b, dtype=float)  # (seeds, images)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError("every run must be tested on the same images")
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    observed = float(a.mean() - b.mean())
    images = rng.integers(n, size=(resamples, n))  # (R, n): the same images for both models
    seeds_a = rng.integers(len(a), size=(resamples, len(a)))
    seeds_b = rng.integers(len(b), size=(resamples, len(b)))
    mean_a = np.take_along_axis(a[seeds_a], images[:, None, :], axis=2).mean(axis=(1, 2))
    mean_b = np.take_along_axis(b[seeds_b], images[:, None, :], axis=2).mean(axis=(1, 2))
    low, high = np.quantile(mean_a - mean_b, [0.025, 0.975])
    return observed, float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    """Two entries' seeds paired on the same test images: the difference of the seed means (first minus
    second) with its 95% bootstrap interval, McNemar's p for every pair of seeds, and the suite's
    ordering rule (docs/results.md): every seed of one above every seed of the other, every p below
    ``alpha``, the interval excluding 0 (``cleared``), and at least ``min_seeds`` seeds each (``seeded``)."""

    difference: float
    low: float
    high: float
    p_values: list[float]
    cleared: bool
    seeded: bool

    @property
    def ordered(self) -> bool:
        """Whether the rule orders the two."""
        return self.cleared and self.seeded


def compare(
    correct_a: Sequence[Sequence[bool]],
    correct_b: Sequence[Sequence[bool]],
    accuracy_a: Sequence[float],
    accuracy_b: Sequence[float],
    *,
    alpha: float = 0.05,
    min_seeds: int = 2,
) -> Comparison:
    """The two entries compared by the suite's rule: per seed, the per-image results and the accuracy."""
    p_values = [mcnemar(x, y)[2] for x in correct_a for y in correct_b]
    difference, low, high = paired_bootstrap(correct_a, correct_b)
    above = min(accuracy_a) > max(accuracy_b) or min(accuracy_b) > max(accuracy_a)
    cleared = above and max(p_values) < alpha and (low > 0 or high < 0)
    seeded = min(len(correct_a), len(correct_b)) >= min_seeds
    return Comparison(difference, low, high, p_values, cleared, seeded)
