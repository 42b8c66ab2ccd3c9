import math

import pytest
import torch

from sa_conv.nn.encodings import (
    GaussianEncoding,
    LearnedRelativeEncoding,
    QuadraticEncoding,
    relative_shifts,
)


def test_relative_shifts_row_major():
    d = relative_shifts(2, 3)
    assert d.shape == (6, 6, 2)
    # query (0, 1) is index 1, key (1, 0) is index 3: shift (1, -1)
    assert d[1, 3].tolist() == [1, -1]
    assert d[4, 0].tolist() == [-1, -1]


def test_quadratic_paper_init_statistics():
    torch.manual_seed(1)
    enc = QuadraticEncoding(20000)
    assert enc.centres.std().item() == pytest.approx(2.0, rel=0.03)
    assert enc.spread.mean().item() == pytest.approx(1.0, abs=1e-3)
    assert enc.spread.std().item() == pytest.approx(0.01, rel=0.05)


def test_quadratic_logit_formula():
    enc = QuadraticEncoding(2).set_(torch.tensor([[1.0, -2.0], [0.5, 0.0]]), torch.tensor([3.0, 0.25]))
    logits = enc.logits(4, 5)
    # head 0, query (1, 3) -> index 8, key (3, 0) -> index 15: delta (2, -3), diff (1, -1)
    assert logits[0, 8, 15].item() == pytest.approx(-3.0 * 2)
    # head 1, query (0, 0), key (0, 4): delta (0, 4), diff (-0.5, 4)
    assert logits[1, 0, 4].item() == pytest.approx(-0.25 * (0.25 + 16))


def test_quadratic_large_alpha_attends_one_pixel():
    enc = QuadraticEncoding(1).set_(torch.tensor([[1.0, -2.0]]), 46.0)
    probs = enc.logits(8, 8).softmax(-1)[0]  # (N, N)
    q = 3 * 8 + 4  # interior query (3, 4)
    target = 4 * 8 + 2  # (3 + 1, 4 - 2)
    assert probs[q, target].item() >= 0.999
    assert probs[q].argmax().item() == target


def test_quadratic_axis_logits_sum_to_full():
    enc = QuadraticEncoding(3)
    row, col = enc.axis_logits(4, 6)
    full = row[:, :, None, :, None] + col[:, None, :, None, :]
    torch.testing.assert_close(full.reshape(3, 24, 24), enc.logits(4, 6))


def test_gaussian_isotropic_equals_quadratic():
    quad = QuadraticEncoding(4)
    gauss = GaussianEncoding(4)
    with torch.no_grad():
        gauss.centres.copy_(quad.centres)
        gauss.scale.copy_(quad.spread[:, None, None] * torch.eye(2))
    torch.testing.assert_close(gauss.logits(5, 7), quad.logits(5, 7), rtol=1e-6, atol=1e-5)


def test_gaussian_general_formula():
    gauss = GaussianEncoding(1)
    s = torch.tensor([[1.0, 0.5], [-0.3, 2.0]])
    with torch.no_grad():
        gauss.centres.copy_(torch.tensor([[0.5, -1.0]]))
        gauss.scale.copy_(s[None])
    a = s @ s.T
    diff = torch.tensor([2.0, 1.0]) - torch.tensor([0.5, -1.0])  # query (0,0) -> key (2,1)
    expected = -0.5 * diff @ a @ diff
    assert gauss.logits(3, 3)[0, 0, 2 * 3 + 1].item() == pytest.approx(expected.item(), rel=1e-6)


def test_gaussian_degenerate_heads():
    gauss = GaussianEncoding(4)
    with torch.no_grad():
        gauss.scale.copy_(
            torch.stack(
                [
                    torch.eye(2),  # healthy
                    torch.diag(torch.tensor([1.0, 0.01])),  # condition 1e4: thin stripe
                    torch.eye(2) * 1e-3,  # largest eigenvalue 1e-6: uniform
                    torch.diag(torch.tensor([1.0, 0.1])),  # condition 100: fine
                ]
            )
        )
    assert gauss.degenerate_heads().tolist() == [False, True, True, False]


def test_learned_relative_depends_only_on_shift():
    enc = LearnedRelativeEncoding(3, 8, max_size=6)
    logits = enc.logits(5, 6)
    delta = relative_shifts(5, 6)
    by_shift: dict[tuple[int, int], torch.Tensor] = {}
    for q in range(30):
        for k in range(30):
            key = tuple(delta[q, k].tolist())
            if key in by_shift:
                torch.testing.assert_close(logits[:, q, k], by_shift[key])
            by_shift[key] = logits[:, q, k]
    # and equals the formula key_row . row[dy] + key_col . col[dx]
    dy, dx = 2, -3
    q, k = 0 * 6 + 4, 2 * 6 + 1
    expected = enc.key_row @ enc.row[dy + 5] + enc.key_col @ enc.col[dx + 5]
    torch.testing.assert_close(logits[:, q, k], expected)
    row, col = enc.axis_logits(5, 6)
    full = (row[:, :, None, :, None] + col[:, None, :, None, :]).reshape(3, 30, 30)
    torch.testing.assert_close(full, logits)


def test_learned_relative_grid_too_large():
    enc = LearnedRelativeEncoding(2, 4, max_size=4)
    with pytest.raises(ValueError, match="width=5"):
        enc.logits(4, 5)
    with pytest.raises(ValueError, match="height=9"):
        enc.axis_logits(9, 2)


@pytest.mark.parametrize("cls", [QuadraticEncoding, GaussianEncoding])
@pytest.mark.parametrize("heads", [0, -3])
def test_bad_heads(cls, heads):
    with pytest.raises(ValueError, match="heads"):
        cls(heads)


def test_set_rejects_bad_values():
    enc = QuadraticEncoding(2)
    with pytest.raises(ValueError, match="centres"):
        enc.set_(torch.zeros(3, 2), 1.0)
    with pytest.raises(ValueError, match="alpha"):
        enc.set_(torch.zeros(2, 2), -1.0)
    enc.set_(torch.zeros(2, 2), 46.0)
    torch.testing.assert_close(enc.alpha, torch.full((2,), 46.0))
    assert math.isclose(enc.logits(2, 2)[0, 0, 3].item(), -92.0, rel_tol=1e-6)
