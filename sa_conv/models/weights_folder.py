"""Where the shipped weights live, torch-free (command lines name it in their help)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["weights_dir"]


def weights_dir() -> Path:
    """The folder of shipped weights: ``$SA_CONV_WEIGHTS``, else ``weights/`` of the checkout."""
    return Path(os.environ.get("SA_CONV_WEIGHTS") or Path(__file__).resolve().parents[2] / "weights")
