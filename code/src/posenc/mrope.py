r"""RoPE over several position axes: 2D RoPE for image patches and Qwen2-VL's multimodal RoPE (M-RoPE).

Book: the chapter on today's variants (``book/08_variants.ipynb``, section "Multimodal RoPE").

A token carries one integer position per axis, :math:`(m^{(0)}, m^{(1)}, \dots)`. The pairs of the head
are split into consecutive **sections**, one per axis; pair ``i`` of section ``a`` turns by
:math:`m^{(a)} \theta_i`:

.. math::

    \varphi_i(m) = m^{(a(i))}\, \theta_i, \qquad a(i) = \text{the section that holds pair } i .

Within one axis this is RoPE, so the score of a query and a key depends on the differences of their
positions, axis by axis, :math:`r^{(a)} = n^{(a)} - m^{(a)}`. When all axes of both tokens carry the
same position (a text token in Qwen2-VL), every pair turns by :math:`m \theta_i` and M-RoPE is 1D RoPE.

* :func:`apply_mrope`: Qwen2-VL (Wang et al., arXiv:2409.12191). Axes (temporal, height, width),
  frequencies :math:`\theta_i = \text{base}^{-2i/d}` of the whole head, ``sections`` = the model's
  ``rope_parameters["mrope_section"]`` in pairs (Qwen2-VL: ``[16, 24, 24]`` for ``d = 128``), so the
  fastest pairs follow time and the slowest follow width. Pairs ``(i, i + d/2)`` (``pairing="half"``),
  as in transformers' ``Qwen2VLRotaryEmbedding`` and ``apply_rotary_pos_emb``, which the tests match.
* ``layout="interleaved"``: Qwen3-VL (transformers' ``Qwen3VLTextRotaryEmbedding``,
  ``recomposition_frequencies``; ``mrope_section`` ``[24, 20, 20]`` for ``d = 128``). The axes take
  turns pair by pair instead of in blocks: pair ``i`` follows height if ``i % 3 == 1`` and
  ``i < 3 * sections[1]``, width if ``i % 3 == 2`` and ``i < 3 * sections[2]``, and time otherwise, so
  every axis gets fast and slow frequencies alike.
* :func:`apply_rope_2d`: axial 2D RoPE for a grid of patches, the layout of Qwen2-VL's vision encoder:
  the first ``d/4`` pairs turn by the row, the next ``d/4`` by the column, each axis with the
  frequencies of a ``d/2``-dimensional RoPE, :math:`\text{base}^{-4j/d}`, ``0 <= j < d/4``.

Shapes:
    b: batch, h: heads, s: sequence length, d: head dim, A: number of position axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from posenc._checks import (
    check_int,
    check_integer_tensor,
    check_real,
    check_tensor,
    exact_integer_limit,
    float_dtype,
    has_values,
)
from posenc.rope import rope_rotate
from posenc.rope_scaling import RopeScaling, rope_spec
from posenc.sinusoidal import frequencies

__all__ = [
    "MROPE_LAYOUTS",
    "QWEN2VL_MROPE_SECTION",
    "QWEN3VL_MROPE_SECTION",
    "apply_mrope",
    "apply_rope_2d",
    "mrope_axes",
    "mrope_cos_sin",
]

QWEN2VL_MROPE_SECTION = (16, 24, 24)  # Qwen2-VL's mrope_section (pairs), head dim 128
QWEN3VL_MROPE_SECTION = (24, 20, 20)  # Qwen3-VL's mrope_section (pairs), head dim 128, interleaved
MROPE_LAYOUTS = ("sectioned", "interleaved")  # Qwen2-VL's blocks, Qwen3-VL's pair-by-pair turns


def _check_sections(sections: object, pairs: int) -> tuple[int, ...]:
    if not isinstance(sections, Sequence) or isinstance(sections, str) or len(sections) == 0:
        raise TypeError(f"sections must be a non-empty sequence of ints, got {sections!r}")
    out = tuple(check_int("sections[]", n, minimum=1) for n in sections)
    if sum(out) != pairs:
        raise ValueError(f"sections must add up to the number of pairs {pairs}, got {list(out)} (sum {sum(out)})")
    return out


def _check_axis_positions(positions: object, axes: int, compute: torch.dtype) -> Tensor:
    check_integer_tensor("positions", positions)
    if positions.dim() not in (2, 3) or positions.shape[0] != axes:
        raise ValueError(f"positions must be ({axes}, s) or ({axes}, b, s), got shape {tuple(positions.shape)}")
    if has_values(positions) and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got minimum {int(positions.min())}")
    limit = exact_integer_limit(compute)  # past it, two positions can share an angle
    if has_values(positions) and int(positions.max()) > limit:
        raise ValueError(
            f"positions must be <= 2**{limit.bit_length() - 1} = {limit} to be exact in {compute} angles, "
            f"got {int(positions.max())}"
        )
    return positions.long()


def _check_layout(layout: object) -> str:
    if not isinstance(layout, str) or layout not in MROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {MROPE_LAYOUTS}, got {layout!r}")
    return layout


def mrope_axes(sections: Sequence[int], layout: str = "sectioned") -> Tensor:
    """Kernel (unchecked): the axis ``a(i)`` that each pair ``i`` follows, for a layout of :data:`MROPE_LAYOUTS`.

    ``"sectioned"`` (Qwen2-VL): ``sections[0]`` pairs of axis 0, then ``sections[1]`` of axis 1, ...
    ``"interleaved"`` (Qwen3-VL, three axes): axis 1 at ``i % 3 == 1, i < 3 * sections[1]``, axis 2 at
    ``i % 3 == 2, i < 3 * sections[2]``, axis 0 elsewhere.

    Shapes:
        returns ``(sum(sections),)`` int64.
    """
    pairs = sum(sections)
    if layout == "sectioned":
        return torch.repeat_interleave(torch.arange(len(sections)), torch.tensor(sections))  # (d/2,)
    axis = torch.zeros(pairs, dtype=torch.int64)  # (d/2,): time by default
    for a in range(1, len(sections)):  # as transformers' recomposition_frequencies writes it
        axis[a : 3 * sections[a] : 3] = a
    return axis


def mrope_cos_sin(
    positions: Tensor,
    inv_freq: Tensor,
    sections: Sequence[int],
    *,
    dtype: torch.dtype = torch.float32,
    layout: str = "sectioned",
    attention_scale: float = 1.0,
) -> tuple[Tensor, Tensor]:
    r"""cos and sin of :math:`m^{(a(i))} \theta_i`: pair ``i`` reads the position of its axis ``a(i)``.

    ``layout="sectioned"``: ``sections[a]`` consecutive pairs follow axis ``a`` (Qwen2-VL);
    ``"interleaved"``: the axes take turns (Qwen3-VL, :func:`mrope_axes`). The sections must add up
    to ``len(inv_freq)``. Angles are float32 (float64 when ``dtype`` is float64), as in transformers;
    cos and sin are multiplied by ``attention_scale``.

    Shapes:
        positions ``(A, s)`` or ``(A, b, s)`` integers >= 0 with ``A = len(sections)``; inv_freq
        ``(d/2,)``; returns cos and sin ``(s, d/2)`` or ``(b, s, d/2)`` in ``dtype``.
    """
    dtype = float_dtype("dtype", dtype)
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    sections = _check_sections(sections, inv_freq.shape[0])
    layout = _check_layout(layout)
    if layout == "interleaved" and len(sections) != 3:
        raise ValueError(f"layout='interleaved' (Qwen3-VL) has three axes, got sections {list(sections)}")
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    positions = _check_axis_positions(positions, len(sections), compute)
    attention_scale = check_real("attention_scale", attention_scale, greater_than=0.0)
    angles = positions[..., None].to(compute) * inv_freq.to(positions.device, compute)  # (A, [b,] s, d/2)
    axis = mrope_axes(sections, layout).to(positions.device)  # (d/2,): a(i)
    pair = torch.arange(inv_freq.shape[0], device=positions.device)
    angles = angles.movedim(0, -1)[..., pair, axis]  # ([b,] s, d/2): pair i at axis a(i)
    if attention_scale == 1.0:
        return angles.cos().to(dtype), angles.sin().to(dtype)
    return (angles.cos() * attention_scale).to(dtype), (angles.sin() * attention_scale).to(dtype)


def apply_mrope(
    x: Tensor,
    positions: Tensor,
    *,
    sections: Sequence[int],
    base: float | None = None,
    layout: str = "sectioned",
    scaling: RopeScaling | Mapping | None = None,
) -> Tensor:
    r"""Multimodal RoPE: pair ``i`` turns by the position of its axis (Qwen2-VL, arXiv:2409.12191; Qwen3-VL).

    ``sections`` in pairs, e.g. :data:`QWEN2VL_MROPE_SECTION` ``(16, 24, 24)`` for ``d = 128`` (temporal,
    height, width) with ``layout="sectioned"`` (Qwen2-VL), or :data:`QWEN3VL_MROPE_SECTION`
    ``(24, 20, 20)`` with ``layout="interleaved"`` (Qwen3-VL). Frequencies
    :math:`\theta_i = \text{base}^{-2i/d}` over the whole head (``base`` default 10000), or those of a
    RoPE scaling spec (``scaling``, as for :func:`posenc.apply_rope`, on the whole head; the
    length of the length-dependent types is the largest position + 1), pairs ``(i, i + d/2)``.
    With all axes equal (text tokens) it equals :func:`posenc.apply_rope`.

    Shapes:
        x ``(b, h, s, d)``; positions ``(A, s)`` or ``(A, b, s)``; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    spec, base = rope_spec(scaling, base=base)
    d = spec.check_head_dim(x.shape[-1])
    if spec.rotary_dim(d) != d:
        raise ValueError(f"M-RoPE rotates the whole head: got partial_rotary_factor = {spec.partial_rotary_factor:g}")
    check_integer_tensor("positions", positions)
    seq_len = int(positions.max()) + 1 if has_values(positions) and int(positions.min()) >= 0 else None
    inv_freq = spec.inv_freq(d, base, seq_len)  # (d/2,) float32, as transformers
    cos, sin = mrope_cos_sin(
        positions, inv_freq, sections, dtype=x.dtype, layout=layout, attention_scale=spec.attention_scale(seq_len)
    )  # ([b,] s, d/2)
    return rope_rotate(x, cos.to(x.device), sin.to(x.device), pairing="half")  # (b, h, s, d), checks the shapes


