"""Tests of posenc.batching: positions and masks for left padding, packing and streaming caches.

The strongest checks are behavioural: a left-padded or packed row run through a RoPE attention with
these positions and masks gives, for each real token, the output of its document run alone; and the
position ids equal the ones transformers builds where it defines the convention.
"""

import pytest
import torch

from posenc import apply_rope, scaled_dot_product_attention, sinusoidal_encoding
from posenc.batching import (
    additive_mask,
    document_causal_mask,
    packed_document_ids,
    packed_position_ids,
    padding_causal_mask,
    position_ids_from_mask,
    streaming_cache_indices,
)


def _rope_attention(x, positions, allowed):
    """One head of RoPE attention with q = k = v = x; x (b, s, d), positions (b, s), allowed (b, s, s)."""
    x = x[:, None]  # (b, 1, s, d)
    q = apply_rope(x, positions)
    k = apply_rope(x, positions)
    bias = additive_mask(allowed, dtype=x.dtype)[:, None]  # (b, 1, s, s)
    out, _ = scaled_dot_product_attention(q, k, x, bias=bias)
    return out[:, 0]  # (b, s, d)


def test_position_ids_from_mask_counts_real_tokens():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 1, 0, 2]])
    assert torch.equal(position_ids_from_mask(mask), expected)
    assert torch.equal(position_ids_from_mask(mask.bool()), expected)
    padded = position_ids_from_mask(mask, pad_position=7)
    assert torch.equal(padded[mask.bool()], expected[mask.bool()])
    assert (padded[~mask.bool()] == 7).all()
    assert position_ids_from_mask(mask).dtype == torch.int64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_left_padded_rows_equal_their_unpadded_runs(dtype):
    g = torch.Generator().manual_seed(0)
    lengths, s, d = [5, 3, 1], 5, 8
    x = torch.randn(len(lengths), s, d, generator=g, dtype=dtype)
    mask = torch.tensor([[0] * (s - n) + [1] * n for n in lengths])
    out = _rope_attention(x, position_ids_from_mask(mask), padding_causal_mask(mask))
    assert out.isfinite().all()  # padded queries see themselves: no empty softmax row
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for row, n in enumerate(lengths):
        alone = x[row : row + 1, s - n :]  # (1, n, d)
        ref = _rope_attention(alone, torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril()[None])
        torch.testing.assert_close(out[row, s - n :], ref[0], atol=tol, rtol=tol)


def test_column_positions_shift_every_row_by_its_padding():
    # column = position + number of pads: RoPE's scores see only differences, so they do not notice;
    # an absolute encoding added to the input does (the notebook shows both).
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    columns = torch.arange(4).expand(2, 4)
    pads = (mask == 0).sum(-1, keepdim=True)  # (b, 1)
    real = mask.bool()
    assert torch.equal((columns - pads)[real], position_ids_from_mask(mask)[real])
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    allowed = padding_causal_mask(mask)
    right = _rope_attention(x, position_ids_from_mask(mask), allowed)
    torch.testing.assert_close(_rope_attention(x, columns, allowed)[real], right[real], atol=1e-12, rtol=0)
    absolute = [
        _rope_attention(x + sinusoidal_encoding(p, 8, dtype=torch.float64), torch.zeros_like(p), allowed)
        for p in (position_ids_from_mask(mask), columns)
    ]
    assert (absolute[0][0, 2:] - absolute[1][0, 2:]).abs().max() > 1e-3  # the padded row moves
    torch.testing.assert_close(absolute[0][1], absolute[1][1], atol=0, rtol=0)  # the full row does not


def test_padding_causal_mask():
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    allowed = padding_causal_mask(mask)
    assert allowed.shape == (2, 3, 3) and allowed.dtype == torch.bool
    assert torch.equal(allowed[1], torch.ones(3, 3, dtype=torch.bool).tril())
    expected = torch.tensor([[True, False, False], [False, True, False], [False, True, True]])
    assert torch.equal(allowed[0], expected)
    assert allowed.any(-1).all()  # no row without a key


def test_packed_ids():
    assert torch.equal(packed_document_ids([2, 3, 1]), torch.tensor([0, 0, 1, 1, 1, 2]))
    assert torch.equal(packed_position_ids([2, 3, 1]), torch.tensor([0, 1, 0, 1, 2, 0]))
    assert torch.equal(packed_position_ids(torch.tensor([4])), torch.arange(4))
    allowed = document_causal_mask(packed_document_ids([2, 3, 1]))
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for lo, hi in ((0, 2), (2, 5), (5, 6)):
        expected[lo:hi, lo:hi] = torch.ones(hi - lo, hi - lo, dtype=torch.bool).tril()
    assert torch.equal(allowed, expected)
    batched = document_causal_mask(torch.stack([packed_document_ids([2, 3, 1]), torch.zeros(6, dtype=torch.long)]))
    assert batched.shape == (2, 6, 6)
    assert torch.equal(batched[0], expected)
    assert torch.equal(batched[1], torch.ones(6, 6, dtype=torch.bool).tril())


