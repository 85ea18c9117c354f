"""Tests of posenc.variants: p-RoPE's frequencies and its limits (p = 1 is RoPE, p = 0 leaves x alone),
the interleaved NoPE layers (Llama 4's pattern and query scale, a NoPE layer blind to order apart from
the mask), CoPE's positions (counting, the paper's reverse sum, interpolation), FIRE's normalised
distance (formula, range, shift invariance below the threshold), decode steps, errors."""

import math

import pytest
import torch

from posenc import apply_rope, rope_inv_freq
from posenc.variants import (
    FIREBias,
    InterleavedRoPE,
    apply_p_rope,
    cope_attention,
    cope_logits,
    cope_positions,
    fire_normalized_distance,
    irope_layers,
    irope_transformer,
    llama4_attention_scale,
    p_rope_inv_freq,
)


def _x(b=2, h=3, s=10, d=16, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, s, d, generator=gen, dtype=torch.float64).to(dtype)


# ---- p-RoPE -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_p_rope_keeps_the_fastest_frequencies(d, p):
    theta = p_rope_inv_freq(d, p=p)
    full, _ = rope_inv_freq(d)
    kept = math.floor(p * d / 2)
    assert torch.equal(theta[:kept], full[:kept])
    assert torch.all(theta[kept:] == 0)


def test_p_rope_limits_and_decode_step():
    x, pos = _x(), torch.arange(3, 13)
    assert torch.equal(apply_p_rope(x, pos, p=1.0), apply_rope(x, pos))
    assert torch.equal(apply_p_rope(x, pos, p=0.0), x)
    out = apply_p_rope(x, pos, p=0.5)
    assert torch.equal(apply_p_rope(x[:, :, -1:], pos[-1:], p=0.5), out[:, :, -1:])
    # the slow half of the pairs (i >= d/4, at i and i + d/2) passes unchanged
    d = x.shape[-1]
    for lo, hi in ((d // 4, d // 2), (3 * d // 4, d)):
        assert torch.equal(out[..., lo:hi], x[..., lo:hi])


def test_p_rope_score_is_relative():
    q, k = _x(s=1), _x(s=1, seed=1)

    def score(m, n):
        t = torch.tensor
        return (apply_p_rope(q, t([m]), p=0.25) * apply_p_rope(k, t([n]), p=0.25)).sum()

    assert torch.allclose(score(3, 10), score(503, 510))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"p": 1.5}, ValueError, "p must be in"),
        ({"p": "half"}, TypeError, "p must"),
        ({"base": 0.5}, ValueError, "base"),
    ],
)
def test_p_rope_bad_inputs(kwargs, error, match):
    with pytest.raises(error, match=match):
        apply_p_rope(_x(), torch.arange(10), **({"p": 0.5} | kwargs))


# ---- interleaved NoPE layers ------------------------------------------------------------------------


def test_irope_layer_pattern_is_llama4s():
    assert irope_layers(8) == (True, True, True, False) * 2
    assert irope_layers(3, nope_every=2) == (True, False, True)
    with pytest.raises(ValueError, match="nope_every"):
        irope_layers(4, nope_every=0)


def test_llama4_attention_scale():
    pos = torch.tensor([0, 8190, 8191, 3 * 8192 - 1])
    expected = torch.tensor([1.0, 1.0, 1.0 + 0.1 * math.log(2), 1.0 + 0.1 * math.log(4)])
    torch.testing.assert_close(llama4_attention_scale(pos), expected)
    with pytest.raises(TypeError, match="positions"):
        llama4_attention_scale(torch.zeros(3))


