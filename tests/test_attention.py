"""Tests of posenc.attention: the formula, agreement with PyTorch, and argument checks."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from posenc import causal_mask, scaled_dot_product_attention


def _qkv(b, h, s_q, s_k, d, dtype, seed=0, d_v=None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s_q, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, s_k, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, s_k, d_v or d, generator=gen, dtype=dtype)
    return q, k, v


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


def test_bias_broadcasts_from_every_supported_shape():
    q, k, v = _qkv(2, 3, 4, 6, 8, torch.float64)
    base = torch.randn(4, 6, dtype=torch.float64)
    expected, _ = scaled_dot_product_attention(q, k, v, bias=base.expand(2, 3, 4, 6))
    for bias in (base, base[None], base[None, None], base.expand(3, 4, 6)):
        out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
        torch.testing.assert_close(out, expected)


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
    for before, after in zip(copies, (q, k, v, bias)):
        assert torch.equal(before, after)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"q": [[1.0]]}, TypeError, "q must be a torch.Tensor"),
        ({"q": torch.zeros(2, 4, 8)}, ValueError, r"q must have 4 dimensions, got shape \(2, 4, 8\)"),
        ({"k": torch.zeros(1, 2, 4, 8, dtype=torch.long)}, TypeError, "k must have a floating-point dtype"),
        ({"k": torch.zeros(1, 2, 4, 7)}, ValueError, "q and k must share head_dim"),
        ({"v": torch.zeros(1, 2, 5, 8)}, ValueError, "k and v must have the same length"),
        ({"v": torch.zeros(1, 3, 4, 8)}, ValueError, "must share batch and head sizes"),
        ({"bias": torch.zeros(4, 5)}, ValueError, r"bias must broadcast to \(b, h, s_q, s_k\) = \(1, 2, 4, 4\), got \(4, 5\)"),
        ({"bias": torch.zeros(3, 4, 4)}, ValueError, "bias must broadcast"),
        ({"bias": torch.zeros(1, 2, 1, 4, 4)}, ValueError, "bias must broadcast"),
        ({"bias": torch.zeros(4, 4, dtype=torch.bool)}, TypeError, "bias must have a floating-point dtype"),
        ({"causal": "yes"}, TypeError, "causal must be a bool, got 'yes'"),
        ({"q": torch.zeros(1, 2, 0, 8)}, ValueError, "non-empty"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, pattern):
    args = dict(zip("qkv", _qkv(1, 2, 4, 4, 8, torch.float32)))
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=pattern):
        scaled_dot_product_attention(q, k, v, **args)


def test_causal_needs_queries_no_longer_than_keys():
    q, k, v = _qkv(1, 1, 5, 3, 4, torch.float32)
    with pytest.raises(ValueError, match="q_len <= k_len.*q_len=5, k_len=3"):
        scaled_dot_product_attention(q, k, v, causal=True)


@pytest.mark.parametrize(("q_len", "k_len", "error"), [(0, 3, ValueError), (2, -1, ValueError), (2.0, 3, TypeError), (True, 3, TypeError)])
def test_causal_mask_rejects_bad_lengths(q_len, k_len, error):
    with pytest.raises(error, match="q_len|k_len"):
        causal_mask(q_len, k_len)
