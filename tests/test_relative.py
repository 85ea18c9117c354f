"""Tests of posenc.relative: signs, T5 buckets and bias against transformers, Shaw's two versions."""

import pytest
import torch
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention  # test-only dependency

from posenc import (
    T5RelativeBias,
    relative_positions,
    scaled_dot_product_attention,
    shaw_attention,
    shaw_attention_naive,
    shaw_relative_indices,
    t5_relative_bucket,
)

SETTINGS = [
    dict(bidirectional=True, num_buckets=32, max_distance=128),
    dict(bidirectional=False, num_buckets=32, max_distance=128),
    dict(bidirectional=True, num_buckets=64, max_distance=256),
    dict(bidirectional=False, num_buckets=16, max_distance=64),
    dict(bidirectional=True, num_buckets=4, max_distance=2),
    dict(bidirectional=False, num_buckets=2, max_distance=2),
    dict(bidirectional=False, num_buckets=7, max_distance=9),
    dict(bidirectional=True, num_buckets=10, max_distance=1000),
]


def test_relative_positions_is_key_minus_query():
    rel = relative_positions(3, 5, offset=2)
    assert rel.dtype == torch.int64 and rel.shape == (3, 5)
    for i in range(3):
        for j in range(5):
            assert rel[i, j] == j - (2 + i)


@pytest.mark.parametrize("settings", SETTINGS, ids=str)
def test_t5_buckets_equal_transformers_for_every_distance(settings):
    rel = torch.arange(-5000, 5001)
    ours = t5_relative_bucket(rel, **settings)
    theirs = T5Attention._relative_position_bucket(rel, **settings)
    assert torch.equal(ours, theirs)
    assert ours.dtype == torch.int64
    assert 0 <= ours.min() and ours.max() < settings["num_buckets"]


def test_t5_buckets_shape_and_dtypes():
    rel = torch.arange(-20, 20, dtype=torch.int32).reshape(4, 10)
    assert t5_relative_bucket(rel).shape == (4, 10)
    assert torch.equal(t5_relative_bucket(rel), t5_relative_bucket(rel.long()))


@pytest.mark.parametrize("settings", SETTINGS[:4], ids=str)
def test_t5_buckets_are_monotone_in_distance_and_saturate(settings):
    distance = torch.arange(0, 3000)
    if settings["bidirectional"]:
        after, before = t5_relative_bucket(distance, **settings), t5_relative_bucket(-distance, **settings)
        assert torch.all(after[1:] >= after[:-1]) and torch.all(before[1:] >= before[:-1])
        assert torch.all(after[1:] >= settings["num_buckets"] // 2)  # later keys use the upper half
        assert torch.all(before < settings["num_buckets"] // 2)
    else:
        before = t5_relative_bucket(-distance, **settings)
        assert torch.all(before[1:] >= before[:-1])
        assert torch.all(t5_relative_bucket(distance, **settings) == 0)  # later keys: bucket 0
    assert before[settings["max_distance"] :].unique().numel() == 1  # one bucket for every far distance


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("q_len", "k_len", "offset"), [(1, 1, 0), (7, 7, 0), (300, 300, 0), (1, 50, 49), (4, 20, 16), (5, 9, 100)])
def test_t5_bias_equals_transformers_compute_bias(bidirectional, q_len, k_len, offset):
    config = T5Config(num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      d_model=32, d_kv=8, is_decoder=not bidirectional)
    theirs = T5Attention(config, has_relative_attention_bias=True)
    ours = T5RelativeBias(4, bidirectional=bidirectional)
    with torch.no_grad():
        ours.weight.copy_(theirs.relative_attention_bias.weight)
        expected = theirs.compute_bias(q_len, k_len, past_seen_tokens=offset)[0]  # (h, s_q, s_k)
        got = ours(q_len, k_len, offset=offset)
    assert got.shape == (4, q_len, k_len)
    assert torch.equal(got, expected)


def test_t5_bias_depends_on_relative_position_only_and_has_gradients():
    bias = T5RelativeBias(3, generator=torch.Generator().manual_seed(0))
    full = bias(40, 40)
    for k in range(-39, 40):
        diagonal = full.diagonal(k, dim1=-2, dim2=-1)  # (h, n)
        assert torch.equal(diagonal, diagonal[:, :1].expand_as(diagonal))
    assert torch.equal(bias(1, 40, offset=39)[:, 0], full[:, 39])  # decoding step = last row
    full.sum().backward()
    assert bias.weight.grad is not None and bias.weight.grad.abs().sum() > 0


def _shaw_inputs(b=2, h=3, s_q=6, s_k=6, d=8, max_relative=2, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, s_q, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, s_k, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, s_k, d, generator=gen, dtype=dtype)
    rel_k = torch.randn(2 * max_relative + 1, d, generator=gen, dtype=dtype)
    rel_v = torch.randn(2 * max_relative + 1, d, generator=gen, dtype=dtype)
    return q, k, v, rel_k, rel_v


def test_shaw_naive_matches_the_paper_written_out():
    q, k, v, rel_k, rel_v = _shaw_inputs(b=1, h=1, s_q=5, s_k=5, d=4, max_relative=2)
    out, weights = shaw_attention_naive(q, k, v, rel_k, rel_v)
    for i in range(5):
        logits = torch.stack([q[0, 0, i] @ (k[0, 0, j] + rel_k[max(-2, min(2, j - i)) + 2]) / 2.0 for j in range(5)])
        alpha = torch.softmax(logits, 0)
        z = sum(alpha[j] * (v[0, 0, j] + rel_v[max(-2, min(2, j - i)) + 2]) for j in range(5))
        torch.testing.assert_close(weights[0, 0, i], alpha)
        torch.testing.assert_close(out[0, 0, i], z)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("s_q", "s_k", "max_relative", "offset"), [(6, 6, 2, 0), (6, 6, 10, 0), (1, 9, 3, 8), (3, 12, 4, 9), (16, 16, 1, 0)])
