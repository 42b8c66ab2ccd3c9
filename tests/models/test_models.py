import pytest
import torch

from sa_conv.models import MODELS, SAClassifier, create_model
from sa_conv.nn.surgery import prune_model_heads


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


def linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.parametrize("name", ["quadratic", "gaussian", "learned", "learned-content"])
def test_paper_models_keep_pytorchs_default_init(name):
    torch.manual_seed(0)
    model = create_model(name, layers=2, hidden=64, heads=3, ffn=32)
    for layer in linears(model):
        bound = 1 / layer.in_features**0.5  # kaiming_uniform(a=sqrt 5) and the default bias init
        assert layer.weight.abs().max() <= bound and layer.weight.std() > 0.8 * bound / 3**0.5
        assert layer.bias.abs().max() <= bound and layer.bias.abs().max() > 0.5 * bound  # not zeros
    if name.startswith("learned"):
        enc = model.blocks[0].attention.encoding
        assert enc.row.std().item() == pytest.approx(1.0, abs=0.1)  # nn.Embedding: N(0, 1)
        assert enc.key_row.abs().max() <= 1 / 64**0.5  # default Linear(hidden, heads, bias=False)


def test_learned_relative_attention_is_not_uniform_at_init():
    """The paper's init gives the learned heads positional logits of order 1; BERT's init gives ~0."""
    spread = {}
    for init in ("paper", "bert"):
        torch.manual_seed(0)
        model = create_model("learned", layers=1, hidden=400, heads=9, init=init)
        logits = model.blocks[0].attention.encoding.logits(16, 16)
        spread[init] = logits.std().item()
    assert spread["paper"] > 0.3 and spread["bert"] < 0.05


def test_bert_init_is_a_named_option():
    torch.manual_seed(0)
    model = create_model("quadratic", layers=2, hidden=64, heads=3, ffn=32, init="bert")
    weights = torch.cat([layer.weight.flatten() for layer in linears(model)])
    assert weights.std().item() == pytest.approx(0.02, rel=0.05)
    assert all(torch.count_nonzero(layer.bias) == 0 for layer in linears(model))
    with pytest.raises(ValueError, match="init must be"):
        create_model("quadratic", init="xavier")


def test_related_systems_init_as_their_code():
    torch.manual_seed(0)
    composite = create_model("composite", layers=1, hidden=64, heads=3, ffn=32)
    enc = composite.blocks[0].attention.encoding
    assert torch.count_nonzero(enc.bias) == 0  # Chang et al.: the bias table starts at zeros
    bound = 1 / 15  # Kaiming-uniform over the 15 x 15 relative positions of window 7
    assert enc.rel.abs().max() <= bound and enc.rel.abs().max() > 0.9 * bound
    assert linears(composite)[0].weight.std().item() == pytest.approx(0.02, rel=0.1)  # BERT init
    mixed = create_model("mixed", layers=1, hidden=64, heads=4, ffn=32).blocks[0].attention
    assert mixed.key_depthwise.weight.std().item() == pytest.approx(0.02, rel=0.15)  # ConvBERT's init
    assert mixed.key_pointwise.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.count_nonzero(mixed.key_pointwise.bias) == 0


def test_mixed_attention_is_not_position_blind():
    """ConvBERT adds absolute position embeddings: on a constant image the attention still varies."""
    model = create_model("mixed", layers=1, hidden=64, heads=4, ffn=32).eval()
    assert model.position.shape == (16, 16, 64)
    with torch.no_grad():
        model.position.mul_(50)  # as after training: BERT's N(0, 0.02) init is nearly silent
    probs = model.attention_maps(torch.ones(1, 3, 32, 32))[0]  # (1, 2, 256, 256)
    assert probs.std(-1).max() > 2e-5
    blind = create_model("mixed", layers=1, hidden=64, heads=4, ffn=32, absolute_position=False).eval()
    uniform = blind.attention_maps(torch.ones(1, 3, 32, 32))[0]
    assert uniform.std(-1).max() < 1e-9  # every token alike: exactly uniform attention


def test_pruned_model_rebuilds_from_its_config():
    model = create_model("gaussian", layers=2, hidden=16, heads=4, ffn=8).eval()
    images = torch.randn(2, 3, 32, 32)
    prune_model_heads(model, {0: [1], 1: [0, 3]})
    assert model.config.layer_heads == (3, 2)
    twin = SAClassifier(model.config)
    twin.load_state_dict(model.state_dict())
    torch.testing.assert_close(twin.eval()(images), model(images))
