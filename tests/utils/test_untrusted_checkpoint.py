"""No checkpoint runs code: a file whose unpickling would act is refused unread by every command that
reads checkpoints, and checkpoints written before the RNG state was plain data still open."""

import os

import numpy as np
import pytest
import torch
from helpers import QUICK, call, one_line_error

from experiments import convert, evaluate, explore, figures, prune, run
from sa_conv.training.checkpoints import set_rng_states
from sa_conv.utils.safe_load import UnsafeCheckpointError, read_checkpoint


class _Acts:
    """Unpickling this makes the folder ``path``: any code could run in its place."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.makedirs, (self.path,))


@pytest.fixture
def hostile(quick_checkpoint, tmp_path):
    """A real checkpoint with one more entry whose unpickling acts; the path it would create."""
    ckpt = torch.load(quick_checkpoint, weights_only=True)
    marker = tmp_path / "code-ran"
    ckpt["extra"] = _Acts(str(marker))
    path = tmp_path / "hostile" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save(ckpt, path)
    return path, marker


def test_the_hostile_file_does_act_when_loaded_unsafely(hostile) -> None:
    """The fixture is what it claims: pickle's default load runs its code."""
    path, marker = hostile
    torch.load(path, weights_only=False)
    assert marker.is_dir()


@pytest.mark.parametrize(
    "command",
    ["evaluate", "figures", "explore", "convert", "prune", "run --resume"],
)
def test_every_reader_refuses_a_checkpoint_that_would_run_code(hostile, tmp_path, capsys, command) -> None:
    path, marker = hostile
    out = tmp_path / "out"
    module, argv = {
        "evaluate": (evaluate, [str(path), "--synthetic"]),
        "figures": (figures, [str(path), "--out", str(out)]),
        "explore": (explore, [str(path), "--synthetic", "--out", str(out / "page.html")]),
        "convert": (convert, ["--checkpoint", str(path), "--to-conv"]),
        "prune": (prune, [str(path), "--synthetic", "--epochs", "1"]),
        "run --resume": (run, ["quadratic", *QUICK, "--resume", str(path), "--output-dir", str(out)]),
    }[command]
    line = one_line_error(*call(module, argv, capsys)[::2])
    assert "may be unsafe" in line and "os.makedirs" in line and str(path) in line
    assert not marker.exists()  # nothing ran
    assert not out.exists()  # and nothing was written


def test_read_checkpoint_raises_the_unsafe_error(hostile) -> None:
    path, marker = hostile
    with pytest.raises(UnsafeCheckpointError, match="may be unsafe"):
        read_checkpoint(path)
    assert not marker.exists()


def test_the_rng_state_is_plain_data_and_older_checkpoints_still_open(quick_checkpoint, tmp_path) -> None:
    ckpt = read_checkpoint(quick_checkpoint)
    name, keys, pos, has_gauss, cached = ckpt["callbacks"]["ResumableRNG"]["rng"]["numpy"]
    assert isinstance(keys, torch.Tensor) and keys.dtype == torch.int64 and keys.shape == (624,)
    # as written before: numpy's own state, an ndarray of uint32
    older = dict(ckpt)
    legacy = (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
    rng = ckpt["callbacks"]["ResumableRNG"]["rng"]
    older["callbacks"] = {"ResumableRNG": {"rng": {**rng, "numpy": legacy}}}
    path = tmp_path / "older.ckpt"
    torch.save(older, path)
    reread = read_checkpoint(path)["callbacks"]["ResumableRNG"]["rng"]
    assert isinstance(reread["numpy"][1], np.ndarray)
    for state in (reread, ckpt["callbacks"]["ResumableRNG"]["rng"]):  # both restore the same stream
        set_rng_states(state)
        drawn = np.random.rand(3)
        set_rng_states(state)
        assert np.array_equal(np.random.rand(3), drawn)
    set_rng_states(reread)
    a = np.random.rand(5)
    set_rng_states(ckpt["callbacks"]["ResumableRNG"]["rng"])
    assert np.array_equal(np.random.rand(5), a)
