"""Tests of posenc.attention: the formula, agreement with PyTorch, precision, and argument checks."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import alibi_bias, causal_mask, scaled_dot_product_attention


def _qkv(b, h, s_q, s_k, d, dtype, seed=0, d_v=None, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = (scale * torch.randn(b, h, s_q, d, generator=gen, dtype=torch.float64)).to(dtype)
    k = (scale * torch.randn(b, h, s_k, d, generator=gen, dtype=torch.float64)).to(dtype)
    v = torch.randn(b, h, s_k, d_v or d, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v


def _reference(q, k, v, bias=None, offset=None):
    """Attention written out in float64 scalars: softmax_j(q_i . k_j / sqrt(d) + B_ij) over allowed j.

    ``offset=None``: no mask; otherwise query i sees keys j <= offset + i.
    """
    q, k, v = q.double(), k.double(), v.double()
    b, h, s_q, d = q.shape
    s_k = k.shape[2]
    bias = torch.zeros(b, h, s_q, s_k, dtype=torch.float64) if bias is None else bias.double().expand(b, h, s_q, s_k)
    out = torch.zeros(b, h, s_q, v.shape[-1], dtype=torch.float64)
    for bi, hi, i in itertools.product(range(b), range(h), range(s_q)):
        keys = [j for j in range(s_k) if offset is None or j <= offset + i]
        logits = [
            sum(q[bi, hi, i, c].item() * k[bi, hi, j, c].item() for c in range(d)) / math.sqrt(d)
            + bias[bi, hi, i, j].item()
            for j in keys
        ]
        top = max(logits)
        e = [math.exp(x - top) for x in logits]
        for j, weight in zip(keys, e, strict=True):
            out[bi, hi, i] += weight / sum(e) * v[bi, hi, j]
    return out


TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 4), (2, 3, 5, 5, 8), (1, 4, 7, 11, 16), (3, 2, 16, 16, 64)])
def test_matches_the_formula_written_out(shape, dtype):
    b, h, s_q, s_k, d = shape
    q, k, v = _qkv(b, h, s_q, s_k, d, dtype, d_v=d + 3)
    out, weights = scaled_dot_product_attention(q, k, v)
    # The formula with explicit loops over the query and key positions.
    expected = torch.empty(b, h, s_q, d + 3, dtype=dtype)
    for bi, hi, i in itertools.product(range(b), range(h), range(s_q)):
        logits = torch.stack([q[bi, hi, i] @ k[bi, hi, j] / math.sqrt(d) for j in range(s_k)])
        expected[bi, hi, i] = torch.softmax(logits, 0) @ v[bi, hi]
    torch.testing.assert_close(out, expected, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(weights.sum(-1), torch.ones(b, h, s_q, dtype=dtype))
    assert out.dtype == weights.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 5, 8), (1, 4, 7, 11, 16)])
def test_matches_torch_with_bias(shape, dtype):
    b, h, s_q, s_k, d = shape
    q, k, v = _qkv(b, h, s_q, s_k, d, dtype)
    bias = torch.randn(h, s_q, s_k, dtype=dtype, generator=torch.Generator().manual_seed(9))
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    out0, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out0, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_square_matches_torch(dtype):
    q, k, v = _qkv(2, 3, 9, 9, 8, dtype)
    out, weights = scaled_dot_product_attention(q, k, v, causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.all(weights.triu(diagonal=1) == 0)  # no query attends to a later key


def test_causal_rectangular_is_bottom_right_aligned():
    # With a KV cache the 3 queries are the last 3 of 8 positions: query i is at position 5 + i.
    q, k, v = _qkv(1, 2, 3, 8, 8, torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v, causal=True)
    allowed = torch.tensor([[j <= 5 + i for j in range(8)] for i in range(3)])
    assert torch.equal(causal_mask(3, 8), allowed)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    assert torch.all(weights[..., ~allowed] == 0)
    # Decoding query by query equals the full causal computation on the last rows.
    q_full, k_full, v_full = _qkv(1, 2, 8, 8, 8, torch.float64, seed=3)
    full, _ = scaled_dot_product_attention(q_full, k_full, v_full, causal=True)
    for t in range(8):
        step, _ = scaled_dot_product_attention(q_full[:, :, t : t + 1], k_full[:, :, : t + 1], v_full[:, :, : t + 1])
        torch.testing.assert_close(step, full[:, :, t : t + 1])


@pytest.mark.parametrize(("s_q", "s_k", "offset"), [(5, 3, 0), (3, 8, 0), (3, 8, 2), (2, 4, 6)])
def test_explicit_offset_positions_the_causal_mask(s_q, s_k, offset):
    q, k, v = _qkv(1, 2, s_q, s_k, 8, torch.float64)
    out, weights = scaled_dot_product_attention(q, k, v, causal=True, offset=offset)
    torch.testing.assert_close(out, _reference(q, k, v, offset=offset))
    allowed = torch.tensor([[j <= offset + i for j in range(s_k)] for i in range(s_q)])
    assert torch.all(weights[..., ~allowed] == 0) and torch.all(weights[..., allowed] > 0)


def test_bias_broadcasts_from_every_supported_shape():
    q, k, v = _qkv(2, 3, 4, 6, 8, torch.float64)
    base = torch.randn(4, 6, dtype=torch.float64)
    expected, _ = scaled_dot_product_attention(q, k, v, bias=base.expand(2, 3, 4, 6))
    for bias in (base, base[None], base[None, None], base.expand(3, 4, 6)):
        out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(expected, _reference(q, k, v, bias=base))


def test_permutation_equivariance_without_mask_and_its_failure_with_causal_mask():
    q, k, v = _qkv(1, 2, 6, 6, 8, torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out, weights = scaled_dot_product_attention(q, k, v)
    out_p, weights_p = scaled_dot_product_attention(q[:, :, perm], k[:, :, perm], v[:, :, perm])
    torch.testing.assert_close(out_p, out[:, :, perm])
    torch.testing.assert_close(weights_p, weights[:, :, perm][..., perm])
    causal, _ = scaled_dot_product_attention(q, k, v, causal=True)
    causal_p, _ = scaled_dot_product_attention(q[:, :, perm], k[:, :, perm], v[:, :, perm], causal=True)
    assert not torch.allclose(causal_p, causal[:, :, perm])


def test_no_mutation_of_inputs():
    q, k, v = _qkv(1, 2, 4, 4, 8, torch.float32)
    bias = torch.zeros(4, 4)
    copies = [t.clone() for t in (q, k, v, bias)]
    scaled_dot_product_attention(q, k, v, bias=bias, causal=True)
    for before, after in zip(copies, (q, k, v, bias), strict=True):
        assert torch.equal(before, after)


# Half precision: the output is rounded to the dtype (bfloat16 keeps 8 bits, float16 11), so
# the tolerance is a few of its units; a wrong answer (NaN, a mis-scaled or mis-biased softmax)
# is off by O(1).
HALF_TOL = {torch.float16: {"atol": 3e-3, "rtol": 3e-3}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_large_magnitude_half_precision_stays_finite_and_accurate(dtype, causal):
    # |q|, |k| ~ 60 and d = 64: q . k reaches 10^5, past float16's 65504, while q . k / 8 fits.
    q, k, v = _qkv(2, 2, 12, 12, 64, dtype, scale=60.0)
    if dtype == torch.float16:
        assert (q @ k.transpose(-2, -1)).isinf().any(), "the inputs must overflow an unscaled float16 product"
    out, weights = scaled_dot_product_attention(q, k, v, causal=causal)
    assert out.dtype == weights.dtype == dtype
    assert out.isfinite().all() and weights.isfinite().all()
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)  # float64
    torch.testing.assert_close(out.double(), expected, **HALF_TOL[dtype])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal), **HALF_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float32_bias_with_half_precision_queries(dtype):
    # ALiBi at distances up to 300: bfloat16 could not tell neighbouring keys apart (spacing 2 near 300).
    h, s = 4, 300
    q, k, v = _qkv(1, h, 4, s, 16, dtype)
    bias = alibi_bias(h, 4, s)  # float32
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias, causal=True)
    assert out.dtype == weights.dtype == dtype
    mask = torch.where(causal_mask(4, s), 0.0, float("-inf"))  # (s_q, s_k)
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double() + mask)
    torch.testing.assert_close(out.double(), expected, **HALF_TOL[dtype])
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias + mask)  # torch also takes a float32 mask
    torch.testing.assert_close(out, theirs, **HALF_TOL[dtype])
    # The bias in the queries' dtype works too (same dtype: the ordinary case).
    same, _ = scaled_dot_product_attention(q, k, v, bias=alibi_bias(h, 4, s, dtype=dtype), causal=True)
    assert same.dtype == dtype and same.isfinite().all()


def test_float64_bias_with_float32_queries_is_computed_in_float64():
    q, k, v = _qkv(1, 2, 3, 5, 8, torch.float32)
    bias = torch.randn(2, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, _reference(q, k, v, bias=bias).float(), rtol=1e-6, atol=1e-6)


@settings(max_examples=50, deadline=None, database=None)
@given(data=st.data())
def test_property_matches_the_float64_reference_with_random_masks_and_biases(data):
    b, h = data.draw(st.integers(1, 2), label="b"), data.draw(st.integers(1, 3), label="h")
    s_q, s_k = data.draw(st.integers(1, 5), label="s_q"), data.draw(st.integers(1, 6), label="s_k")
    d, d_v = data.draw(st.integers(1, 8), label="d"), data.draw(st.integers(1, 4), label="d_v")
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    causal = data.draw(st.booleans(), label="causal")
    offset = None
    if causal:
        choices = st.integers(0, 8) if s_q > s_k else st.one_of(st.none(), st.integers(0, 8))
        offset = data.draw(choices, label="offset")
    bias_shape = data.draw(st.sampled_from([None, (s_q, s_k), (h, s_q, s_k), (b, 1, s_q, s_k), (1, h, 1, s_k)]))
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
    q, k, v = (torch.randn(b, h, s, n, generator=gen, dtype=dtype) for s, n in ((s_q, d), (s_k, d), (s_k, d_v)))
    bias = None
    if bias_shape is not None:
        bias = 3 * torch.randn(bias_shape, generator=gen, dtype=dtype)
        # Random -inf entries (a padding mask), never on key 0, which every query may see.
        blocked = torch.rand(bias_shape, generator=gen) < 0.3
        blocked[..., 0] = False
        bias = bias.masked_fill(blocked, float("-inf"))
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias, causal=causal, offset=offset)
    reference_offset = (s_k - s_q if offset is None else offset) if causal else None  # the convention
    tol = {torch.float32: 2e-5, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(out.double(), _reference(q, k, v, bias, reference_offset), rtol=tol, atol=tol)
    torch.testing.assert_close(weights.sum(-1).double(), torch.ones(b, h, s_q, dtype=torch.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"q": [[1.0]]}, TypeError, "q must be a torch.Tensor"),
        ({"q": torch.zeros(2, 4, 8)}, ValueError, r"q must have 4 dimensions, got shape \(2, 4, 8\)"),
        ({"k": torch.zeros(1, 2, 4, 8, dtype=torch.long)}, TypeError, "k must have a floating-point dtype"),
        ({"k": torch.zeros(1, 2, 4, 8, dtype=torch.float64)}, TypeError, "q, k and v must share one dtype"),
        ({"v": torch.zeros(1, 2, 4, 8, device="meta")}, ValueError, "q, k and v must be on one device"),
        ({"k": torch.zeros(1, 2, 4, 7)}, ValueError, "q and k must share head_dim"),
        ({"v": torch.zeros(1, 2, 5, 8)}, ValueError, "k and v must have the same length"),
        ({"v": torch.zeros(1, 3, 4, 8)}, ValueError, "must share batch and head sizes"),
        (
            {"bias": torch.zeros(4, 5)},
            ValueError,
            r"bias must broadcast to \(b, h, s_q, s_k\) = \(1, 2, 4, 4\), got \(4, 5\)",
        ),
        ({"bias": torch.zeros(3, 4, 4)}, ValueError, "bias must broadcast"),
        ({"bias": torch.zeros(1, 2, 1, 4, 4)}, ValueError, "bias must broadcast"),
        ({"bias": torch.zeros(4, 4, dtype=torch.bool)}, TypeError, "bias must have a floating-point dtype"),
        ({"bias": torch.zeros(4, 4, dtype=torch.uint8)}, TypeError, "bias must have a floating-point dtype"),
        ({"bias": torch.zeros(4, 4, device="meta")}, ValueError, "bias must be on q's device cpu, got meta"),
        ({"bias": [[0.0]]}, TypeError, "bias must be a torch.Tensor"),
        ({"causal": "yes"}, TypeError, "causal must be a bool, got 'yes'"),
        ({"causal": 1}, TypeError, "causal must be a bool, got 1"),
        ({"offset": 2}, ValueError, "offset only positions the causal mask; got offset=2 with causal=False"),
        ({"causal": True, "offset": -1}, ValueError, "offset must be >= 0, got -1"),
        ({"causal": True, "offset": 0.5}, TypeError, "offset must be an integer"),
        ({"q": torch.zeros(1, 2, 0, 8)}, ValueError, "non-empty"),
        ({"q": torch.zeros(1, 2, 4, 0), "k": torch.zeros(1, 2, 4, 0)}, ValueError, "non-empty"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, pattern):
    args = dict(zip("qkv", _qkv(1, 2, 4, 4, 8, torch.float32), strict=True))
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=pattern):
        scaled_dot_product_attention(q, k, v, **args)


def test_causal_with_more_queries_than_keys_needs_an_explicit_offset():
    q, k, v = _qkv(1, 1, 5, 3, 4, torch.float32)
    with pytest.raises(ValueError, match="q_len=5, k_len=3: pass offset explicitly"):
        scaled_dot_product_attention(q, k, v, causal=True)
