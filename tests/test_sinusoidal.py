"""Tests of posenc.sinusoidal: the formula, the shift identity, layout, precision, references, errors."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import frequencies, shift_matrix, sinusoid_frequencies, sinusoidal_encoding, sinusoidal_table


def reference_table(n, d, base=10000.0):
    """The paper's formula, element by element, in float64 numpy."""
    table = np.zeros((n, d))
    for pos in range(n):
        for i in range(d // 2):
            angle = pos / base ** (2 * i / d)
            table[pos, 2 * i] = math.sin(angle)
            table[pos, 2 * i + 1] = math.cos(angle)
    return torch.from_numpy(table)


@pytest.mark.parametrize(("n", "d", "base"), [(1, 2, 10000.0), (50, 16, 10000.0), (33, 6, 100.0), (64, 128, 500000.0)])
def test_values_equal_the_formula(n, d, base):
    torch.testing.assert_close(
        sinusoidal_table(n, d, base=base, dtype=torch.float64), reference_table(n, d, base), atol=1e-12, rtol=0
    )


def test_layout_even_sin_odd_cos_and_position_zero():
    table = sinusoidal_table(10, 8, dtype=torch.float64)
    assert torch.equal(table[0], torch.tensor([0.0, 1.0] * 4, dtype=torch.float64))  # sin 0, cos 0
    omega = sinusoid_frequencies(8)
    torch.testing.assert_close(table[:, 0::2], torch.sin(torch.arange(10.0, dtype=torch.float64)[:, None] * omega))
    torch.testing.assert_close(table[:, 1::2], torch.cos(torch.arange(10.0, dtype=torch.float64)[:, None] * omega))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype(dtype):
    assert sinusoidal_table(7, 4, dtype=dtype).dtype == dtype
    assert shift_matrix(2, 4, dtype=dtype).dtype == dtype


def test_float32_agrees_with_float64_reference_up_to_10000_positions():
    table = sinusoidal_table(10000, 64)
    reference = sinusoidal_table(10000, 64, dtype=torch.float64)
    assert (table.double() - reference).abs().max() < 1e-6
    # Computing the angles in float32 instead would be wrong by far more than that.
    omega32 = sinusoid_frequencies(64).float()
    naive = torch.sin(torch.arange(10000, dtype=torch.float32)[:, None] * omega32)
    assert (naive.double() - reference[:, 0::2]).abs().max() > 1e-4


def test_the_public_kernel_is_the_checked_functions_formula():
    # posenc.frequencies (unchecked, float32 by default) is the one home of theta_i; sinusoid_frequencies checks.
    for d, base in ((8, 10000.0), (128, 500000.0)):
        i = torch.arange(d // 2, dtype=torch.float64)
        torch.testing.assert_close(frequencies(d, base, torch.float64), base ** (-2 * i / d), rtol=1e-15, atol=0)
        assert torch.equal(frequencies(d, base, torch.float64), sinusoid_frequencies(d, base=base))
        assert frequencies(d, base).dtype == torch.float32
    divided = frequencies(8, 10000.0, divided_by=torch.tensor([1.0, 2.0, 4.0, 8.0]))
    torch.testing.assert_close(divided, frequencies(8, 10000.0) / torch.tensor([1.0, 2.0, 4.0, 8.0]))


def test_frequencies_form_a_geometric_progression():
    omega = sinusoid_frequencies(128)
    assert omega[0] == 1.0
    torch.testing.assert_close(omega[1:] / omega[:-1], torch.full((63,), 10000.0 ** (-2 / 128), dtype=torch.float64))
    wavelengths = 2 * math.pi / omega
    assert wavelengths[0] == pytest.approx(2 * math.pi)
    assert wavelengths[-1] == pytest.approx(2 * math.pi * 10000 ** (126 / 128))


@pytest.mark.parametrize("d", [2, 8, 64])
@pytest.mark.parametrize("k", [0, 1, 5, 37, -3, -20, 2.5])
def test_shift_matrix_moves_every_position_by_k(d, k):
    positions = torch.arange(-30, 200, dtype=torch.float64)
    pe = sinusoidal_encoding(positions, d, dtype=torch.float64)  # (n, d)
    shifted = sinusoidal_encoding(positions + k, d, dtype=torch.float64)
    m = shift_matrix(k, d, dtype=torch.float64)
    torch.testing.assert_close(pe @ m.T, shifted, atol=1e-10, rtol=0)  # PE(pos + k) = M(k) PE(pos), row-wise


@settings(max_examples=50, deadline=None)
@given(
    positions=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=5),
    k=st.integers(-(10**4), 10**4),
    half_d=st.integers(1, 16),
    base=st.floats(2.0, 1e6),
)
def test_shift_identity_holds_for_any_positions_offsets_and_bases(positions, k, half_d, base):
    d = 2 * half_d
    pe = sinusoidal_encoding(torch.tensor(positions), d, base=base, dtype=torch.float64)  # (n, d)
    shifted = sinusoidal_encoding(torch.tensor(positions) + k, d, base=base, dtype=torch.float64)
    # float64 angles of size up to 1e6 carry ~1e-10 of rounding, which the identity inherits.
    torch.testing.assert_close(pe @ shift_matrix(k, d, base=base, dtype=torch.float64).T, shifted, atol=1e-8, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_frequencies_in_every_dtype_and_bit_identical_to_transformers_in_float32(dtype):
    omega = sinusoid_frequencies(64, base=500000.0, dtype=dtype)
    assert omega.dtype == dtype and omega.shape == (32,)
    exact = torch.tensor([500000.0 ** (-2 * i / 64) for i in range(32)], dtype=torch.float64)
    torch.testing.assert_close(omega.double(), exact, rtol=torch.finfo(dtype).eps, atol=0)
    if dtype == torch.float32:  # transformers' default RoPE inv_freq, written its way
        assert torch.equal(omega, 1.0 / (500000.0 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64)))


def test_shift_matrix_is_an_orthogonal_block_diagonal_group():
    d = 16
    m3, m5 = shift_matrix(3, d, dtype=torch.float64), shift_matrix(5, d, dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    torch.testing.assert_close(m3 @ m3.T, eye)
    torch.testing.assert_close(shift_matrix(0, d, dtype=torch.float64), eye)
    torch.testing.assert_close(m3 @ m5, shift_matrix(8, d, dtype=torch.float64))
    torch.testing.assert_close(shift_matrix(-3, d, dtype=torch.float64), m3.T)
    off_block = torch.ones(d, d, dtype=torch.bool)
    for i in range(0, d, 2):
        off_block[i : i + 2, i : i + 2] = False
    assert torch.all(m3[off_block] == 0)


def test_encoding_accepts_any_shape_and_far_positions():
    positions = torch.tensor([[0, 1], [10**6, 5]])
    enc = sinusoidal_encoding(positions, 8, dtype=torch.float64)
    assert enc.shape == (2, 2, 8)
    torch.testing.assert_close(enc[0, 1], sinusoidal_table(2, 8, dtype=torch.float64)[1])
    # every pair is a point on the unit circle, so ||PE(pos)||^2 = d/2 at any position
    torch.testing.assert_close((enc**2).sum(-1), torch.full((2, 2), 4.0, dtype=torch.float64))


def test_agrees_with_hugging_face_xlm_and_distilbert():
    pytest.importorskip("transformers")
    from transformers.models.distilbert import modeling_distilbert as distilbert
    from transformers.models.xlm import modeling_xlm as xlm

    for n, d in [(512, 768), (100, 64), (10, 2)]:
        ours = sinusoidal_table(n, d)
        for create in (xlm.create_sinusoidal_embeddings, distilbert.create_sinusoidal_embeddings):
            theirs = create(n, d, torch.empty(n, d))
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_concatenated_layout_of_fairseq_m2m100_is_a_permutation_with_another_base():
    # fairseq / tensor2tensor style: [all sines | all cosines], omega_i = 10000^(-i/(d/2 - 1)).
    pytest.importorskip("transformers")
    from transformers.models.m2m_100 import modeling_m2m_100 as m2m

    n, d = 64, 32
    theirs = m2m.M2M100SinusoidalPositionalEmbedding.get_embedding(n, d)
    ours = sinusoidal_table(n, d, base=10000.0 ** (d / (d - 2)))
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # sines first, then cosines
    torch.testing.assert_close(ours[:, order], theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: sinusoidal_table(10, 7), ValueError, "dim must be even.*got 7"),
        (lambda: sinusoidal_table(0, 8), ValueError, "n_positions must be >= 1, got 0"),
        (lambda: sinusoidal_table(-5, 8), ValueError, "n_positions must be >= 1, got -5"),
        (lambda: sinusoidal_table(10, 0), ValueError, "dim must be >= 1, got 0"),
        (lambda: sinusoidal_table(10.0, 8), TypeError, "n_positions must be an integer"),
        (lambda: sinusoidal_table(10, 8, base=1.0), ValueError, "base must be > 1, got 1"),
        (lambda: sinusoidal_table(10, 8, base=0.5), ValueError, "base must be > 1"),
        (lambda: sinusoidal_table(10, 8, base=float("inf")), ValueError, "base must be finite"),
        (lambda: sinusoidal_table(10, 8, dtype=torch.int64), TypeError, "dtype must be a floating-point"),
        (lambda: sinusoidal_encoding([1, 2], 8), TypeError, "positions must be a torch.Tensor"),
        (lambda: sinusoidal_encoding(torch.tensor([True]), 8), TypeError, "positions must be an integer or real"),
        (
            lambda: sinusoidal_encoding(torch.tensor([1.0, float("nan")]), 8),
            ValueError,
            "positions must be finite, got nan",
        ),
        (lambda: sinusoidal_encoding(torch.tensor([1, 2]), 8, base=1.0), ValueError, "base must be > 1"),
        (lambda: sinusoid_frequencies(8, dtype=torch.int64), TypeError, "dtype must be a floating-point"),
        (lambda: sinusoid_frequencies(8, base=-3.0), ValueError, "base must be > 1, got -3"),
        (lambda: sinusoid_frequencies(True), TypeError, "dim must be an integer"),
        (lambda: shift_matrix(1, 5), ValueError, "dim must be even"),
        (lambda: shift_matrix("1", 4), TypeError, "delta must be a real number"),
        (lambda: shift_matrix(float("nan"), 4), ValueError, "delta must be finite"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_sinusoidal_encoding_refuses_integer_positions_that_float64_would_round():
    # 2**53 + 1 rounds to 2**53 in float64: the two would share an encoding, a silent wrong answer
    limit = 2**53
    assert sinusoidal_encoding(torch.tensor([limit, -limit]), 8).shape == (2, 8)
    for position in (limit + 1, -(limit + 1), 2**62):
        with pytest.raises(ValueError, match=r"positions must be <= 2\*\*53"):
            sinusoidal_encoding(torch.tensor([0, position]), 8)
