r"""Rotary position embedding, RoPE (Su et al., RoFormer, arXiv:2104.09864), and its scaled variants.

Book: chapter 5 (``book/05_rope.ipynb``) and the RoPE scaling atlas of chapter 6.

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

Numerics follow transformers exactly: inverse frequencies are computed in float32 the way its
``modeling_rope_utils`` does, angles are ``float32(position) * inv_freq`` and cos/sin are cast to
the input's dtype, so results agree with it to float32 rounding at every position. The one
deliberate exception is float64 input, whose angles are computed in float64 (transformers would
round them to float32), so that the book's identities hold to 1e-12.

Shapes:
    b: batch, h: heads, s: sequence length, d: rotated head dim (even).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from posenc._checks import check_even_dim, check_int, check_integer_tensor, check_real, check_tensor

__all__ = ["PAIRINGS", "ROPE_TYPES", "RotaryEmbedding", "apply_rope", "rope_cos_sin", "rope_inv_freq"]

PAIRINGS = ("half", "interleaved")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")

# For each rope_type: the keys it requires and the optional keys with their defaults
# (the names and defaults of transformers' rope_parameters).
_REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
_OPTIONAL = {
    "default": {},
    "linear": {},
    "dynamic": {},
    "yarn": {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "mscale": None, "mscale_all_dim": None, "truncate": True},
    "llama3": {},
}
_INTEGER_KEYS = ("original_max_position_embeddings",)


def _check_scaling(scaling: object) -> tuple[str, dict]:
    """Validate a rope_parameters-style dict; return its type and the full parameters with defaults."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, Mapping):
        raise TypeError(f"scaling must be a dict (transformers' rope_parameters) or None, got {type(scaling).__name__}")
    rope_type = scaling.get("rope_type", "default")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"scaling['rope_type'] must be one of {ROPE_TYPES}, got {rope_type!r}")
    allowed = {"rope_type", "rope_theta", *_REQUIRED[rope_type], *_OPTIONAL[rope_type]}
    unknown = sorted(set(scaling) - allowed)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for rope_type {rope_type!r}; allowed: {sorted(allowed)}")
    if "rope_theta" in scaling:
        raise ValueError("pass the RoPE base as base=..., not as scaling['rope_theta']")
    missing = [key for key in _REQUIRED[rope_type] if key not in scaling]
    if missing:
        raise ValueError(f"rope_type {rope_type!r} needs scaling keys {missing}")
    params = {**_OPTIONAL[rope_type], **{k: v for k, v in scaling.items() if k != "rope_type"}}
    for key in _INTEGER_KEYS:
        if key in params:
            params[key] = check_int(f"scaling['{key}']", params[key], minimum=1)
    if "factor" in params:
        params["factor"] = check_real("scaling['factor']", params["factor"])
        if params["factor"] < 1:
            raise ValueError(f"scaling['factor'] must be >= 1 (it stretches the context), got {params['factor']:g}")
    if rope_type == "llama3":
        low = check_real("scaling['low_freq_factor']", params["low_freq_factor"], greater_than=0)
        high = check_real("scaling['high_freq_factor']", params["high_freq_factor"], greater_than=0)
        if not high > low:
            raise ValueError(f"scaling['high_freq_factor'] must be > low_freq_factor, got {high:g} <= {low:g}")
    if rope_type == "yarn":
        for key in ("beta_fast", "beta_slow"):
            params[key] = check_real(f"scaling['{key}']", params[key], greater_than=0)
        for key in ("attention_factor", "mscale", "mscale_all_dim"):
            if params[key] is not None:
                params[key] = check_real(f"scaling['{key}']", params[key], greater_than=0)
        if not isinstance(params["truncate"], bool):
            raise TypeError(f"scaling['truncate'] must be a bool, got {params['truncate']!r}")
    return rope_type, params


