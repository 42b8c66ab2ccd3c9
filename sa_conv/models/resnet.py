"""The CIFAR ResNet18: 3x3 stride-1 stem, no max-pool, stages of 64-128-256-512, average pool, linear."""

from __future__ import annotations

from torch import Tensor, nn

from sa_conv.models.base import Backbone
from sa_conv.models.resnet_config import ResNetConfig

__all__ = ["BasicBlock", "ResNet18", "ResNetConfig"]


class BasicBlock(nn.Module):
    """Two 3x3 convs with batch norm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(Backbone):
    """Images ``(B, 3, 32, 32)`` -> logits ``(B, classes)``."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        w = config.width
        self.stem = nn.Sequential(
            nn.Conv2d(config.in_channels, w, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(w),
            nn.ReLU(inplace=True),
        )
        layers, in_planes = [], w
        for i, n in enumerate(config.blocks):
            planes = w * 2**i
            for j in range(n):
                layers.append(BasicBlock(in_planes, planes, stride=2 if (i > 0 and j == 0) else 1))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, config.num_classes)

    def forward(self, images: Tensor) -> Tensor:
        c = self.config.in_channels
        if images.ndim != 4 or images.shape[1] != c:
            raise ValueError(f"images must be (B, {c}, H, W), got shape {tuple(images.shape)}")
        x = self.layers(self.stem(images))  # (B, 512, 4, 4)
        return self.fc(self.pool(x).flatten(1))  # (B, classes)
