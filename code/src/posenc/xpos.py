r"""xPos: RoPE with a per-pair exponential decay (Sun et al., "A Length-Extrapolatable Transformer",
arXiv:2212.10554).

Book: chapter 7 (``book/07_beyond.ipynb``, section "xPos").

xPos rotates queries and keys exactly as RoPE does (:mod:`posenc.rope`) and, in addition, scales
pair ``i`` of a query at position ``m`` by :math:`\zeta_i^{m/\kappa}` and pair ``i`` of a key at
position ``n`` by :math:`\zeta_i^{-n/\kappa}`:

.. math::

    \zeta_i = \frac{2i/d + \gamma}{1 + \gamma}, \qquad 0 \le i < d/2, \qquad
    \gamma = 0.4, \quad \kappa = \text{scale\_base} = 512,

so that :math:`\gamma/(1+\gamma) = \zeta_0 < \dots < \zeta_{d/2-1} < 1`. The score is RoPE's, pair by
pair, times :math:`\zeta_i^{(m-n)/\kappa} = \zeta_i^{-r/\kappa}` with :math:`r = n - m`:

.. math::

    \langle \text{xpos}_q(q, m), \text{xpos}_k(k, n) \rangle
    = \sum_i \zeta_i^{-r/\kappa}\, \langle R(m\theta_i)\, q_{(i)}, R(n\theta_i)\, k_{(i)} \rangle .

It depends on ``r`` only (shift-invariant, like RoPE), and for causal attention (:math:`r \le 0`) each
pair's term is damped by :math:`\zeta_i^{|r|/\kappa} \le 1`, more for the fast pairs (small ``i``,
small :math:`\zeta_i`). For a key after the query (:math:`r > 0`, bidirectional attention) the
factor exceeds 1: xPos is meant for causal decoders.

The exponent grows with the position, so :math:`\zeta_0^{\pm p/\kappa}` leaves the floating-point
range for long inputs (float32 near ``p - center = 36000`` with the defaults, float16 near 4000).
Implementations (torchscale, x-transformers, flash-attn) subtract about half the sequence length from
the positions before the exponent; the score does not change, because it depends on ``m - n`` only.
Here that reference position is the explicit argument ``center`` (default 0), the same for every call,
so that a one-token decode step equals the last row of the full pass. Positions that would leave the
range of ``x``'s dtype raise a ``ValueError``.

Conventions: the frequencies are RoPE's :math:`\theta_i = \text{base}^{-2i/d}` (the paper and
torchscale use base 10000); ``pairing`` as in :func:`posenc.apply_rope` (torchscale pairs
``(2i, 2i+1)``: ``pairing="interleaved"``). The scale is applied to pair ``i`` whichever features form
it. The paper's other half, blockwise causal attention at inference, is not part of this module.

Shapes:
    b: batch, h: heads, s: sequence length, d: head dim (even).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from posenc._checks import check_even_dim, check_int, check_real, check_tensor, float_dtype, has_values
from posenc.rope import check_pairing, check_positions, cos_sin, rotate
from posenc.rope_scaling import RopeScaling, rope_spec

__all__ = ["XPOS_ROLES", "apply_xpos", "xpos_zeta"]

XPOS_ROLES = ("query", "key")
DEFAULT_GAMMA = 0.4  # the paper's gamma
DEFAULT_SCALE_BASE = 512.0  # the paper's and torchscale's scale_base (kappa)


def _zeta(head_dim: int, gamma: float) -> Tensor:
    """Unchecked kernel of :func:`xpos_zeta`, float64."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)  # (d/2,): pair index
    return (2 * i / head_dim + gamma) / (1 + gamma)  # (d/2,): zeta_i