def apply_rope_2d(x: Tensor, rows: Tensor, cols: Tensor, *, base: float = 10000.0) -> Tensor:
    r"""Axial 2D RoPE: pairs ``j < d/4`` turn by ``row * base^(-4j/d)``, pairs ``d/4 + j`` by ``col * base^(-4j/d)``.

    The score of two patches depends on ``(row_n - row_m, col_n - col_m)`` only. Pairs ``(i, i + d/2)``.

    Shapes:
        x ``(b, h, s, d)`` with ``d % 4 == 0``; rows, cols ``(s,)`` or ``(b, s)`` integers >= 0;
        returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    base = check_real("base", base, greater_than=1.0)
    d = x.shape[-1]
    if d % 4:
        raise ValueError(f"2D RoPE needs a head dim divisible by 4, got {d}")
    for name, value in (("rows", rows), ("cols", cols)):
        check_integer_tensor(name, value)
    if rows.shape != cols.shape:
        raise ValueError(f"rows and cols must have one shape, got {tuple(rows.shape)} and {tuple(cols.shape)}")
    axis_freq = frequencies(d // 2, base)  # (d/4,): a d/2-dimensional RoPE per axis
    inv_freq = torch.cat((axis_freq, axis_freq))  # (d/2,): the same frequencies for each axis
    cos, sin = mrope_cos_sin(torch.stack((rows, cols)), inv_freq, (d // 4, d // 4), dtype=x.dtype)
    return rope_rotate(x, cos.to(x.device), sin.to(x.device), pairing="half")  # (b, h, s, d)
