"""Tests of posenc.xpos: the rotation-and-scale against the paper's formula written pair by pair, the
score identity (RoPE's score times zeta_i^(-r/kappa) per pair), shift invariance, decay with distance,
decode steps, the reference position ``center``, the floating-point range, and clear errors."""

import cmath
import itertools
import math

import pytest
import torch

from posenc import apply_rope, apply_xpos, rope_inv_freq, xpos_zeta
from posenc.xpos import XPOS_ROLES

D = 16
DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


def _x(b=2, h=3, s=12, d=D, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, s, d, generator=gen, dtype=torch.float64).to(dtype)


def paper_xpos(x, positions, role, *, pairing="half", gamma=0.4, kappa=512.0, center=0, base=10000.0):
    """arXiv:2212.10554 written plainly in float64: pair i as a complex number a + ib, times
    exp(i p theta_i) and zeta_i ** (+-(p - center) / kappa), with zeta_i = (2i/d + gamma) / (1 + gamma).

    theta_i are RoPE's float32 frequencies, as posenc (and transformers) keep them: their rounding is
    tested in test_rope.py; here the scale is under test."""
    d = x.shape[-1]
    thetas = rope_inv_freq(d, base=base)[0].tolist()
    pairs = (
        [(i, i + d // 2) for i in range(d // 2)] if pairing == "half" else [(2 * i, 2 * i + 1) for i in range(d // 2)]
    )
    sign = 1 if role == "query" else -1
    out = x.double().clone()
    for j, p in enumerate(positions.tolist()):
        for i, (a, b) in enumerate(pairs):
            theta = thetas[i]
            zeta = (2 * i / d + gamma) / (1 + gamma)
            factor = cmath.exp(1j * p * theta) * zeta ** (sign * (p - center) / kappa)
            za = x.double()[..., j, a] + 1j * x.double()[..., j, b]  # (b, h) complex
            rotated = za * factor
            out[..., j, a], out[..., j, b] = rotated.real, rotated.imag
    return out


def _pair_scores(q_rot, k_rot, pairing):
    """Per-pair dot products of rotated q and k: (..., d/2)."""
    prod = q_rot * k_rot
    d = prod.shape[-1]
    if pairing == "half":
        return prod[..., : d // 2] + prod[..., d // 2 :]
    return prod[..., 0::2] + prod[..., 1::2]


# --- the formula ----------------------------------------------------------------------------------


def test_zeta_is_the_papers_formula_and_lies_in_0_1():
    zeta = xpos_zeta(128, dtype=torch.float64)
    i = torch.arange(64, dtype=torch.float64)
    assert torch.allclose(zeta, (i / 64 + 0.4) / 1.4, rtol=0, atol=1e-15)  # (i / (d/2) + gamma) / (1 + gamma)
    assert math.isclose(float(zeta[0]), 0.4 / 1.4) and float(zeta[-1]) < 1
    assert torch.all(zeta[1:] > zeta[:-1])  # fast pairs (small i) decay most
    assert xpos_zeta(128).dtype == torch.float32
    assert torch.equal(xpos_zeta(128), zeta.float())


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("role", XPOS_ROLES)
@pytest.mark.parametrize("center", [0, 7, -3])
def test_matches_the_formula_written_pair_by_pair(pairing, role, center):
    x = _x()
    positions = torch.arange(20, 32)
    expected = paper_xpos(x, positions, role, pairing=pairing, center=center)
    got = apply_xpos(x, positions, role=role, pairing=pairing, center=center)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.4, 1.0])
@pytest.mark.parametrize("kappa", [512.0, 8.0])
def test_gamma_scale_base_and_base_are_used(gamma, kappa):
    x = _x(s=5)
    positions = torch.tensor([0, 3, 9, 40, 41])
    for role in XPOS_ROLES:
        got = apply_xpos(x, positions, role=role, gamma=gamma, scale_base=kappa, base=500.0)
        expected = paper_xpos(x, positions, role, gamma=gamma, kappa=kappa, base=500.0)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_at_center_xpos_is_rope():
    x = _x(s=1)
    for role in XPOS_ROLES:
        assert torch.equal(
            apply_xpos(x, torch.tensor([5]), role=role, center=5), apply_rope(x, torch.tensor([5]), base=10000.0)
        )


# --- the score ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_score_is_ropes_score_times_zeta_per_pair(pairing):
    q, k = _x(s=1, seed=1), _x(s=1, seed=2)
    zeta = xpos_zeta(D, dtype=torch.float64)
    for m, n in [(10, 3), (700, 100), (5, 5), (3000, 0)]:
        score = (
            apply_xpos(q, torch.tensor([m]), role="query", pairing=pairing)
            * apply_xpos(k, torch.tensor([n]), role="key", pairing=pairing)
        ).sum(-1)
        rope_pairs = _pair_scores(
            apply_rope(q, torch.tensor([m]), pairing=pairing),
            apply_rope(k, torch.tensor([n]), pairing=pairing),
            pairing,
        )  # (b, h, 1, d/2)
        r = n - m
        expected = (rope_pairs * zeta ** (-r / 512)).sum(-1)
        torch.testing.assert_close(score, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shift", [1, 17, 1000])
def test_score_depends_on_r_only(shift):
    q, k = _x(s=1, seed=3), _x(s=1, seed=4)

    def score(m, n):
        return (apply_xpos(q, torch.tensor([m]), role="query") * apply_xpos(k, torch.tensor([n]), role="key")).sum()

    for m, n in [(9, 2), (40, 40), (300, 0)]:
        assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-10, abs_tol=1e-12)


def test_center_changes_q_and_k_but_not_the_scores():
    q, k = _x(seed=5), _x(seed=6)
    positions = torch.arange(100, 112)

    def scores(center):
        q_rot = apply_xpos(q, positions, role="query", center=center)
        k_rot = apply_xpos(k, positions, role="key", center=center)
        return q_rot, q_rot @ k_rot.transpose(-2, -1)  # (b, h, s, s)

    (q0, s0), (q1, s1) = scores(0), scores(106)  # torchscale-like: center near the middle of the positions
    assert not torch.allclose(q0, q1)
    torch.testing.assert_close(s0, s1, rtol=1e-10, atol=1e-12)


def test_each_pair_decays_with_distance_in_a_causal_decoder():
    # One pair at a time, with q and k chosen so that RoPE's pair score is |q||k| cos(r theta_i):
    # xPos multiplies it by zeta_i ** (|r| / 512), which falls with the distance |r| = m - n.
    zeta = xpos_zeta(D, dtype=torch.float64)
    m = 4000
    for i in range(D // 2):
        q = torch.zeros(1, 1, 1, D, dtype=torch.float64)
        q[..., i] = 1.0
        k = q.clone()
        ratios = []
        for n in (m, m - 1, m - 100, m - 1000, m - 4000):
            xpos_score = (
                apply_xpos(q, torch.tensor([m]), role="query") * apply_xpos(k, torch.tensor([n]), role="key")
            ).sum()
            rope_score = (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum()
            ratios.append(float(xpos_score / rope_score))
            assert math.isclose(ratios[-1], float(zeta[i]) ** ((m - n) / 512), rel_tol=1e-9)
        assert ratios[0] == pytest.approx(1.0) and all(a > b for a, b in itertools.pairwise(ratios))
        # a key after the query (r > 0: not causal) is amplified instead
        after = (
            apply_xpos(q, torch.tensor([m]), role="query") * apply_xpos(k, torch.tensor([m + 100]), role="key")
        ).sum()
        rope_after = (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([m + 100]))).sum()
        assert float(after / rope_after) > 1


# --- decode steps, batches, dtypes ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_decode_step_equals_the_last_row_of_the_full_pass(dtype, pairing):
    x = _x(s=30, dtype=dtype)
    positions = torch.arange(30)
    for role in XPOS_ROLES:
        full = apply_xpos(x, positions, role=role, pairing=pairing)
        step = apply_xpos(x[:, :, -1:], positions[-1:], role=role, pairing=pairing)
        assert torch.equal(step, full[:, :, -1:])


def test_batched_positions_equal_one_row_at_a_time():
    x = _x(b=2, s=6)
    positions = torch.stack([torch.arange(6), torch.arange(50, 56)])  # (b, s)
    got = apply_xpos(x, positions, role="key")
    for row in range(2):
        assert torch.equal(got[row : row + 1], apply_xpos(x[row : row + 1], positions[row], role="key"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_agrees_with_float64(dtype):
    x = _x(s=40)
    positions = torch.arange(3000, 3040)
    expected = apply_xpos(x, positions, role="query")
    got = apply_xpos(x.to(dtype), positions, role="query").double()
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol * expected.abs().max().item())


def test_out_of_range_positions_raise_and_center_brings_them_back():
    x = _x(s=2, dtype=torch.float16)
    # float16: zeta_0 ** (p / 512) stays a normal float16 for |p| up to about 3960
    apply_xpos(x, torch.tensor([0, 3900]), role="key")
    with pytest.raises(ValueError, match=r"positions - center reach 4100: .*float16.*center"):
        apply_xpos(x, torch.tensor([0, 4100]), role="key")
    apply_xpos(x, torch.tensor([0, 4100]), role="key", center=2050)
    with pytest.raises(ValueError, match="reach 40000"):
        apply_xpos(x.float(), torch.tensor([0, 40000]), role="query")
    assert torch.isfinite(apply_xpos(x.double(), torch.tensor([0, 40000]), role="query")).all()


def test_takes_a_rope_scaling_spec():
    # xPos rotates by the spec's frequencies and scale; with Linear(4) that is positions / 4 at the center
    from posenc import Linear

    x = torch.randn(1, 2, 6, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    positions = torch.arange(6)
    at_center = apply_xpos(x, positions, role="query", scaling=Linear(factor=4.0), scale_base=1e30)
    torch.testing.assert_close(at_center, apply_rope(x, positions, scaling={"rope_type": "linear", "factor": 4}))
    with pytest.raises(ValueError, match="must rotate the whole head"):
        apply_xpos(x, positions, role="key", scaling={"rope_type": "default", "partial_rotary_factor": 0.5})


def test_empty_sequence():
    x = torch.zeros(1, 1, 0, D)
    assert apply_xpos(x, torch.zeros(0, dtype=torch.long), role="query").shape == (1, 1, 0, D)


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"role": "value"}, ValueError, r"role must be one of \('query', 'key'\), got 'value'"),
        ({"role": None}, ValueError, "role must be one of"),
        ({"role": "query", "gamma": 0.0}, ValueError, "gamma must be > 0, got 0"),
        ({"role": "query", "gamma": "0.4"}, TypeError, "gamma must be a real number, got '0.4'"),
        ({"role": "query", "scale_base": -512}, ValueError, "scale_base must be > 0, got -512"),
        ({"role": "query", "base": 1.0}, ValueError, "base must be > 1, got 1"),
        ({"role": "query", "center": 1.5}, TypeError, r"center must be an integer, got 1.5"),
        ({"role": "query", "center": True}, TypeError, r"center must be an integer, got True"),
        ({"role": "query", "pairing": "adjacent"}, ValueError, "pairing must be one of"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, match):
    with pytest.raises(error, match=match):
        apply_xpos(_x(s=4), torch.arange(4), **kwargs)


def test_role_is_required():
    with pytest.raises(TypeError, match="role"):
        apply_xpos(_x(s=4), torch.arange(4))


@pytest.mark.parametrize(
    ("x", "positions", "error", "match"),
    [
        (torch.zeros(2, 4, D), torch.arange(4), ValueError, r"x must have 4 dimensions, got shape \(2, 4, 16\)"),
        (torch.zeros(1, 1, 4, D, dtype=torch.long), torch.arange(4), TypeError, "x must have a floating-point dtype"),
        (torch.zeros(1, 1, 4, 15), torch.arange(4), ValueError, r"head_dim \(x.shape\[-1\]\) must be even .*got 15"),
        (torch.zeros(1, 1, 4, D), torch.arange(4.0), TypeError, "positions must be an integer tensor"),
        (torch.zeros(1, 1, 4, D), torch.tensor([-1, 0, 1, 2]), ValueError, "positions must be >= 0, got -1"),
        (torch.zeros(1, 1, 4, D), torch.arange(5), ValueError, r"positions must be \(s,\) or \(b, s\) with s = 4"),
        ([[0.0]], torch.arange(1), TypeError, "x must be a torch.Tensor, got list"),
    ],
)
def test_bad_tensors_name_themselves(x, positions, error, match):
    with pytest.raises(error, match=match):
        apply_xpos(x, positions, role="key")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"head_dim": 7}, ValueError, "head_dim must be even"),
        ({"head_dim": 8, "gamma": -1}, ValueError, "gamma must be > 0, got -1"),
        ({"head_dim": 8, "dtype": torch.int32}, TypeError, "dtype must be a floating-point torch.dtype"),
    ],
)
def test_zeta_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        xpos_zeta(**kwargs)
