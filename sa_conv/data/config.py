"""How a run uses its data (``DataConfig``): batches, the split protocol, augmentation.

No Lightning here: the run config and the command lines import it without paying for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sa_conv.utils.config import is_count, option
from sa_conv.utils.quote import quoted

__all__ = ["DataConfig", "Protocol"]

Protocol = Literal["clean", "paper"]
MAX_IMAGES = 10**8  # CIFAR-10 has 60,000


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """How a run uses its data: batches, the split protocol, augmentation (what decides its result)."""

    batch_size: int = option(100, "training batch size")
    protocol: Protocol = option("clean", "clean: hold out val_size images, test once; paper: test each epoch")
    val_size: int = option(5000, "clean protocol: training images held out for validation")
    train_subset: int | None = option(None, "train on the first N images of the training split")
    augment: bool = option(True, "random crop 32 (padding 4) and horizontal flip")

    def __post_init__(self) -> None:
        checks = [
            ("batch_size", is_count(self.batch_size, MAX_IMAGES), f"an integer from 1 to {MAX_IMAGES:,}"),
            ("protocol", self.protocol in ("clean", "paper"), "clean or paper"),
            (
                "val_size",
                self.val_size == 0 or is_count(self.val_size, MAX_IMAGES),
                f"from 0 to {MAX_IMAGES:,}",
            ),
            (
                "train_subset",
                self.train_subset is None or is_count(self.train_subset, MAX_IMAGES),
                f"an integer from 1 to {MAX_IMAGES:,}",
            ),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {quoted(getattr(self, name))}")
