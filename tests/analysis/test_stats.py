"""The paired test and the bootstrap behind every ordering claimed between models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sa_conv.analysis.statistics import accuracy_stderr, difference_stderr, mcnemar, paired_bootstrap


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_images():
    a = [True] * 10 + [False] * 2 + [True] * 50
    b = [False] * 10 + [True] * 2 + [True] * 50
    only_a, only_b, p = mcnemar(a, b)
    assert (only_a, only_b) == (10, 2)
    assert p == pytest.approx(2 * sum(math.comb(12, i) for i in range(3)) / 2**12)  # 0.0386
    assert mcnemar(a, a)[2] == 1.0
    with pytest.raises(ValueError, match="tested on 3 and 2"):
        mcnemar([True] * 3, [True] * 2)


def test_the_bootstrap_interval_covers_a_real_difference_and_straddles_none():
    rng = np.random.default_rng(0)
    better = [rng.random(2000) < 0.75 for _ in range(2)]
    worse = [rng.random(2000) < 0.70 for _ in range(2)]
    diff, low, high = paired_bootstrap(better, worse, resamples=500)
    assert diff == pytest.approx(np.mean(better) - np.mean(worse))
    assert 0 < low < diff < high
    level = [rng.random(2000) < 0.72 for _ in range(4)]  # two "models" of the same accuracy
    _, low, high = paired_bootstrap(level[:2], level[2:], resamples=500)
    assert low < 0 < high
    _, low, high = paired_bootstrap(level[:1], [level[0].copy()], resamples=50)  # one run against itself
    assert low == high == 0.0


def test_standard_errors():
    assert accuracy_stderr(0.5, 100) == pytest.approx(0.05)
    assert difference_stderr(0.5, 0.5, 100) == pytest.approx(0.05 * math.sqrt(2))
