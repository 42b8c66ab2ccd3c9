import pytest
import torch

from sa_conv.models import MODELS, SAClassifier, create_model


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("quadratic", 12.09e6),
        ("learned", 12.28e6),
        ("learned-content", 29.6e6),
        ("resnet18", 11.17e6),
    ],
)
def test_paper_parameter_counts(name, expected):
    assert abs(n_params(create_model(name)) - expected) / expected < 0.005


def test_paper_architecture_details():
    model = create_model("quadratic")
    assert isinstance(model, SAClassifier)
    assert len(model.blocks) == 6
    block = model.blocks[0]
    assert block.attention.heads == 9 and block.attention.dim == 400
    assert block.attention.proj.in_features == 3600 and block.attention.proj.out_features == 400
    assert block.attn_dense.in_features == 400 and block.fc1.out_features == 512
    assert block.attn_norm.eps == 1e-12 and block.attention.attn_dropout.p == 0.1
    assert model.embed.in_features == 12 and model.head.in_features == 400
    assert n_params(create_model("quadratic", heads=16)) > n_params(model)


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_shapes_and_attention_maps(name):
    overrides = {} if name == "resnet18" else {"layers": 2, "hidden": 16, "heads": 4, "ffn": 32}
    model = create_model(name, **overrides).eval()
    images = torch.randn(2, 3, 32, 32)
    assert model(images).shape == (2, 10)
    if isinstance(model, SAClassifier):
        maps = model.attention_maps(images)
        assert len(maps) == 2
        b = 2 if model.config.content else 1
        heads = 2 if model.config.attention == "mixed" else 4  # mixed: half the heads are convolutions
        assert all(m.shape == (b, heads, 256, 256) for m in maps)
        torch.testing.assert_close(maps[0].sum(-1), torch.ones(b, heads, 256))


def test_pixel_concatenation_is_invertible_pooling():
    model = create_model("quadratic", layers=1, hidden=16, heads=2, ffn=8)
    with torch.no_grad():
        model.embed.weight.copy_(torch.eye(16, 12))
        model.embed.bias.zero_()
    images = torch.randn(1, 3, 32, 32)
    tokens = model.tokens(images)  # (1, 16, 16, 16)
    # token (i, j) holds the 2x2 patch of pixels (2i..2i+1, 2j..2j+1) of every channel
    patch = images[0, :, 4:6, 10:12].reshape(3, 4).flatten()
    torch.testing.assert_close(tokens[0, 2, 5, :12], patch)


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="valid models: resnet18, quadratic"):
        create_model("vit")


def test_unknown_override():
    with pytest.raises(ValueError, match="no option heads"):
        create_model("resnet18", heads=4)


@pytest.mark.parametrize("heads", [0, -2])
def test_bad_heads(heads):
    with pytest.raises(ValueError, match="heads"):
        create_model("quadratic", heads=heads)


def test_bad_image_shape():
    model = create_model("quadratic", layers=1, hidden=16, heads=2, ffn=8)
    with pytest.raises(ValueError, match="images"):
        model(torch.randn(2, 1, 32, 32))
    with pytest.raises(ValueError, match="images"):
        model(torch.randn(3, 32, 32))


@pytest.mark.parametrize("name", list(MODELS))
def test_every_parameter_gets_a_gradient(name):
    overrides = {"width": 8} if name == "resnet18" else {"layers": 2, "hidden": 16, "heads": 4, "ffn": 32}
    model = create_model(name, **overrides)
    model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
