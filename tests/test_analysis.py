"""Tests of posenc.analysis: the per-pair RoPE logit sums to the RoPE logit; the two rules on hand-made cases."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import apply_rope, rope_inv_freq
from posenc.analysis import alias_distance, carrying_pairs, rope_pair_logits


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim", [2, 8, 16])
def test_pair_logits_sum_to_the_rope_logit_for_every_query_and_key_position(pairing, head_dim):
    generator = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 1, 1, head_dim, generator=generator, dtype=torch.float64)  # one query vector
    k = torch.randn(1, 1, 1, head_dim, generator=generator, dtype=torch.float64)  # one key vector
    inv_freq, _ = rope_inv_freq(head_dim, base=100.0)
    s = 40
    positions = torch.arange(s)
    q_rot = apply_rope(q.expand(1, 1, s, head_dim), positions, base=100.0, pairing=pairing)[0, 0]  # (s, d)
    k_rot = apply_rope(k.expand(1, 1, s, head_dim), positions, base=100.0, pairing=pairing)[0, 0]  # (s, d)
    logits = q_rot @ k_rot.T  # (m, n): <R_m q, R_n k>
    r = positions[None, :] - positions[:, None]  # (m, n): key minus query
    parts = rope_pair_logits(q[0, 0, 0], k[0, 0, 0], r, inv_freq, pairing=pairing)  # (m, n, p)
    assert parts.shape == (s, s, head_dim // 2)
    torch.testing.assert_close(parts.sum(-1), logits, rtol=0, atol=1e-12)


def test_one_pair_by_hand():
    # d = 2: q = (1, 0) -> z_q = 1; k = (0, 1) -> z_k = i; theta = pi / 2, r = 1:
    # Re(conj(1) * i * e^{i pi/2}) = Re(i * i) = -1; rotating k by pi/2 gives (-1, 0), and q . (-1, 0) = -1.
    q = torch.tensor([1.0, 0.0], dtype=torch.float64)
    k = torch.tensor([0.0, 1.0], dtype=torch.float64)
    theta = torch.tensor([math.pi / 2], dtype=torch.float64)
    assert rope_pair_logits(q, k, 1, theta).tolist() == pytest.approx([-1.0], abs=1e-15)
    assert rope_pair_logits(q, k, 0, theta).tolist() == pytest.approx([0.0], abs=1e-15)
    assert rope_pair_logits(q, k, -1, theta).tolist() == pytest.approx([1.0], abs=1e-15)  # the key one place back


def test_the_two_pairings_read_different_features_as_a_pair():
    # d = 4 with q = k = e_0: "half" pairs (0, 2) and (1, 3), "interleaved" (0, 1) and (2, 3); either way
    # pair 0 holds e_0, so c_0 = cos(r theta_0) and c_1 = 0. With q = e_0, k = e_1 they differ:
    # interleaved: z_q = 1, z_k = i in pair 0 -> c_0 = Re(i e^{i r theta_0}) = -sin(r theta_0);
    # half: e_1 sits in pair 1, so every product is 0.
    theta = torch.tensor([0.3, 0.01], dtype=torch.float64)
    e = torch.eye(4, dtype=torch.float64)
    for pairing in ("half", "interleaved"):
        assert rope_pair_logits(e[0], e[0], 5, theta, pairing=pairing).tolist() == pytest.approx([math.cos(1.5), 0])
    assert rope_pair_logits(e[0], e[1], 5, theta, pairing="interleaved").tolist() == pytest.approx([-math.sin(1.5), 0])
    assert rope_pair_logits(e[0], e[1], 5, theta, pairing="half").tolist() == pytest.approx([0, 0])


def test_attention_scale_multiplies_the_logit_by_its_square():
    q, k = torch.randn(2, 8, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64)
    theta = torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64)
    torch.testing.assert_close(
        rope_pair_logits(q, k, -7, theta, attention_scale=1.5), 2.25 * rope_pair_logits(q, k, -7, theta)
    )


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: rope_pair_logits(torch.ones(4), torch.ones(6), 1, torch.ones(2)), ValueError, "same head dim"),
        (lambda: rope_pair_logits(torch.ones(4), torch.ones(4), 1, torch.ones(3)), ValueError, "inv_freq must hold"),
        (lambda: rope_pair_logits(torch.ones(3), torch.ones(3), 1, torch.ones(1)), ValueError, "even head dim"),
        (lambda: rope_pair_logits(torch.ones(4), torch.ones(4), 1.5, torch.ones(2)), TypeError, "distance"),
        (
            lambda: rope_pair_logits(torch.ones(4), torch.ones(4), torch.tensor([1.5]), torch.ones(2)),
            TypeError,
            "integer tensor",
        ),
        (lambda: rope_pair_logits(torch.ones(4), torch.ones(4), 1, torch.ones(2), pairing="x"), ValueError, "pairing"),
        (lambda: rope_pair_logits(torch.ones(4, dtype=torch.long), torch.ones(4), 1, torch.ones(2)), TypeError, "q"),
    ],
)
def test_pair_logits_validate_their_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ---- carrying pairs -------------------------------------------------------------------------------------------


def test_carrying_pairs_takes_the_largest_magnitudes_until_the_share_is_reached():
    c = torch.tensor([0.05, -5.0, 3.0, 1.0, -0.5, 0.45])  # |c| sums to 10
    assert carrying_pairs(c, 0.5).tolist() == [1]  # 5 of 10
    assert carrying_pairs(c, 0.8).tolist() == [1, 2]  # 8 of 10
    assert carrying_pairs(c, 0.9).tolist() == [1, 2, 3]  # 9 of 10, exactly the share
    assert carrying_pairs(c, 0.91).tolist() == [1, 2, 3, 4]
    assert carrying_pairs(c, 1.0).tolist() == [0, 1, 2, 3, 4, 5]


def test_carrying_pairs_breaks_ties_by_index_and_ignores_signs():
    assert carrying_pairs(torch.tensor([1.0, -1.0, 1.0, 1.0]), 0.5).tolist() == [0, 1]
    assert carrying_pairs(torch.tensor([2.0, -2.0]), 0.5).tolist() == [0]


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: carrying_pairs(torch.zeros(3)), ValueError, "all zero"),
        (lambda: carrying_pairs(torch.tensor([1.0, float("nan")])), ValueError, "finite"),
        (lambda: carrying_pairs(torch.ones(3), 0.0), ValueError, "share"),
        (lambda: carrying_pairs(torch.ones(3), 1.5), ValueError, "share"),
        (lambda: carrying_pairs(torch.ones(2, 3)), ValueError, "dimensions"),
        (lambda: carrying_pairs(torch.empty(0)), ValueError, "at least one pair"),
    ],
)
def test_carrying_pairs_validates_its_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ---- alias distance -----------------------------------------------------------------------------------------------


def test_alias_distance_is_the_first_common_return_of_the_carrying_pairs():
    # periods 4 and 6 positions: pair 0 returns every 4, pair 1 every 6, both every lcm = 12
    theta = torch.tensor([2 * math.pi / 4, 2 * math.pi / 6, 2 * math.pi / 1000])
    assert alias_distance(theta, [0], trained=3, max_distance=100, tol=1e-6) == 7
    assert alias_distance(theta, [1], trained=3, max_distance=100, tol=1e-6) == 9
    assert alias_distance(theta, [0, 1], trained=3, max_distance=100, tol=1e-6) == 15
    # the slow pair does not come back within 100 positions: no alias predicted
    assert alias_distance(theta, [0, 1, 2], trained=3, max_distance=100, tol=1e-6) is None
    assert alias_distance(theta, [0, 1], trained=3, max_distance=14, tol=1e-6) is None


def test_alias_distance_tolerance_is_an_angle_either_side_of_a_whole_turn():
    # theta = 2 pi / 10.5: after 10 positions the pair is 0.5 / 10.5 turn short (17.1 degrees),
    # after 11 positions 0.5 / 10.5 turn past; both within 20 degrees, neither within 15.
    theta = torch.tensor([2 * math.pi / 10.5], dtype=torch.float64)
    assert alias_distance(theta, [0], trained=0, max_distance=15, tol=math.radians(20)) == 10
    assert alias_distance(theta, [0], trained=0, max_distance=15, tol=math.radians(15)) is None
    assert alias_distance(theta, [0], trained=0, max_distance=21, tol=math.radians(1)) == 21


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: alias_distance(torch.ones(2), [2], trained=1, max_distance=5, tol=0.1), ValueError, "index"),
        (lambda: alias_distance(torch.ones(2), [], trained=1, max_distance=5, tol=0.1), ValueError, "non-empty"),
        (lambda: alias_distance(torch.ones(2), [0], trained=5, max_distance=5, tol=0.1), ValueError, "max_distance"),
        (lambda: alias_distance(torch.ones(2), [0], trained=1, max_distance=5, tol=4.0), ValueError, "tol"),
        (lambda: alias_distance(torch.ones(2), [0], trained=-1, max_distance=5, tol=0.1), ValueError, "trained"),
    ],
)
def test_alias_distance_validates_its_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
