"""Bad data is named in one line before any run folder is made: a corrupt or wrong-size image, a
``--data-dir`` that is not a data tree (never downloaded into), a download without a network."""

import urllib.error
from pathlib import Path

import pytest
import torch
from helpers import BATCHES_OF_41, call, jpeg_tree, one_line_error

from experiments import run
from experiments.cli import data as cli_data


def test_corrupt_and_wrong_size_images_are_named(tmp_path, capsys):
    root = jpeg_tree(tmp_path / "data")
    argv = ["quadratic", *BATCHES_OF_41, "--data-dir", str(root), "--output-dir", str(tmp_path / "o")]
    (root / "train" / "frog" / "1.jpg").write_bytes(b"\xff\xd8 broken")
    code, _, err = call(run, argv, capsys)
    assert "frog/1.jpg" in one_line_error(code, err)
    assert not (tmp_path / "o").exists()  # nothing written: no empty run folder left behind
    from torchvision.io import encode_jpeg

    (root / "train" / "frog" / "1.jpg").write_bytes(
        encode_jpeg(torch.zeros(3, 64, 64, dtype=torch.uint8)).numpy().tobytes()
    )
    code, _, err = call(run, argv, capsys)
    assert "frog/1.jpg is 64x64, expected 32x32" in one_line_error(code, err)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ("split", "it is one split of an ImageFolder tree; pass its parent folder"),  # DIR/train
        ("test-only", "has no 'train' folder"),
        ("other", "refusing to download CIFAR-10 into it"),
    ],
)
def test_a_mistaken_data_dir_never_downloads_into_it(tmp_path, capsys, layout, match, monkeypatch):
    from torchvision.datasets import CIFAR10

    monkeypatch.setattr(CIFAR10, "download", lambda self: pytest.fail("tried to download"))
    root = jpeg_tree(tmp_path / "data")
    data_dir = {"split": root / "train", "test-only": root, "other": tmp_path / "notes"}[layout]
    if layout == "test-only":
        import shutil

        shutil.rmtree(root / "train")
    if layout == "other":
        data_dir.mkdir()
        (data_dir / "readme.txt").write_text("my notes")
    argv = ["quadratic", *BATCHES_OF_41, "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "o")]
    code, _, err = call(run, argv, capsys)
    assert match in one_line_error(code, err)


def test_no_network_for_the_download(tmp_path, capsys, monkeypatch):
    from torchvision.datasets import CIFAR10

    def offline(self):
        Path(self.root).mkdir(parents=True)  # as torchvision does before it connects
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    monkeypatch.setattr(cli_data, "DEFAULT_DATA_DIR", tmp_path / "data" / "cifar10")
    code, _, err = call(run, ["quadratic", *BATCHES_OF_41, "--output-dir", str(tmp_path / "o")], capsys)
    line = one_line_error(code, err)
    assert "could not download CIFAR-10" in line and "--data-dir" in line
    assert sorted(tmp_path.iterdir()) == []  # neither an empty download folder nor an empty run folder
