"""What a run's data is, wherever it lies: images per split and a SHA-256 of the decoded images and labels
(a moved copy has the same; other data, another split does not), and how two fingerprints differ."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from sa_conv.data.batches import TensorImages

__all__ = ["data_difference", "fingerprint"]


def fingerprint(splits: Mapping[str, TensorImages]) -> dict[str, object]:
    """``{split: images, ..., "sha256": digest}`` of the splits, in their order (train, val, test)."""
    digest = hashlib.sha256()
    counts = {}
    for name, dataset in splits.items():
        counts[name] = len(dataset)
        for tensor in (dataset.images, dataset.labels):
            digest.update(tensor.contiguous().numpy().tobytes())
    return {**counts, "sha256": digest.hexdigest()}


def data_difference(stored: Mapping[str, object], now: Mapping[str, object]) -> str | None:
    """How two data fingerprints differ, in words (None: the same data)."""
    counts = [
        f"{k} {stored[k]} images (now: {now[k]})" for k in ("train", "val", "test") if stored[k] != now[k]
    ]
    if counts:
        return ", ".join(counts)
    if stored["sha256"] != now["sha256"]:
        was, now_ = str(stored["sha256"])[:12], str(now["sha256"])[:12]
        return f"the same numbers of images, other images or labels (sha256 {was}, now {now_})"
    return None
