"""Tests of posenc.rope: the rotation identities, and exact agreement with transformers' RoPE."""

import math

import pytest
import torch
from transformers import CohereConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.cohere import modeling_cohere as cohere  # test-only dependency
from transformers.models.llama import modeling_llama as llama

from posenc import RotaryEmbedding, apply_rope, rope_cos_sin, rope_inv_freq

HEAD_DIM = 64


def _qk(b=2, h=3, s=50, d=HEAD_DIM, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, s, d, generator=gen, dtype=dtype) for _ in range(2))


def _llama_config(base, scaling, max_positions=4096):
    rope_parameters = {"rope_type": "default", "rope_theta": base, **(scaling or {})}
    if scaling and scaling.get("rope_type") == "dynamic":
        # transformers' dynamic NTK reads the original length from max_position_embeddings
        max_positions = scaling["original_max_position_embeddings"]
        rope_parameters.pop("original_max_position_embeddings")
    return LlamaConfig(hidden_size=HEAD_DIM * 4, num_attention_heads=4, head_dim=HEAD_DIM,
                       max_position_embeddings=max_positions, rope_parameters=rope_parameters)


SCALINGS = [
    None,
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "linear", "factor": 8.0},
    {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 512},
    {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 1024},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "attention_factor": 1.2},
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.8},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "truncate": False},
    {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=str)
@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("seq_len", [None, 300, 5000])
def test_inv_freq_equals_transformers(scaling, base, seq_len):
    config = _llama_config(base, scaling)
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "default":
        theirs, their_scale = llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        # Models pass the length as a tensor (max(position_ids) + 1), which dynamic NTK computes with in float32.
        length = torch.tensor(seq_len) if seq_len is not None else None
        theirs, their_scale = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=length)
    ours, our_scale = rope_inv_freq(HEAD_DIM, base=base, scaling=scaling, seq_len=seq_len)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    assert our_scale == pytest.approx(their_scale, rel=1e-12)