def test_nope_layer_sees_order_only_through_the_mask_and_rope_layers_see_distance():
    from posenc.models import ModelShape

    scheme = InterleavedRoPE(ModelShape(16, 2, 2), nope_every=2)  # layer 0 RoPE, layer 1 NoPE
    q, k, v = _x(b=1, h=2, s=6, d=8, dtype=torch.float32), _x(b=1, h=2, s=6, d=8, seed=1), _x(b=1, h=2, s=6, d=8)
    k, v = k.float(), v.float()
    # the last query sees every key: permuting the keys (with their values) leaves a NoPE layer's output alone
    perm = torch.tensor([3, 0, 4, 1, 2, 5])
    out_nope, _ = scheme.attend(1, q, k, v, None)
    out_perm, _ = scheme.attend(1, q, k[:, :, perm], v[:, :, perm], None)
    torch.testing.assert_close(out_nope[:, :, -1], out_perm[:, :, -1])
    out_rope, _ = scheme.attend(0, q, k, v, None)
    out_rope_perm, _ = scheme.attend(0, q, k[:, :, perm], v[:, :, perm], None)
    assert not torch.allclose(out_rope[:, :, -1], out_rope_perm[:, :, -1], atol=1e-4)


def test_irope_transformer_builds_and_is_position_aware():
    model = irope_transformer(12, num_layers=4, dim=32, num_heads=2, seed=3, device="cpu")
    assert model.position == "irope" and model.scheme.rope_layers == (True, True, True, False)
    nope = irope_transformer(12, num_layers=4, dim=32, num_heads=2, seed=3, nope_every=1, device="cpu")
    assert nope.scheme.rope_layers == (False,) * 4
    # one NoPE layer: the last position's output sees its prefix as a set (keys and values swap together)
    one_nope = irope_transformer(12, num_layers=1, dim=32, num_heads=2, nope_every=1, device="cpu")
    one_rope = irope_transformer(12, num_layers=1, dim=32, num_heads=2, nope_every=2, device="cpu")
    tokens, swapped = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[2, 1, 3, 4]])
    torch.testing.assert_close(one_nope(tokens)[:, -1], one_nope(swapped)[:, -1])
    assert not torch.allclose(one_rope(tokens)[:, -1], one_rope(swapped)[:, -1], atol=1e-6)
    # the same weights for a seed: only the scheme differs from the NoPE model
    plain = torch.nn.Module.state_dict(one_nope)
    assert all(torch.equal(t, torch.nn.Module.state_dict(one_rope)[name]) for name, t in plain.items())
    with pytest.raises(ValueError, match="position"):
        irope_transformer(12, position="rope")


# ---- CoPE -------------------------------------------------------------------------------------------


def test_cope_positions_count_tokens_of_one_kind():
    kind = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0])  # 1 marks, e.g., sentence ends
    s = len(kind)
    gates = kind.double().expand(1, 1, s, s).clone()
    p = cope_positions(gates)[0, 0]
    for m in range(s):
        for n in range(m + 1):
            assert p[m, n] == kind[n : m + 1].sum()
        assert torch.all(p[m, m + 1 :] == 0)


def test_cope_with_all_gates_one_is_the_relative_distance_plus_one():
    s = 7
    p = cope_positions(torch.ones(1, 1, s, s))[0, 0]
    m, n = torch.arange(s)[:, None], torch.arange(s)[None]
    assert torch.equal(p, torch.where(n <= m, (m - n + 1).float(), torch.zeros(())))


def test_cope_logits_formula_and_interpolation():
    q, k = _x(b=1, h=1, s=5, d=4), _x(b=1, h=1, s=5, d=4, seed=1)
    table = _x(b=1, h=1, s=3, d=4, seed=2)[0, 0]  # P = 3: positions clipped at 2
    logits = cope_logits(q, k, table)[0, 0]
    q0, k0 = q[0, 0], k[0, 0]
    for m in range(5):
        gates = torch.sigmoid(q0[m] @ k0[: m + 1].T / 2)  # sqrt(d) = 2
        for n in range(m + 1):
            p = min(float(gates[n:].sum()), 2.0)
            lo, hi = math.floor(p), math.ceil(p)
            z = (p - lo) * (q0[m] @ table[hi]) + (1 - (p - lo)) * (q0[m] @ table[lo])
            torch.testing.assert_close(logits[m, n], q0[m] @ k0[n] / 2 + z)
        assert torch.all(logits[m, m + 1 :] == float("-inf"))


