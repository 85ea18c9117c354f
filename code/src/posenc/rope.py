r"""Rotary position embedding, RoPE (Su et al., RoFormer, arXiv:2104.09864), and its scaled variants.

Book: chapter 6 (``book/06_rope.ipynb``) and the RoPE scaling atlas of chapter 7.

Each pair of features of a query or key at position ``m`` is rotated by the angle ``m * theta_i``:

.. math::

    \begin{pmatrix} x'_a \\ x'_b \end{pmatrix} =
    \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{pmatrix}
    \begin{pmatrix} x_a \\ x_b \end{pmatrix},
    \qquad \theta_i = \text{base}^{-2i/d}, \quad 0 \le i < d/2,

so that :math:`\langle R_m q, R_n k \rangle = \langle q, R_{n-m} k \rangle` depends on ``n - m`` only.

Which features form a pair is a convention, named here explicitly (``pairing``):

* ``"half"``: feature ``i`` with ``i + d/2`` -- Hugging Face transformers' LLaMA, Qwen, Mistral
  (``rotate_half``);
* ``"interleaved"``: feature ``2i`` with ``2i + 1`` -- RoFormer, Meta's original LLaMA code
  (complex numbers), torchtune, transformers' Cohere.

The frequencies :math:`\theta_i` are imported from :func:`posenc.sinusoid_frequencies` (RoPE
rotates by the sinusoidal encoding's frequencies); the scaled variants are the registry of
:mod:`posenc.rope_scaling`. Numerics follow transformers exactly: inverse frequencies are float32
as in its ``modeling_rope_utils``, angles are ``float32(position) * inv_freq`` and cos/sin are cast
to the input's dtype, so float32 results agree with it to float32 rounding at every position. In
float16/bfloat16 the fused multiply-adds of the fast kernel round once where transformers rounds
twice, so about one element in seven differs from it by one unit in the last place (closer to the
float64 result, not further). The one deliberate exception is float64 input, whose angles are
computed in float64 from the same float32 frequencies (transformers would round them to float32),
so that the book's identities hold to 1e-12.

Two forms of the rotation stand side by side: :func:`rope_rotate_reference`, the formula
:math:`x \cos + \operatorname{rotate}(x) \sin` in a few lines, and :func:`rope_rotate`, the fast
kernel that :func:`apply_rope` and :class:`RotaryEmbedding` use; the tests hold them equal.

Shapes:
    b: batch, h: heads, s: sequence length, d: head dim (even), r: rotated features (``r = d``
    unless ``partial_rotary_factor < 1``, GPT-NeoX; the last ``d - r`` features pass unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from posenc._checks import (
    check_int,
    check_integer_tensor,
    check_real,
    check_tensor,
    exact_integer_limit,
    float_dtype,
    has_values,
)
from posenc.rope_scaling import LENGTH_DEPENDENT, ROPE_TYPES, _inv_freq, _resolve

__all__ = [
    "PAIRINGS",
    "ROPE_TYPES",
    "RotaryEmbedding",
    "apply_rope",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_rotate",
    "rope_rotate_reference",
]

PAIRINGS = ("half", "interleaved")


def rope_inv_freq(
    head_dim: int,
    *,
    base: float | None = None,
    scaling: Mapping | None = None,
    seq_len: int | None = None,
) -> tuple[Tensor, float]:
    r"""Inverse frequencies :math:`\theta_i` of RoPE, and the factor that cos and sin are multiplied by.

    Dispatches through the registry :data:`posenc.rope_scaling.ROPE_SCALINGS` (formulas and papers
    there): ``default`` (arXiv:2104.09864, chapter 6), ``linear`` (PI, arXiv:2306.15595), ``dynamic``
    (dynamic NTK), ``yarn`` (arXiv:2309.00071), ``llama3`` (arXiv:2407.21783), ``longrope``
    (arXiv:2402.13753, Phi-3) and ``proportional`` (chapter 7).

    ``scaling`` is a model's ``rope_scaling`` from ``config.json`` (legacy key ``"type"`` accepted)
    or transformers 5's ``config.rope_parameters``. ``base`` defaults to the dict's ``rope_theta``,
    else 10000; giving both with different values is an error. With ``partial_rotary_factor`` in the
    dict (GPT-NeoX), only the first ``r = int(head_dim * partial_rotary_factor)`` features rotate and
    ``r/2`` frequencies are returned. ``seq_len`` (the length processed, ``max(position) + 1``)
    matters for ``dynamic`` and ``longrope`` only. Two values that models keep at the top level of
    their config are read from the dict: ``original_max_position_embeddings`` (required by
    ``dynamic``, ``yarn``, ``llama3``, ``longrope``) and, for ``longrope`` without ``factor``,
    ``max_position_embeddings`` (Phi-3: ``factor = max_position_embeddings / original``).
    :func:`posenc.rope_settings` reads all of this from a model's config.

    Shapes:
        returns ``inv_freq (r/2,)`` float32 (``r = d`` unless partial) and ``attention_scale`` (a float).
    """
    rope = _resolve(head_dim, base, scaling)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len, minimum=1)
    return _inv_freq(rope, seq_len)


def _cos_sin(positions: Tensor, inv_freq: Tensor, scale: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Unchecked kernel of :func:`rope_cos_sin`."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    angles = positions[..., None].to(compute) * inv_freq.to(compute)  # (..., d/2): m * theta_i
    if scale == 1.0:
        return angles.cos().to(dtype), angles.sin().to(dtype)
    return (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)


def _check_positions(positions: object, *, name: str = "positions", compute: torch.dtype = torch.float32) -> Tensor:
    """Integer positions as int64 (indexing with uint8 would be a boolean mask), >= 0, exact in ``compute``."""
    check_integer_tensor(name, positions)
    positions = positions.long()
    if has_values(positions):
        low, high = int(positions.min()), int(positions.max())
        if low < 0:
            raise ValueError(f"{name} must be >= 0, got {low}")
        limit = exact_integer_limit(compute)  # past it, two positions can share an angle
        if high > limit:
            raise ValueError(
                f"{name} must be <= 2**{limit.bit_length() - 1} = {limit} to be exact in {compute} angles, got {high}"
            )
    return positions


def rope_cos_sin(
    positions: Tensor, inv_freq: Tensor, *, attention_scale: float = 1.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    r"""cos and sin of the angles :math:`m\,\theta_i`, times ``attention_scale``, cast to ``dtype``.

    The angles are float32, as in transformers, except for float64 output, where they are float64
    (so that the book's identities hold to 1e-12 at any position). Chapter 6.

    Shapes:
        positions ``(...)`` integers >= 0, inv_freq ``(d/2,)``; returns cos and sin ``(..., d/2)`` in ``dtype``.
    """
    dtype = float_dtype("dtype", dtype)
    positions = _check_positions(positions, compute=dtype)
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if has_values(inv_freq) and not bool(inv_freq.isfinite().all()):
        raise ValueError(f"inv_freq must be finite, got {inv_freq.tolist()}")
    if inv_freq.device != positions.device:
        raise ValueError(f"positions ({positions.device}) and inv_freq ({inv_freq.device}) must be on one device")
    attention_scale = check_real("attention_scale", attention_scale, greater_than=0.0)
    return _cos_sin(positions, inv_freq, attention_scale, dtype)


def _check_pairing(pairing: object) -> str:
    if not isinstance(pairing, str) or pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return pairing


def _broadcastable(table: Tensor) -> Tensor:
    # (s, d/2) broadcasts over (b, h) as it is; (b, s, d/2) -> (b, 1, s, d/2).
    return table[:, None] if table.dim() == 3 else table


def _check_rotation(x: object, cos: object, sin: object, pairing: object) -> tuple[Tensor, Tensor, Tensor, str]:
    check_tensor("x", x, ndim=4, floating=True)
    for name, table in (("cos", cos), ("sin", sin)):
        check_tensor(name, table, floating=True)
        if table.dim() not in (2, 3, 4) or table.device != x.device or table.dtype != x.dtype:
            raise ValueError(
                f"{name} must be (s, r/2), (b, s, r/2) or (b, 1|h, s, r/2) on {x.device} in {x.dtype} like x, "
                f"got shape {tuple(table.shape)} on {table.device} in {table.dtype}"
            )
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    rotary = 2 * cos.shape[-1]
    if rotary > x.shape[-1] or rotary == 0:
        raise ValueError(f"cos has {cos.shape[-1]} pairs, more than x's head_dim/2 = {x.shape[-1] // 2} (or none)")
    try:
        shape = torch.broadcast_shapes(_broadcastable(cos).shape[:-1], x.shape[:-1])
    except RuntimeError:
        shape = None
    if shape != x.shape[:-1]:  # cos and sin follow x; they never enlarge the output
        raise ValueError(f"cos {tuple(cos.shape)} does not broadcast to x {tuple(x.shape)}")
    return x, _broadcastable(cos), _broadcastable(sin), _check_pairing(pairing)


def rope_rotate_reference(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: str = "half") -> Tensor:
    r"""The rotation as the formula writes it: :math:`x' = x \odot \cos + \operatorname{rotate}(x) \odot \sin`.

    ``rotate`` maps each pair :math:`(a, b)` to :math:`(-b, a)` (a quarter turn), so that pair by pair
    :math:`(a', b') = (a \cos - b \sin,\ b \cos + a \sin)`, the 2x2 rotation of RoFormer
    (arXiv:2104.09864, eq. 34). For ``"half"`` the pairs are ``(i, i + r/2)``, so ``rotate(x) =
    [-x2, x1]`` with ``x1, x2`` the two halves; for ``"interleaved"`` they are ``(2i, 2i + 1)``, so
    ``rotate(x)_{2i} = -x_{2i+1}`` and ``rotate(x)_{2i+1} = x_{2i}``. With fewer pairs in ``cos``
    than in ``x`` (``r < d``, GPT-NeoX's partial rotary), the last ``d - r`` features pass unchanged.
    Readable and slow (several temporaries); :func:`rope_rotate` is the fast form. Chapter 6.

    Shapes:
        x ``(b, h, s, d)``; cos, sin ``(s, r/2)``, ``(b, s, r/2)`` or ``(b, 1, s, r/2)`` in x's dtype;
        returns ``(b, h, s, d)``.
    """
    x, cos, sin, pairing = _check_rotation(x, cos, sin, pairing)
    r = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]  # (b, h, s, r), (b, h, s, d - r)
    if pairing == "half":
        x1, x2 = x_rot.chunk(2, dim=-1)  # (b, h, s, r/2) each
        rotated = torch.cat((-x2, x1), dim=-1)  # (b, h, s, r)
        cos, sin = (
            torch.cat((cos, cos), dim=-1),
            torch.cat((sin, sin), dim=-1),
        )  # (..., s, r): pair i sits at i and i + r/2
    else:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]  # (b, h, s, r/2) each
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)  # (b, h, s, r)
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)  # (..., s, r): pair i at 2i, 2i+1
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)  # (b, h, s, d)


def _prepare(cos: Tensor, sin: Tensor, pairing: str, x: Tensor) -> tuple[Tensor, ...]:
    """cos and sin in the form the pairing's kernel reads fastest; built once per call, shared by q and k."""
    if pairing == "half":
        return torch.cat((cos, cos), dim=-1), sin  # (..., s, r): pair i sits at i and i + r/2; (..., s, r/2)
    if x.dtype in (torch.float32, torch.float64):
        return (torch.complex(cos, sin),)  # (..., s, r/2): exp(i m theta)
    return cos, sin


def _rotate_half(x: Tensor, cos_full: Tensor, sin: Tensor) -> Tensor:
    """Pairs (i, i + d/2): out = x * [cos, cos], then two in-place fused multiply-adds on the halves."""
    half = x.shape[-1] // 2
    out = x * cos_full  # (b, h, s, d): a cos | b cos -- the one full-size temporary
    out[..., :half].addcmul_(x[..., half:], sin, value=-1)  # a cos - b sin, in place
    out[..., half:].addcmul_(x[..., :half], sin)  # b cos + a sin, in place
    return out


def _complex_view_ok(x: Tensor) -> bool:
    return (
        x.stride(-1) == 1
        and x.storage_offset() % 2 == 0
        and all(stride % 2 == 0 for stride, size in zip(x.stride()[:-1], x.shape[:-1], strict=True) if size > 1)
    )


def _rotate_interleaved(x: Tensor, *tables: Tensor) -> Tensor:
    """Pairs (2i, 2i + 1): the pair a + ib times exp(i angle), one complex multiply over a view of x."""
    if len(tables) == 1 and _complex_view_ok(x):
        z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (b, h, s, d/2) complex, a view: no copy
        return torch.view_as_real(z * tables[0]).flatten(-2)  # (b, h, s, d)
    # Half precision (no complex32 kernels on CPU), or a layout a complex view cannot take: the
    # pairs written out, out of place so that autograd can differentiate it.
    cos, sin = (tables[0].real, tables[0].imag) if len(tables) == 1 else tables
    a, b = x[..., 0::2], x[..., 1::2]  # (b, h, s, d/2) each
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)  # (b, h, s, d)


def _rotate_prepared(x: Tensor, tables: tuple[Tensor, ...], pairing: str, rotary: int) -> Tensor:
    kernel = _rotate_half if pairing == "half" else _rotate_interleaved
    if rotary == x.shape[-1]:
        return kernel(x, *tables)
    return torch.cat((kernel(x[..., :rotary], *tables), x[..., rotary:]), dim=-1)  # partial rotary: the rest passes


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str) -> Tensor:
    """Unchecked kernel of :func:`rope_rotate`; cos and sin already broadcastable to (b, h, s, r/2)."""
    return _rotate_prepared(x, _prepare(cos, sin, pairing, x), pairing, 2 * cos.shape[-1])