@pytest.mark.parametrize("scaling", SCALINGS, ids=str)
@pytest.mark.parametrize("positions", ["range", "offset", "batched"])
def test_half_pairing_equals_transformers_llama(scaling, positions):
    base = 10000.0
    config = _llama_config(base, scaling)
    q, k = _qk(s=40)
    position_ids = {
        "range": torch.arange(40)[None],
        "offset": torch.arange(3000, 3040)[None],
        "batched": torch.stack([torch.arange(40), torch.arange(100, 140)]),
    }[positions]
    rotary = llama.LlamaRotaryEmbedding(config)
    cos, sin = rotary(q, position_ids)
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)
    ids = position_ids[0] if positions != "batched" else position_ids
    q_ours, k_ours = apply_rope(q, ids, base=base, scaling=scaling), apply_rope(k, ids, base=base, scaling=scaling)
    torch.testing.assert_close(q_ours, q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_ours, k_ref, rtol=1e-5, atol=1e-5)
    module = RotaryEmbedding(HEAD_DIM, max_positions=4096, base=base, scaling=scaling)
    q_mod, k_mod = module(q, k, ids)
    torch.testing.assert_close(q_mod, q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_mod, k_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("base", [10000.0, 1000000.0])
def test_interleaved_pairing_equals_transformers_cohere(base):
    config = CohereConfig(hidden_size=HEAD_DIM * 4, num_attention_heads=4, max_position_embeddings=8192,
                          rope_parameters={"rope_type": "default", "rope_theta": base})
    q, k = _qk(s=64)
    position_ids = torch.arange(1000, 1064)[None]
    cos, sin = cohere.CohereRotaryEmbedding(config)(q, position_ids)
    q_ref, k_ref = cohere.apply_rotary_pos_emb(q, k, cos, sin)
    module = RotaryEmbedding(HEAD_DIM, max_positions=8192, base=base, pairing="interleaved")
    q_ours, k_ours = module(q, k, position_ids[0])
    torch.testing.assert_close(q_ours, q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_ours, k_ref, rtol=1e-5, atol=1e-5)


def test_interleaved_pairing_equals_meta_complex_multiplication():
    # Meta's LLaMA reference: view pairs (2i, 2i+1) as complex numbers, multiply by exp(i m theta).
    q, _ = _qk(s=30, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    rotation = torch.polar(torch.ones(30, HEAD_DIM // 2, dtype=torch.float64), torch.arange(30.0, dtype=torch.float64)[:, None] * theta)
    expected = torch.view_as_real(torch.view_as_complex(q.reshape(2, 3, 30, HEAD_DIM // 2, 2)) * rotation).flatten(-2)
    torch.testing.assert_close(apply_rope(q, torch.arange(30), pairing="interleaved"), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_scores_depend_on_the_offset_only_and_norms_are_kept(pairing):
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 1, 1, HEAD_DIM, generator=gen, dtype=torch.float64), torch.randn(1, 1, 1, HEAD_DIM, generator=gen, dtype=torch.float64)
    rotate = lambda x, m: apply_rope(x, torch.tensor([m]), pairing=pairing)  # noqa: E731
    for m, n in [(0, 5), (7, 12), (1000, 1005), (3, 3), (50, 20)]:
        score = (rotate(q, m) * rotate(k, n)).sum()
        assert torch.allclose(score, (q * rotate(k, n - m) if n >= m else rotate(q, m - n) * k).sum())
        assert torch.allclose(score, (rotate(q, m + 333) * rotate(k, n + 333)).sum())
    assert torch.allclose(rotate(q, 12345).norm(), q.norm())


def test_half_and_interleaved_are_a_fixed_permutation_apart():
    q, _ = _qk(dtype=torch.float64)
    half = HEAD_DIM // 2
    to_interleaved = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()  # i, i + d/2, ...
    positions = torch.arange(50)
    torch.testing.assert_close(
        apply_rope(q, positions, pairing="half")[..., to_interleaved],
        apply_rope(q[..., to_interleaved], positions, pairing="interleaved"),
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes_are_kept(dtype):
    q, k = _qk(dtype=dtype)
    module = RotaryEmbedding(HEAD_DIM, max_positions=64)
    q_out, k_out = module(q, k, torch.arange(50))
    assert q_out.dtype == k_out.dtype == dtype
    reference = apply_rope(q.double(), torch.arange(50))
    torch.testing.assert_close(q_out.double(), reference, rtol=2e-2, atol=2e-2)


def test_module_changes_no_state_and_does_not_touch_inputs():
    module = RotaryEmbedding(HEAD_DIM, max_positions=128)
    before = {name: t.clone() for name, t in module.state_dict(keep_vars=True).items()}
    cos, sin = module.cos.clone(), module.sin.clone()
    q, k = _qk()
    q0, k0 = q.clone(), k.clone()
    module(q, k, torch.arange(50))
    assert torch.equal(q, q0) and torch.equal(k, k0)
    assert torch.equal(module.cos, cos) and torch.equal(module.sin, sin)
    assert before == {} and "cos" not in module.state_dict()  # buffers are not persistent


def test_dynamic_module_follows_sequence_length_without_state():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32}
    module = RotaryEmbedding(HEAD_DIM, max_positions=256, scaling=scaling)
    q, k = _qk(s=100)
    q_long, _ = module(q, k, torch.arange(100))
    q_short, _ = module(q[:, :, :10], k[:, :, :10], torch.arange(10))
    torch.testing.assert_close(q_short, apply_rope(q[:, :, :10], torch.arange(10)))  # short: original frequencies
    torch.testing.assert_close(q_long, apply_rope(q, torch.arange(100), scaling=scaling))
    assert not torch.allclose(q_long[:, :, :10], q_short)


def test_cos_sin_and_attention_scale():
    inv_freq, scale = rope_inv_freq(8, scaling={"rope_type": "yarn", "factor": math.e**10, "original_max_position_embeddings": 64})
    assert scale == pytest.approx(0.1 * 10 + 1)
    cos, sin = rope_cos_sin(torch.arange(5), inv_freq, attention_scale=scale)
    torch.testing.assert_close(cos**2 + sin**2, torch.full((5, 4), scale**2))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: rope_inv_freq(63), ValueError, "head_dim must be even.*got 63"),
        (lambda: rope_inv_freq(64, base=1.0), ValueError, "base must be > 1"),
        (lambda: rope_inv_freq(64, scaling="linear"), TypeError, "scaling must be a dict"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "ntk"}), ValueError, "rope_type.*must be one of.*got 'ntk'"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "linear"}), ValueError, "needs scaling keys \\['factor'\\]"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "linear", "factor": 0.5}), ValueError, "factor'\\] must be >= 1.*0.5"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "linear", "factr": 2}), ValueError, "unknown key\\(s\\) \\['factr'\\]"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "default", "rope_theta": 5e5}), ValueError, "pass the RoPE base as base="),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 8192, "low_freq_factor": 4, "high_freq_factor": 1}), ValueError, "high_freq_factor'\\] must be > low_freq_factor"),
        (lambda: rope_inv_freq(64, scaling={"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1.5}), TypeError, "original_max_position_embeddings'\\] must be an integer"),
        (lambda: rope_inv_freq(64, seq_len=0), ValueError, "seq_len must be >= 1"),
        (lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(4.0)), TypeError, "positions must be an integer tensor"),
        (lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(5)), ValueError, "positions must be \\(s,\\) or \\(b, s\\) with s = 4"),
        (lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.tensor([0, 1, -2, 3])), ValueError, "positions must be >= 0"),
        (lambda: apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(4), pairing="neox"), ValueError, "pairing must be one of.*'neox'"),
        (lambda: apply_rope(torch.zeros(1, 4, 8), torch.arange(4)), ValueError, "x must have 4 dimensions"),
        (lambda: RotaryEmbedding(8, max_positions=4)(torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 5, 8), torch.arange(5)), ValueError, "position 4 is past max_positions=4"),
        (lambda: RotaryEmbedding(8, max_positions=8)(torch.zeros(1, 1, 5, 6), torch.zeros(1, 1, 5, 6), torch.arange(5)), ValueError, "head_dim 8"),
        (lambda: RotaryEmbedding(7, max_positions=8), ValueError, "head_dim must be even"),
        (lambda: RotaryEmbedding(8, max_positions=0), ValueError, "max_positions must be >= 1"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_current_model_families_rotate_like_half_pairing(family):
    import importlib

    from posenc import rope_cos_sin

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    q, k = _qk(s=20)
    positions = torch.arange(100, 120)
    cos, sin = rope_cos_sin(positions, rope_inv_freq(HEAD_DIM, base=1e6)[0])
    cos, sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    q_ref, k_ref = module.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_rope(q, positions, base=1e6), q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(apply_rope(k, positions, base=1e6), k_ref, rtol=1e-5, atol=1e-5)
