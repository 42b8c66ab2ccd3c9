"""Head motion and coverage: the shift profile, half-mass regions, their overlap and coverage, and how
far each head's centre moved from its initialization."""

import itertools

import pytest
import torch

from sa_conv.analysis.locality import head_regions, interior_queries, overlap_and_coverage, shift_profile
from sa_conv.analysis.maps import initial_of, layer_summary, locality_snapshot
from sa_conv.models import create_model
from sa_conv.nn.encodings import QuadraticEncoding


def one_hot_heads(shifts: list[tuple[int, int]], side: int = 8) -> torch.Tensor:
    """Quadratic heads attending (almost) only to query + shift: ``(1, heads, N, N)``."""
    enc = QuadraticEncoding(len(shifts)).set_(torch.tensor(shifts, dtype=torch.float32), 1000.0)
    return enc.logits(side, side).softmax(-1)[None]


def test_the_profile_of_a_one_pixel_head_is_its_shift_and_sums_to_one() -> None:
    probs = one_hot_heads([(1, 2), (0, -1)])
    profile = shift_profile(probs, 8, 8, queries=interior_queries(8, 8, 2))
    assert profile.shape == (2, 15, 15)
    torch.testing.assert_close(profile.sum(dim=(1, 2)), torch.ones(2, dtype=profile.dtype))
    assert profile[0, 7 + 1, 7 + 2] == pytest.approx(1.0, abs=1e-9)
    assert profile[1, 7, 7 - 1] == pytest.approx(1.0, abs=1e-9)


def test_the_profile_equals_a_literal_sum_over_queries() -> None:
    torch.manual_seed(3)
    probs = torch.rand(2, 3, 16, 16).softmax(-1)  # 4x4 grid, two images, three heads
    queries = interior_queries(4, 4, 1)
    profile = shift_profile(probs, 4, 4, queries=queries)
    literal = torch.zeros(3, 7, 7, dtype=torch.float64)
    for b, h, q in itertools.product(range(2), range(3), queries.tolist()):
        for k in range(16):
            dy, dx = k // 4 - q // 4, k % 4 - q % 4
            literal[h, dy + 3, dx + 3] += probs[b, h, q, k].double() / (2 * len(queries))
    torch.testing.assert_close(profile, literal)


def test_a_grid_of_distinct_one_pixel_heads_covers_nine_pixels_without_overlap() -> None:
    shifts = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    regions = head_regions(shift_profile(one_hot_heads(shifts), 8, 8, queries=interior_queries(8, 8, 2)))
    assert regions.sum(dim=(1, 2)).tolist() == [1] * 9
    assert overlap_and_coverage(regions) == (0.0, 9)


def test_heads_on_the_same_pixel_overlap_fully() -> None:
    regions = head_regions(shift_profile(one_hot_heads([(0, 1), (0, 1), (1, 0)]), 8, 8))
    overlap, coverage = overlap_and_coverage(regions)
    assert overlap == pytest.approx(1 / 3)  # pairs: identical (1), and two disjoint (0, 0)
    assert coverage == 2


def test_a_region_takes_the_heaviest_shifts_until_half_the_mass() -> None:
    profile = torch.tensor([[[0.3, 0.25], [0.25, 0.2]]], dtype=torch.float64)
    assert head_regions(profile).tolist() == [[[True, True], [False, False]]]  # 0.3 + 0.25 (first tie)
    profile = torch.tensor([[[0.5, 0.3], [0.1, 0.1]]], dtype=torch.float64)
    assert head_regions(profile).tolist() == [[[True, False], [False, False]]]  # exactly half: one shift
    wide = torch.full((1, 2, 2), 0.25, dtype=torch.float64)
    two = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    overlap, coverage = overlap_and_coverage(head_regions(torch.cat([wide, two])))
    assert overlap == pytest.approx(1 / 2) and coverage == 2  # {a, b} and {a}: 1 / 2


def test_displacement_is_measured_from_the_step_zero_snapshot() -> None:
    model = create_model("quadratic", layers=2, hidden=16, heads=4, ffn=16)
    images = torch.zeros(1, 3, 32, 32)
    start = locality_snapshot(model, images, 0)
    centres = model.blocks[1].attention.encoding.centres
    with torch.no_grad():
        moved = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 1.0], [-0.6, 0.8]])
        centres += moved
    later = locality_snapshot(model, images, 10)
    history = [start, later]
    assert initial_of(history) is start and initial_of(history[1:]) is None
    first, second = layer_summary(later, initial_of(history))
    assert first.displacement == [0.0] * 4 and first.median_displacement == 0.0
    assert second.displacement == pytest.approx([5.0, 0.0, 1.0, 1.0], abs=1e-4)
    assert second.median_displacement == pytest.approx(1.0)  # the lower middle of 0, 1, 1, 5
    assert layer_summary(later)[1].displacement is None  # without the start, no motion is claimed
    assert 0.0 <= second.overlap <= 1.0 and 1 <= second.coverage <= 31 * 31


def test_outward_is_the_change_of_each_centres_distance_from_the_query() -> None:
    model = create_model("quadratic", layers=1, hidden=16, heads=4, ffn=16)
    images = torch.zeros(1, 3, 32, 32)
    encoding = model.blocks[0].attention.encoding
    encoding.set_(torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 1.0], [-1.0, 0.0]]), 1.0)
    start = locality_snapshot(model, images, 0)
    encoding.set_(torch.tensor([[4.0, 4.0], [0.0, -2.5], [0.0, 2.0], [-0.6, 0.8]]), 1.0)
    (layer,) = layer_summary(locality_snapshot(model, images, 10), start)
    # 4 sqrt 2 - 1 farther; to the other side and half a pixel farther (moved 4.5); one farther; a turn at
    # the same distance (moved, not outward)
    assert layer.outward == pytest.approx([4 * 2**0.5 - 1, 0.5, 1.0, 0.0], abs=1e-4)
    assert layer.displacement == pytest.approx([5.0, 4.5, 1.0, (0.4**2 + 0.8**2) ** 0.5], abs=1e-4)
    assert layer.median_outward == pytest.approx(0.5, abs=1e-4)  # the lower middle of 0, 0.5, 1, 4.66
