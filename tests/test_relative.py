"""Tests of posenc.relative: T5 buckets and bias against the formula and transformers, Shaw's two versions.

The references here are written from the papers, independently of posenc: T5's bucket formula
evaluated in exact integer arithmetic, Shaw et al.'s equations as loops in float64.
"""

import itertools
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import flex_attention

from posenc import (
    T5RelativeBias,
    relative_positions,
    scaled_dot_product_attention,
    shaw_attention,
    shaw_attention_naive,
    shaw_relative_indices,
    t5_relative_bucket,
)


def _t5():
    """transformers' T5 module (imported here: without transformers only the comparisons skip)."""
    return pytest.importorskip("transformers.models.t5.modeling_t5")  # test-only dependency


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
PROPERTY = settings(max_examples=50, deadline=None, database=None)


def _bucket_reference(rel, bidirectional, num_buckets, max_distance):
    """T5's bucket (Mesh TensorFlow's _relative_position_bucket), one Python int at a time, exactly.

    n = query - key. Bidirectional: half the buckets for n < 0 (keys after the query), n = |n|;
    else n = max(n, 0). Below max_exact = B/2 the bucket is n; above it is
    max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (B - max_exact)),
    capped at B - 1. The floor is the largest t with (n / max_exact)^(B - max_exact) >=
    (max_distance / max_exact)^t, decided here in integers: no rounding anywhere.
    """
    n, bucket = -rel, 0
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    span = num_buckets - max_exact
    lhs = n**span
    t = 0
    while t < span and lhs * max_exact ** (t + 1) >= max_distance ** (t + 1) * max_exact**span:
        t += 1
    return bucket + min(max_exact + t, num_buckets - 1)


@st.composite
def bucket_settings(draw):
    bidirectional = draw(st.booleans())
    num_buckets = 2 * draw(st.integers(2, 32)) if bidirectional else draw(st.integers(2, 48))
    max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = draw(st.integers(max_exact + 1, 2000))
    return dict(bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)


@PROPERTY
@given(settings_=bucket_settings(), rel=st.lists(st.integers(-5000, 5000), min_size=1, max_size=40))
def test_property_t5_buckets_equal_the_formula_in_exact_arithmetic(settings_, rel):
    ours = t5_relative_bucket(torch.tensor(rel), **settings_)
    assert ours.tolist() == [_bucket_reference(r, **settings_) for r in rel]


@PROPERTY
@given(settings_=bucket_settings(), rel=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=40))
def test_property_t5_buckets_equal_transformers_on_random_tensors(settings_, rel):
    rel = torch.tensor(rel)
    assert torch.equal(
        t5_relative_bucket(rel, **settings_), _t5().T5Attention._relative_position_bucket(rel, **settings_)
    )


@pytest.mark.parametrize("settings_", SETTINGS, ids=str)
def test_t5_buckets_equal_transformers_for_every_distance(settings_):
    rel = torch.arange(-5000, 5001)
    ours = t5_relative_bucket(rel, **settings_)
    theirs = _t5().T5Attention._relative_position_bucket(rel, **settings_)
    assert torch.equal(ours, theirs)
    assert ours.dtype == torch.int64
    assert ours.min() >= 0 and ours.max() < settings_["num_buckets"]


@pytest.mark.parametrize("settings_", SETTINGS, ids=str)
def test_t5_buckets_of_extreme_int64_values(settings_):
    # |int64 min| does not fit in int64: a bucket function that takes abs() first goes wrong here.
    extremes = [-(2**63), -(2**62), -(10**15), 10**15, 2**62, 2**63 - 1]
    ours = t5_relative_bucket(torch.tensor(extremes), **settings_)
    assert ours.tolist() == [_bucket_reference(r, **settings_) for r in extremes]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_t5_buckets_of_small_integer_dtypes_equal_int64(dtype):
    info = torch.iinfo(dtype)
    rel64 = torch.arange(max(info.min, -5000), min(info.max, 5000) + 1)  # every value the dtype holds, up to 5000
    ours = t5_relative_bucket(rel64.to(dtype))
    assert ours.dtype == torch.int64
    assert torch.equal(ours, _t5().T5Attention._relative_position_bucket(rel64))


