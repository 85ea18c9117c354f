r"""Sinusoidal absolute positional encoding (Vaswani et al., 2017, arXiv:1706.03762, sec. 3.5).

Book: chapter 2 (``book/02_sinusoidal.ipynb``).

.. math::

    PE_{(pos, 2i)} = \sin(pos\,\theta_i), \qquad PE_{(pos, 2i+1)} = \cos(pos\,\theta_i), \qquad
    \theta_i = \text{base}^{-2i/d}, \quad 0 \le i < d/2

Layout: the paper's, with even indices holding sines and odd indices cosines, pair ``i``
occupying columns ``(2i, 2i+1)``. Other code bases concatenate all sines then all cosines, a
fixed permutation of the same columns (chapter 2 shows the conversion).

Shapes:
    n: number of positions, d: encoding dimension (even).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._checks import (
    check_even_dim,
    check_exact_positions,
    check_int,
    check_real,
    check_tensor,
    float_dtype,
    has_values,
)

__all__ = ["frequencies", "shift_matrix", "sinusoid_frequencies", "sinusoidal_encoding", "sinusoidal_table"]


def frequencies(
    dim: int, base: float | Tensor, dtype: torch.dtype = torch.float32, *, divided_by: float | Tensor | None = None
) -> Tensor:
    r"""The frequency formula :math:`\theta_i = 1 / (\text{divided\_by} \cdot \text{base}^{2i/d})`, unchecked.

    The one home of :math:`\theta_i` in posenc: :func:`sinusoid_frequencies` (checked, float64 by
    default), every RoPE scaling spec of :mod:`posenc.rope_scaling`, xPos, M-RoPE and p-RoPE build on
    it. A public kernel without checks, like ``torch.nn.functional`` beneath ``torch.nn``: ``dim``
    must be an even int >= 2 and ``base`` > 1 (the callers' entry points check that).

    ``base`` may be a 0-d tensor (dynamic NTK's grown base); ``divided_by`` (a scalar or a ``(d/2,)``
    tensor) divides the frequencies inside the reciprocal, as YaRN and LongRoPE write it in
    transformers. Float32 results are bit-identical to transformers' ``inv_freq``.

    Shapes:
        returns ``(d/2,)`` in ``dtype``.
    """
    # 1 / base^(2i/d), written exactly as transformers' modeling_rope_utils writes it, so that the
    # float32 result is bit-identical to its inv_freq (RoPE rotates by these frequencies).
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim  # (d/2,): 2i/d
    if divided_by is None:
        return 1.0 / (base**exponents)  # (d/2,)
    return 1.0 / (divided_by * base**exponents)  # (d/2,)


def sinusoid_frequencies(dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float64) -> Tensor:
    r"""Angular frequencies :math:`\theta_i = \text{base}^{-2i/d}` of the ``d/2`` pairs.

    The one home of this formula in posenc: the sinusoidal encoding (arXiv:1706.03762, chapter 2)
    and every RoPE variant (:math:`\theta_i`, arXiv:2104.09864, chapters 6 to 8) import it. Pair ``i``
    has wavelength :math:`2\pi / \theta_i = 2\pi\, \text{base}^{2i/d}`: a geometric progression from
    :math:`2\pi` up to :math:`2\pi\, \text{base}^{(d-2)/d}`.

    In float32 the result is bit-identical to transformers' default RoPE ``inv_freq``
    (``1 / base ** (arange(0, d, 2).float() / d)``); float64 (the default) serves the sinusoidal tables.

    Shapes:
        returns ``(d/2,)`` in ``dtype``.
    """
    dim = check_even_dim("dim", dim)
    base = check_real("base", base, greater_than=1.0)
    dtype = float_dtype("dtype", dtype)
    return frequencies(dim, base, dtype)


def sinusoidal_encoding(
    positions: Tensor, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The encoding of arbitrary (integer or real) positions, computed in float64 and cast to ``dtype``.

    Computing the angles ``pos * theta_i`` in float64 matters: in float32 the angle of position
    10000 already carries an error of about 1e-3 radians.

    Shapes:
        positions: any shape ``(...)``; returns ``(..., d)``.
    """
    check_tensor("positions", positions)
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must be an integer or real tensor, got {positions.dtype}")
    if positions.is_floating_point() and has_values(positions) and not bool(positions.isfinite().all()):
        raise ValueError(f"positions must be finite, got {positions[~positions.isfinite()].flatten()[0].item()}")
    check_exact_positions("positions", positions, torch.float64)  # integers past 2**53 would round
    dim = check_even_dim("dim", dim)
    base = check_real("base", base, greater_than=1.0)
    dtype = float_dtype("dtype", dtype)
    omega = frequencies(dim, base, torch.float64).to(positions.device)  # (d/2,)
    angles = positions.to(torch.float64)[..., None] * omega  # (..., d/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (..., d/2, 2): (sin, cos) per pair
    return table.flatten(-2).to(dtype)  # (..., d): sin at 2i, cos at 2i+1


def sinusoidal_table(
    n_positions: int, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The table of encodings of positions ``0 .. n_positions - 1``, one row per position.

    Shapes:
        returns ``(n, d)``.
    """
    n_positions = check_int("n_positions", n_positions, minimum=1)
    return sinusoidal_encoding(torch.arange(n_positions), dim, base=base, dtype=dtype)


def shift_matrix(delta: float, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The matrix :math:`M(\Delta)` with :math:`PE_{pos+\Delta} = M(\Delta)\, PE_{pos}` for every position.

    By the angle-addition identities, pair ``i`` (frequency :math:`\theta_i`) transforms as

    .. math::

        \begin{pmatrix} \sin((pos+\Delta)\theta_i) \\ \cos((pos+\Delta)\theta_i) \end{pmatrix}
        = \begin{pmatrix} \cos \Delta\theta_i & \sin \Delta\theta_i \\
            -\sin \Delta\theta_i & \cos \Delta\theta_i \end{pmatrix}
          \begin{pmatrix} \sin(pos\,\theta_i) \\ \cos(pos\,\theta_i) \end{pmatrix},

    so :math:`M(\Delta)` is block-diagonal with one 2x2 rotation per pair and depends on the shift
    ``delta`` only. It is orthogonal, :math:`M(0) = I` and :math:`M(a) M(b) = M(a + b)`. ``delta``
    may be negative.

    Shapes:
        returns ``(d, d)``.
    """
    delta = check_real("delta", delta)
    dtype = float_dtype("dtype", dtype)
    angle = delta * sinusoid_frequencies(dim, base=base)  # (d/2,), float64
    cos, sin = angle.cos(), angle.sin()
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype)  # (d, d)
