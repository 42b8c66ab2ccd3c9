"""Where the tests find the checkout."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the checkout: tests/helpers/ is two folders down
