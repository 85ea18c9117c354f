"""Tests of posenc.rope: the rotation against the paper's 2x2 matrices, exact agreement with transformers'
RoPE (bit for bit in every dtype), the compiled form, the module's state, and clear errors.

transformers is imported lazily (``_tf``), so the tests against the paper run without it."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lazy_transformers import transformers_attr as _tf

from posenc import (
    PAIRINGS,
    RotaryEmbedding,
    apply_rope,
    rope_cos_sin,
    rope_inv_freq,
    rope_rotate,
    rope_rotate_reference,
    sinusoid_frequencies,
)

HEAD_DIM = 64
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
# The rotation in a dtype against the paper's float64 rotation of the same (rounded) inputs: cos and
# sin rounded to the dtype, two products and a sum, each rounded: a few ulps on values of size ~3.
TOLERANCES = {
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
    torch.float32: {"rtol": 1e-6, "atol": 5e-6},
    torch.bfloat16: {"rtol": 3e-2, "atol": 6e-2},  # bf16 ulp at 4 is 2^-5
    torch.float16: {"rtol": 4e-3, "atol": 8e-3},  # fp16 ulp at 4 is 2^-8
}


def _qk(b=2, h=3, s=50, d=HEAD_DIM, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=gen, dtype=torch.float64).to(dtype) for _ in range(2))


def paper_rotation(x, positions, theta, pairing):
    """RoFormer eq. 34 written plainly, in float64: a 2x2 rotation matrix per pair and position."""
    d = x.shape[-1]
    pairs = (
        [(i, i + d // 2) for i in range(d // 2)] if pairing == "half" else [(2 * i, 2 * i + 1) for i in range(d // 2)]
    )
    out = x.double().clone()
    for j, m in enumerate(positions.tolist()):
        for i, (a, b) in enumerate(pairs):
            angle = m * float(theta[i])
            rot = torch.tensor(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64
            )
            out[..., j, [a, b]] = x.double()[..., j, [a, b]] @ rot.T
    return out


def _theta(d, base=10000.0):
    return [base ** (-2 * i / d) for i in range(d // 2)]  # the paper's theta_i, in Python floats


def test_frequencies_are_the_papers_to_float32_rounding():
    # posenc keeps theta_i in float32, as transformers does; the rotations below use those values.
    for d, base in [(8, 10000.0), (64, 500000.0), (128, 1e6)]:
        torch.testing.assert_close(
            rope_inv_freq(d, base=base)[0].double(),
            torch.tensor(_theta(d, base), dtype=torch.float64),
            rtol=1.2e-7,
            atol=0,
        )


# --- the formula ------------------------------------------------------------------------------


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_apply_rope_equals_the_papers_rotation_matrices(pairing):
    q, _ = _qk(b=1, h=2, s=7, d=8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 100, 4096, 70000])
    expected = paper_rotation(q, positions, rope_inv_freq(8)[0].tolist(), pairing)  # float64 angles of float32 theta
    torch.testing.assert_close(apply_rope(q, positions, pairing=pairing), expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(
    m=st.integers(0, 10**6),
    n=st.integers(0, 10**6),
    shift=st.integers(0, 10**6),
    half_d=st.integers(1, 8),
    base=st.floats(2.0, 1e6),
    pairing=st.sampled_from(["half", "interleaved"]),
    seed=st.integers(0, 2**16),
)
def test_scores_depend_on_n_minus_m_only_and_norms_are_kept(m, n, shift, half_d, base, pairing, seed):
    d = 2 * half_d
    q, k = _qk(b=1, h=1, s=1, d=d, dtype=torch.float64, seed=seed)
    rotate = lambda x, p: apply_rope(x, torch.tensor([p]), base=base, pairing=pairing)  # noqa: E731
    score = (rotate(q, m) * rotate(k, n)).sum()
    # <R_m q, R_n k> = <R_{m+c} q, R_{n+c} k>: the same offset n - m gives the same score.
    shifted = (rotate(q, m + shift) * rotate(k, n + shift)).sum()
    assert abs(float(score - shifted)) < 1e-9 * (1 + m + n + shift) * float(q.norm() * k.norm())
    # and against the paper's matrices: score = <q, R_{n-m} k> (n >= m) or <R_{m-n} q, k>.
    theta = rope_inv_freq(d, base=base)[0].tolist()
    reference = (
        (q.double() * paper_rotation(k, torch.tensor([n - m]), theta, pairing)).sum()
        if n >= m
        else (paper_rotation(q, torch.tensor([m - n]), theta, pairing) * k).sum()
    )
    assert abs(float(score - reference)) < 1e-9 * (1 + m + n) * float(q.norm() * k.norm())
    torch.testing.assert_close(rotate(q, m).norm(), q.norm(), rtol=1e-12, atol=0)


@settings(max_examples=50, deadline=None)
@given(s=st.integers(1, 6), half_d=st.integers(1, 8), start=st.integers(0, 10**5), seed=st.integers(0, 2**16))
def test_half_and_interleaved_are_a_fixed_permutation_apart(s, half_d, start, seed):
    d = 2 * half_d
    q, _ = _qk(b=1, h=2, s=s, d=d, dtype=torch.float64, seed=seed)
    to_interleaved = torch.stack([torch.arange(half_d), torch.arange(half_d) + half_d], dim=-1).flatten()  # i, i + d/2
    positions = torch.arange(start, start + s)
    torch.testing.assert_close(
        apply_rope(q, positions, pairing="half")[..., to_interleaved],
        apply_rope(q[..., to_interleaved], positions, pairing="interleaved"),
        rtol=1e-12,
        atol=1e-12,
    )


def test_frequencies_are_the_sinusoidal_ones_bit_for_bit():
    for d, base in [(64, 10000.0), (128, 500000.0), (96, 1e6), (2, 10.0)]:
        theirs = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))  # transformers' default
        assert torch.equal(rope_inv_freq(d, base=base)[0], theirs)
        assert torch.equal(sinusoid_frequencies(d, base=base, dtype=torch.float32), theirs)


# --- the one formula: against transformers bit for bit, against the paper in every dtype -------------


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=str)
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("layout", ["shared", "batched", "partial", "transposed"])
def test_formula_equals_transformers_bit_for_bit(dtype, pairing, layout):
    # The readable cat(x1 cos - x2 sin, x2 cos + x1 sin) rounds exactly as transformers' x cos + rotate_half(x) sin.
    # Their interleaved family (Cohere) computes half precision in float32: compared as such below.
    if layout == "partial" and pairing == "interleaved":
        pytest.skip("transformers has no partial interleaved rotation to compare with")
    q, _ = _qk(s=40, dtype=dtype)
    if layout == "transposed":  # a (b, s, h, d) tensor seen as (b, h, s, d)
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
    positions = (
        torch.stack([torch.arange(40), torch.arange(500, 540)]) if layout == "batched" else torch.arange(1000, 1040)
    )
    rotary = HEAD_DIM // 4 if layout == "partial" else HEAD_DIM
    cos, sin = rope_cos_sin(positions, rope_inv_freq(rotary)[0], dtype=dtype)  # ([b,] s, r/2)
    ours = rope_rotate(q, cos, sin, pairing=pairing)
    assert ours.dtype == dtype and ours.shape == q.shape
    if pairing == "half":
        emb_cos, emb_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        apply = _tf("models.gpt_neox.modeling_gpt_neox" if layout == "partial" else "models.llama.modeling_llama")
    else:
        emb_cos, emb_sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        apply = _tf("models.cohere.modeling_cohere")
    if emb_cos.dim() == 2:
        emb_cos, emb_sin = emb_cos[None], emb_sin[None]
    theirs = apply.apply_rotary_pos_emb(q, q, emb_cos, emb_sin)[0]
    if pairing == "interleaved" and dtype != torch.float32:
        # Cohere rotates half-precision input in float32 and rounds once: so does the formula on float32 input.
        upcast = rope_rotate(q.float(), cos.float(), sin.float(), pairing=pairing).to(dtype)
        assert torch.equal(upcast, theirs)
        torch.testing.assert_close(ours, theirs, **TOLERANCES[dtype])
    else:
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rotation_equals_the_papers_rotation_matrices(pairing):
    q, _ = _qk(b=1, h=1, s=5, d=8, dtype=torch.float64)
    positions = torch.tensor([3, 0, 9, 1000, 7])
    cos, sin = rope_cos_sin(positions, rope_inv_freq(8)[0], dtype=torch.float64)
    expected = paper_rotation(q, positions, rope_inv_freq(8)[0].tolist(), pairing)
    torch.testing.assert_close(rope_rotate(q, cos, sin, pairing=pairing), expected, rtol=1e-12, atol=1e-12)
    assert rope_rotate_reference is rope_rotate  # posenc 1.0's name for the formula, kept


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_module_rotates_every_dtype_like_the_paper(dtype, pairing):
    q, k = _qk(b=1, h=2, s=12, d=16, dtype=dtype)
    positions = torch.arange(100, 112)
    module = RotaryEmbedding(16, max_positions=128, pairing=pairing)
    q_out, k_out = module(q, k, positions)
    assert q_out.dtype == k_out.dtype == dtype
    theta = rope_inv_freq(16)[0].tolist()
    for x, out in ((q, q_out), (k, k_out)):
        torch.testing.assert_close(out.double(), paper_rotation(x, positions, theta, pairing), **TOLERANCES[dtype])


@pytest.fixture(scope="module")
def compiled_rope():
    from posenc.rope import compiler_works

    if not compiler_works():
        pytest.skip("torch.compile does not work on this machine")
    torch.set_num_threads(1)  # the book's 2-core budget; compiling is the slow part
    return {
        pairing: RotaryEmbedding(HEAD_DIM, max_positions=4096, pairing=pairing, compile=True) for pairing in PAIRINGS
    }


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_compiled_module_equals_the_eager_formula_with_a_full_graph(compiled_rope, pairing):
    # RotaryEmbedding compiles cos_sin and rotate with fullgraph=True: a graph break would raise here, not run.
    q, k = _qk(s=64)
    positions = torch.arange(1000, 1064)
    compiled = compiled_rope[pairing]
    assert compiled.compiled and "compiled=True" in repr(compiled)
    eager = RotaryEmbedding(HEAD_DIM, max_positions=4096, pairing=pairing)
    for got, expected in zip(compiled(q, k, positions), eager(q, k, positions), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # compiled cos/sin may differ by an ulp


def test_compile_falls_back_to_eager_with_one_message(monkeypatch):
    import posenc.rope as rope_module

    monkeypatch.setattr(rope_module, "compiler_works", lambda: False)
    with pytest.warns(UserWarning, match="torch.compile does not work here.*eager"):
        module = RotaryEmbedding(HEAD_DIM, max_positions=64, compile=True)
    assert not module.compiled
    q, k = _qk(s=8)
    assert torch.equal(
        module(q, k, torch.arange(8))[0], RotaryEmbedding(HEAD_DIM, max_positions=64)(q, k, torch.arange(8))[0]
    )
    with pytest.raises(TypeError, match="compile must be a bool"):
        RotaryEmbedding(HEAD_DIM, max_positions=64, compile="yes")


# --- agreement with transformers ------------------------------------------------------------------


def _llama_config(base, scaling, max_positions=4096):
    rope_parameters = {"rope_type": "default", "rope_theta": base, **(scaling or {})}
    if scaling and scaling.get("rope_type") == "dynamic":
        # transformers' dynamic NTK reads the original length from max_position_embeddings
        max_positions = scaling["original_max_position_embeddings"]
        rope_parameters.pop("original_max_position_embeddings")
    return _tf("LlamaConfig")(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        head_dim=HEAD_DIM,
        max_position_embeddings=max_positions,
        rope_parameters=rope_parameters,
    )


_gen = torch.Generator().manual_seed(3)
_SHORT, _LONG = (
    (1 + torch.rand(HEAD_DIM // 2, generator=_gen)).tolist(),
    (1 + 30 * torch.rand(HEAD_DIM // 2, generator=_gen)).sort().values.tolist(),
)
SCALINGS = [
    None,
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "linear", "factor": 8.0},
    {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 512},
    {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 1024},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "attention_factor": 1.2},
    {
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "mscale": 1.0,
        "mscale_all_dim": 0.8,
    },
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "truncate": False},
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    {
        "rope_type": "llama3",
        "factor": 32.0,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    {
        "rope_type": "longrope",
        "factor": 32.0,
        "original_max_position_embeddings": 1024,
        "short_factor": _SHORT,
        "long_factor": _LONG,
    },
    {
        "rope_type": "longrope",
        "original_max_position_embeddings": 2048,
        "attention_factor": 1.1,
        "short_factor": _SHORT,
        "long_factor": _LONG,
    },
    {"rope_type": "proportional", "partial_rotary_factor": 0.5},
    {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 2.0},
]


def _ID(s):  # a test id: the scaling's keys, without the long factor lists
    return (
        "none" if s is None else "-".join(f"{k}={v}" for k, v in s.items() if k not in ("short_factor", "long_factor"))
    )


@pytest.mark.parametrize("scaling", SCALINGS, ids=_ID)
@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("seq_len", [None, 300, 5000])
def test_inv_freq_equals_transformers(scaling, base, seq_len):
    config = _llama_config(base, scaling)
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "default":
        theirs, their_scale = _tf("models.llama.modeling_llama").LlamaRotaryEmbedding.compute_default_rope_parameters(
            config
        )
    else:
        # Models pass the length as a tensor (max(position_ids) + 1), which dynamic NTK computes with in float32.
        length = torch.tensor(seq_len) if seq_len is not None else None
        theirs, their_scale = _tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")[rope_type](config, None, seq_len=length)
    ours, our_scale = rope_inv_freq(HEAD_DIM, base=base, scaling=scaling, seq_len=seq_len)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, theirs)  # the same float32 arithmetic: bit for bit
    assert our_scale == pytest.approx(their_scale, rel=1e-12)


@pytest.mark.parametrize("scaling", SCALINGS, ids=_ID)
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
    cos, sin = _tf("models.llama.modeling_llama").LlamaRotaryEmbedding(config)(q, position_ids)
    q_ref, k_ref = _tf("models.llama.modeling_llama").apply_rotary_pos_emb(q, k, cos, sin)
    ids = position_ids[0] if positions != "batched" else position_ids
    for q_ours, k_ours in [
        (apply_rope(q, ids, base=base, scaling=scaling), apply_rope(k, ids, base=base, scaling=scaling)),
        RotaryEmbedding(HEAD_DIM, max_positions=4096, base=base, scaling=scaling)(q, k, ids),
    ]:
        torch.testing.assert_close(q_ours, q_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(k_ours, k_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("base", [10000.0, 1000000.0])
def test_interleaved_pairing_equals_transformers_cohere(base):
    config = _tf("CohereConfig")(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    q, k = _qk(s=64)
    position_ids = torch.arange(1000, 1064)[None]
    cos, sin = _tf("models.cohere.modeling_cohere").CohereRotaryEmbedding(config)(q, position_ids)
    q_ref, k_ref = _tf("models.cohere.modeling_cohere").apply_rotary_pos_emb(q, k, cos, sin)
    module = RotaryEmbedding(HEAD_DIM, max_positions=8192, base=base, pairing="interleaved")
    q_ours, k_ours = module(q, k, position_ids[0])
    torch.testing.assert_close(q_ours, q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_ours, k_ref, rtol=1e-5, atol=1e-5)


def test_partial_rotary_equals_transformers_gpt_neox():
    # GPT-NeoX-20B: 64 heads of 96, rotary_pct 0.25 -> the first 24 features of each head rotate.
    config = _tf("GPTNeoXConfig")(
        hidden_size=6144,
        num_attention_heads=64,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    )
    q, k = _qk(b=1, h=2, s=30, d=96)
    position_ids = torch.arange(200, 230)[None]
    cos, sin = _tf("models.gpt_neox.modeling_gpt_neox").GPTNeoXRotaryEmbedding(config)(q, position_ids)
    q_ref, k_ref = _tf("models.gpt_neox.modeling_gpt_neox").apply_rotary_pos_emb(q, k, cos, sin)
    module = RotaryEmbedding(96, max_positions=2048, scaling=config.rope_parameters)
    q_ours, k_ours = module(q, k, position_ids[0])
    torch.testing.assert_close(q_ours, q_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_ours, k_ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(q_ours[..., 24:], q[..., 24:])  # the other 72 features pass unchanged
    assert rope_inv_freq(96, scaling=config.rope_parameters)[0].shape == (12,)


def test_interleaved_pairing_equals_meta_complex_multiplication():
    # Meta's LLaMA reference: view pairs (2i, 2i+1) as complex numbers, multiply by exp(i m theta).
    q, _ = _qk(s=30, dtype=torch.float64)
    theta = rope_inv_freq(HEAD_DIM)[0].double()  # posenc's float32 theta_i; the rest in float64
    rotation = torch.polar(
        torch.ones(30, HEAD_DIM // 2, dtype=torch.float64), torch.arange(30.0, dtype=torch.float64)[:, None] * theta
    )
    expected = torch.view_as_real(torch.view_as_complex(q.reshape(2, 3, 30, HEAD_DIM // 2, 2)) * rotation).flatten(-2)
    torch.testing.assert_close(apply_rope(q, torch.arange(30), pairing="interleaved"), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_current_model_families_rotate_like_half_pairing(family):
    module = _tf(f"models.{family}.modeling_{family}")
    q, k = _qk(s=20)
    positions = torch.arange(100, 120)
    cos, sin = rope_cos_sin(positions, rope_inv_freq(HEAD_DIM, base=1e6)[0])
    q_ref, k_ref = module.apply_rotary_pos_emb(q, k, torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None])
    torch.testing.assert_close(apply_rope(q, positions, base=1e6), q_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(apply_rope(k, positions, base=1e6), k_ref, rtol=1e-6, atol=1e-6)


# --- the module: one path, no state, dtype moves, decoding ------------------------------------------


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", [None, SCALINGS[3], SCALINGS[5], SCALINGS[12]], ids=_ID)
def test_decode_step_equals_last_row_of_the_full_pass(pairing, scaling):
    n = 40
    module = RotaryEmbedding(HEAD_DIM, max_positions=4096, pairing=pairing, scaling=scaling)
    q, k = _qk(s=n)
    q_full, k_full = module(q, k, torch.arange(n))
    q_step, k_step = module(q[:, :, -1:], k[:, :, -1:], torch.tensor([n - 1]))  # one new token at position n - 1
    torch.testing.assert_close(q_step, q_full[:, :, -1:], rtol=0, atol=0)
    torch.testing.assert_close(k_step, k_full[:, :, -1:], rtol=0, atol=0)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("move", ["bf16-then-float", "half-then-float", "double", "half"])
def test_state_survives_dtype_moves(pairing, move):
    q, k = _qk(dtype=torch.float64)
    positions = torch.arange(3000, 3050)
    fresh = RotaryEmbedding(HEAD_DIM, max_positions=4096, pairing=pairing)
    moved = RotaryEmbedding(HEAD_DIM, max_positions=4096, pairing=pairing)
    moved = {
        "bf16-then-float": lambda m: m.to(torch.bfloat16).float(),
        "half-then-float": lambda m: m.half().float(),
        "double": lambda m: m.double(),
        "half": lambda m: m.half(),
    }[move](moved)
    assert moved.inv_freq.dtype == torch.float32 and torch.equal(moved.inv_freq, fresh.inv_freq)
    for dtype in (torch.float32, torch.float64, torch.float16):
        got, want = moved(q.to(dtype), k.to(dtype), positions), fresh(q.to(dtype), k.to(dtype), positions)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_module_keeps_no_state_and_does_not_touch_inputs():
    module = RotaryEmbedding(HEAD_DIM, max_positions=128, scaling=SCALINGS[3])
    inv_freq = module.inv_freq.clone()
    q, k = _qk(s=100)
    q0, k0 = q.clone(), k.clone()
    first = module(q, k, torch.arange(100))
    module(q[:, :, :10], k[:, :, :10], torch.arange(10))
    assert torch.equal(module(q, k, torch.arange(100))[0], first[0])  # no cache of the last length
    assert torch.equal(q, q0) and torch.equal(k, k0)
    assert torch.equal(module.inv_freq, inv_freq)
    assert module.state_dict() == {}  # inv_freq is derived from the settings, not a weight
    assert [name for name, _ in module.named_buffers()] == ["inv_freq"]


def test_dynamic_module_follows_the_sequence_length():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 32}
    module = RotaryEmbedding(HEAD_DIM, max_positions=256, scaling=scaling)
    q, k = _qk(s=100, dtype=torch.float64)
    q_long, _ = module(q, k, torch.arange(100))
    q_short, _ = module(q[:, :, :10], k[:, :, :10], torch.arange(10))
    grown = 10000.0 * (2.0 * 100 / 32 - 1) ** (HEAD_DIM / (HEAD_DIM - 2))  # the NTK formula, by hand
    theta_long = [grown ** (-2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]
    torch.testing.assert_close(
        q_short, paper_rotation(q[:, :, :10], torch.arange(10), _theta(HEAD_DIM), "half"), rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(
        q_long[:, :, 90:], paper_rotation(q[:, :, 90:], torch.arange(90, 100), theta_long, "half"), rtol=1e-5, atol=1e-5
    )  # float32 frequencies, as transformers


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_any_integer_dtype_of_positions_gives_the_same_rotation(dtype):
    q, k = _qk(s=6)
    positions = torch.tensor([0, 3, 1, 1, 100, 5])
    module = RotaryEmbedding(HEAD_DIM, max_positions=128)
    expected = module(q, k, positions)
    got = module(q, k, positions.to(dtype))  # uint8 indexing would be a boolean mask
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert torch.equal(apply_rope(q, positions.to(dtype)), apply_rope(q, positions))
    assert torch.equal(
        rope_cos_sin(positions.to(dtype), module.inv_freq)[0], rope_cos_sin(positions, module.inv_freq)[0]
    )


def test_empty_sequences_and_grouped_query_heads():
    module = RotaryEmbedding(HEAD_DIM, max_positions=16)
    q, k = module(torch.zeros(2, 3, 0, HEAD_DIM), torch.zeros(2, 3, 0, HEAD_DIM), torch.arange(0))
    assert q.shape == k.shape == (2, 3, 0, HEAD_DIM)
    q, k = _qk(h=8, s=5)
    q_out, k_out = module(q, k[:, :2], torch.arange(5))  # 8 query heads, 2 key heads
    assert torch.equal(k_out, apply_rope(k[:, :2], torch.arange(5))) and q_out.shape == q.shape


def test_cos_sin_and_attention_scale():
    inv_freq, scale = rope_inv_freq(
        8, scaling={"rope_type": "yarn", "factor": math.e**10, "original_max_position_embeddings": 64}
    )
    assert scale == pytest.approx(0.1 * 10 + 1)
    cos, sin = rope_cos_sin(torch.arange(5), inv_freq, attention_scale=scale)
    torch.testing.assert_close(cos**2 + sin**2, torch.full((5, 4), scale**2))
    cos64, _ = rope_cos_sin(torch.tensor([2**30]), inv_freq, dtype=torch.float64)  # far positions: float64 angles
    assert cos64.dtype == torch.float64
    torch.testing.assert_close(cos64[0, 0], torch.tensor(math.cos(2**30), dtype=torch.float64))


_X = torch.zeros(1, 1, 4, 8)
_C = torch.zeros(4, 4)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: rope_inv_freq(63), ValueError, "head_dim must be even.*got 63"),
        (lambda: rope_inv_freq(True), TypeError, "head_dim must be an integer"),
        (lambda: rope_inv_freq(64, base=1.0), ValueError, "base must be > 1, got 1"),
        (lambda: rope_inv_freq(64, base=float("nan")), ValueError, "base must be finite, got nan"),
        (lambda: rope_inv_freq(64, seq_len=0), ValueError, "seq_len must be >= 1"),
        (lambda: rope_inv_freq(64, seq_len=3.5), TypeError, "seq_len must be an integer"),
        (lambda: rope_inv_freq(64, scaling="linear"), TypeError, "scaling must be a dict"),
        (
            lambda: rope_cos_sin(torch.arange(4), torch.ones(2), dtype=torch.int32),
            TypeError,
            "dtype must be a floating-point",
        ),
        (lambda: rope_cos_sin(torch.arange(4.0), torch.ones(2)), TypeError, "positions must be an integer tensor"),
        (lambda: rope_cos_sin(torch.tensor([True]), torch.ones(2)), TypeError, "positions must be an integer tensor"),
        (lambda: rope_cos_sin(torch.tensor([-1]), torch.ones(2)), ValueError, "positions must be >= 0, got -1"),
        (
            lambda: rope_cos_sin(torch.tensor([2**25]), torch.ones(2)),
            ValueError,
            "positions must be <= 2\\*\\*24.*got 33554432",
        ),
        (lambda: rope_cos_sin(torch.arange(4), torch.ones(2, 2)), ValueError, "inv_freq must have 1 dimensions"),
        (
            lambda: rope_cos_sin(torch.arange(4), torch.arange(2)),
            TypeError,
            "inv_freq must have a floating-point dtype",
        ),
        (
            lambda: rope_cos_sin(torch.arange(4), torch.tensor([1.0, float("nan")])),
            ValueError,
            "inv_freq must be finite",
        ),
        (
            lambda: rope_cos_sin(torch.arange(4), torch.ones(2), attention_scale=0.0),
            ValueError,
            "attention_scale must be > 0",
        ),
        (lambda: apply_rope(_X, torch.arange(4.0)), TypeError, "positions must be an integer tensor"),
        (
            lambda: apply_rope(_X, torch.ones(4, dtype=torch.bool)),
            TypeError,
            "positions must be an integer tensor.*bool",
        ),
        (lambda: apply_rope(_X, torch.arange(5)), ValueError, "positions must be \\(s,\\) or \\(b, s\\) with s = 4"),
        (lambda: apply_rope(_X, torch.tensor([0, 1, -2, 3])), ValueError, "positions must be >= 0, got -2"),
        (lambda: apply_rope(_X, torch.arange(4), pairing="neox"), ValueError, "pairing must be one of.*'neox'"),
        (lambda: apply_rope(_X, torch.arange(4), pairing=["half"]), ValueError, "pairing must be one of"),
        (lambda: apply_rope(torch.zeros(1, 4, 8), torch.arange(4)), ValueError, "x must have 4 dimensions"),
        (
            lambda: apply_rope(torch.zeros(1, 1, 4, 8, dtype=torch.int32), torch.arange(4)),
            TypeError,
            "x must have a floating-point",
        ),
        (lambda: apply_rope(torch.zeros(1, 1, 4, 7), torch.arange(4)), ValueError, "head_dim must be even.*got 7"),
        (lambda: rope_rotate(_X, _C, _C.double()), ValueError, "sin must be .* like x"),
        (lambda: rope_rotate(_X, _C, torch.zeros(4, 3)), ValueError, "cos and sin must have one shape"),
        (lambda: rope_rotate(_X, torch.zeros(4, 5), torch.zeros(4, 5)), ValueError, "cos has 5 pairs"),
        (lambda: rope_rotate(_X, torch.zeros(3, 4), torch.zeros(3, 4)), ValueError, "does not broadcast"),
        (lambda: rope_rotate_reference(_X, _C, _C, pairing="x"), ValueError, "pairing must be one of"),
        (
            lambda: RotaryEmbedding(8, max_positions=4)(
                torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 5, 8), torch.arange(5)
            ),
            ValueError,
            "position 4 is past max_positions=4",
        ),
        (
            lambda: RotaryEmbedding(8, max_positions=8)(
                torch.zeros(1, 1, 5, 6), torch.zeros(1, 1, 5, 6), torch.arange(5)
            ),
            ValueError,
            "head_dim 8",
        ),
        (
            lambda: RotaryEmbedding(8, max_positions=8)(_X, _X.double(), torch.arange(4)),
            ValueError,
            "share dtype and device",
        ),
        (
            lambda: RotaryEmbedding(8, max_positions=8)(_X.to("meta"), _X.to("meta"), torch.arange(4)),
            ValueError,
            "q is on meta",
        ),
        (
            lambda: RotaryEmbedding(8, max_positions=8)(_X, _X[:, :, :3], torch.arange(4)),
            ValueError,
            "share batch and length",
        ),
        (lambda: RotaryEmbedding(7, max_positions=8), ValueError, "head_dim must be even"),
        (lambda: RotaryEmbedding(8, max_positions=0), ValueError, "max_positions must be >= 1"),
        (lambda: RotaryEmbedding(8, max_positions=8, pairing=None), ValueError, "pairing must be one of"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_gradients_flow_for_every_pairing_dtype_and_layout(pairing, dtype):
    # Training needs the backward pass: the half-precision and strided fallbacks included.
    wide = torch.randn(1, 2, 5, 9, dtype=dtype, generator=torch.Generator().manual_seed(0))
    for x in (wide[..., :8].clone(), wide[..., 1:]):  # a contiguous tensor, and an odd storage offset
        x = x.detach().requires_grad_(True)
        out = apply_rope(x, torch.arange(5), pairing=pairing)
        out.double().square().sum().backward()
        # A rotation preserves norms, so d|Rx|^2/dx = 2x.
        tol = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
        torch.testing.assert_close(x.grad.double(), 2 * x.detach().double(), rtol=tol, atol=tol)


def test_rope_rotate_refuses_tables_with_a_larger_batch_than_x():
    x = torch.randn(1, 2, 3, 8)
    cos, sin = rope_cos_sin(torch.arange(3), rope_inv_freq(8)[0])  # (s, d/2)
    for table_batch in (cos[None].expand(2, 3, 4), cos[None, :, :2].expand(2, 3, 2).contiguous()):
        other = sin[None, :, : table_batch.shape[-1]].expand(2, 3, table_batch.shape[-1]).contiguous()
        with pytest.raises(ValueError, match=r"cos \(2, 3, \d\) does not broadcast to x \(1, 2, 3, 8\)"):
            rope_rotate(x, table_batch.contiguous(), other)


def test_a_module_built_on_the_meta_device_materialises_with_the_right_frequencies():
    with torch.device("meta"):
        meta = RotaryEmbedding(8, max_positions=10, base=500.0)
    materialised = meta.to_empty(device="cpu")
    assert torch.equal(materialised.inv_freq, RotaryEmbedding(8, max_positions=10, base=500.0).inv_freq)


def test_transformers_computes_the_angles_in_float32_for_a_bfloat16_model():
    """What chapter 11 and the summary say of transformers: for a bfloat16 model, LlamaRotaryEmbedding
    computes the angles m * theta_i and their cos and sin in float32, and only then casts them to the
    model's dtype (as posenc does); angles computed in bfloat16 would be off by radians at 10^5."""
    config = _tf("LlamaConfig")(hidden_size=64, num_attention_heads=1, head_dim=64, max_position_embeddings=4096)
    rotary = _tf("models.llama.modeling_llama").LlamaRotaryEmbedding(config)
    positions = torch.arange(100_000, 100_064)
    x = torch.zeros(1, len(positions), 64, dtype=torch.bfloat16)
    cos, sin = rotary(x, positions[None])
    assert cos.dtype == sin.dtype == torch.bfloat16
    inv_freq, _ = rope_inv_freq(64)  # base 10^4, LlamaConfig's default
    ours_cos, ours_sin = rope_cos_sin(positions, inv_freq)  # float32, (s, d/2)
    ulp = 2.0**-8  # bfloat16's spacing just below 1
    torch.testing.assert_close(cos[0].float(), torch.cat([ours_cos, ours_cos], -1).bfloat16().float(), atol=ulp, rtol=0)
    torch.testing.assert_close(sin[0].float(), torch.cat([ours_sin, ours_sin], -1).bfloat16().float(), atol=ulp, rtol=0)
    angles_bf16 = positions.bfloat16()[:, None] * inv_freq.bfloat16()  # what it does not do
    assert (angles_bf16.float().cos() - ours_cos).abs().max() > 0.5
