"""The CIFAR ResNet18's configuration (``ResNetConfig``): torch-free, so that command lines and configs
read it before the heavy imports; the model itself is ``sa_conv.models.resnet``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sa_conv.utils.config import is_count, option
from sa_conv.utils.quote import quoted

__all__ = ["ResNetConfig"]


@dataclass(frozen=True, kw_only=True)
class ResNetConfig:
    """Configuration of the CIFAR ResNet18."""

    num_classes: int = option(10, "classes of the classifier")
    in_channels: int = option(3, "channels of the input images")
    width: int = option(64, "channels of the first stage; later stages double")
    blocks: tuple[int, ...] = option((2, 2, 2, 2), "basic blocks of each stage")

    def __post_init__(self) -> None:
        for name, most in (("num_classes", 100_000), ("in_channels", 64), ("width", 4096)):
            value = getattr(self, name)
            if not is_count(value, most):
                raise ValueError(f"{name} must be an integer from 1 to {most:,}, got {quoted(value)}")
        if not 1 <= len(self.blocks) <= 8 or not all(is_count(b, 64) for b in self.blocks):
            raise ValueError(
                f"blocks must be 1 to 8 stages of 1 to 64 blocks each, got {quoted(self.blocks)}"
            )

    def to_dict(self) -> dict[str, object]:
        """Plain dict (for hyper-parameters and JSON)."""
        return asdict(self)
