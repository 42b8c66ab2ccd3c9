"""The attention explorer: its data (quantization, statistics), its command's bad input, and the page
itself in a real browser (headless Chromium): pointed at a pixel, it draws each head where it attends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import call, one_line_error
from helpers.browser import FLAGS, chromium
from torch import nn

from experiments import explore
from sa_conv import __version__
from sa_conv.analysis.explorer import explorer_data, quantize, write_explorer
from sa_conv.data.config import DataConfig
from sa_conv.data.datamodule import CIFAR10DataModule
from sa_conv.nn.conversion import conv_to_attention
from sa_conv.training.module import ImageClassifier

SMALL = {"layers": 2, "hidden": 16, "heads": 9, "ffn": 16, "attn_dropout": 0.0}
LAYER2_SHIFT = (0, 3)  # every head of layer 2 but one attends three pixels right of the query
UNIFORM_HEAD = 4  # layer 2's head 5 attends evenly: no peak


def conv_model() -> tuple[ImageClassifier, torch.Tensor]:
    """A quadratic model whose first layer is ``conv_to_attention`` of a known 3 x 3 convolution (heads
    sharp on the 9 taps) and whose second layer attends to one shift; returns it and layer 1's taps."""
    torch.manual_seed(0)
    module = ImageClassifier(model="quadratic", model_config=SMALL).eval()
    conv = nn.Conv2d(16, 16, 3, padding=1)
    twin = conv_to_attention(conv).attention  # 9 quadratic heads, alpha 46, centres on the 3 x 3 taps
    module.backbone.blocks[0].attention = twin
    second = module.backbone.blocks[1].attention.encoding
    alpha = torch.full((9,), 46.0)
    alpha[UNIFORM_HEAD] = 1e-6  # spread evenly: no pixel above 1/256 by more than 0.05%
    second.set_(torch.tensor([LAYER2_SHIFT], dtype=torch.float32).expand(9, 2), alpha)
    return module, twin.encoding.centres.round().long()


def test_quantization_is_exact_to_half_a_step():
    probs = torch.rand(2, 3, 5, 7).softmax(-1)
    codes, scale = quantize(probs)
    assert codes.dtype == torch.uint8 and codes.amax(-1).eq(255).all()
    restored = codes.float() / 255 * scale[..., None]
    assert (restored - probs).abs().max() <= scale.max() / 255 / 2 + 1e-7


def test_positional_maps_are_stored_once_and_content_maps_per_image():
    data = CIFAR10DataModule(DataConfig(), source="synthetic", synthetic_size=64)
    images, _ = data.evaluation_images(3, normalized=False)
    for model, per_image in (("quadratic", False), ("learned-content", True)):
        module = ImageClassifier(model=model, model_config=SMALL)
        page = explorer_data(module.backbone, images, data.normalize(images), meta={"model": model})
        assert [layer["per_image"] for layer in page["layers"]] == [per_image, per_image]
        assert page["n_images"] == 3 and len(page["layers"][0]["mean_distance"]) == 9
        assert ("centres" in page["layers"][0]) == (model == "quadratic")


def write_checkpoint(path: Path, module: ImageClassifier) -> Path:
    torch.save(
        {
            "hyper_parameters": dict(module.hparams),
            "state_dict": module.state_dict(),
            "sa_conv_version": __version__,
            "global_step": 7,
        },
        path,
    )
    return path


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    module, _ = conv_model()
    good = write_checkpoint(tmp_path / "good.ckpt", module)
    resnet = write_checkpoint(
        tmp_path / "resnet.ckpt", ImageClassifier(model="resnet18", model_config={"width": 4})
    )
    (tmp_path / "corrupt.ckpt").write_bytes(b"not a checkpoint")
    (tmp_path / "folder").mkdir()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    cases = [
        ([str(tmp_path / "missing.ckpt")], "does not exist"),
        ([str(tmp_path / "corrupt.ckpt")], "is not a readable checkpoint"),
        ([str(resnet), "--out", str(tmp_path / "r.html")], "resnet18 checkpoint: it has no attention"),
        ([str(good), "--images", "0"], "must be a positive integer"),
        ([str(good), "--out", str(tmp_path / "folder")], "is a folder"),
        ([str(good), "--out", str(blocked / "page.html")], "error:"),
    ]
    for argv, match in cases:
        code, _, err = call(explore, argv, capsys)
        assert match in one_line_error(code, err), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-file",
        "corrupt.ckpt",
        "folder",
        "good.ckpt",
        "resnet.ckpt",
    ]
    assert list((tmp_path / "folder").iterdir()) == []
    argv = [str(good), "--out", str(tmp_path / "page.html"), "--images", "2"]
    code, out, _ = call(explore, argv, capsys)
    assert code == 0 and (tmp_path / "page.html").stat().st_size > 1000 and "MiB" in out


@pytest.mark.slow
def test_the_page_draws_each_head_at_its_tap_from_the_pointed_query(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser_path = chromium()
    module, taps = conv_model()
    data = CIFAR10DataModule(DataConfig(), source="synthetic", synthetic_size=64)
    images, _ = data.evaluation_images(2, normalized=False)
    normalized = data.normalize(images)
    page_path = write_explorer(
        tmp_path / "page.html", explorer_data(module.backbone, images, normalized, meta={"model": "test"})
    )
    maps = [m[0] for m in module.backbone.attention_maps(normalized)]  # positional: (heads, N, N)
    row, col = 7, 4
    query = row * 16 + col
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-rendered]", state="attached")
        box = page.locator("#main").bounding_box()
        page.mouse.move(
            box["x"] + (col + 0.5) / 16 * box["width"], box["y"] + (row + 0.5) / 16 * box["height"]
        )
        for layer, expected in ((0, taps.tolist()), (1, [list(LAYER2_SHIFT)] * 9)):
            page.select_option("#layer", str(layer))
            page.wait_for_function(f"document.body.dataset.rendered === '{layer},0,{row},{col}'")
            cells = page.locator(".cell")
            shown = [
                [int(cells.nth(h).get_attribute(a)) for a in ("data-peak-dy", "data-peak-dx")]
                for h in range(9)
            ]
            uniform = [cells.nth(h).get_attribute("data-uniform") == "true" for h in range(9)]
            assert uniform == [layer == 1 and h == UNIFORM_HEAD for h in range(9)], (layer, uniform)
            if layer == 1:  # a uniform head's argmax is noise: not shown as a peak
                assert "no peak: uniform" in cells.nth(UNIFORM_HEAD).inner_text()
                shown.pop(UNIFORM_HEAD), expected.pop(UNIFORM_HEAD)
            assert shown == expected, (layer, shown)
            for h in range(9):
                drawn = torch.tensor(page.evaluate(f"explorer.values({h})"))
                want = maps[layer][h, query].float()
                assert (drawn - want).abs().max() <= want.max() / 255 / 2 + 1e-6, (layer, h)
        page.keyboard.press("Tab")  # keyboard: the image takes the focus, arrows move the query
        page.locator("#main").focus()
        page.keyboard.press("ArrowUp")
        page.wait_for_function(f"document.body.dataset.rendered === '1,0,{row - 1},{col}'")
        browser.close()
    assert errors == []
