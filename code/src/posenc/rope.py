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

The frequencies :math:`\theta_i` come from one formula, :func:`posenc.frequencies` (RoPE rotates
by the sinusoidal encoding's frequencies), through the spec of each scaling type
(:mod:`posenc.rope_scaling`). Numerics follow transformers exactly: inverse frequencies are float32
as in its ``modeling_rope_utils``, angles are ``float32(position) * inv_freq``, cos/sin are cast to
the input's dtype and the rotation is the same sequence of rounded operations, so results agree
with its LLaMA path bit for bit in every dtype but float64, whose angles are computed in float64 from
the same float32 frequencies (transformers would round them to float32), so that the book's
identities hold to 1e-12. (transformers' Cohere, an interleaved family, rotates float16/bfloat16
input in float32 and rounds once; posenc rounds each step in the input's dtype there.)

The rotation is written once, as the formula reads (:func:`rotate`): for ``"half"``,
``cat(x1 cos - x2 sin, x2 cos + x1 sin)``. That readable form is also the fast path: eager, it is
faster than transformers' ``x cos + rotate_half(x) sin`` (fewer full-size temporaries), and
``RotaryEmbedding(..., compile=True)`` compiles it with ``torch.compile`` into one pass over q
and k (``benchmarks/rope.py`` and the measurements page record the ratios). Kernels
(:func:`cos_sin`, :func:`rotate`) are public and unchecked, like
``torch.nn.functional`` beneath ``torch.nn``; the entry points (:func:`apply_rope`,
:func:`rope_rotate`, :func:`rope_cos_sin`, :func:`rope_inv_freq`, :class:`RotaryEmbedding`)
validate once.

Shapes:
    b: batch, h: heads, s: sequence length, d: head dim (even), r: rotated features (``r = d``
    unless ``partial_rotary_factor < 1``, GPT-NeoX; the last ``d - r`` features pass unchanged).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from posenc._checks import (
    check_bool,
    check_int,
    check_integer_tensor,
    check_real,
    check_tensor,
    exact_integer_limit,
    float_dtype,
    has_values,
)
from posenc.rope_scaling import PAIRINGS, ROPE_TYPES, RopeScaling, RopeSettings, rope_spec

__all__ = [
    "PAIRINGS",
    "ROPE_TYPES",
    "RotaryEmbedding",
    "apply_rope",
    "check_pairing",
    "check_positions",
    "compiler_works",
    "cos_sin",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_rotate",
    "rope_rotate_reference",
    "rotate",
]


def rope_inv_freq(
    head_dim: int,
    *,
    base: float | None = None,
    scaling: RopeScaling | Mapping | None = None,
    seq_len: int | None = None,
) -> tuple[Tensor, float]:
    r"""Inverse frequencies :math:`\theta_i` of RoPE, and the factor that cos and sin are multiplied by.

    ``scaling`` is a spec of :mod:`posenc.rope_scaling` (``Default``, ``Linear``, ``DynamicNTK``,
    ``Yarn``, ``Llama3``, ``LongRope``, ``Proportional``: formulas and papers there), or a dict as a
    model's ``config.json`` gives it (``rope_scaling``, legacy key ``"type"`` accepted) or
    transformers 5's ``config.rope_parameters``, translated once by :func:`posenc.rope_spec`.
    ``base`` defaults to the dict's ``rope_theta``, else 10000; giving both with different values is
    an error. With ``partial_rotary_factor`` (GPT-NeoX), only the first
    ``r = int(head_dim * partial_rotary_factor)`` features rotate and ``r/2`` frequencies are
    returned. ``seq_len`` (the length processed, ``max(position) + 1``) matters for the
    length-dependent types (``dynamic``, ``longrope``) only. :func:`posenc.rope_settings` reads all of
    this from a model's config.

    Shapes:
        returns ``inv_freq (r/2,)`` float32 (``r = d`` unless partial) and ``attention_scale`` (a float).
    """
    spec, base = rope_spec(scaling, base=base)
    head_dim = spec.check_head_dim(head_dim)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len, minimum=1)
    return spec.inv_freq(head_dim, base, seq_len), spec.attention_scale(seq_len)


def cos_sin(
    positions: Tensor, inv_freq: Tensor, scale: float = 1.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    r"""Kernel (unchecked): cos and sin of :math:`m\,\theta_i`, times ``scale``, cast to ``dtype``.

    Angles are float32 (float64 when ``dtype`` is float64), as transformers computes them; see
    :func:`rope_cos_sin` for the checked entry point. Chapter 6.

    Shapes:
        positions ``(...)`` integers, inv_freq ``(r/2,)``; returns cos and sin ``(..., r/2)`` in ``dtype``.
    """
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    angles = positions[..., None].to(compute) * inv_freq.to(compute)  # (..., r/2): m * theta_i
    if scale == 1.0:
        return angles.cos().to(dtype), angles.sin().to(dtype)
    return (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)


def _check_position_values(positions: object, *, name: str, compute: torch.dtype) -> Tensor:
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
    (so that the book's identities hold to 1e-12 at any position). The checked form of
    :func:`cos_sin`. Chapter 6.

    Shapes:
        positions ``(...)`` integers >= 0, inv_freq ``(d/2,)``; returns cos and sin ``(..., d/2)`` in ``dtype``.
    """
    dtype = float_dtype("dtype", dtype)
    positions = _check_position_values(positions, name="positions", compute=dtype)
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if has_values(inv_freq) and not bool(inv_freq.isfinite().all()):
        raise ValueError(f"inv_freq must be finite, got {inv_freq.tolist()}")
    if inv_freq.device != positions.device:
        raise ValueError(f"positions ({positions.device}) and inv_freq ({inv_freq.device}) must be on one device")
    attention_scale = check_real("attention_scale", attention_scale, greater_than=0.0)
    return cos_sin(positions, inv_freq, attention_scale, dtype)


def check_pairing(pairing: object) -> str:
    """Return ``pairing`` if it is one of :data:`PAIRINGS`, else raise a ``ValueError`` naming it."""
    if not isinstance(pairing, str) or pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return pairing


def rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str = "half") -> Tensor:
    r"""Kernel (unchecked): the rotation as the formula writes it, pair by pair.

    Each pair :math:`(a, b)` becomes :math:`(a \cos - b \sin,\ b \cos + a \sin)`, the 2x2 rotation of
    RoFormer (arXiv:2104.09864, eq. 34). For ``"half"`` the pairs are ``(i, i + r/2)``:
    ``cat(x1 cos - x2 sin, x2 cos + x1 sin)`` with ``x1, x2`` the two halves; for ``"interleaved"``
    they are ``(2i, 2i + 1)``: the same two lines on ``x[..., 0::2]`` and ``x[..., 1::2]``,
    interleaved back. With fewer pairs in ``cos`` than in ``x`` (``r < d``, GPT-NeoX's partial
    rotary), the last ``d - r`` features pass unchanged. This is also the fast form: it writes one
    output and two half-size temporaries per line, fewer than transformers' ``x cos +
    rotate_half(x) sin``, and ``torch.compile`` fuses it into one pass (``RotaryEmbedding(...,
    compile=True)``). Chapter 6.

    Shapes:
        x ``(b, h, s, d)``; cos, sin ``(s, r/2)``, ``(b, s, r/2)`` or ``(b, 1|h, s, r/2)`` in x's dtype;
        returns ``(b, h, s, d)``.
    """
    if cos.dim() == 3:  # (b, s, r/2) -> (b, 1, s, r/2): one table per sequence, shared by the heads
        cos, sin = cos[:, None], sin[:, None]
    r = 2 * cos.shape[-1]
    x_rot = x[..., :r]  # (b, h, s, r)
    if pairing == "half":
        x1, x2 = x_rot[..., : r // 2], x_rot[..., r // 2 :]  # (b, h, s, r/2) each: pair i is (i, i + r/2)
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (b, h, s, r)
    else:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]  # (b, h, s, r/2) each: pair i is (2i, 2i + 1)
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)  # (b, h, s, r)
    if r == x.shape[-1]:
        return out
    return torch.cat((out, x[..., r:]), dim=-1)  # (b, h, s, d): partial rotary, the rest passes


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
    table = cos[:, None] if cos.dim() == 3 else cos
    try:
        shape = torch.broadcast_shapes(table.shape[:-1], x.shape[:-1])
    except RuntimeError:
        shape = None
    if shape != x.shape[:-1]:  # cos and sin follow x; they never enlarge the output
        raise ValueError(f"cos {tuple(cos.shape)} does not broadcast to x {tuple(x.shape)}")
    return x, cos, sin, check_pairing(pairing)


def rope_rotate(x: Tensor, cos: Tensor, sin: Tensor, *, pairing: str = "half") -> Tensor:
    r"""Rotate ``x`` by given cos and sin: the checked entry point of :func:`rotate` (the formula).

    :math:`x' = x \odot \cos + \operatorname{rotate}(x) \odot \sin`, where ``rotate`` maps each pair
    :math:`(a, b)` to :math:`(-b, a)`; see :func:`rotate` for the pairings. Chapter 6.

    Shapes:
        x ``(b, h, s, d)``; cos, sin ``(s, r/2)``, ``(b, s, r/2)`` or ``(b, 1, s, r/2)`` in x's dtype
        (``r < d``: the last ``d - r`` features pass unchanged); returns ``(b, h, s, d)``.
    """
    x, cos, sin, pairing = _check_rotation(x, cos, sin, pairing)
    return rotate(x, cos, sin, pairing)


#: posenc 1.0 kept a slow "reference" form beside a hand-tuned kernel; the formula is now the one
#: form, so the reference is :func:`rope_rotate` itself (kept so that 1.0 code keeps working).
rope_rotate_reference = rope_rotate


def check_positions(x: Tensor, positions: object) -> Tensor:
    """Positions ``(s,)`` or ``(b, s)`` for ``x (b, h, s, d)``: integers >= 0, exact in x's angles.

    Returns them as int64 on x's device; raises a ``TypeError``/``ValueError`` naming ``positions``.
    """
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    positions = _check_position_values(positions, name="positions", compute=compute)
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
    scaling: RopeScaling | Mapping | None = None,
) -> Tensor:
    """Rotate queries or keys ``x`` by their positions: a pure function (chapter 6).

    ``base`` and ``scaling`` (a spec or a dict) as in :func:`rope_inv_freq`; for the length-dependent
    types (``dynamic``, ``longrope``) the length is ``max(positions) + 1``. Equals
    :class:`RotaryEmbedding`. To reproduce a model: ``s = rope_settings(config)``, then
    ``apply_rope(x, positions, base=s.base, scaling=s.scaling, pairing=s.pairing)``.

    Shapes:
        x ``(b, h, s, d)``; positions ``(s,)`` or ``(b, s)`` integers >= 0; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    pairing = check_pairing(pairing)
    spec, base = rope_spec(scaling, base=base)
    head_dim = spec.check_head_dim(x.shape[-1])
    positions = check_positions(x, positions)
    seq_len = _seq_len(positions)
    inv_freq = spec.inv_freq(head_dim, base, seq_len).to(x.device)
    return rotate(x, *cos_sin(positions, inv_freq, spec.attention_scale(seq_len), x.dtype), pairing)


@functools.cache
def compiler_works() -> bool:
    """Whether ``torch.compile`` can build and run :func:`cos_sin` and :func:`rotate` here (tried once, on the CPU)."""
    if not hasattr(torch, "compile"):
        return False
    try:
        x = torch.ones(1, 1, 2, 4)
        cos, sin = torch.compile(cos_sin, fullgraph=True)(torch.arange(2), torch.ones(2), 1.0, x.dtype)
        torch.compile(rotate, fullgraph=True)(x, cos, sin, "half")
    except Exception:
        return False
    return True


class RotaryEmbedding(nn.Module):
    """RoPE as a module: the validated spec and the float32 ``inv_freq`` are built once, in ``__init__``.

    ``forward(q, k, positions)`` computes cos and sin of ``positions * inv_freq`` in float32 (as
    transformers does; float64 for float64 input), once for both, and rotates both with
    :func:`rotate`, the formula. One code path serves every dtype and every ``rope_type``: for the
    length-dependent types (``dynamic``, ``longrope``) the frequencies of the length
    ``max(positions) + 1`` are computed in the call, without storing anything. ``forward`` changes no
    state, so a decode step (one query and key at position ``n - 1``) equals the last row of the
    full pass.

    ``compile=True`` runs :func:`cos_sin` and :func:`rotate` through ``torch.compile(fullgraph=True)``,
    separately (so that the angles' cos and sin are computed once, not once per head): one fused pass
    over q and one over k, several times faster on a CPU (``benchmarks/rope.py``). Where no compiler works
    (:func:`compiler_works`), the module says so once (a ``UserWarning``) and runs eager. The
    compiled cos/sin may differ from the eager ones by an ulp.

    ``inv_freq`` follows the module's device but never its dtype: ``.half()`` or
    ``.to(torch.bfloat16)`` keep it float32 (a bf16 ``inv_freq`` would be off by 0.4% at every
    position), see ``_apply``. :meth:`from_settings` builds the module of a model's
    :func:`posenc.rope_settings`. Chapter 6; the scaling types in chapter 7.

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
        scaling: RopeScaling | Mapping | None = None,
        compile: bool = False,  # noqa: A002 -- the name torch users know (torch.compile), shadowing nothing used here
    ):
        super().__init__()
        self.max_positions = check_int("max_positions", max_positions, minimum=1)
        self.pairing = check_pairing(pairing)
        self.scaling, self.base = rope_spec(scaling, base=base)
        self.head_dim = self.scaling.check_head_dim(head_dim)
        self.rope_type = self.scaling.rope_type
        self.attention_scale = self.scaling.attention_scale(None)
        self.compiled = check_bool("compile", compile) and compiler_works()
        if compile and not self.compiled:
            warnings.warn(
                "RotaryEmbedding(compile=True): torch.compile does not work here (no compiler found or it "
                "failed on a test input); running the eager formula instead",
                stacklevel=2,
            )
        self._cos_sin = torch.compile(cos_sin, fullgraph=True) if self.compiled else cos_sin
        self._rotate = torch.compile(rotate, fullgraph=True) if self.compiled else rotate
        self.register_buffer("inv_freq", self.scaling.inv_freq(self.head_dim, self.base), persistent=False)

    @classmethod
    def from_settings(
        cls,
        settings: RopeSettings,
        *,
        max_positions: int,
        compile: bool = False,  # noqa: A002 -- as in __init__
    ) -> RotaryEmbedding:
        """The module of a model's settings (:func:`posenc.rope_settings`, which must know the head dim)."""
        if not isinstance(settings, RopeSettings):
            raise TypeError(f"settings must be a posenc.RopeSettings, got {type(settings).__name__}")
        if settings.head_dim is None:
            raise ValueError(
                "settings.head_dim is None (the config did not tell it); build RotaryEmbedding(head_dim, ...)"
            )
        return cls(
            settings.head_dim,
            max_positions=max_positions,
            base=settings.base,
            pairing=settings.pairing,
            scaling=settings.scaling,
            compile=compile,
        )

    def _apply(self, fn, recurse=True):
        # Let .to(device)/.cuda() move inv_freq, but keep it float32 under .half()/.double()/.to(dtype).
        kept = self.inv_freq
        super()._apply(fn, recurse)
        if kept.is_meta:  # built on the meta device, now materialised (to_empty): recompute, nothing to copy
            kept = self.scaling.inv_freq(self.head_dim, self.base)
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
        positions = check_positions(q, positions)
        if has_values(positions) and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} is past max_positions={self.max_positions} of this RotaryEmbedding"
            )
        inv_freq, scale = self.inv_freq, self.attention_scale
        if self.scaling.length_dependent:  # frequencies of this length, computed, not stored
            seq_len = _seq_len(positions)
            inv_freq = self.scaling.inv_freq(self.head_dim, self.base, seq_len).to(q.device)
            scale = self.scaling.attention_scale(seq_len)
        cos, sin = self._cos_sin(positions, inv_freq, scale, q.dtype)  # (s, r/2) or (b, s, r/2), once for q and k
        return self._rotate(q, cos, sin, self.pairing), self._rotate(k, cos, sin, self.pairing)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, max_positions={self.max_positions}, base={self.base:g}, "
            f"pairing={self.pairing!r}, rope_type={self.rope_type!r}, compiled={self.compiled}"
        )