def _default_inv_freq(dim: int, base: float) -> Tensor:
    # theta_i = base^(-2i/d), in float32 as transformers computes it.
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  # (d/2,)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inv_freq(
    head_dim: int,
    *,
    base: float = 10000.0,
    scaling: Mapping | None = None,
    seq_len: int | None = None,
) -> tuple[Tensor, float]:
    r"""Inverse frequencies :math:`\theta_i` of RoPE, and the factor that cos and sin are multiplied by.

    ``scaling`` is a dict in the style of transformers' ``rope_parameters`` (without ``rope_theta``,
    which is ``base`` here):

    * ``None`` or ``{"rope_type": "default"}``: :math:`\theta_i = \text{base}^{-2i/d}`.
    * ``"linear"`` (position interpolation, arXiv:2306.15595): :math:`\theta_i / \text{factor}`.
    * ``"dynamic"`` (dynamic NTK): for ``seq_len`` beyond ``original_max_position_embeddings`` the base
      grows to :math:`\text{base}\,(\text{factor}\cdot s / L_0 - (\text{factor} - 1))^{d/(d-2)}`;
      shorter sequences keep the original frequencies.
    * ``"yarn"`` (arXiv:2309.00071): interpolates low frequencies, keeps high ones, ramps between
      the dimensions that turn ``beta_slow`` and ``beta_fast`` times within the original context;
      cos and sin are scaled by ``attention_factor`` (default :math:`0.1 \ln(\text{factor}) + 1`).
    * ``"llama3"`` (Llama 3.1): divides frequencies whose wavelength exceeds
      ``original_max_position_embeddings / low_freq_factor`` by ``factor``, keeps those shorter than
      ``.../ high_freq_factor``, and blends in between.

    Shapes:
        returns ``inv_freq (d/2,)`` float32 and ``attention_scale`` (a float; 1.0 except for YaRN).
    """
    dim = check_even_dim("head_dim", head_dim)
    base = check_real("base", base, greater_than=1.0)
    rope_type, p = _check_scaling(scaling)
    if seq_len is not None:
        seq_len = check_int("seq_len", seq_len, minimum=1)

    if rope_type == "default":
        return _default_inv_freq(dim, base), 1.0
    if rope_type == "linear":
        return _default_inv_freq(dim, base) / p["factor"], 1.0
    if rope_type == "dynamic":
        original = p["original_max_position_embeddings"]
        if seq_len is None or seq_len <= original:
            return _default_inv_freq(dim, base), 1.0  # within the original context: unchanged
        # transformers' models grow the base with the length as a tensor, i.e. in float32: do the same.
        length = torch.tensor(seq_len)
        grown = base * ((p["factor"] * length / original) - (p["factor"] - 1)) ** (dim / (dim - 2))
        return _default_inv_freq(dim, grown), 1.0
    if rope_type == "llama3":
        inv_freq = _default_inv_freq(dim, base)
        factor, original = p["factor"], p["original_max_position_embeddings"]
        low_wavelen = original / p["low_freq_factor"]
        high_wavelen = original / p["high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)  # long waves: interpolate
        smooth = (original / wavelen - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, blended, scaled), 1.0

    # YaRN, with transformers' arithmetic (float32 frequencies, float64 Python scalars).
    factor, original = p["factor"], p["original_max_position_embeddings"]
    attention_factor = p["attention_factor"]
    if attention_factor is None:
        if p["mscale"] and p["mscale_all_dim"]:
            attention_factor = _yarn_mscale(factor, p["mscale"]) / _yarn_mscale(factor, p["mscale_all_dim"])
        else:
            attention_factor = _yarn_mscale(factor)

    def correction_dim(num_rotations: float) -> float:
        # The pair whose wavelength fits num_rotations times into the original context.
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(p["beta_fast"]), correction_dim(p["beta_slow"])
    if p["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp, as transformers does
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp  # 1: keep the original frequency (fast pairs), 0: interpolate (slow pairs)
    return interpolation * (1 - keep) + extrapolation * keep, float(attention_factor)


def _check_pairing(pairing: object) -> str:
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    return pairing


def _check_positions(positions: object, *, seq_len: int, batch: int | None = None) -> Tensor:
    check_integer_tensor("positions", positions)
    if positions.dim() not in (1, 2) or positions.shape[-1] != seq_len or (
        positions.dim() == 2 and batch is not None and positions.shape[0] not in (1, batch)
    ):
        raise ValueError(f"positions must be (s,) or (b, s) with s = {seq_len}, got shape {tuple(positions.shape)}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    return positions


def rope_cos_sin(
    positions: Tensor, inv_freq: Tensor, *, attention_scale: float = 1.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles ``position * inv_freq``, times ``attention_scale``, cast to ``dtype``.

    The angles are float32, as in transformers, except for float64 output, where they are float64
    (so that the book's identities hold to 1e-12 at any position).

    Shapes:
        positions ``(...)``, inv_freq ``(d/2,)``; returns cos and sin ``(..., d/2)`` in ``dtype``.
    """
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    angles = positions[..., None].to(compute) * inv_freq.to(compute)  # (..., d/2)
    return (angles.cos() * attention_scale).to(dtype), (angles.sin() * attention_scale).to(dtype)


def _rotate_half(x: Tensor, cos_full: Tensor, sin: Tensor) -> Tensor:
    """Pairs (i, i + d/2): out = x * [cos, cos] + [-x2, x1] * [sin, sin], in three passes over x."""
    half = x.shape[-1] // 2
    out = x * cos_full  # (b, h, s, d): a cos | b cos
    out[..., :half].addcmul_(x[..., half:], sin, value=-1)  # a cos - b sin
    out[..., half:].addcmul_(x[..., :half], sin)  # b cos + a sin
    return out


def _complex_view_ok(x: Tensor) -> bool:
    return (
        x.dtype in (torch.float32, torch.float64)
        and x.stride(-1) == 1
        and x.storage_offset() % 2 == 0
        and all(stride % 2 == 0 for stride, size in zip(x.stride()[:-1], x.shape[:-1]) if size > 1)
    )


def _rotate_interleaved(x: Tensor, cos: Tensor, sin: Tensor, rotation: Tensor | None = None) -> Tensor:
    """Pairs (2i, 2i + 1): as complex numbers a + ib times exp(i angle), one pass where possible."""
    if _complex_view_ok(x):
        if rotation is None:
            rotation = torch.complex(cos.to(x.dtype), sin.to(x.dtype))  # (..., s, d/2)
        z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (b, h, s, d/2), a view
        return torch.view_as_real(z * rotation).flatten(-2)  # (b, h, s, d)
    out = torch.empty_like(x)  # half precision, or a layout a complex view cannot take
    a, b, out_a, out_b = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
    torch.mul(a, cos, out=out_a)
    out_a.addcmul_(b, sin, value=-1)  # a cos - b sin
    torch.mul(b, cos, out=out_b)
    out_b.addcmul_(a, sin)  # b cos + a sin
    return out


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, pairing: str) -> Tensor:
    """Rotate each pair (a, b) of x by the angle whose cos and sin are given: (a cos - b sin, b cos + a sin)."""
    if pairing == "half":
        return _rotate_half(x, torch.cat((cos, cos), dim=-1), sin)
    return _rotate_interleaved(x, cos, sin)


def _broadcastable(table: Tensor) -> Tensor:
    # (s, d/2) -> (s, d/2), broadcasting over (b, h); (b, s, d/2) -> (b, 1, s, d/2).
    return table if table.dim() == 2 else table[:, None]


def apply_rope(
    x: Tensor,
    positions: Tensor,
    *,
    base: float = 10000.0,
    pairing: str = "half",
    scaling: Mapping | None = None,
) -> Tensor:
    """Rotate queries or keys ``x`` by their positions (a pure function; see :class:`RotaryEmbedding`).

    For ``rope_type="dynamic"`` the frequencies follow the sequence length ``max(positions) + 1``.

    Shapes:
        x ``(b, h, s, d)``; positions ``(s,)`` or ``(b, s)`` integers; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    pairing = _check_pairing(pairing)
    positions = _check_positions(positions, seq_len=x.shape[2], batch=x.shape[0])
    seq_len = int(positions.max()) + 1 if positions.numel() else None
    inv_freq, scale = rope_inv_freq(x.shape[-1], base=base, scaling=scaling, seq_len=seq_len)
    cos, sin = rope_cos_sin(positions, inv_freq.to(x.device), attention_scale=scale, dtype=x.dtype)
    return _rotate(x, _broadcastable(cos), _broadcastable(sin), pairing)


def _consecutive(positions: Tensor) -> slice | None:
    """``slice(p, p + s)`` if positions is the 1-D run ``p, p + 1, ..., p + s - 1``, else None."""
    if positions.dim() != 1 or positions.numel() == 0:
        return None
    start = int(positions[0])
    if positions.numel() > 1 and not bool((positions.diff() == 1).all()):
        return None
    return slice(start, start + positions.numel())


class RotaryEmbedding(nn.Module):
    """RoPE with cos/sin tables for positions ``0 .. max_positions - 1`` built once, in ``__init__``.

    ``forward(q, k, positions)`` looks the angles up and rotates both; it changes no state. With
    ``rope_type="dynamic"`` the frequencies depend on the sequence length, so no table is kept and
    each call computes them for ``max(positions) + 1``, still without storing anything.

    Shapes:
        q ``(b, h_q, s, d)``, k ``(b, h_k, s, d)``, positions ``(s,)`` or ``(b, s)``; returns (q, k).
    """

    def __init__(
        self,
        head_dim: int,
        *,
        max_positions: int,
        base: float = 10000.0,
        pairing: str = "half",
        scaling: Mapping | None = None,
    ):
        super().__init__()
        self.head_dim = check_even_dim("head_dim", head_dim)
        self.max_positions = check_int("max_positions", max_positions, minimum=1)
        self.base = check_real("base", base, greater_than=1.0)
        self.pairing = _check_pairing(pairing)
        self.rope_type, _ = _check_scaling(scaling)
        self.scaling = None if scaling is None else dict(scaling)
        if self.rope_type == "dynamic":
            self.cos = self.sin = None
            return
        inv_freq, scale = rope_inv_freq(self.head_dim, base=self.base, scaling=self.scaling)
        cos, sin = rope_cos_sin(torch.arange(self.max_positions), inv_freq, attention_scale=scale)
        self.register_buffer("cos", cos, persistent=False)  # (max_positions, d/2), float32
        self.register_buffer("sin", sin, persistent=False)
        # The same tables in the form each pairing's kernel reads fastest.
        if self.pairing == "half":
            self.register_buffer("cos_full", torch.cat((cos, cos), dim=-1), persistent=False)  # (max_positions, d)
        else:
            self.register_buffer("rotation", torch.complex(cos, sin), persistent=False)  # (max_positions, d/2)

    def forward(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        check_tensor("q", q, ndim=4, floating=True)
        check_tensor("k", k, ndim=4, floating=True)
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"q and k must have head_dim {self.head_dim}, got {tuple(q.shape)} and {tuple(k.shape)}")
        if k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
            raise ValueError(f"q and k must share batch and length, got {tuple(q.shape)} and {tuple(k.shape)}")
        positions = _check_positions(positions, seq_len=q.shape[2], batch=q.shape[0])
        if positions.numel() and int(positions.max()) >= self.max_positions:
            raise ValueError(
                f"position {int(positions.max())} is past max_positions={self.max_positions} of this RotaryEmbedding"
            )
        if self.cos is None or q.dtype == torch.float64:  # dynamic NTK, or float64 angles: no table
            rotate = lambda t: apply_rope(t, positions, base=self.base, pairing=self.pairing, scaling=self.scaling)  # noqa: E731
            return rotate(q), rotate(k)
        rows = _consecutive(positions)  # a slice of the tables (a view) instead of a gather, when possible
        lookup = (lambda table: table[rows]) if rows is not None else (lambda table: _broadcastable(table[positions]))
        sin = lookup(self.sin).to(q.dtype)  # (s, d/2) or (b, 1, s, d/2)
        if self.pairing == "half":
            cos_full = lookup(self.cos_full).to(q.dtype)  # (s, d) or (b, 1, s, d)
            return _rotate_half(q, cos_full, sin), _rotate_half(k, cos_full, sin)
        cos = lookup(self.cos).to(q.dtype)
        rotation = lookup(self.rotation) if q.dtype == torch.float32 else None
        return _rotate_interleaved(q, cos, sin, rotation), _rotate_interleaved(k, cos, sin, rotation)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, max_positions={self.max_positions}, base={self.base:g}, "
            f"pairing={self.pairing!r}, rope_type={self.rope_type!r}"
        )
