"""Tests of posenc.alibi: slopes against BLOOM's implementation in transformers, and the bias."""

import math

import pytest
import torch
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # test-only dependency

from posenc import alibi_bias, alibi_slopes, scaled_dot_product_attention


@pytest.mark.parametrize("num_heads", range(1, 65))
def test_slopes_equal_bloom(num_heads):
    alibi = build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)  # (h, 1, 2): slope * key position
    # BLOOM raises to powers in float32; posenc in float64, then rounds once: equal to float32 precision.
    torch.testing.assert_close(alibi_slopes(num_heads), alibi[:, 0, 1], rtol=1e-6, atol=0)


def test_power_of_two_slopes_are_the_papers_geometric_sequence():
    assert torch.equal(alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))  # 1/2, 1/4, ..., 1/256
    slopes = alibi_slopes(16)
    assert slopes[0] == 2 ** (-8 / 16)
    torch.testing.assert_close(slopes[1:] / slopes[:-1], torch.full((15,), 2 ** (-8 / 16)))


def test_non_power_of_two_takes_every_other_slope_of_the_next_power():
    assert torch.equal(alibi_slopes(12)[:8], alibi_slopes(8))
    assert torch.equal(alibi_slopes(12)[8:], alibi_slopes(16)[0::2][:4])


def test_bias_values_and_shift_invariance():
    bias = alibi_bias(4, 6, 6)
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(6):
            for j in range(6):
                assert bias[h, i, j] == -slopes[h] * abs(j - i)
    assert torch.equal(alibi_bias(4, 1, 6, offset=5)[:, 0], bias[:, 5])
    assert bias.shape == (4, 6, 6) and bias.dtype == torch.float32


def test_bloom_form_gives_the_same_causal_attention():
    # BLOOM adds m * j (key position); within a causal row that differs from -m (i - j) by a constant.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 10, 8, generator=gen) for _ in range(3))
    bloom = build_alibi_tensor(torch.ones(1, 10), 4, torch.float32)[None, :, :, :]  # (1, h, 1, s_k)
    ours, _ = scaled_dot_product_attention(q, k, v, bias=alibi_bias(4, 10, 10), causal=True)
    theirs, _ = scaled_dot_product_attention(q, k, v, bias=bloom.expand(1, 4, 10, 10), causal=True)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize(("call", "error", "pattern"), [
    (lambda: alibi_slopes(0), ValueError, "num_heads must be >= 1, got 0"),
    (lambda: alibi_slopes(2.0), TypeError, "num_heads must be an integer"),
    (lambda: alibi_bias(4, 0, 3), ValueError, "q_len must be >= 1"),
])
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_slopes_are_positive_and_the_first_head_starts_the_sequence():
    for n in (1, 3, 5, 12, 64, 100):
        slopes = alibi_slopes(n)
        assert torch.isfinite(slopes).all() and (slopes > 0).all() and slopes.numel() == n
        assert math.isclose(slopes[0].item(), 2 ** (-8 / 2 ** math.floor(math.log2(n))), rel_tol=1e-6)