def rope_rotate(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: str = "half") -> Tensor:
    r"""The fast kernel: the same rotation as :func:`rope_rotate_reference`, with fewer passes over ``x``.

    Why it is fast (``x`` is the large tensor, cos and sin are ``b*h`` times smaller):

    * ``"half"``: one product ``x * [cos, cos]`` allocates the output, then two in-place
      ``addcmul_`` on its halves add :math:`\mp` the other half times sin. transformers' LLaMA path
      (``q * cos + rotate_half(q) * sin``) writes four full-size temporaries (two halves negated and
      concatenated, two products) before the sum.
    * ``"interleaved"``: the pairs ``(2i, 2i+1)`` of a float32/float64 tensor are viewed as complex
      numbers without a copy, and one complex multiply by :math:`e^{i m\theta}` rotates them all;
      half precision (no complex32 kernels on CPU) takes the pairs written out instead.

    Book: chapter 6. Validates its arguments; internal calls use the unchecked ``_rotate``.

    Shapes:
        x ``(b, h, s, d)``; cos, sin ``(s, r/2)``, ``(b, s, r/2)`` or ``(b, 1, s, r/2)`` in x's dtype
        (``r < d``: the last ``d - r`` features pass unchanged); returns ``(b, h, s, d)``.
    """
    x, cos, sin, pairing = _check_rotation(x, cos, sin, pairing)
    return _rotate(x, cos, sin, pairing)