@pytest.mark.parametrize("settings_", SETTINGS[:4], ids=str)
def test_t5_buckets_are_monotone_in_distance_and_saturate(settings_):
    distance = torch.arange(0, 3000)
    if settings_["bidirectional"]:
        after, before = t5_relative_bucket(distance, **settings_), t5_relative_bucket(-distance, **settings_)
        assert torch.all(after[1:] >= after[:-1]) and torch.all(before[1:] >= before[:-1])
        assert torch.all(after[1:] >= settings_["num_buckets"] // 2)  # later keys use the upper half
        assert torch.all(before < settings_["num_buckets"] // 2)
    else:
        before = t5_relative_bucket(-distance, **settings_)
        assert torch.all(before[1:] >= before[:-1])
        assert torch.all(t5_relative_bucket(distance, **settings_) == 0)  # later keys: bucket 0
    assert before[settings_["max_distance"] :].unique().numel() == 1  # one bucket for every far distance
    assert before[-1] == (settings_["num_buckets"] // (2 if settings_["bidirectional"] else 1)) - 1  # the last


def _t5_pair(bidirectional, num_heads=4):
    config = _t5().T5Config(
        num_heads=num_heads,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        d_model=32,
        d_kv=8,
        is_decoder=not bidirectional,
    )
    theirs = _t5().T5Attention(config, has_relative_attention_bias=True)
    ours = T5RelativeBias(num_heads, bidirectional=bidirectional)
    with torch.no_grad():
        ours.weight.copy_(theirs.relative_attention_bias.weight)
    return ours, theirs


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(
    ("q_len", "k_len", "offset"),
    [(1, 1, 0), (7, 7, 0), (300, 300, 0), (1, 50, 49), (4, 20, 16), (5, 9, 100), (4, 20, 0), (6, 3, 0)],
)
def test_t5_bias_equals_transformers_compute_bias(bidirectional, q_len, k_len, offset):
    ours, theirs = _t5_pair(bidirectional)
    with torch.no_grad():
        expected = theirs.compute_bias(q_len, k_len, past_seen_tokens=offset)[0]  # (h, s_q, s_k)
        got = ours(q_len, k_len, offset=offset)
        if offset == k_len - q_len:  # the default places the queries there
            assert torch.equal(ours(q_len, k_len), got)
    assert got.shape == (4, q_len, k_len)
    assert torch.equal(got, expected)


@pytest.mark.parametrize(
    ("q_len", "k_len", "offset"), [(5, 5, None), (1, 9, None), (3, 10, None), (4, 4, 2**40), (6, 2, 0)]
)
def test_t5_forward_is_the_per_distance_bias_of_the_relative_positions(q_len, k_len, offset):
    t5 = T5RelativeBias(3, num_buckets=8, max_distance=10, generator=torch.Generator().manual_seed(2))
    rel = relative_positions(q_len, k_len, offset=offset)  # (s_q, s_k)
    per_pair = t5.distance_bias(rel)  # (h, s_q, s_k)
    torch.testing.assert_close(t5(q_len, k_len, offset=offset), per_pair, rtol=0, atol=0)
    # bias() against the definition w[bucket(r), h], one entry at a time.
    for h, i, j in itertools.product(range(3), range(q_len), range(k_len)):
        bucket = _bucket_reference(int(rel[i, j]), True, 8, 10)
        assert per_pair[h, i, j] == t5.weight[bucket, h]


def test_t5_per_distance_bias_shapes_and_dtypes():
    t5 = T5RelativeBias(3, generator=torch.Generator().manual_seed(0))
    assert t5.distance_bias(torch.tensor(-4)).shape == (3,)
    assert t5.distance_bias(torch.arange(-5, 5)).shape == (3, 10)
    assert t5.distance_bias(torch.zeros(2, 4, 5, dtype=torch.long)).shape == (3, 2, 4, 5)
    rel = torch.arange(0, 120)
    torch.testing.assert_close(
        t5.distance_bias(rel.to(torch.uint8)), t5.distance_bias(rel), rtol=0, atol=0
    )  # not a boolean mask
    torch.testing.assert_close(t5.distance_bias(-rel.to(torch.int16)), t5.distance_bias(-rel), rtol=0, atol=0)


def test_t5_per_distance_bias_of_one_head():
    t5 = T5RelativeBias(3, num_buckets=8, max_distance=10, generator=torch.Generator().manual_seed(4))
    rel = torch.arange(-12, 13)
    every_head = t5.distance_bias(rel)  # (h, 25)
    for h in range(3):
        expected = torch.stack([t5.weight[_bucket_reference(r, True, 8, 10), h] for r in rel.tolist()])
        torch.testing.assert_close(t5.distance_bias(rel, h), expected, rtol=0, atol=0)
        torch.testing.assert_close(t5.distance_bias(rel, torch.tensor(h, dtype=torch.uint8)), expected, rtol=0, atol=0)
        torch.testing.assert_close(every_head[h], expected, rtol=0, atol=0)
    heads = torch.tensor([[0], [2]])  # (2, 1) broadcasts with (25,) to (2, 25)
    torch.testing.assert_close(t5.distance_bias(rel, heads), every_head[[0, 2]], rtol=0, atol=0)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_per_distance_bias_as_a_flex_attention_score_mod(bidirectional):
    b, h, L, d = 1, 4, 16, 8
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, L, d, generator=gen) for _ in range(3))
    t5 = T5RelativeBias(h, num_buckets=8, max_distance=12, bidirectional=bidirectional, generator=gen)

    def t5_score_mod(score, batch, head, q_idx, kv_idx):
        return score + t5.distance_bias(kv_idx - q_idx, head)  # relative position: key minus query

    def t5_score_mod_all_heads(score, batch, head, q_idx, kv_idx):
        return score + t5.distance_bias(kv_idx - q_idx)[head]

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention without torch.compile warns that it is unfused
        reference, _ = scaled_dot_product_attention(q, k, v, bias=t5(L, L))
        no_bias, _ = scaled_dot_product_attention(q, k, v)
        for score_mod in (t5_score_mod, t5_score_mod_all_heads):
            flex_out = flex_attention(q, k, v, score_mod=score_mod)
            torch.testing.assert_close(flex_out, reference, rtol=1e-5, atol=1e-5)
    assert (flex_out - no_bias).abs().max() > 1e-2  # the bias does change the result


def test_t5_bias_depends_on_relative_position_only_and_has_gradients():
    bias = T5RelativeBias(3, generator=torch.Generator().manual_seed(0))
    full = bias(40, 40)
    for k in range(-39, 40):
        diagonal = full.diagonal(k, dim1=-2, dim2=-1)  # (h, n)
        assert torch.equal(diagonal, diagonal[:, :1].expand_as(diagonal))
    assert torch.equal(bias(1, 40)[:, 0], full[:, 39])  # decoding step, default offset = last row
    full.sum().backward()
    assert bias.weight.grad is not None and bias.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------
# Shaw et al. (arXiv:1803.02155)


def _shaw_inputs(b=2, h=3, s_q=6, s_k=6, d=8, max_relative=2, seed=0, dtype=torch.float64, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = (scale * torch.randn(b, h, s_q, d, generator=gen, dtype=torch.float64)).to(dtype)
    k = (scale * torch.randn(b, h, s_k, d, generator=gen, dtype=torch.float64)).to(dtype)
    v = torch.randn(b, h, s_k, d, generator=gen, dtype=torch.float64).to(dtype)
    rel_k = torch.randn(2 * max_relative + 1, d, generator=gen, dtype=torch.float64).to(dtype)
    rel_v = torch.randn(2 * max_relative + 1, d, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v, rel_k, rel_v


def _shaw_reference(q, k, v, rel_k, rel_v, causal, offset):
    """Shaw et al., eqs. 3-5, in float64, one query at a time; query i sits at offset + i."""
    q, k, v, rel_k, rel_v = (t.double() for t in (q, k, v, rel_k, rel_v))
    b, h, s_q, d = q.shape
    s_k, max_rel = k.shape[2], (rel_k.shape[0] - 1) // 2
    out = torch.zeros(b, h, s_q, v.shape[-1], dtype=torch.float64)
    weights = torch.zeros(b, h, s_q, s_k, dtype=torch.float64)
    for bi, hi, i in itertools.product(range(b), range(h), range(s_q)):
        keys = [j for j in range(s_k) if not causal or j <= offset + i]
        row = {j: max(-max_rel, min(max_rel, j - (offset + i))) + max_rel for j in keys}  # clip(j - i, -k, k) + k
        e = {j: float(q[bi, hi, i] @ (k[bi, hi, j] + rel_k[row[j]])) / math.sqrt(d) for j in keys}
        top = max(e.values())
        z = sum(math.exp(x - top) for x in e.values())
        for j in keys:
            alpha = math.exp(e[j] - top) / z
            weights[bi, hi, i, j] = alpha
            out[bi, hi, i] += alpha * (v[bi, hi, j] + rel_v[row[j]])
    return out, weights


def test_shaw_naive_matches_the_paper_written_out():
    q, k, v, rel_k, rel_v = _shaw_inputs(b=1, h=1, s_q=5, s_k=5, d=4, max_relative=2)
    out, weights = shaw_attention_naive(q, k, v, rel_k, rel_v)
    for i in range(5):
        logits = torch.stack([q[0, 0, i] @ (k[0, 0, j] + rel_k[max(-2, min(2, j - i)) + 2]) / 2.0 for j in range(5)])
        alpha = torch.softmax(logits, 0)
        z = sum(alpha[j] * (v[0, 0, j] + rel_v[max(-2, min(2, j - i)) + 2]) for j in range(5))
        torch.testing.assert_close(weights[0, 0, i], alpha)
        torch.testing.assert_close(out[0, 0, i], z)


@PROPERTY
@given(data=st.data())
def test_property_shaw_both_versions_equal_the_paper(data):
    s_q, s_k = data.draw(st.integers(1, 5), label="s_q"), data.draw(st.integers(1, 6), label="s_k")
    d, max_relative = data.draw(st.integers(1, 6), label="d"), data.draw(st.integers(1, 7), label="max_relative")
    causal = data.draw(st.booleans(), label="causal")
    offset = data.draw(st.integers(0, 9) if s_q > s_k else st.one_of(st.none(), st.integers(0, 9)), label="offset")
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    args = _shaw_inputs(
        b=1,
        h=2,
        s_q=s_q,
        s_k=s_k,
        d=d,
        max_relative=max_relative,
        seed=data.draw(st.integers(0, 2**16), label="seed"),
        dtype=dtype,
    )
    expected_out, expected_weights = _shaw_reference(*args, causal, s_k - s_q if offset is None else offset)
    tol = {torch.float32: 2e-5, torch.float64: 1e-10}[dtype]
    for function in (shaw_attention_naive, shaw_attention):
        out, weights = function(*args, causal=causal, offset=offset)
        assert out.dtype == weights.dtype == dtype
        torch.testing.assert_close(out.double(), expected_out, rtol=tol, atol=tol)
        torch.testing.assert_close(weights.double(), expected_weights, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("s_q", "s_k", "max_relative", "offset"),
    [
        (6, 6, 2, 0),
        (6, 6, 10, 0),
        (1, 9, 3, 8),
        (3, 12, 4, 9),
        (16, 16, 1, 0),
        (5, 9, 2, 100),
        (4, 9, 3, None),
        (7, 3, 2, 0),
    ],
)
def test_shaw_memory_efficient_equals_naive(dtype, causal, s_q, s_k, max_relative, offset):
    args = _shaw_inputs(s_q=s_q, s_k=s_k, max_relative=max_relative, dtype=dtype)
    out_a, w_a = shaw_attention_naive(*args, causal=causal, offset=offset)
    out_b, w_b = shaw_attention(*args, causal=causal, offset=offset)
    torch.testing.assert_close(out_b, out_a)
    torch.testing.assert_close(w_b, w_a)


# Outputs are rounded to the dtype: a few of its units of tolerance; a wrong answer is off by O(1).
HALF_TOL = {torch.float16: {"atol": 3e-3, "rtol": 3e-3}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("function", [shaw_attention_naive, shaw_attention])
def test_shaw_large_magnitude_half_precision(dtype, function):
    # |q|, |k| ~ 60, d = 64: q . k passes float16's 65504 before the 1/sqrt(d) scaling.
    args = _shaw_inputs(b=1, h=2, s_q=5, s_k=7, d=64, max_relative=2, dtype=dtype, scale=60.0)
    out, weights = function(*args, causal=True)
    assert out.dtype == weights.dtype == dtype and out.isfinite().all()
    expected, _ = _shaw_reference(*args, causal=True, offset=2)
    torch.testing.assert_close(out.double(), expected, **HALF_TOL[dtype])


def test_shaw_float32_tables_with_bfloat16_queries():
    q, k, v, rel_k, rel_v = _shaw_inputs(s_q=3, s_k=5, dtype=torch.bfloat16)
    rel_k, rel_v = rel_k.float(), rel_v.float()
    expected, _ = _shaw_reference(q, k, v, rel_k, rel_v, causal=True, offset=2)
    for function in (shaw_attention_naive, shaw_attention):
        out, _ = function(q, k, v, rel_k, rel_v, causal=True)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.double(), expected, **HALF_TOL[torch.bfloat16])


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
    for a, t in zip(naive_grads, args, strict=True):
        torch.testing.assert_close(t.grad, a)


def test_shaw_indices_clip():
    index = shaw_relative_indices(4, 4, 1)
    assert index.tolist() == [[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]]
    assert shaw_relative_indices(1, 4, 2).tolist() == [[0, 0, 1, 2]]  # default: the last query, at position 3
    assert shaw_relative_indices(1, 4, 2, offset=0).tolist() == [[2, 3, 4, 4]]
    assert shaw_relative_indices(2, 3, 2**62).dtype == torch.int64


def _shaw_call(function=shaw_attention, **changes):
    args = dict(zip(["q", "k", "v", "rel_k", "rel_v"], _shaw_inputs(), strict=True))
    kwargs = {key: changes.pop(key) for key in ("causal", "offset") if key in changes}
    args.update(changes)
    return lambda: function(*args.values(), **kwargs)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: t5_relative_bucket(torch.arange(4), num_buckets=31),
            ValueError,
            "num_buckets must be even when bidirectional .*got 31",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(4), num_buckets=2),
            ValueError,
            "num_buckets must be >= 4 when bidirectional",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(4), bidirectional=False, num_buckets=1),
            ValueError,
            "num_buckets must be >= 2",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(4), num_buckets=32, max_distance=8),
            ValueError,
            "max_distance must be larger than the exact zone \\(8 distances",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(4), max_distance=2**63),
            ValueError,
            r"max_distance must be <= 2\*\*62",
        ),
        (lambda: t5_relative_bucket(torch.arange(4.0)), TypeError, "relative_position must be an integer tensor"),
        (
            lambda: t5_relative_bucket(torch.ones(4, dtype=torch.bool)),
            TypeError,
            "relative_position must be an integer tensor, got torch.bool",
        ),
        (lambda: t5_relative_bucket([1, 2]), TypeError, "relative_position must be a torch.Tensor"),
        (lambda: t5_relative_bucket(torch.arange(4), bidirectional=1), TypeError, "bidirectional must be a bool"),
        (lambda: T5RelativeBias(0), ValueError, "num_heads must be >= 1"),
        (lambda: T5RelativeBias(True), TypeError, "num_heads must be an integer, got True"),
        (lambda: T5RelativeBias(2, num_buckets=5), ValueError, "num_buckets must be even"),
        (lambda: T5RelativeBias(2, generator=0), TypeError, "generator must be a torch.Generator"),
        (lambda: T5RelativeBias(2)(0, 4), ValueError, "q_len must be >= 1, got 0"),
        (lambda: T5RelativeBias(2)(4, 3), ValueError, "q_len=4, k_len=3: pass offset explicitly"),
        (lambda: T5RelativeBias(2)(2, 3, offset=-1), ValueError, "offset must be >= 0, got -1"),
        (lambda: T5RelativeBias(2)(2, 3, offset=1.0), TypeError, "offset must be an integer"),
        (
            lambda: T5RelativeBias(2).distance_bias(torch.tensor([1.0])),
            TypeError,
            "relative_position must be an integer tensor",
        ),
        (
            lambda: T5RelativeBias(2).distance_bias(torch.tensor([True])),
            TypeError,
            "relative_position must be an integer tensor",
        ),
        (
            lambda: T5RelativeBias(2).distance_bias(torch.zeros(3, dtype=torch.long, device="meta")),
            ValueError,
            "relative_position must be on the bias's device cpu, got meta",
        ),
        (lambda: T5RelativeBias(2).distance_bias(torch.arange(3), 2), ValueError, "head must be < num_heads=2, got 2"),
        (lambda: T5RelativeBias(2).distance_bias(torch.arange(3), -1), ValueError, "head must be >= 0, got -1"),
        (lambda: T5RelativeBias(2).distance_bias(torch.arange(3), 1.0), TypeError, "head must be an integer, got 1.0"),
        (
            lambda: T5RelativeBias(2).distance_bias(torch.arange(3), torch.tensor(1.0)),
            TypeError,
            "head must be an integer tensor",
        ),
        (
            lambda: T5RelativeBias(2).distance_bias(torch.arange(3), torch.tensor(1, device="meta")),
            ValueError,
            "head must be on the bias's device cpu, got meta",
        ),
        (lambda: relative_positions(3, 3, offset=1.5), TypeError, "offset must be an integer"),
        (lambda: shaw_relative_indices(3, 3, 0), ValueError, "max_relative must be >= 1, got 0"),
        (lambda: shaw_relative_indices(3, 3, 2**63), ValueError, r"max_relative must be <= 2\*\*62"),
        (lambda: shaw_relative_indices(3, 3, 2.0), TypeError, "max_relative must be an integer"),
        (lambda: shaw_relative_indices(4, 3, 2), ValueError, "pass offset explicitly"),
        (lambda: shaw_relative_indices(3, 3, 2, offset=-2), ValueError, "offset must be >= 0, got -2"),
        (_shaw_call(rel_k=torch.zeros(4, 8), rel_v=torch.zeros(4, 8)), ValueError, "2k \\+ 1 rows"),
        (_shaw_call(rel_k=torch.zeros(5, 7)), ValueError, "rel_k must be \\(2k \\+ 1, d\\) with d = 8"),
        (_shaw_call(rel_v=torch.zeros(3, 8)), ValueError, "rel_v must be"),
        (_shaw_call(rel_k=torch.zeros(5, 8, dtype=torch.long)), TypeError, "rel_k must have a floating-point dtype"),
        (
            _shaw_call(rel_v=torch.zeros(5, 8, dtype=torch.float64, device="meta")),
            ValueError,
            "rel_v must be on q's device cpu, got meta",
        ),
        (_shaw_call(k=torch.zeros(2, 3, 6, 8)), TypeError, "q, k and v must share one dtype"),
        (_shaw_call(causal="yes"), TypeError, "causal must be a bool"),
        (_shaw_call(causal=1), TypeError, "causal must be a bool"),
        (_shaw_call(offset=-1), ValueError, "offset must be >= 0, got -1"),
        (_shaw_call(q=torch.zeros(2, 3, 8, 8, dtype=torch.float64)), ValueError, "pass offset explicitly"),
        (_shaw_call(q=torch.zeros(2, 3, 0, 8, dtype=torch.float64)), ValueError, "q_len must be >= 1|non-empty"),
        (_shaw_call(shaw_attention_naive, q=torch.zeros(2, 3, 4)), ValueError, "q must have 4 dimensions"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_defaults_are_t5s():
    config = _t5().T5Config()
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == (32, 128)
    bias = T5RelativeBias(config.num_heads)
    assert (bias.num_buckets, bias.max_distance, bias.bidirectional) == (32, 128, True)