def test_cope_decode_step_equals_last_row():
    q, k, v = _x(), _x(seed=1), _x(seed=2)
    table = _x(b=1, h=1, s=6, d=16, seed=3)[0, 0]
    out, weights = cope_attention(q, k, v, table)
    step, step_weights = cope_attention(q[:, :, -1:], k, v, table)
    torch.testing.assert_close(step, out[:, :, -1:])
    torch.testing.assert_close(step_weights, weights[:, :, -1:])
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def _cope_reference(q, k, v, table):
    """CoPE attention from the formula, loops over (m, n) in float64 (arXiv:2405.18719, the paper's code)."""
    q, k, v, table = (t.double() for t in (q, k, v, table))
    b, h, s_q, d = q.shape
    s_k, last = k.shape[2], table.shape[0] - 1
    out = torch.zeros(b, h, s_q, v.shape[-1], dtype=torch.float64)
    for m in range(s_q):
        position = s_k - s_q + m  # the queries are the last s_q positions
        q_m, keys, values = q[:, :, m : m + 1], k[:, :, : position + 1], v[:, :, : position + 1]
        content = (q_m @ keys.transpose(-1, -2))[:, :, 0] / math.sqrt(d)  # (b, h, n): n = 0 .. m
        p = torch.sigmoid(content).flip(-1).cumsum(-1).flip(-1).clamp(max=last)  # sum over t = n .. m
        z = (q_m @ table.T)[:, :, 0]  # (b, h, P)
        lo, hi = p.floor().long(), p.ceil().long()
        logits = content + z.gather(-1, hi) * (p - lo) + z.gather(-1, lo) * (1 - (p - lo))
        out[:, :, m] = (torch.softmax(logits, -1)[..., None] * values).sum(-2)
    return out


def test_cope_in_bfloat16_stays_close_to_a_float64_reference_at_512_keys():
    # Computed in bfloat16 throughout, the running sum of 512 gates drifts by about 1 and the output by 3.1
    # here; in float32 and cast back, the output is the reference rounded to bfloat16 (measured: 0.008).
    s, d = 512, 16
    q, k, v = (_x(b=1, h=2, s=s, d=d, seed=seed).to(torch.bfloat16) for seed in (1, 2, 3))
    table = _x(b=1, h=1, s=600, d=d, seed=4)[0, 0].to(torch.bfloat16)  # P = 600 rows: no clipping
    expected = _cope_reference(q[:, :, -64:], k, v, table)  # float64 from the same bfloat16 inputs
    got, weights = cope_attention(q[:, :, -64:], k, v, table)  # the last 64 queries: the longest sums
    assert got.dtype == weights.dtype == torch.bfloat16
    assert (got.double() - expected).abs().max() < 0.03  # a few bfloat16 steps (2**-7 near 2)
    gate = torch.tensor(0.7, dtype=torch.bfloat16)
    positions = cope_positions(gate.expand(1, 1, s, s))[0, 0, -1]  # the last query: s - n gates summed
    exact = gate.double() * torch.arange(s, 0, -1, dtype=torch.float64)
    # one rounding of the float32 sum to bfloat16 (spacing 2 between 256 and 512), not a drift of many
    assert positions.dtype == torch.bfloat16 and (positions.double() - exact).abs().max() <= 1.0


