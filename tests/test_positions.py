"""Tests of posenc.positions: the one query/key position convention, and that every scheme follows it.

The convention: query i sits at offset + i, key j at j, relative position j - (offset + i), causal
iff j <= offset + i, offset=None meaning k_len - q_len. The decode-step tests run every position
scheme with default arguments on the last s_q queries and compare with the last rows of the full
computation: they fail if any function defaults to another alignment.
"""

import numpy as np
import pytest
import torch

from posenc import (
    T5RelativeBias,
    alibi_bias,
    causal_mask,
    relative_positions,
    resolve_offset,
    scaled_dot_product_attention,
    shaw_attention,
    shaw_attention_naive,
)


@pytest.mark.parametrize(
    ("q_len", "k_len", "offset"),
    [(1, 1, None), (4, 4, None), (1, 7, None), (3, 10, None), (3, 10, 0), (5, 2, 0), (2, 3, 9)],
)
def test_relative_positions_and_mask_follow_the_convention(q_len, k_len, offset):
    start = k_len - q_len if offset is None else offset  # the convention, written out
    rel = relative_positions(q_len, k_len, offset=offset)
    mask = causal_mask(q_len, k_len, offset=offset)
    assert rel.shape == mask.shape == (q_len, k_len)
    assert rel.dtype == torch.int64 and mask.dtype == torch.bool
    for i in range(q_len):
        for j in range(k_len):
            assert rel[i, j] == j - (start + i)
            assert mask[i, j] == (j <= start + i)
    assert resolve_offset(q_len, k_len, offset) == start


def test_default_is_bottom_right_and_square_is_lower_triangular():
    assert torch.equal(causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(relative_positions(1, 5), torch.tensor([[-4, -3, -2, -1, 0]]))  # the newest token
    assert torch.equal(relative_positions(2, 5, offset=0), torch.tensor([[0, 1, 2, 3, 4], [-1, 0, 1, 2, 3]]))
    assert causal_mask(1, 6).all()  # a decode step sees the whole cache


def test_numpy_integers_and_device_are_accepted():
    assert torch.equal(
        relative_positions(np.int64(2), np.int32(3), offset=np.int64(1)), relative_positions(2, 3, offset=1)
    )
    assert causal_mask(2, 3, device="meta").device.type == "meta"
    assert relative_positions(2, 3, device=torch.device("meta")).device.type == "meta"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "pattern"),
    [
        ((5, 3), {}, ValueError, r"q_len=5, k_len=3: pass offset explicitly"),
        ((3, 3), {"offset": -1}, ValueError, "offset must be >= 0, got -1"),
        ((3, 3), {"offset": 1.0}, TypeError, r"offset must be an integer, got 1.0"),
        ((3, 3), {"offset": True}, TypeError, "offset must be an integer, got True"),
        ((3, 3), {"offset": torch.tensor(1)}, TypeError, "offset must be an integer"),
        ((0, 3), {}, ValueError, "q_len must be >= 1, got 0"),
        ((3, -2), {}, ValueError, "k_len must be >= 1, got -2"),
        ((2.0, 3), {}, TypeError, "q_len must be an integer"),
        ((False, 3), {}, TypeError, "q_len must be an integer"),
        ((3, 3), {"offset": 2**62}, ValueError, r"positions must stay below 2\*\*62"),
        ((3, 2**63), {}, ValueError, r"k_len must be <= 2\*\*62, got 9223372036854775808"),
    ],
)
@pytest.mark.parametrize("function", [relative_positions, causal_mask])
def test_bad_arguments_raise_clear_errors(function, args, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        function(*args, **kwargs)


def test_resolve_offset_checks_like_the_functions_it_serves():
    with pytest.raises(ValueError, match="pass offset explicitly"):
        resolve_offset(4, 3)
    assert resolve_offset(4, 3, 0) == 0 and resolve_offset(3, 4) == 1


# ---------------------------------------------------------------------------------------------
# Every scheme, default arguments: a decode step (s_q = 1) and a prefill chunk (s_q = 3 of 10)
# equal the last rows of the full (s_k, s_k) computation.

H, D, MAX_REL = 3, 8, 2


def _tables(dtype):
    gen = torch.Generator().manual_seed(11)
    return (
        torch.randn(2 * MAX_REL + 1, D, generator=gen, dtype=dtype),
        torch.randn(2 * MAX_REL + 1, D, generator=gen, dtype=dtype),
    )


def _t5(bidirectional):
    return T5RelativeBias(
        H, num_buckets=8, max_distance=6, bidirectional=bidirectional, generator=torch.Generator().manual_seed(3)
    ).double()


def _sdpa(bias_fn=None, causal=True):
    """A scheme that adds bias_fn(s_q, s_k, offset) to the logits; the offset reaches mask and bias."""

    def attend(q, k, v, offset=None):
        s_q, s_k = q.shape[2], k.shape[2]
        bias = None if bias_fn is None else bias_fn(s_q, s_k, offset)
        mask_offset = {"offset": offset} if causal else {}  # offset only positions the causal mask
        return scaled_dot_product_attention(q, k, v, bias=bias, causal=causal, **mask_offset)

    return attend


def _alibi(s_q, s_k, offset):
    return alibi_bias(H, s_q, s_k, offset=offset, dtype=torch.float64)


def _shaw(function, causal):
    return lambda q, k, v, offset=None: function(q, k, v, *_tables(q.dtype), causal=causal, offset=offset)


SCHEMES = {
    "plain causal": _sdpa(),
    "alibi causal": _sdpa(_alibi),
    "alibi bidirectional": _sdpa(_alibi, causal=False),
    "t5 causal": _sdpa(lambda s_q, s_k, offset: _t5(False)(s_q, s_k, offset=offset)),
    "t5 bidirectional": _sdpa(lambda s_q, s_k, offset: _t5(True)(s_q, s_k, offset=offset), causal=False),
    "shaw naive causal": _shaw(shaw_attention_naive, True),
    "shaw causal": _shaw(shaw_attention, True),
    "shaw naive bidirectional": _shaw(shaw_attention_naive, False),
    "shaw bidirectional": _shaw(shaw_attention, False),
}


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(("s_q", "s_k"), [(1, 10), (3, 10), (10, 10)])
def test_decode_step_and_prefill_chunk_equal_the_last_rows_of_the_full_computation(scheme, s_q, s_k):
    attend = SCHEMES[scheme]
    gen = torch.Generator().manual_seed(s_q)
    q, k, v = (torch.randn(2, H, s_k, D, generator=gen, dtype=torch.float64) for _ in range(3))
    full_out, full_weights = attend(q, k, v)
    out, weights = attend(q[:, :, -s_q:], k, v)  # default arguments: queries are the last s_q positions
    torch.testing.assert_close(out, full_out[:, :, -s_q:], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, full_weights[:, :, -s_q:], rtol=1e-12, atol=1e-12)
    explicit, _ = attend(q[:, :, -s_q:], k, v, offset=s_k - s_q)
    torch.testing.assert_close(explicit, out, rtol=0, atol=0)
    if s_q < s_k:
        # The comparison has teeth: the same queries placed first (offset=0, top-left) differ.
        top_left, _ = attend(q[:, :, -s_q:], k, v, offset=0)
        assert (top_left - out).abs().max() > 1e-3, f"{scheme}: offset=0 gave the same answer as the default"
