"""Tests of posenc.alibi: slopes against BLOOM's implementation in transformers, and the bias."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import alibi_bias, alibi_slopes, scaled_dot_product_attention


def build_alibi_tensor(*args):
    """transformers' BLOOM ALiBi (imported here: without transformers only the comparisons skip)."""
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")  # test-only dependency
    return bloom.build_alibi_tensor(*args)


def _paper_slopes(n):
    """Press et al. (arXiv:2108.12409), section 3: for a power of two n, m_h = 2^(-8h/n); otherwise the
    2^floor(log2 n) = p slopes of p heads, then the odd-numbered slopes 2^(-8(2j-1)/(2p)) of 2p heads."""
    p = 1
    while 2 * p <= n:
        p *= 2
    return [2.0 ** (-8.0 * h / p) for h in range(1, p + 1)] + [
        2.0 ** (-8.0 * (2 * j - 1) / (2 * p)) for j in range(1, n - p + 1)
    ]


@pytest.mark.parametrize("num_heads", [*range(1, 65), 112])  # 112: BLOOM-176B, chapter 9
def test_slopes_equal_bloom(num_heads):
    alibi = build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)  # (h, 1, 2): slope * key position
    # BLOOM raises to powers in float32; posenc in float64, then rounds once: equal to float32 precision.
    torch.testing.assert_close(alibi_slopes(num_heads), alibi[:, 0, 1], rtol=1e-6, atol=0)


def test_power_of_two_slopes_are_the_papers_geometric_sequence():
    assert torch.equal(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))  # 1/2, 1/4, ..., 1/256
    slopes = alibi_slopes(16)
    assert slopes[0] == 2 ** (-8 / 16)
    torch.testing.assert_close(slopes[1:] / slopes[:-1], torch.full((15,), 2 ** (-8 / 16)))


@pytest.mark.parametrize("num_heads", [1, 2, 3, 5, 6, 8, 12, 20, 33, 64, 96])
def test_slopes_equal_the_papers_rule_written_out(num_heads):
    # Non-powers of two: the slopes of the power of two below, then every other slope of twice that.
    expected = torch.tensor(_paper_slopes(num_heads), dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(num_heads).double(), expected, rtol=1e-7, atol=0)  # float32 rounding


def test_bias_values_and_shift_invariance():
    bias = alibi_bias(4, 6, 6)
    slopes = _paper_slopes(4)
    for h in range(4):
        for i in range(6):
            for j in range(6):
                assert bias[h, i, j] == pytest.approx(-slopes[h] * abs(j - i), rel=1e-6, abs=0)
    assert torch.equal(alibi_bias(4, 1, 6)[:, 0], bias[:, 5])  # default: the decode step is the last row
    assert torch.equal(alibi_bias(4, 1, 6, offset=2)[:, 0], bias[:, 2])
    assert bias.shape == (4, 6, 6) and bias.dtype == torch.float32


@settings(max_examples=50, deadline=None, database=None)
@given(data=st.data())
def test_property_bias_is_minus_slope_times_query_minus_key_position(data):
    num_heads = data.draw(st.integers(1, 20), label="num_heads")
    q_len, k_len = data.draw(st.integers(1, 6), label="q_len"), data.draw(st.integers(1, 8), label="k_len")
    offset = data.draw(
        st.integers(0, 50) if q_len > k_len else st.one_of(st.none(), st.integers(0, 50)), label="offset"
    )
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    bias = alibi_bias(num_heads, q_len, k_len, offset=offset, dtype=dtype)
    assert bias.shape == (num_heads, q_len, k_len) and bias.dtype == dtype
    start = k_len - q_len if offset is None else offset  # query i sits at start + i
    slopes = _paper_slopes(num_heads)
    rel = 1e-6 if dtype == torch.float32 else 1e-13
    for h in range(num_heads):
        for i in range(q_len):
            for j in range(k_len):
                query_pos, key_pos = start + i, j
                expected = -slopes[h] * abs(query_pos - key_pos)  # = -m (i - j) where j <= i (causal)
                assert bias[h, i, j].item() == pytest.approx(expected, rel=rel, abs=0), (h, i, j)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_dtype_and_device_arguments(dtype):
    bias = alibi_bias(6, 3, 40, dtype=dtype)
    assert bias.dtype == dtype
    exact = (
        torch.tensor(_paper_slopes(6), dtype=torch.float64)[:, None, None]
        * -(torch.arange(37, 40)[:, None] - torch.arange(40)[None, :]).abs()
    )
    torch.testing.assert_close(bias, exact.to(dtype), rtol=0, atol=0)  # equal to the exact value rounded to dtype
    assert alibi_bias(2, 3, 4, device="meta").device.type == "meta"


def test_bloom_form_gives_the_same_causal_attention():
    # BLOOM adds m * j (key position); within a causal row that differs from -m (i - j) by a constant.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 10, 8, generator=gen) for _ in range(3))
    bloom = build_alibi_tensor(torch.ones(1, 10), 4, torch.float32)[None, :, :, :]  # (1, h, 1, s_k)
    ours, _ = scaled_dot_product_attention(q, k, v, bias=alibi_bias(4, 10, 10), causal=True)
    theirs, _ = scaled_dot_product_attention(q, k, v, bias=bloom.expand(1, 4, 10, 10), causal=True)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: alibi_slopes(0), ValueError, "num_heads must be >= 1, got 0"),
        (lambda: alibi_slopes(10**12), ValueError, "num_heads must be <= 65536, got 1000000000000"),
        (lambda: alibi_slopes(2.0), TypeError, "num_heads must be an integer"),
        (lambda: alibi_bias(0, 3, 3), ValueError, "num_heads must be >= 1, got 0"),
        (lambda: alibi_bias(True, 3, 3), TypeError, "num_heads must be an integer, got True"),
        (lambda: alibi_bias(4, 0, 3), ValueError, "q_len must be >= 1"),
        (lambda: alibi_bias(4, 3, -1), ValueError, "k_len must be >= 1, got -1"),
        (lambda: alibi_bias(4, 5, 3), ValueError, "q_len=5, k_len=3: pass offset explicitly"),
        (lambda: alibi_bias(4, 3, 5, offset=-1), ValueError, "offset must be >= 0, got -1"),
        (lambda: alibi_bias(4, 3, 5, offset=2.0), TypeError, "offset must be an integer"),
        (lambda: alibi_bias(4, 3, 5, dtype=torch.int64), TypeError, "dtype must be a floating-point torch.dtype"),
        (lambda: alibi_bias(4, 3, 5, dtype="float32"), TypeError, "dtype must be a floating-point torch.dtype"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_slopes_are_positive_and_the_first_head_starts_the_sequence():
    for n in (1, 3, 5, 12, 64, 100):
        slopes = alibi_slopes(n)
        assert torch.isfinite(slopes).all() and (slopes > 0).all() and slopes.numel() == n
        assert math.isclose(slopes[0].item(), 2 ** (-8 / 2 ** math.floor(math.log2(n))), rel_tol=1e-6)


def test_positions_past_float32_exactness_are_refused_not_merged():
    # float32 holds every integer only up to 2**24: two keys would share one distance.
    with pytest.raises(ValueError, match=r"not exact in torch\.float32 distances"):
        alibi_bias(1, 1, 3, offset=2**25)
    bias = alibi_bias(1, 1, 3, offset=2**25, dtype=torch.float64)  # float64 is exact there
    assert len(set(bias.flatten().tolist())) == 3