def test_cope_float64_equals_the_reference():
    q, k, v = _x(b=1, h=2, s=4), _x(b=1, h=2, s=9, seed=1), _x(b=1, h=2, s=9, seed=2)
    table = _x(b=1, h=1, s=5, d=16, seed=3)[0, 0]  # P = 5: positions clipped at 4
    torch.testing.assert_close(cope_attention(q, k, v, table)[0], _cope_reference(q, k, v, table))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda q: cope_attention(q, [[1.0]], q, torch.zeros(4, 16)),
            TypeError,
            r"k must be a torch\.Tensor, got list",
        ),
        (lambda q: cope_attention(q, q, "v", torch.zeros(4, 16)), TypeError, r"v must be a torch\.Tensor, got str"),
        (
            lambda q: cope_attention(q.half(), q.float(), q.float(), torch.zeros(4, 16)),
            TypeError,
            r"q, k and v must share one dtype, got q torch\.float16, k torch\.float32, v torch\.float32",
        ),
        (
            lambda q: cope_logits(q.float(), q.half(), torch.zeros(4, 16)),
            TypeError,
            r"q and k must share one dtype, got q torch\.float32, k torch\.float16",
        ),
        (
            lambda q: cope_attention(q, q, q[:, :, :3], torch.zeros(4, 16)),
            ValueError,
            r"v \(2, 3, 3, 16\) must match k",
        ),
        (lambda q: cope_logits(q, q, torch.zeros(4, 16, device="meta")), ValueError, "must be on one device"),
    ],
)
def test_cope_names_the_bad_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(_x())


def test_cope_bad_inputs():
    q = _x()
    with pytest.raises(ValueError, match="pos_emb"):
        cope_logits(q, q, torch.zeros(4, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="s_q <= s_k"):
        cope_logits(q, q[:, :, :3], torch.zeros(4, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="gates"):
        cope_positions(torch.full((1, 1, 3, 3), 2.0))
    with pytest.raises(TypeError, match=r"q must be a torch\.Tensor"):
        cope_logits([1.0], q, torch.zeros(4, 16))


# ---- FIRE -------------------------------------------------------------------------------------------


def test_fire_input_is_the_formula():
    x = fire_normalized_distance(7, 7, eta=0.5, threshold=3.0)
    for m in range(7):
        for n in range(7):
            expected = math.log1p(0.5 * (m - n)) / math.log1p(0.5 * max(m, 3.0)) if n <= m else 0.0
            assert math.isclose(float(x[m, n]), expected, rel_tol=1e-6, abs_tol=1e-7)


def test_fire_input_stays_in_unit_interval_at_any_length():
    x = fire_normalized_distance(1, 200_000, threshold=512.0)  # the last query of a long input
    assert float(x.min()) >= 0.0 and float(x.max()) == 1.0  # key 0 of a query past the threshold


def test_fire_is_shift_invariant_below_the_threshold_only():
    x = fire_normalized_distance(64, 64, threshold=32.0)
    # same distance m - n = 5 at queries 10 and 30 (both < threshold): same input
    assert x[10, 5] == x[30, 25]
    # past the threshold the same distance is squeezed as m grows (progressive interpolation)
    assert x[63, 58] < x[40, 35] < x[30, 25]


def test_fire_bias_decode_step_and_mask():
    torch.manual_seed(0)
    fire = FIREBias(3, hidden=8, threshold=4.0)
    full, step = fire(9, 9), fire(1, 9)
    assert full.shape == (3, 9, 9)
    torch.testing.assert_close(step, full[:, -1:])
    after = torch.ones(9, 9, dtype=torch.bool).triu(1)  # keys after the query
    assert torch.all(full[:, after] == float("-inf")) and torch.all(full[:, ~after].isfinite())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q_len": 5, "k_len": 4}, ValueError, "k_len"),
        ({"eta": 0.0}, ValueError, "eta"),
        ({"threshold": -1.0}, ValueError, "threshold"),
        ({"q_len": 2.0}, TypeError, "q_len"),
    ],
)
def test_fire_bad_inputs(kwargs, error, match):
    args = {"q_len": 3, "k_len": 4} | kwargs
    with pytest.raises(error, match=match):
        fire_normalized_distance(args.pop("q_len"), args.pop("k_len"), **args)
