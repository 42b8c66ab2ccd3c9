"""The tiny runs tests share, trained once per session (the tests read them, and edit only copies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.runs import QUICK, TEN_STEPS, train


@pytest.fixture(scope="session")
def quick_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The last checkpoint of a one-step synthetic run (``QUICK``)."""
    return train(tmp_path_factory.mktemp("runs"), "quadratic", *QUICK) / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="session")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run that resumed ones must equal: 3 epochs of 10 steps (``TEN_STEPS``)."""
    return train(tmp_path_factory.mktemp("straight"), "quadratic", *TEN_STEPS, "--epochs", "3")


@pytest.fixture(scope="session")
def straight_bf16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``straight`` in the project's bf16 (the default where bf16 is native, a GPU's included)."""
    flags = (*TEN_STEPS, "--epochs", "3", "--precision", "bf16-mixed")
    return train(tmp_path_factory.mktemp("straight-bf16"), "quadratic", *flags)