def test_packed_documents_equal_their_separate_runs():
    g = torch.Generator().manual_seed(1)
    lengths, d = [3, 4, 2], 8
    x = torch.randn(1, sum(lengths), d, generator=g, dtype=torch.float64)
    doc = packed_document_ids(lengths)
    out = _rope_attention(x, packed_position_ids(lengths)[None], document_causal_mask(doc)[None])
    start = 0
    for n in lengths:
        ref = _rope_attention(
            x[:, start : start + n], torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril()[None]
        )
        torch.testing.assert_close(out[:, start : start + n], ref, atol=1e-12, rtol=1e-12)
        start += n


def test_additive_mask():
    allowed = torch.tensor([[True, False], [True, True]])
    bias = additive_mask(allowed, dtype=torch.float64)
    assert bias.dtype == torch.float64
    assert torch.equal(bias, torch.tensor([[0.0, float("-inf")], [0.0, 0.0]], dtype=torch.float64))


def test_streaming_cache_indices():
    assert torch.equal(streaming_cache_indices(5, cache_size=8, num_sinks=4), torch.arange(5))
    kept = streaming_cache_indices(20, cache_size=8, num_sinks=4)
    assert torch.equal(kept, torch.tensor([0, 1, 2, 3, 16, 17, 18, 19]))
    assert torch.equal(streaming_cache_indices(20, cache_size=3, num_sinks=0), torch.tensor([17, 18, 19]))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: position_ids_from_mask([[1, 1]]), TypeError, "attention_mask must be a torch.Tensor"),
        (lambda: position_ids_from_mask(torch.ones(3, dtype=torch.long)), ValueError, "attention_mask must have 2"),
        (lambda: position_ids_from_mask(torch.ones(1, 3)), TypeError, "attention_mask must be an integer or bool"),
        (lambda: position_ids_from_mask(torch.tensor([[1, 2]])), ValueError, "only 0 and 1, got 2"),
        (lambda: position_ids_from_mask(torch.ones(1, 2, dtype=torch.long), pad_position=-1), ValueError, "pad_pos"),
        (lambda: padding_causal_mask(torch.tensor([[1, -1]])), ValueError, "only 0 and 1, got -1"),
        (lambda: packed_position_ids([2, 0]), ValueError, r"doc_lengths\[1\] must be >= 1, got 0"),
        (lambda: packed_position_ids([]), ValueError, "at least one document"),
        (lambda: packed_position_ids("abc"), TypeError, "doc_lengths must be a sequence"),
        (lambda: packed_position_ids([2.0]), TypeError, r"doc_lengths\[0\] must be an integer"),
        (lambda: packed_document_ids(torch.tensor([[2]])), ValueError, "doc_lengths must be 1-D"),
        (lambda: packed_document_ids(torch.tensor([2.0])), TypeError, "doc_lengths must be an integer tensor"),
        (lambda: document_causal_mask(torch.tensor([0.0, 1.0])), TypeError, "doc_ids must be an integer tensor"),
        (lambda: document_causal_mask(torch.tensor([0, 1, 0])), ValueError, "doc_ids must not decrease"),
        (lambda: document_causal_mask(torch.zeros(1, 1, 2, dtype=torch.long)), ValueError, "doc_ids must be"),
        (lambda: additive_mask(torch.ones(2)), TypeError, "allowed must be a bool tensor"),
        (lambda: additive_mask(torch.ones(2, dtype=torch.bool), dtype=torch.long), TypeError, "dtype must be"),
        (lambda: streaming_cache_indices(0, cache_size=4, num_sinks=1), ValueError, "seq_len must be >= 1, got 0"),
        (lambda: streaming_cache_indices(9, cache_size=4, num_sinks=4), ValueError, "num_sinks must be < cache_size"),
        (lambda: streaming_cache_indices(9, cache_size=4, num_sinks=-1), ValueError, "num_sinks must be >= 0"),
        (lambda: streaming_cache_indices(9, cache_size=True, num_sinks=1), TypeError, "cache_size must be an integer"),
    ],
)
def test_bad_inputs_raise_and_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_position_ids_match_transformers_generate():
    generation = pytest.importorskip("transformers.generation.utils")
    prepare = getattr(generation.GenerationMixin, "_prepare_position_ids_for_generation", None)
    if prepare is None:
        pytest.skip("this transformers version builds position ids elsewhere")
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    input_ids = torch.ones_like(mask)
    # the method reads only its arguments on the attention-mask path (self is not used there)
    theirs = prepare(None, input_ids, {"attention_mask": mask})
    assert torch.equal(position_ids_from_mask(mask), theirs)


def test_packed_ids_match_transformers_flattening_collator():
    transformers = pytest.importorskip("transformers")
    collator = transformers.DataCollatorWithFlattening(return_tensors="pt", return_seq_idx=True)
    lengths = [2, 5, 1, 3]
    features = [{"input_ids": list(range(10, 10 + n))} for n in lengths]
    batch = collator(features)
    assert torch.equal(packed_position_ids(lengths), batch["position_ids"][0])
    assert torch.equal(packed_document_ids(lengths), batch["seq_idx"][0].long())
    masking = pytest.importorskip("transformers.masking_utils")
    found = masking.find_packed_sequence_indices(packed_position_ids(lengths)[None])
    assert torch.equal(packed_document_ids(lengths), found[0])