def test_shaw_memory_efficient_equals_naive(dtype, causal, s_q, s_k, max_relative, offset):
    if causal and offset + s_q > s_k:
        pytest.skip("every query needs a key at or before it")
    args = _shaw_inputs(s_q=s_q, s_k=s_k, max_relative=max_relative, dtype=dtype)
    out_a, w_a = shaw_attention_naive(*args, causal=causal, offset=offset)
    out_b, w_b = shaw_attention(*args, causal=causal, offset=offset)
    torch.testing.assert_close(out_b, out_a)
    torch.testing.assert_close(w_b, w_a)


def test_shaw_with_zero_tables_is_plain_attention():
    q, k, v, rel_k, rel_v = _shaw_inputs()
    plain, _ = scaled_dot_product_attention(q, k, v, causal=True)
    ours, _ = shaw_attention(q, k, v, torch.zeros_like(rel_k), torch.zeros_like(rel_v), causal=True)
    torch.testing.assert_close(ours, plain)


def test_shaw_gradients_agree():
    args = [t.requires_grad_() for t in _shaw_inputs(s_q=5, s_k=5)]
    shaw_attention_naive(*args)[0].square().sum().backward()
    naive_grads = [t.grad.clone() for t in args]
    for t in args:
        t.grad = None
    shaw_attention(*args)[0].square().sum().backward()
    for a, t in zip(naive_grads, args):
        torch.testing.assert_close(t.grad, a)


def test_shaw_indices_clip():
    index = shaw_relative_indices(4, 4, 1)
    assert index.tolist() == [[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]]


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: relative_positions(-1, 3), ValueError, "q_len must be >= 1, got -1"),
        (lambda: relative_positions(3, 0), ValueError, "k_len must be >= 1, got 0"),
        (lambda: relative_positions(3, 3, offset=1.5), TypeError, "offset must be an integer"),
        (lambda: t5_relative_bucket(torch.arange(4), num_buckets=31), ValueError, "num_buckets must be even when bidirectional .*got 31"),
        (lambda: t5_relative_bucket(torch.arange(4), num_buckets=2), ValueError, "num_buckets must be >= 4 when bidirectional"),
        (lambda: t5_relative_bucket(torch.arange(4), bidirectional=False, num_buckets=1), ValueError, "num_buckets must be >= 2"),
        (lambda: t5_relative_bucket(torch.arange(4), num_buckets=32, max_distance=8), ValueError, "max_distance must be larger than the exact zone \\(8 distances"),
        (lambda: t5_relative_bucket(torch.arange(4.0)), TypeError, "relative_position must be an integer tensor"),
        (lambda: t5_relative_bucket([1, 2]), TypeError, "relative_position must be a torch.Tensor"),
        (lambda: t5_relative_bucket(torch.arange(4), bidirectional=1), TypeError, "bidirectional must be a bool"),
        (lambda: T5RelativeBias(0), ValueError, "num_heads must be >= 1"),
        (lambda: T5RelativeBias(2, num_buckets=5), ValueError, "num_buckets must be even"),
        (lambda: T5RelativeBias(2)(0, 4), ValueError, "q_len must be >= 1, got 0"),
        (lambda: shaw_relative_indices(3, 3, 0), ValueError, "max_relative must be >= 1, got 0"),
        (lambda: shaw_attention(*_shaw_inputs()[:3], torch.zeros(4, 8), torch.zeros(4, 8)), ValueError, "2k \\+ 1 rows"),
        (lambda: shaw_attention(*_shaw_inputs()[:3], torch.zeros(5, 7), torch.zeros(5, 8)), ValueError, "rel_k must be \\(2k \\+ 1, d\\) with d = 8"),
        (lambda: shaw_attention(*_shaw_inputs()[:3], torch.zeros(5, 8), torch.zeros(3, 8)), ValueError, "rel_v must be"),
        (lambda: shaw_attention(*_shaw_inputs()[:3], torch.zeros(5, 8), torch.zeros(5, 8), causal="yes"), TypeError, "causal must be a bool"),
        (lambda: shaw_attention_naive(torch.zeros(2, 3, 4), *_shaw_inputs()[1:]), ValueError, "q must have 4 dimensions"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_defaults_are_t5s():
    config = T5Config()
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == (32, 128)
    bias = T5RelativeBias(config.num_heads)
    assert (bias.num_buckets, bias.max_distance, bias.bidirectional) == (32, 128, True)
