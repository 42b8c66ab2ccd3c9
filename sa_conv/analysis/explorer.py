"""The attention explorer: one self-contained HTML page per model (no server, no network).

Pick an image, point at a pixel, see every head of a layer attend from there. The page holds its data
inline: the images (raw RGB), every layer's attention maps quantized to one byte per probability (each
query's row scaled to its own maximum, kept in float32, so a value is exact to half a step of 1/255 of
that maximum) and deflated, decompressed in the page by the browser's ``DecompressionStream``. A page over
its budget (content attention of a deep model on many images) is quantized to fewer levels (127, 63, 31):
each layer states its step.
Positional attention is stored once (it does not depend on the image); content attention per image.
Per head: its mean attention distance and whether it is sharp (``analysis.locality``), and for Gaussian
heads their centres and inverse covariances (the page draws the 50% / 90% circles).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from torch import Tensor

from sa_conv.analysis.locality import locality
from sa_conv.analysis.maps import attention_maps_of, locality_queries
from sa_conv.models import Backbone
from sa_conv.nn.encodings import PositionalEncoding
from sa_conv.utils.files import write_text

__all__ = ["explorer_data", "explorer_html", "quantize", "write_explorer"]

LEVELS = (255, 127, 63, 31)  # quantization levels, tried in turn until the page fits its budget


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def quantize(probs: Tensor, levels: int = 255) -> tuple[Tensor, Tensor]:
    """``(..., N)`` probabilities -> uint8 codes and the float32 scale of each row:
    p ~ code / levels * scale, exact to half a step."""
    scale = probs.amax(-1).float().clamp_min(torch.finfo(torch.float32).tiny)  # (...,)
    codes = (probs.float() / scale[..., None] * levels).round().clamp(0, levels).to(torch.uint8)
    return codes, scale


def _maps(probs: Tensor, levels: int) -> dict[str, int | str]:
    """A layer's maps quantized to ``levels`` steps of their row maxima, compressed, base64 text."""
    codes, scale = quantize(probs.detach().cpu(), levels)
    return {
        "levels": levels,
        "maps": _b64(zlib.compress(codes.numpy().tobytes(), 9)),
        "scales": _b64(scale.numpy().astype("<f4").tobytes()),
    }


def _layer(probs: Tensor, encoding: PositionalEncoding | None, side: int) -> dict[str, object]:
    """One layer's page data: quantized maps ``(I, heads, N, N)`` (I = 1 when positional), statistics."""
    m = locality(probs, side, side, queries=locality_queries(side))
    layer: dict[str, object] = {
        "heads": probs.shape[1],
        "per_image": probs.shape[0] > 1,
        **_maps(probs, LEVELS[0]),
        "mean_distance": [round(float(v), 3) for v in m.mean_distance],
        "sharp": [bool(v) for v in m.sharp],
    }
    gaussians = encoding.head_gaussians() if encoding is not None else None
    if gaussians is not None:
        layer["centres"] = gaussians[0].float().cpu().tolist()
        layer["inverse_covariance"] = gaussians[1].float().cpu().tolist()
    return layer


def explorer_data(
    backbone: Backbone,
    images: Tensor,
    normalized: Tensor,
    *,
    meta: Mapping[str, object],
    budget_mb: float = 18.0,
) -> dict[str, object]:
    """The page's data: ``images`` uint8 ``(I, 3, 32, 32)`` as shown, ``normalized`` as the model takes
    them, ``meta`` for the header (model, config, step, accuracy, where the images come from). The maps
    take at most ``budget_mb`` of text where fewer quantization levels can bring them there."""
    if not backbone.has_attention:
        raise ValueError(f"{type(backbone).__name__} has no attention layers to explore")
    side = backbone.config.grid
    maps = attention_maps_of(backbone, normalized)  # per layer (I|1, heads, N, N)
    layers = [_layer(m, e, side) for m, e in zip(maps, backbone.encodings(), strict=True)]
    sizes = [len(str(layer["maps"])) for layer in layers]  # characters of each layer's maps
    for levels in LEVELS[1:]:  # over budget: coarser steps, layer by layer, largest first
        if sum(sizes) <= budget_mb * 2**20:
            break
        for i in sorted(range(len(layers)), key=lambda i: -sizes[i]):
            coarser = _maps(maps[i], levels)
            layers[i].update(coarser)
            sizes[i] = len(str(coarser["maps"]))
    pixels = images.to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu()  # (I, 32, 32, 3)
    viridis = (colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255).round().astype(int)
    return {
        "meta": meta,
        "grid": side,
        "image_size": images.shape[-1],
        "images": _b64(pixels.numpy().tobytes()),
        "n_images": images.shape[0],
        "layers": layers,
        "colormap": viridis.tolist(),
    }


def explorer_html(data: dict[str, object]) -> str:
    """The page: the template with the data inlined (``</`` escaped so no string ends the script)."""
    template = resources.files("sa_conv.analysis").joinpath("explorer.html").read_text()
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return template.replace("/*DATA*/null", payload, 1)


def write_explorer(path: str | Path, data: dict[str, object]) -> Path:
    """Write the page atomically (a folder or an unwritable path: ``ValueError`` / ``OSError``)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder: name the page's file, e.g. {path / 'explorer.html'}")
    write_text(path, explorer_html(data))
    return path
