"""Tests of posenc._checks: integer bounds, exact positions, and that every public entry point that takes an
integer refuses one of 2**70 with a ValueError naming the argument (not an OverflowError from torch, a hang
or an allocation of 2**70 elements)."""

import pytest
import torch

import posenc
from posenc import batching, tasks, variants
from posenc._checks import MAX_INT, check_exact_positions, check_int, exact_integer_limit

HUGE = 2**70


def test_check_int_bounds():
    assert check_int("n", MAX_INT) == MAX_INT and check_int("n", -MAX_INT) == -MAX_INT
    with pytest.raises(ValueError, match=r"n must be <= 2\*\*62, got 4611686018427387905"):
        check_int("n", MAX_INT + 1)
    with pytest.raises(ValueError, match=r"n must be >= -2\*\*62"):
        check_int("n", -MAX_INT - 1)
    with pytest.raises(ValueError, match="n must be <= 10, got 11"):
        check_int("n", 11, maximum=10)
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        check_int("n", 0, minimum=1)
    with pytest.raises(TypeError, match="n must be an integer"):
        check_int("n", True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_check_exact_positions_refuses_what_the_dtype_rounds(dtype):
    limit = exact_integer_limit(dtype)
    exact = torch.tensor([0, limit, -limit])
    assert check_exact_positions("positions", exact, dtype) is exact
    # the first integer past the limit really is rounded, so refusing it is right
    assert torch.tensor(limit + 1, dtype=torch.int64).to(dtype).to(torch.int64) != limit + 1
    for bad in (limit + 1, -limit - 1):
        with pytest.raises(ValueError, match=rf"positions must be <= 2\*\*\d+ = {limit} .* got {limit + 1}"):
            check_exact_positions("positions", torch.tensor([3, bad]), dtype)
    floats = torch.tensor([2.0**60])  # already a float: nothing left to lose, returned as it is
    assert check_exact_positions("positions", floats, dtype) is floats


def _qkv(s=3):
    return (torch.zeros(1, 2, s, 4) for _ in range(3))


def _model():
    return posenc.TinyTransformer(8, position="none", dim=8, num_heads=2, num_layers=1, device="cpu")


# (name of the argument, call): each call passes 2**70 to that argument of a public entry point.
HUGE_CALLS = {
    "alibi_slopes num_heads": ("num_heads", lambda: posenc.alibi_slopes(HUGE)),
    "alibi_bias num_heads": ("num_heads", lambda: posenc.alibi_bias(HUGE, 1, 1)),
    "alibi_bias k_len": ("k_len", lambda: posenc.alibi_bias(2, 1, HUGE)),
    "alibi_bias offset": ("offset", lambda: posenc.alibi_bias(2, 1, 1, offset=HUGE)),
    "causal_mask k_len": ("k_len", lambda: posenc.causal_mask(1, HUGE)),
    "causal_mask q_len": ("q_len", lambda: posenc.causal_mask(HUGE, 1, offset=0)),
    "relative_positions offset": ("offset", lambda: posenc.relative_positions(1, 1, offset=HUGE)),
    "resolve_offset k_len": ("k_len", lambda: posenc.resolve_offset(1, HUGE)),
    "scaled_dot_product_attention offset": (
        "offset",
        lambda: posenc.scaled_dot_product_attention(*_qkv(), causal=True, offset=HUGE),
    ),
    "LearnedPositionalEmbedding max_positions": ("max_positions", lambda: posenc.LearnedPositionalEmbedding(HUGE, 4)),
    "LearnedPositionalEmbedding dim": ("dim", lambda: posenc.LearnedPositionalEmbedding(4, HUGE)),
    "TinyTransformer vocab_size": ("vocab_size", lambda: posenc.TinyTransformer(HUGE, position="none")),
    "TinyTransformer dim": ("dim", lambda: posenc.TinyTransformer(8, position="none", dim=HUGE)),
    "TinyTransformer num_heads": ("num_heads", lambda: posenc.TinyTransformer(8, position="none", num_heads=HUGE)),
    "TinyTransformer num_layers": ("num_layers", lambda: posenc.TinyTransformer(8, position="none", num_layers=HUGE)),
    "TinyTransformer seed": ("seed", lambda: posenc.TinyTransformer(8, position="none", seed=HUGE)),
    "TinyTransformer shaw max_relative": (
        "max_relative",
        lambda: posenc.TinyTransformer(8, position="shaw", position_options={"max_relative": HUGE}),
    ),
    "TinyTransformer irope nope_every": (
        "nope_every",
        lambda: posenc.TinyTransformer(8, position="irope", position_options={"nope_every": HUGE}),
    ),
    "T5RelativeBias num_heads": ("num_heads", lambda: posenc.T5RelativeBias(HUGE)),
    "T5RelativeBias num_buckets": ("num_buckets", lambda: posenc.T5RelativeBias(2, num_buckets=HUGE)),
    "T5RelativeBias max_distance": ("max_distance", lambda: posenc.T5RelativeBias(2, max_distance=HUGE)),
    "T5RelativeBias forward k_len": ("k_len", lambda: posenc.T5RelativeBias(2)(1, HUGE)),
    "T5RelativeBias forward offset": ("offset", lambda: posenc.T5RelativeBias(2)(1, 1, offset=HUGE)),
    "t5_relative_bucket num_buckets": (
        "num_buckets",
        lambda: posenc.t5_relative_bucket(torch.arange(3), num_buckets=HUGE),
    ),
    "t5_relative_bucket max_distance": (
        "max_distance",
        lambda: posenc.t5_relative_bucket(torch.arange(3), max_distance=HUGE),
    ),
    "t5_exact_zone num_buckets": ("num_buckets", lambda: posenc.t5_exact_zone(HUGE)),
    "shaw_relative_indices max_relative": ("max_relative", lambda: posenc.shaw_relative_indices(1, 1, HUGE)),
    "shaw_relative_indices k_len": ("k_len", lambda: posenc.shaw_relative_indices(1, HUGE, 2)),
    "shaw_attention offset": (
        "offset",
        lambda: posenc.shaw_attention(*_qkv(), torch.zeros(5, 4), torch.zeros(5, 4), causal=True, offset=HUGE),
    ),
    "position_ids_from_mask pad_position": (
        "pad_position",
        lambda: batching.position_ids_from_mask(torch.ones(1, 3, dtype=torch.bool), pad_position=HUGE),
    ),
    "packed_document_ids doc_lengths": ("doc_lengths", lambda: batching.packed_document_ids([2, HUGE])),
    "packed_position_ids doc_lengths": ("doc_lengths", lambda: batching.packed_position_ids([HUGE])),
    "streaming_cache_indices seq_len": (
        "seq_len",
        lambda: batching.streaming_cache_indices(HUGE, cache_size=4, num_sinks=1),
    ),
    "streaming_cache_indices cache_size": (
        "cache_size",
        lambda: batching.streaming_cache_indices(8, cache_size=HUGE, num_sinks=1),
    ),
    "streaming_cache_indices num_sinks": (
        "num_sinks",
        lambda: batching.streaming_cache_indices(8, cache_size=4, num_sinks=HUGE),
    ),
    "rope_inv_freq head_dim": ("head_dim", lambda: posenc.rope_inv_freq(HUGE)),
    "RotaryEmbedding max_positions": ("max_positions", lambda: posenc.RotaryEmbedding(8, max_positions=HUGE)),
    "sinusoid_frequencies dim": ("dim", lambda: posenc.sinusoid_frequencies(HUGE)),
    "sinusoidal_table n_positions": ("n_positions", lambda: posenc.sinusoidal_table(HUGE, 4)),
    "sinusoidal_encoding dim": ("dim", lambda: posenc.sinusoidal_encoding(torch.arange(3), HUGE)),
    "xpos_zeta head_dim": ("head_dim", lambda: posenc.xpos_zeta(HUGE)),
    "p_rope_inv_freq head_dim": ("head_dim", lambda: variants.p_rope_inv_freq(HUGE, p=0.5)),
    "irope_layers num_layers": ("num_layers", lambda: variants.irope_layers(HUGE)),
    "irope_layers nope_every": ("nope_every", lambda: variants.irope_layers(4, nope_every=HUGE)),
    "llama4_attention_scale floor_scale": (
        "floor_scale",
        lambda: variants.llama4_attention_scale(torch.arange(3), floor_scale=HUGE),
    ),
    "fire_normalized_distance k_len": ("k_len", lambda: variants.fire_normalized_distance(1, HUGE)),
    "FIREBias num_heads": ("num_heads", lambda: variants.FIREBias(HUGE)),
    "FIREBias hidden": ("hidden", lambda: variants.FIREBias(2, hidden=HUGE)),
    "FIREBias forward k_len": ("k_len", lambda: variants.FIREBias(2)(1, HUGE)),
    "irope_transformer max_positions": (
        "max_positions",
        lambda: variants.irope_transformer(8, max_positions=HUGE, dim=8, num_heads=2, device="cpu"),
    ),
    "lag_copy_targets lag": ("lag", lambda: tasks.lag_copy_targets(torch.zeros(1, 4, dtype=torch.long), lag=HUGE)),
    "lag_copy_batch length": ("length", lambda: tasks.lag_copy_batch(torch.Generator(), 2, HUGE, vocab_size=4, lag=1)),
    "marker_recall_batch batch": (
        "batch",
        lambda: tasks.marker_recall_batch(torch.Generator(), HUGE, 5, vocab_size=4),
    ),
    "accuracy_per_position seed": (
        "seed",
        lambda: tasks.accuracy_per_position(_model(), length=4, vocab_size=8, seed=HUGE, lag=1),
    ),
    "train steps": (
        "steps",
        lambda: tasks.train(_model(), steps=HUGE, batch=2, lr=1e-3, seed=0, vocab_size=8, lag=1, min_len=2, max_len=4),
    ),
    "WithStartToken start_token": ("start_token", lambda: tasks.WithStartToken(_model(), start_token=HUGE)),
}


@pytest.mark.parametrize("case", HUGE_CALLS)
def test_an_integer_of_2_to_the_70_is_refused_with_a_named_value_error(case):
    name, call = HUGE_CALLS[case]
    with pytest.raises(ValueError, match=rf"{name}.*{HUGE}|{name}.*2\*\*"):
        call()
