"""An ImageFolder tree read safely: every real folder walked once (a symlink loop or a second way into a
folder refused by name), unreadable files and folders named as such, each image's size read from its
header and bounded before it is decoded."""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["IMG_EXTENSIONS", "MAX_FILE_BYTES", "TreeError", "class_folders", "decode_bounded", "image_files"]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # ImageFolder's
MAX_FILE_BYTES = 1 << 20  # a 32 x 32 RGB image takes at most 3 KiB uncompressed; 1 MiB is generous


class TreeError(RuntimeError):
    """The tree cannot be read as it is; the message names the file or folder and what to do."""


def _reason(err: OSError) -> str:
    """What an ``OSError`` says, named plainly (``permission denied``, ``no such file``)."""
    return "permission denied" if isinstance(err, PermissionError) else (err.strerror or type(err).__name__)


def class_folders(folder: Path) -> list[str]:
    """The class folder names of one split, sorted (ImageFolder's order)."""
    try:
        return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError as err:
        raise TreeError(f"cannot read folder {folder}: {_reason(err)}") from None


def image_files(folder: Path, classes: list[str]) -> list[tuple[str, int]]:
    """``(path, class index)`` of every image under ``folder/<class>/``, in ImageFolder's order; each real
    folder is read once: a link back into the tree (a loop, or a second way in) is refused by name."""
    seen: dict[str, str] = {}  # real folder -> the path it was first read through

    def refuse(err: OSError) -> None:
        raise TreeError(f"cannot read folder {err.filename}: {_reason(err)}")

    samples: list[tuple[str, int]] = []
    for index, name in enumerate(classes):
        top = os.path.join(folder, name)
        walked = []
        for root, dirs, files in os.walk(top, followlinks=True, onerror=refuse):
            real = os.path.realpath(root)
            if real in seen:
                raise TreeError(
                    f"{root} leads back to {seen[real]} (a folder link loop, or a second link to one "
                    "folder): its images would be read twice; remove the link"
                )
            seen[real] = root
            dirs.sort()
            walked.append((root, sorted(files)))
        for root, files in sorted(walked):
            samples += [(os.path.join(root, f), index) for f in files if f.lower().endswith(IMG_EXTENSIONS)]
    return samples


def decode_bounded(path: str, size: int) -> Tensor:
    """The RGB image at ``path`` as uint8 ``(3, size, size)``; its file size and its width and height (read
    from its header) checked before anything is decoded."""
    from PIL import Image, UnidentifiedImageError
    from torchvision.io import ImageReadMode, decode_image

    try:
        stored = os.stat(path).st_size
        if stored > MAX_FILE_BYTES:
            raise TreeError(f"image {path} takes {stored:,} bytes, over the bound of {MAX_FILE_BYTES:,}")
        with open(path, "rb") as file:
            data = file.read()
    except OSError as err:
        raise TreeError(f"cannot read image {path}: {_reason(err)}") from None
    try:
        with warnings.catch_warnings():  # PIL warns of large images; the size is refused just below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as header:  # reads the header only
                width, height = header.size
    except Image.DecompressionBombError:
        raise TreeError(
            f"image {path} has over {Image.MAX_IMAGE_PIXELS:,} pixels, expected {size}x{size}"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise TreeError(f"cannot decode image {path}: {str(err).splitlines()[0][:80]}") from None
    if (width, height) != (size, size):
        raise TreeError(f"image {path} is {width}x{height}, expected {size}x{size}")
    try:
        return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    except RuntimeError as err:
        raise TreeError(f"cannot decode image {path}: {str(err).splitlines()[0][:80]}") from None
