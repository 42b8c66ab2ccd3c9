"""Shared fixtures: deterministic seeds, the offline CIFAR-10 tree when it exists, shipped weights kept
apart, and the tiny runs of ``helpers.fixtures``. Test files live in folders that mirror the package
(``tests/nn/`` tests ``sa_conv/nn/``, ``tests/programs/`` the programs of ``experiments/``: a folder named
``experiments`` here would hide that package, ``tests/`` being on the path); what they share is in
``tests/helpers/``."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import sa_conv.utils.machine as machine

pytest_plugins = ["helpers.fixtures"]

SHARED_ARCHIVE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cifar10-jpeg.tar.gz"


SHIPPED_WEIGHTS = Path(__file__).resolve().parents[1] / "weights"


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _float32_by_default() -> Iterator[None]:
    """No native bf16, CPU or GPU: ``--precision auto`` is float32 in every test on every machine, in this
    process and the runs it starts, so runs compare alike; tests of the bf16 default pretend a machine of
    their own (``cpu_with``, ``gpu_with``). Session-wide, so that the runs module- and session-scoped
    fixtures train (set up before any test's own fixtures) are float32 too on a CPU with native bf16."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SA_CONV_CPU_BF16", "emulated")
        patch.setattr(machine, "cuda_has_native_bf16", lambda: False)
        yield


@pytest.fixture(autouse=True)
def _weights_elsewhere(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Studies in tests ship and carry into a folder of their own, never the checkout's ``weights/``."""
    monkeypatch.setenv("SA_CONV_WEIGHTS", str(tmp_path_factory.mktemp("weights")))


@pytest.fixture(scope="session")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CIFAR-10 JPEG tree from ../shared/data, extracted once per session (or skip)."""
    archive = Path(os.environ.get("SA_CONV_CIFAR_ARCHIVE", SHARED_ARCHIVE))
    if not archive.is_file():
        pytest.skip(f"real CIFAR-10 archive not found at {archive}")
    root = tmp_path_factory.mktemp("cifar")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root / "cifar10-jpeg"