def xpos_zeta(head_dim: int, *, gamma: float = DEFAULT_GAMMA, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The per-pair decay bases :math:`\zeta_i = (2i/d + \gamma) / (1 + \gamma)` of xPos.

    Computed in float64 and rounded once to ``dtype``. All lie in :math:`(0, 1)` for :math:`\gamma > 0`:
    the fastest pair (``i = 0``) has the smallest, :math:`\gamma / (1 + \gamma)`. Chapter 7.

    Shapes:
        returns ``(d/2,)`` in ``dtype``.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    gamma = check_real("gamma", gamma, greater_than=0.0)
    dtype = float_dtype("dtype", dtype)
    return _zeta(head_dim, gamma).to(dtype)


def _check_role(role: object) -> str:
    if not isinstance(role, str) or role not in XPOS_ROLES:
        raise ValueError(f"role must be one of {XPOS_ROLES}, got {role!r}")
    return role


def _exponent_limit(dtype: torch.dtype) -> float:
    # The largest |log(scale)| whose scale stays a normal number of dtype, both ways (>= tiny, <= max).
    info = torch.finfo(dtype)
    return min(math.log(info.max), -math.log(info.tiny))


def apply_xpos(
    x: Tensor,
    positions: Tensor,
    *,
    role: str,
    base: float | None = None,
    scaling: RopeScaling | Mapping | None = None,
    gamma: float = DEFAULT_GAMMA,
    scale_base: float = DEFAULT_SCALE_BASE,
    center: int = 0,
    pairing: str = "half",
) -> Tensor:
    r"""Rotate ``x`` by its positions as RoPE does and scale pair ``i`` by :math:`\zeta_i^{\pm(p - c)/\kappa}`.

    ``role="query"`` multiplies by :math:`\zeta_i^{(m - c)/\kappa}`, ``role="key"`` by
    :math:`\zeta_i^{-(n - c)/\kappa}` (:math:`c` = ``center``, :math:`\kappa` = ``scale_base``), so that
    the score of a query at ``m`` and a key at ``n`` is RoPE's, pair by pair, times
    :math:`\zeta_i^{(m-n)/\kappa}`, whatever ``center`` is (see the module docstring). Queries and keys
    must use the same ``base``, ``gamma``, ``scale_base``, ``center`` and ``pairing``. Nothing depends
    on the length, so a decode step (one position) equals the last row of the full pass.

    Angles and scales are computed in float32 (float64 for float64 input) and rounded once to ``x``'s
    dtype. Chapter 7 (arXiv:2212.10554). The rotation's frequencies are RoPE's (``base``, default
    10000), or those of a RoPE scaling spec (``scaling``, as for :func:`posenc.apply_rope`; it must
    rotate the whole head, and its attention scale multiplies cos and sin).

    Shapes:
        x ``(b, h, s, d)``; positions ``(s,)`` or ``(b, s)`` integers >= 0; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    role = _check_role(role)
    pairing = check_pairing(pairing)
    head_dim = check_even_dim("head_dim (x.shape[-1])", x.shape[-1])
    spec, base = rope_spec(scaling, base=base)
    spec.check_head_dim(head_dim)
    if spec.rotary_dim(head_dim) != head_dim:
        raise ValueError(
            f"xPos scales every pair: scaling must rotate the whole head, got partial_rotary_factor = "
            f"{spec.partial_rotary_factor:g}"
        )
    gamma = check_real("gamma", gamma, greater_than=0.0)
    scale_base = check_real("scale_base", scale_base, greater_than=0.0)
    center = check_int("center", center)
    positions = check_positions(x, positions)

    zeta = _zeta(head_dim, gamma)  # (d/2,) float64
    if has_values(positions):  # (a meta tensor has no values to check)
        farthest = max(abs(int(positions.max()) - center), abs(int(positions.min()) - center))
        largest = farthest / scale_base * -math.log(float(zeta[0]))  # max |log(scale)|: the fastest pair
        if largest > _exponent_limit(x.dtype):
            raise ValueError(
                f"positions - center reach {farthest}: zeta_0 ** ({farthest} / scale_base={scale_base:g}) leaves "
                f"the range of {x.dtype}; pass center near the middle of the positions (the score does not "
                "change) or a wider dtype"
            )

    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    seq_len = int(positions.max()) + 1 if has_values(positions) else None  # dynamic NTK, LongRoPE read it
    inv_freq = spec.inv_freq(head_dim, base, seq_len).to(x.device)  # (d/2,)
    cos, sin = cos_sin(positions, inv_freq, spec.attention_scale(seq_len), compute)  # (..., s, d/2)
    sign = 1.0 if role == "query" else -1.0
    exponent = sign * (positions - center).to(compute)[..., None] / scale_base  # (..., s, 1): +-(p - c) / kappa
    scale = (exponent * zeta.log().to(compute).to(x.device)).exp()  # (..., s, d/2): zeta_i ** exponent
    cos, sin = (cos * scale).to(x.dtype), (sin * scale).to(x.dtype)  # a rotation times a scale, per pair
    return rotate(x, cos, sin, pairing)  # (b, h, s, d)