def _check_positions_for(x: Tensor, positions: object) -> Tensor:
    """Positions (s,) or (b, s) for x (b, h, s, d), as int64 on x's device."""
    positions = _check_positions(positions, compute=x.dtype)
    b, s = x.shape[0], x.shape[2]
    if (
        positions.dim() not in (1, 2)
        or positions.shape[-1] != s
        or (positions.dim() == 2 and positions.shape[0] not in (1, b))
    ):
        raise ValueError(f"positions must be (s,) or (b, s) with s = {s}, b = {b}, got shape {tuple(positions.shape)}")
    return positions.to(x.device)


def _seq_len(positions: Tensor) -> int | None:
    # The length a model has seen when it rotates these positions (dynamic NTK and LongRoPE read it).
    return int(positions.max()) + 1 if has_values(positions) else None


def apply_rope(
    x: Tensor,
    positions: Tensor,
    *,
    base: float | None = None,
    pairing: str = "half",
    scaling: Mapping | None = None,
) -> Tensor:
    """Rotate queries or keys ``x`` by their positions: a pure function (chapter 6).

    ``base`` and ``scaling`` as in :func:`rope_inv_freq`; for the length-dependent types
    (``dynamic``, ``longrope``) the length is ``max(positions) + 1``. Equals :class:`RotaryEmbedding`.

    Shapes:
        x ``(b, h, s, d)``; positions ``(s,)`` or ``(b, s)`` integers >= 0; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    pairing = _check_pairing(pairing)
    rope = _resolve(x.shape[-1], base, scaling)
    positions = _check_positions_for(x, positions)
    inv_freq, scale = _inv_freq(rope, _seq_len(positions))
    cos, sin = _cos_sin(positions, inv_freq.to(x.device), scale, x.dtype)  # (s, r/2) or (b, s, r/2)
    return _rotate(x, _broadcastable(cos), _broadcastable(sin), pairing)


class RotaryEmbedding(nn.Module):
    """RoPE as a module: the validated settings and the float32 ``inv_freq`` are built once, in ``__init__``.

    ``forward(q, k, positions)`` computes cos and sin of ``positions * inv_freq`` in float32 (as
    transformers does; float64 for float64 input) and rotates both with :func:`rope_rotate`'s kernel.
    One code path serves every dtype and every ``rope_type``: for ``dynamic`` and ``longrope`` the
    frequencies of the length ``max(positions) + 1`` are computed in the call, without storing
    anything. ``forward`` changes no state, so a decode step (one query and key at position
    ``n - 1``) equals the last row of the full pass.

    ``inv_freq`` follows the module's device but never its dtype: ``.half()`` or
    ``.to(torch.bfloat16)`` keep it float32 (a bf16 ``inv_freq`` would be off by 0.4% at every
    position), see ``_apply``. Chapter 6; the scaling types in chapter 7.

    Shapes:
        q ``(b, h_q, s, d)``, k ``(b, h_k, s, d)`` (grouped-query attention: ``h_k`` may differ),
        positions ``(s,)`` or ``(b, s)`` integers in ``[0, max_positions)``; returns (q, k) rotated.
    """

    def __init__(
        self,
        head_dim: int,
        *,
        max_positions: int,
        base: float | None = None,
        pairing: str = "half",
        scaling: Mapping | None = None,
    ):
        super().__init__()
        self.max_positions = check_int("max_positions", max_positions, minimum=1)
        self.pairing = _check_pairing(pairing)
        self._rope = _resolve(head_dim, base, scaling)
        self.head_dim, self.base, self.rope_type = self._rope.head_dim, self._rope.base, self._rope.rope_type
        inv_freq, self.attention_scale = _inv_freq(self._rope, None)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (r/2,) float32

    def _apply(self, fn, recurse=True):
        # Let .to(device)/.cuda() move inv_freq, but keep it float32 under .half()/.double()/.to(dtype).
        kept = self.inv_freq
        super()._apply(fn, recurse)
        if kept.is_meta:  # built on the meta device, now materialised (to_empty): recompute, nothing to copy
            kept = _inv_freq(self._rope, None)[0]
        self.inv_freq = kept.to(self.inv_freq.device)
        return self

    def forward(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        check_tensor("q", q, ndim=4, floating=True)
        check_tensor("k", k, ndim=4, floating=True)
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"q and k must have head_dim {self.head_dim}, got {tuple(q.shape)} and {tuple(k.shape)}")
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
            raise ValueError(f"q and k must share batch and length, got {tuple(q.shape)} and {tuple(k.shape)}")
        if k.dtype != q.dtype or k.device != q.device:
            raise ValueError(
                f"q and k must share dtype and device, got {q.dtype} on {q.device} and {k.dtype} on {k.device}"
            )
        if q.device != self.inv_freq.device:
            raise ValueError(
                f"q is on {q.device} but this RotaryEmbedding is on {self.inv_freq.device}; move it with .to()"
            )
        positions = _check_positions_for(q, positions)
        if has_values(positions) and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} is past max_positions={self.max_positions} of this RotaryEmbedding"
            )
        inv_freq, scale = self.inv_freq, self.attention_scale
        if self.rope_type in LENGTH_DEPENDENT:  # frequencies of this length, computed, not stored
            inv_freq, scale = _inv_freq(self._rope, _seq_len(positions))
            inv_freq = inv_freq.to(q.device)
        cos, sin = _cos_sin(positions, inv_freq, scale, q.dtype)  # (s, r/2) or (b, s, r/2)
        tables = _prepare(_broadcastable(cos), _broadcastable(sin), self.pairing, q)  # once for q and k
        rotary = 2 * cos.shape[-1]
        return _rotate_prepared(q, tables, self.pairing, rotary), _rotate_prepared(k, tables, self.pairing, rotary)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, max_positions={self.max_positions}, base={self.base:g}, "
            f"pairing={self.pairing!r}, rope_type={self.rope_type!r}"
        )
