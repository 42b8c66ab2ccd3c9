"""An image tree is read once per real folder and bounded before decoding: a folder link loop or a second
link into one folder refused by name (a legitimate linked class folder read as usual), unreadable files
and folders named as such, an image's size read from its header and refused before it is decoded."""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path

import pytest
import torch
import torchvision.io
from helpers import BATCHES_OF_41, call, jpeg_tree, one_line_error
from PIL import Image

import sa_conv.data.tree as tree
from experiments import run
from sa_conv.data.sources import DataError, load_image_folder


def refused(root: Path) -> str:
    """The one message loading ``root``'s training split fails with."""
    with pytest.raises(DataError) as err:
        load_image_folder(root, "train")
    return str(err.value)


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("train/cat/loop", ".."),  # back to the split: every class again
        ("train/cat/loop", "."),  # to itself
        ("train/dog/deep/er", "../.."),  # two levels down, back to its class
        ("train/truck/again", "../cat"),  # a second way into another class's folder
    ],
)
def test_a_link_back_into_the_tree_is_refused_by_name(tmp_path, link, target):
    root = jpeg_tree(tmp_path / "data")
    path = root / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target, target_is_directory=True)
    message = refused(root)
    assert "leads back to" in message and "remove the link" in message
    assert str(root / "train") in message and "\n" not in message


def test_a_loop_through_the_command_is_one_line_and_leaves_no_run(tmp_path, capsys):
    root = jpeg_tree(tmp_path / "data")
    (root / "train/cat/loop").symlink_to("..", target_is_directory=True)
    argv = ["quadratic", *BATCHES_OF_41, "--data-dir", str(root), "--output-dir", str(tmp_path / "o")]
    code, _, err = call(run, argv, capsys)
    assert "train/cat/loop" in one_line_error(code, err)
    assert not (tmp_path / "o").exists()


def test_a_linked_class_folder_is_read_once_as_usual(tmp_path):
    root = jpeg_tree(tmp_path / "data")
    elsewhere = tmp_path / "elsewhere"
    (root / "train/cat").rename(elsewhere)
    (root / "train/cat").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "more").mkdir()
    (elsewhere / "more/extra.jpg").write_bytes((elsewhere / "0.jpg").read_bytes())
    images, labels = load_image_folder(root, "train")
    assert len(images) == 31 and int((labels == 3).sum()) == 4  # three cats and the one below them


@pytest.mark.parametrize("what", ["file", "folder"])
def test_an_unreadable_file_or_folder_is_named_permission_denied(tmp_path, monkeypatch, what):
    root = jpeg_tree(tmp_path / "data")
    denied = root / "train/frog" / ("1.jpg" if what == "file" else "")
    real_open, real_scandir = open, os.scandir

    def guarded_open(path, *args, **kwargs):
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    def guarded_scandir(path="."):  # os.walk lists folders through os.scandir
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("builtins.open", guarded_open)
    monkeypatch.setattr(os, "scandir", guarded_scandir)
    message = refused(root)
    assert "permission denied" in message and "frog" in message


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height`` (a few hundred bytes; nothing decodes it here)."""
    small = io.BytesIO()
    Image.new("RGB", (1, 1)).save(small, format="PNG")
    data = bytearray(small.getvalue())
    data[16:24] = width.to_bytes(4, "big") + height.to_bytes(4, "big")  # IHDR's width and height
    data[29:33] = zlib.crc32(data[12:29]).to_bytes(4, "big")  # the chunk's checksum, over type and data
    return bytes(data)


@pytest.mark.parametrize("side", [33, 4096, 30_000, 2**31 - 1])
def test_an_image_is_refused_by_its_header_before_it_is_decoded(tmp_path, monkeypatch, side):
    root = jpeg_tree(tmp_path / "data")
    (root / "train/ship/1.jpg").unlink()
    (root / "train/ship/big.png").write_bytes(png_header_only(side, side))
    decoded: list[int] = []
    original = torchvision.io.decode_image  # imported where it is used: patched at its source

    def counting(data: torch.Tensor, *args, **kwargs):
        decoded.append(data.numel())
        return original(data, *args, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_image", counting)
    message = refused(root)
    assert "big.png" in message and "expected 32x32" in message and len(message) < 300
    assert len(decoded) < 30  # the images before it, never the big one (its decode would be side^2 x 3)
    assert all(n < 10_000 for n in decoded)


def test_a_file_too_large_for_an_image_is_refused_unread(tmp_path, monkeypatch):
    root = jpeg_tree(tmp_path / "data")
    big = root / "train/bird/2.jpg"
    with big.open("r+b") as file:
        file.truncate(tree.MAX_FILE_BYTES + 1)  # sparse: nothing written
    message = refused(root)
    assert "bird/2.jpg" in message and f"{tree.MAX_FILE_BYTES:,}" in message
