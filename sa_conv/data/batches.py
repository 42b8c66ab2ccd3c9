"""Batches: the images held in memory, fetched a whole batch at a time; the sampler and loader whose
position resumes exactly (and is shared fairly between DDP ranks)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["ResumableBatchSampler", "ResumableDataLoader", "TensorImages", "resumable_loader", "whole_batch"]


class TensorImages(Dataset[tuple[Tensor, Tensor]]):
    """uint8 images ``(N, 3, H, W)`` and labels ``(N,)``, fetched a whole batch at a time."""

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.images[index], self.labels[index]

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        idx = torch.as_tensor(indices)
        return self.images[idx], self.labels[idx]


class ResumableBatchSampler(Sampler[list[int]]):
    """Batches of indices: a permutation drawn from (seed, epoch), this rank's share of it, resumable.

    Kept instead of ``DistributedSampler``: that one pads every rank's share with repeated images, so a
    DDP test pass would count some test images twice; and it cannot restart mid-epoch.

    ``consumed`` counts the batches that training actually used (the data module advances it when a
    batch reaches the device, not when the loader prefetches it), so a checkpoint taken mid-epoch
    resumes exactly at the next unseen batch. Each rank of a distributed run takes every
    ``world_size``-th index: no padding, no duplicates.
    """

    def __init__(
        self, n: int, batch_size: int, *, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1
    ) -> None:
        self.n, self.batch_size, self.shuffle, self.seed = n, batch_size, shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.epoch, self.consumed = 0, 0
        self.sampler = self  # Lightning calls ``loader.batch_sampler.sampler.set_epoch`` each epoch

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at each epoch start; a new epoch starts from its first batch."""
        if epoch != self.epoch:
            self.epoch, self.consumed = epoch, 0

    def _batches(self) -> list[Tensor]:
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.n)
        mine = order[self.rank :: self.world_size]
        if self.shuffle and len(mine) < self._per_rank:  # training: every rank takes as many steps (DDP
            mine = torch.cat([mine, mine[: self._per_rank - len(mine)]])  # syncs every step): repeat one
        return list(mine.split(self.batch_size))

    @property
    def _per_rank(self) -> int:
        """The most indices any rank has (rank 0's)."""
        return math.ceil(self.n / self.world_size)

    def __iter__(self) -> Iterator[list[int]]:
        # a generator: the order is drawn at the first batch, after Lightning's set_epoch (Lightning may
        # create the iterator before, e.g. when it resumes from an epoch-end checkpoint)
        if self.consumed >= len(self):  # the last epoch ran to its end: this is the next one
            self.epoch, self.consumed = self.epoch + 1, 0
        yield from (batch.tolist() for batch in self._batches()[self.consumed :])

    def __len__(self) -> int:
        mine = self._per_rank if self.shuffle else len(range(self.rank, self.n, self.world_size))
        return math.ceil(mine / self.batch_size)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.consumed = state["epoch"], state["consumed"]


class ResumableDataLoader(DataLoader[tuple[Tensor, Tensor]]):
    """A DataLoader whose position Lightning saves in checkpoints (``state_dict``/``load_state_dict``)."""

    @property
    def position(self) -> ResumableBatchSampler:
        """The batch sampler, which keeps the loader's position."""
        sampler = self.batch_sampler
        assert isinstance(sampler, ResumableBatchSampler), "a resumable loader has a resumable sampler"
        return sampler

    def state_dict(self) -> dict[str, int]:
        return self.position.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position.load_state_dict(state)


def whole_batch(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """collate_fn for ``TensorImages.__getitems__``: the batch is already stacked."""
    return batch


def resumable_loader(
    dataset: TensorImages,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    pin_memory: bool = False,
) -> ResumableDataLoader:
    """A loader of whole batches of this rank's share, whose position resumes exactly.

    It has a generator of its own: creating an iterator would otherwise draw from the global RNG, between
    the epoch-end checkpoint and the next step, and a resumed run's dropout would be one draw behind.
    ``pin_memory`` (on CUDA): the copy to the device is then asynchronous (no host sync per step).
    """
    sampler = ResumableBatchSampler(
        len(dataset), batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size
    )
    return ResumableDataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=whole_batch,  # type: ignore[arg-type]  # the dataset yields whole batches
        generator=torch.Generator(),
        pin_memory=pin_memory,
    )
