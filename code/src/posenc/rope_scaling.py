r"""RoPE scaling: one small frozen spec per ``rope_type``, and reading a model's RoPE settings.

Book: chapter 6 (``book/06_rope.ipynb``) for ``default``; the RoPE scaling atlas of chapter 7
(``book/07_beyond.ipynb``) for the others.

Each ``rope_type`` is one frozen dataclass (:class:`Default`, :class:`Linear`, :class:`DynamicNTK`,
:class:`Yarn`, :class:`Llama3`, :class:`LongRope`, :class:`Proportional`) whose fields are exactly
the keys it allows (transformers' ``rope_parameters`` names), which validates itself once when built
(``ValueError``/``TypeError`` naming the key and the value) and computes its own formula from the one
public :func:`posenc.frequencies`:

* ``spec.inv_freq(head_dim, base, seq_len=None)``: the ``(r/2,)`` float32 frequencies;
* ``spec.attention_scale(seq_len=None)``: the factor cos and sin are multiplied by (the key
  ``attention_factor``, where a type has it, is one input of it);
* ``spec.length_dependent``: whether the two depend on the length processed (``seq_len``);
* ``spec.check_head_dim(head_dim)``: the checks that need the head dimension (once, at an entry point).

The registry :data:`ROPE_SCALINGS` maps ``rope_type`` to its class, so adding a type is one class (and
its tests). Dicts are translated once, at the door: :meth:`RopeScaling.from_dict` reads a model's
``rope_scaling`` (legacy key ``"type"``, early Phi-3's ``"su"``) or transformers 5's
``rope_parameters``; :func:`rope_spec` also takes ``rope_theta`` out of the dict; :func:`rope_settings`
reads a whole config (per layer type where the model has several).

Two values that models keep at the top level of their config rather than in ``rope_scaling`` are
fields of the specs that need them, and :func:`rope_settings` copies them in:
``original_max_position_embeddings`` (``L_0``, the pre-training context: ``dynamic``, ``yarn``,
``llama3``, ``longrope``) and ``max_position_embeddings`` (read by ``yarn`` and ``longrope`` only
when ``factor`` is absent, as ``factor = max_position_embeddings / L_0``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import torch
from torch import Tensor

from posenc._checks import check_even_dim, check_int, check_real
from posenc.sinusoidal import frequencies

__all__ = [
    "EXTENSION_METHODS",
    "PAIRINGS",
    "ROPE_SCALINGS",
    "ROPE_TYPES",
    "Default",
    "DynamicNTK",
    "Linear",
    "Llama3",
    "LongRope",
    "Proportional",
    "RopeScaling",
    "RopeSettings",
    "Yarn",
    "extension_settings",
    "rope_settings",
    "rope_spec",
]

DEFAULT_BASE = 10000.0
PAIRINGS = ("half", "interleaved")


def _key(name: str) -> str:
    return f"scaling[{name!r}]"


def _factor(value: object, *, rope_type: str, name: str = "factor") -> float:
    if value is None:
        raise ValueError(f"scaling needs the key {name!r} for rope_type {rope_type!r}")
    value = check_real(_key(name), value)
    if value < 1:
        raise ValueError(f"{_key(name)} must be >= 1 (it stretches the context), got {value:g}")
    return value


def _positive(name: str, value: object) -> float | None:
    return None if value is None else check_real(_key(name), value, greater_than=0.0)


def _original(rope_type: str, value: object) -> int:
    if value is None:
        raise ValueError(
            f"rope_type {rope_type!r} needs scaling['original_max_position_embeddings'] (the pre-training "
            "context; a model's config.json may keep it, or max_position_embeddings, at the top level: "
            "posenc.rope_settings(config) copies it into the spec)"
        )
    return check_int(_key("original_max_position_embeddings"), value, minimum=1)


def _factor_list(name: str, value: object) -> tuple[float, ...]:
    if value is None:
        raise ValueError(f"rope_type 'longrope' needs the key {name!r} (one factor per pair)")
    if isinstance(value, Tensor):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{_key(name)} must be a list of numbers (one per pair), got {type(value).__name__}")
    return tuple(check_real(f"{_key(name)}[{i}]", v, greater_than=0.0) for i, v in enumerate(value))


@dataclass(frozen=True, kw_only=True)
class RopeScaling:
    r"""The base of every spec: RoPE's own frequencies, optionally on a leading part of each head.

    ``partial_rotary_factor`` :math:`p` (GPT-NeoX, transformers 5's ``rope_parameters``): only the first
    ``r = int(p d)`` features of each head rotate, with the frequencies of an ``r``-dimensional RoPE;
    the last ``d - r`` pass unchanged. Subclasses override :meth:`inv_freq` (and
    the method :meth:`attention_scale`); the methods are unchecked kernels, validation happens in
    ``__post_init__`` and :meth:`check_head_dim`.
    """

    rope_type: ClassVar[str] = "default"
    length_dependent: ClassVar[bool] = False  #: frequencies or attention factor depend on ``seq_len``
    #: transformers reads L_0 of this type from the config's top-level max_position_embeddings (dynamic NTK)
    original_is_max_position: ClassVar[bool] = False
    partial_rotary_factor: float = 1.0

    def __post_init__(self) -> None:
        fraction = check_real(_key("partial_rotary_factor"), self.partial_rotary_factor, greater_than=0.0)
        if fraction > 1:
            raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1], got {fraction:g}")
        self._set("partial_rotary_factor", fraction)

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # normalising a field of a frozen dataclass, in __post_init__ only

    def rotary_dim(self, head_dim: int) -> int:
        """The number of rotated leading features of a head of ``head_dim`` (unchecked)."""
        return int(head_dim * self.partial_rotary_factor)

    def check_head_dim(self, head_dim: object) -> int:
        """Validate what depends on the head dimension (even, an even rotary part >= 2); return ``head_dim``."""
        head_dim = check_even_dim("head_dim", head_dim)
        rotary = self.rotary_dim(head_dim)
        if rotary < 2 or rotary % 2:
            raise ValueError(
                f"head_dim * scaling['partial_rotary_factor'] = {head_dim} * {self.partial_rotary_factor:g} must be "
                f"an even rotary dimension >= 2, got {rotary}"
            )
        return head_dim

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        r""":math:`\theta_i = \text{base}^{-2i/r}`, ``(r/2,)`` float32 (RoFormer, arXiv:2104.09864; chapter 6)."""
        return frequencies(self.rotary_dim(head_dim), base)

    def attention_scale(self, seq_len: int | None = None) -> float:
        """The factor that cos and sin are multiplied by (1.0 unless the type says otherwise)."""
        return 1.0

    @classmethod
    def from_dict(cls, scaling: Mapping) -> RopeScaling:
        """The door for dicts: a model's ``rope_scaling`` or transformers 5's ``rope_parameters`` -> a spec.

        Reads ``rope_type``, or the legacy ``"type"`` (early Phi-3's ``"su"`` means ``"longrope"``); both
        given must agree. ``rope_theta`` is not a key of a spec: :func:`rope_spec` takes it out first.
        A dict of Qwen2-VL's M-RoPE (``mrope_section``, or ``type: "mrope"``) is refused with a pointer to
        :mod:`posenc.mrope`. Unknown keys are an error that lists the allowed ones.
        """
        spec_class = _spec_class(scaling)
        allowed = {field.name for field in dataclasses.fields(spec_class)}
        keys = {k: v for k, v in scaling.items() if k not in ("rope_type", "type")}
        unknown = sorted(set(keys) - allowed, key=str)
        if unknown:
            raise ValueError(
                f"unknown key(s) {unknown} for rope_type {spec_class.rope_type!r}; allowed: "
                f"{sorted({'rope_type', *allowed})}"
            )
        return spec_class(**{k: v for k, v in keys.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        """The spec as a ``rope_parameters``-style dict (``rope_type`` and every field)."""
        out = {"rope_type": self.rope_type}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out


def _spec_class(scaling: object) -> type[RopeScaling]:
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be a dict (a model's rope_scaling or rope_parameters), a RopeScaling or None, "
            f"got {type(scaling).__name__}"
        )
    if "mrope_section" in scaling or "mrope" in (scaling.get("type"), scaling.get("rope_type")):
        raise ValueError(
            f"this is Qwen2-VL's multimodal RoPE (mrope_section = {scaling.get('mrope_section')!r}): one "
            "position per axis, so it is not a RoPE scaling; use posenc.mrope.apply_mrope(x, positions, "
            "sections=mrope_section, base=rope_theta)"
        )
    legacy = {"su": "longrope"}.get(scaling.get("type"), scaling.get("type"))
    rope_type = scaling.get("rope_type", legacy if legacy is not None else "default")
    if legacy is not None and legacy != rope_type:
        raise ValueError(
            f"scaling['type'] = {scaling['type']!r} and scaling['rope_type'] = {scaling['rope_type']!r} disagree"
        )
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"scaling['rope_type'] must be one of {ROPE_TYPES}, got {rope_type!r}")
    return ROPE_SCALINGS[rope_type]


@dataclass(frozen=True, kw_only=True)
class Default(RopeScaling):
    r"""RoPE's own frequencies, :math:`\theta_i = \text{base}^{-2i/d}` (RoFormer, arXiv:2104.09864; chapter 6)."""

    rope_type: ClassVar[str] = "default"


@dataclass(frozen=True, kw_only=True)
class Linear(RopeScaling):
    r"""Position interpolation, PI (Chen et al., arXiv:2306.15595; chapter 7).

    Positions are squeezed by ``factor`` :math:`\alpha` into the trained range, which is the same as
    dividing every frequency: :math:`\theta'_i = \theta_i / \alpha`.
    """

    rope_type: ClassVar[str] = "linear"
    factor: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("factor", _factor(self.factor, rope_type="linear"))

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        return frequencies(self.rotary_dim(head_dim), base) / self.factor  # (r/2,)


@dataclass(frozen=True, kw_only=True)
class DynamicNTK(RopeScaling):
    r"""Dynamic NTK-aware scaling (chapter 7).

    No paper: "NTK-Aware Scaled RoPE" was posted by bloc97 on Reddit r/LocalLLaMA (June 2023) and
    made dynamic by emozilla ("Dynamically Scaled RoPE", same forum); YaRN (arXiv:2309.00071, sec. 3)
    writes both up. The base grows with the length :math:`L` beyond :math:`L_0` so that the slowest
    pair is interpolated while the fastest barely changes:

    .. math:: \text{base}' = \text{base}\,\bigl(s L / L_0 - (s - 1)\bigr)^{d/(d-2)}, \qquad L > L_0;

    for :math:`L \le L_0` (or ``seq_len=None``) the frequencies are RoPE's own. The grown base is
    computed as a float32 tensor, as transformers' models do (they pass the length as a tensor).
    transformers reads :math:`L_0` from the config's top-level ``max_position_embeddings``.
    """

    rope_type: ClassVar[str] = "dynamic"
    length_dependent: ClassVar[bool] = True
    original_is_max_position: ClassVar[bool] = True
    factor: float | None = None
    original_max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("factor", _factor(self.factor, rope_type="dynamic"))
        self._set("original_max_position_embeddings", _original("dynamic", self.original_max_position_embeddings))

    def check_head_dim(self, head_dim: object) -> int:
        head_dim = super().check_head_dim(head_dim)
        if self.rotary_dim(head_dim) <= 2:
            raise ValueError(f"rope_type 'dynamic' needs head_dim > 2 (its exponent is d/(d-2)), got {head_dim}")
        return head_dim

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        d, original = self.rotary_dim(head_dim), self.original_max_position_embeddings
        if seq_len is None or seq_len <= original:
            return frequencies(d, base)  # within the original context: unchanged
        grown = base * ((self.factor * torch.tensor(seq_len) / original) - (self.factor - 1)) ** (d / (d - 2))
        return frequencies(d, grown)  # (r/2,)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    # YaRN's temperature: sqrt(1/tau) = 0.1 ln(alpha) + 1 (arXiv:2309.00071, eq. 22).
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True, kw_only=True)
class Yarn(RopeScaling):
    r"""YaRN (Peng et al., arXiv:2309.00071; chapter 7): NTK-by-parts interpolation plus a temperature.

    Pair ``i`` turns :math:`r_i = L_0 \theta_i / 2\pi` times within the original context. Pairs
    turning more than ``beta_fast`` times keep :math:`\theta_i`, pairs turning fewer than
    ``beta_slow`` times are interpolated to :math:`\theta_i / \alpha`, and a linear ramp :math:`w_i`
    blends the pairs in between:

    .. math:: \theta'_i = (1 - w_i)\,\theta_i / \alpha + w_i\,\theta_i.

    ``beta_fast == beta_slow`` (Kimi K2) is allowed: the ramp gets transformers' width of 0.001 pair.
    cos and sin are multiplied by ``attention_factor``, by default :math:`0.1 \ln \alpha + 1`, or with
    DeepSeek's ``mscale``/``mscale_all_dim`` the ratio of two such terms (1.0 when they are equal:
    DeepSeek-V3 applies its temperature in the softmax scale instead). As in transformers, a
    ``mscale`` or ``mscale_all_dim`` of 0 means absent. Without ``factor``, :math:`\alpha` =
    ``max_position_embeddings / original_max_position_embeddings``. Arithmetic follows transformers
    (float32 frequencies, float64 Python scalars).
    """

    rope_type: ClassVar[str] = "yarn"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        original = _original("yarn", self.original_max_position_embeddings)
        self._set("original_max_position_embeddings", original)
        if self.max_position_embeddings is not None:
            self._set(
                "max_position_embeddings",
                check_int(_key("max_position_embeddings"), self.max_position_embeddings, minimum=1),
            )
        if self.factor is None:  # DeepSeek-style: the ratio of the extended to the original context
            if self.max_position_embeddings is None:
                raise ValueError("scaling needs the key 'factor' for rope_type 'yarn' (or max_position_embeddings)")
            self._set("factor", self.max_position_embeddings / original)
        self._set("factor", _factor(self.factor, rope_type="yarn"))
        self._set("beta_fast", _positive("beta_fast", self.beta_fast))
        self._set("beta_slow", _positive("beta_slow", self.beta_slow))
        if self.beta_fast < self.beta_slow:
            raise ValueError(f"{_key('beta_fast')} must be >= beta_slow, got {self.beta_fast:g} < {self.beta_slow:g}")
        self._set("attention_factor", _positive("attention_factor", self.attention_factor))
        for name in ("mscale", "mscale_all_dim"):
            value = getattr(self, name)
            if value is not None and check_real(_key(name), value) == 0:
                value = None  # transformers: `if mscale and mscale_all_dim`, so 0 means absent
            self._set(name, _positive(name, value))
        if not isinstance(self.truncate, bool):
            raise TypeError(
                f"{_key('truncate')} must be a bool, got {self.truncate!r} ({type(self.truncate).__name__})"
            )

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        d, original, factor = self.rotary_dim(head_dim), self.original_max_position_embeddings, self.factor

        def correction_dim(num_rotations: float) -> float:
            # The (fractional) pair index whose wavelength fits num_rotations times into L_0.
            return (d * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # avoid a zero-width ramp, as transformers does
        ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (r/2,)
        theta = frequencies(d, base)  # (r/2,)
        interpolated = frequencies(d, base, divided_by=factor)  # theta_i / alpha, rounded as transformers does
        keep = 1 - ramp  # w_i: 1 keeps theta_i (fast pairs), 0 interpolates (slow pairs)
        return interpolated * (1 - keep) + theta * keep

    def attention_scale(self, seq_len: int | None = None) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(self.factor, self.mscale_all_dim)
        return _yarn_mscale(self.factor)


@dataclass(frozen=True, kw_only=True)
class Llama3(RopeScaling):
    r"""Llama 3.1's frequency-dependent interpolation (Llama 3 paper, arXiv:2407.21783; chapter 7).

    With wavelength :math:`\lambda_i = 2\pi/\theta_i`, :math:`\lambda_{lo} = L_0 / \text{low\_freq\_factor}`
    and :math:`\lambda_{hi} = L_0 / \text{high\_freq\_factor}`: pairs with :math:`\lambda_i < \lambda_{hi}`
    keep :math:`\theta_i`, pairs with :math:`\lambda_i > \lambda_{lo}` get :math:`\theta_i / \alpha`, and in
    between, with :math:`w_i = (L_0/\lambda_i - \text{low}) / (\text{high} - \text{low})`,

    .. math:: \theta'_i = (1 - w_i)\,\theta_i / \alpha + w_i\,\theta_i.

    ``high_freq_factor == low_freq_factor`` (Llama 4 Scout) leaves no pair in between: a hard switch
    at :math:`\lambda_i = L_0 / \text{low}`, as transformers computes it.
    """

    rope_type: ClassVar[str] = "llama3"
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("factor", _factor(self.factor, rope_type="llama3"))
        self._set("original_max_position_embeddings", _original("llama3", self.original_max_position_embeddings))
        for name in ("low_freq_factor", "high_freq_factor"):
            if getattr(self, name) is None:
                raise ValueError(f"rope_type 'llama3' needs the key {name!r}")
            self._set(name, _positive(name, getattr(self, name)))
        if self.high_freq_factor < self.low_freq_factor:
            raise ValueError(
                f"{_key('high_freq_factor')} must be >= low_freq_factor, "
                f"got {self.high_freq_factor:g} < {self.low_freq_factor:g}"
            )

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        theta = frequencies(self.rotary_dim(head_dim), base)  # (r/2,)
        factor, original = self.factor, self.original_max_position_embeddings
        low, high = self.low_freq_factor, self.high_freq_factor
        wavelen = 2 * math.pi / theta
        scaled = torch.where(wavelen > original / low, theta / factor, theta)  # long waves: interpolate
        if high == low:
            return scaled  # no medium band (transformers' blend would divide by zero there, and is never used)
        smooth = (original / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < original / high) * ~(wavelen > original / low)
        return torch.where(is_medium, blended, scaled)  # (r/2,)


@dataclass(frozen=True, kw_only=True)
class LongRope(RopeScaling):
    r"""LongRoPE (Ding et al., arXiv:2402.13753), as shipped in Phi-3 (arXiv:2404.14219); chapter 7.

    Each pair has its own searched rescale factor :math:`\lambda_i`: ``long_factor`` when the
    length exceeds :math:`L_0`, ``short_factor`` otherwise (also for ``seq_len=None``):

    .. math:: \theta'_i = \theta_i / \lambda_i, \qquad
              \text{attention\_scale} = \sqrt{1 + \ln \alpha / \ln L_0}\ \ (1 \text{ if } \alpha \le 1),

    with :math:`\alpha` = ``factor``, or ``max_position_embeddings / L_0`` when ``factor`` is absent,
    unless ``attention_factor`` is given. Phi-3.5-MoE gives the scale itself, one per regime:
    ``short_mscale`` up to :math:`L_0`, ``long_mscale`` beyond (transformers' ``PhimoeRotaryEmbedding``).
    Caution: transformers 5.23's ``PhimoeRotaryEmbedding`` keeps the SHORT factors past :math:`L_0`
    (its ``forward`` recomputes the frequencies without the length) while it switches to
    ``long_mscale``; posenc follows the formula above (long factors past :math:`L_0`, as Phi-3 does
    and as Microsoft's Phi-3.5-MoE code does), so the two agree up to :math:`L_0` only.
    """

    rope_type: ClassVar[str] = "longrope"
    length_dependent: ClassVar[bool] = True
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    factor: float | None = None
    attention_factor: float | None = None
    short_mscale: float | None = None
    long_mscale: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("original_max_position_embeddings", _original("longrope", self.original_max_position_embeddings))
        self._set("short_factor", _factor_list("short_factor", self.short_factor))
        self._set("long_factor", _factor_list("long_factor", self.long_factor))
        if self.factor is not None:
            self._set("factor", _factor(self.factor, rope_type="longrope"))
        if self.max_position_embeddings is not None:
            self._set(
                "max_position_embeddings",
                check_int(_key("max_position_embeddings"), self.max_position_embeddings, minimum=1),
            )
        for name in ("attention_factor", "short_mscale", "long_mscale"):
            self._set(name, _positive(name, getattr(self, name)))
        if (self.short_mscale is None) != (self.long_mscale is None):
            raise ValueError(
                f"scaling needs both 'short_mscale' and 'long_mscale' or neither, got short_mscale="
                f"{self.short_mscale!r}, long_mscale={self.long_mscale!r}"
            )
        if (self.attention_factor, self.factor, self.max_position_embeddings, self.short_mscale) == (None,) * 4:
            raise ValueError(
                "rope_type 'longrope' needs scaling['factor'], scaling['attention_factor'] or "
                "scaling['max_position_embeddings'] (Phi-3 keeps max_position_embeddings at the top level of "
                "its config: posenc.rope_settings(config) copies it)"
            )

    def check_head_dim(self, head_dim: object) -> int:
        head_dim = super().check_head_dim(head_dim)
        pairs = self.rotary_dim(head_dim) // 2
        for name in ("short_factor", "long_factor"):
            if len(getattr(self, name)) != pairs:
                raise ValueError(f"{_key(name)} must have head_dim/2 = {pairs} entries, got {len(getattr(self, name))}")
        return head_dim

    def _long(self, seq_len: int | None) -> bool:
        return seq_len is not None and seq_len > self.original_max_position_embeddings

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        rescale = torch.tensor(self.long_factor if self._long(seq_len) else self.short_factor)  # (r/2,): lambda_i
        return frequencies(self.rotary_dim(head_dim), base, divided_by=rescale.float())  # (r/2,)

    def attention_scale(self, seq_len: int | None = None) -> float:
        if self.short_mscale is not None:
            return self.long_mscale if self._long(seq_len) else self.short_mscale
        if self.attention_factor is not None:
            return self.attention_factor
        factor = self.factor
        if factor is None:
            factor = self.max_position_embeddings / self.original_max_position_embeddings
        return (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(self.original_max_position_embeddings))
        )


@dataclass(frozen=True, kw_only=True)
class Proportional(RopeScaling):
    r"""transformers' "proportional" RoPE (no paper: ``_compute_proportional_rope_parameters``); p-RoPE.

    Only the first :math:`r = \lfloor p\,d/2 \rfloor` pairs (``partial_rotary_factor`` :math:`p`)
    rotate, with the frequencies of the FULL head dimension; the other pairs get frequency 0 (no
    rotation), so the result keeps ``d/2`` entries. All are divided by ``factor`` (default 1):

    .. math:: \theta'_i = \text{base}^{-2i/d} / \alpha \ (i < r), \qquad \theta'_i = 0 \ (i \ge r).

    This is p-RoPE (Barbero et al., arXiv:2410.06205; :func:`posenc.variants.p_rope_inv_freq`), and
    Gemma 4's global layers (``p = 0.25``, chapter 8). ``p = 0`` (no pair rotates) is allowed.
    """

    rope_type: ClassVar[str] = "proportional"
    partial_rotary_factor: float = 1.0
    factor: float = 1.0

    def __post_init__(self) -> None:
        fraction = check_real(_key("partial_rotary_factor"), self.partial_rotary_factor)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"scaling['partial_rotary_factor'] must be in [0, 1], got {fraction:g}")
        self._set("partial_rotary_factor", fraction)
        self._set("factor", _factor(self.factor, rope_type="proportional"))

    def rotary_dim(self, head_dim: int) -> int:
        return head_dim  # the slow pairs stay in place, with frequency 0

    def inv_freq(self, head_dim: int, base: float, seq_len: int | None = None) -> Tensor:
        rotated = int(self.partial_rotary_factor * head_dim // 2)
        theta = frequencies(head_dim, base)[:rotated]  # (p d/2,)
        return torch.cat((theta, torch.zeros(head_dim // 2 - rotated))) / self.factor  # (d/2,)


#: The registry: rope_type -> its spec class (transformers' ``ROPE_INIT_FUNCTIONS`` plus ``"default"``).
#: ``"axial"`` (2-D positions of vision models) is :func:`posenc.mrope.apply_rope_2d`.
ROPE_SCALINGS: Mapping[str, type[RopeScaling]] = MappingProxyType(
    {cls.rope_type: cls for cls in (Default, Linear, DynamicNTK, Yarn, Llama3, LongRope, Proportional)}
)
ROPE_TYPES = tuple(ROPE_SCALINGS)


def rope_spec(scaling: Mapping | RopeScaling | None = None, *, base: object = None) -> tuple[RopeScaling, float]:
    """The door of every RoPE entry point: ``(scaling, base)`` -> a validated ``(spec, base)``.

    ``scaling`` is a spec, ``None`` (RoPE's own frequencies) or a dict as :meth:`RopeScaling.from_dict`
    reads it, which may also hold ``rope_theta`` (transformers 5's ``rope_parameters``). ``base``
    defaults to that ``rope_theta``, else 10000; giving both with different values is an error.
    """
    theta = None
    if scaling is None:
        scaling = Default()
    elif isinstance(scaling, Mapping):
        theta = scaling.get("rope_theta")
        if theta is not None:
            theta = check_real("scaling['rope_theta']", theta, greater_than=1.0)
        scaling = RopeScaling.from_dict({k: v for k, v in scaling.items() if k != "rope_theta"})
    elif not isinstance(scaling, RopeScaling):
        raise TypeError(
            f"scaling must be a dict (a model's rope_scaling or rope_parameters), a RopeScaling or None, "
            f"got {type(scaling).__name__}"
        )
    if base is None:
        base = DEFAULT_BASE if theta is None else theta
    else:
        base = check_real("base", base, greater_than=1.0)
        if theta is not None and theta != base:
            raise ValueError(f"base={base:g} and scaling['rope_theta']={theta:g} disagree; give one of them")
    return scaling, base


# --- reading a model's settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class RopeSettings:
    """A model's RoPE settings in posenc's terms (see :func:`rope_settings`).

    Unpacks as posenc 1.0's triple, ``base, scaling, rotary_fraction = rope_settings(config)``; the
    pairing and the layer type are read as attributes.
    """

    base: float  #: the RoPE base (rope_theta)
    scaling: RopeScaling  #: the spec, for ``scaling=``; carries ``partial_rotary_factor``
    rotary_fraction: float  #: the rotated share of each head (GPT-NeoX: 0.25; ``proportional``: its p)
    pairing: str = "half"  #: ``"half"`` (i, i + d/2) or ``"interleaved"`` (2i, 2i + 1), see posenc.rope
    layer_type: str | None = None  #: the layer type these settings were read for (per-layer configs)
    head_dim: int | None = None  #: the head dimension the model rotates with, when the config tells it

    def __iter__(self):
        return iter((self.base, self.scaling, self.rotary_fraction))


#: model_type -> pairing, for the families whose modeling code in transformers rotates (2i, 2i + 1)
#: (``rotate_every_two``, ``x[..., 0::2]`` or a complex view of the pairs as in Llama 4 and DeepSeek-V2);
#: everything else is "half".
#: DeepSeek-V3 (and Kimi K2, its architecture) says it in ``rope_interleave``, True by default in transformers.
INTERLEAVED_MODEL_TYPES = frozenset(
    {
        "gptj",
        "codegen",
        "cohere",
        "cohere2",
        "glm",
        "glm4",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
        "llama4",
        "llama4_text",
    }
)


def _get(config: object, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    try:
        return getattr(config, name, default)
    except RuntimeError:  # transformers 5's per-layer attributes (Gemma 4's head_dim) refuse a global read
        return default


def _pairing(config: object) -> str:
    interleave = _get(config, "rope_interleave")  # DeepSeek-V3's switch; absent elsewhere
    if interleave is not None:
        return "interleaved" if interleave else "half"
    return "interleaved" if _get(config, "model_type") in INTERLEAVED_MODEL_TYPES else "half"


# Per-layer-type configs written the transformers 4 way: the top-level key that holds each layer type's base.
_LAYER_BASES = {
    "gemma3_text": {"sliding_attention": "rope_local_base_freq", "full_attention": "rope_theta"},
    "gemma3": {"sliding_attention": "rope_local_base_freq", "full_attention": "rope_theta"},
    "modernbert": {"sliding_attention": "local_rope_theta", "full_attention": "global_rope_theta"},
}
# The bases transformers fills in when such a config omits them.
_LAYER_DEFAULTS = {
    "rope_local_base_freq": 10000.0,
    "local_rope_theta": 10000.0,
    "global_rope_theta": 160000.0,
}


def _layer_params(config: object, params: dict, layer_type: str | None) -> tuple[dict, str | None]:
    """One layer type's rope parameters from a per-layer config; ``(params, None)`` for other configs."""
    per_layer = {k: v for k, v in params.items() if isinstance(v, Mapping)}
    model_type = _get(config, "model_type")
    bases = _LAYER_BASES.get(model_type)
    if not per_layer and bases is None and any(_get(config, key) is not None for key in _LAYER_DEFAULTS):
        bases = _LAYER_BASES["modernbert" if _get(config, "global_rope_theta") is not None else "gemma3"]
    if not per_layer and bases is None:
        if layer_type is not None:
            raise ValueError(f"layer_type={layer_type!r} given, but this config has one RoPE setting for all layers")
        return params, None
    types = sorted(per_layer) if per_layer else sorted(bases)
    if layer_type is None:
        raise ValueError(
            f"this config sets RoPE per layer type {types} (e.g. local and global attention layers): pass "
            "layer_type= one of them"
        )
    if layer_type not in types:
        raise ValueError(f"layer_type must be one of {types}, got {layer_type!r}")
    if per_layer:  # transformers 5's rope_parameters keyed by layer type
        return dict(per_layer[layer_type]), layer_type
    # transformers 4 / config.json: Gemma 3 applies rope_scaling to its global layers only, ModernBERT to both
    key = bases[layer_type]
    value = _get(config, key)
    own = {"rope_theta": _LAYER_DEFAULTS.get(key) if value is None else value}
    if key == "rope_local_base_freq":
        return own, layer_type
    return {**params, **own}, layer_type


def _head_dim(config: object, layer_type: str | None) -> int | None:
    if layer_type is not None and _get(config, "per_layer_config") is not None:
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            config = config.per_layer_config[layer_type]  # transformers 5 (Gemma 4: wider global heads)
    elif layer_type == "full_attention" and _get(config, "global_head_dim") is not None:
        return _get(config, "global_head_dim")  # Gemma 4's config.json
    head_dim = _get(config, "qk_rope_head_dim") or _get(config, "head_dim")  # DeepSeek: the rotated part
    width = _get(config, "hidden_size") or _get(config, "n_embd")  # GPT-J/GPT-2 style: n_embd, n_head
    heads = _get(config, "num_attention_heads") or _get(config, "n_head")
    if head_dim is None and width and heads:
        head_dim = width // heads
    return head_dim


def rope_settings(config: object, layer_type: str | None = None) -> RopeSettings:
    """Read a model's RoPE settings from a transformers config (4.x or 5.x) or a ``config.json`` dict.

    Understands transformers 5's ``config.rope_parameters`` (``rope_theta`` and
    ``partial_rotary_factor`` inside the dict, or one such dict per layer type), transformers 4's
    ``config.rope_theta`` + ``config.rope_scaling`` (legacy key ``"type"``, early Phi-3's ``"su"``) +
    ``config.partial_rotary_factor``, and GPT-NeoX's older ``rotary_emb_base``/``rotary_pct``.

    Models with local and global attention layers set RoPE per layer type: Gemma 3 (sliding layers:
    ``rope_local_base_freq``, no scaling; full layers: ``rope_theta`` and ``rope_scaling``),
    ModernBERT (``local_rope_theta``, ``global_rope_theta``, ``rope_scaling`` on both), Gemma 4
    (``rope_parameters`` keyed by layer type; full layers: ``proportional``, their own
    ``global_head_dim``). For them ``layer_type`` (``"sliding_attention"`` or ``"full_attention"``)
    is required, and a ``ValueError`` names the layer types without it.

    The pairing is read from the config: DeepSeek's ``rope_interleave: true`` and the families whose
    transformers code rotates ``(2i, 2i + 1)`` (:data:`INTERLEAVED_MODEL_TYPES`: GPT-J, CodeGen,
    Cohere, GLM) are ``"interleaved"``, the rest ``"half"``. The top-level ``max_position_embeddings``
    and ``original_max_position_embeddings`` are copied into the spec where its type needs them, so
    that ``apply_rope(x, p, base=s.base, scaling=s.scaling, pairing=s.pairing)`` and
    ``RotaryEmbedding`` reproduce the model with its FULL head dimension (a partial rotation is the
    spec's ``partial_rotary_factor``). The result is validated when the config tells the head
    dimension (then ``head_dim`` is set). Book: chapter 6.

    Example::

        base, scaling, fraction = posenc.rope_settings(transformers.LlamaConfig())
        local = posenc.rope_settings(gemma3_config, layer_type="sliding_attention")
    """
    if not isinstance(config, Mapping) and not hasattr(config, "__dict__"):
        raise TypeError(f"config must be a transformers config or a config.json dict, got {type(config).__name__}")
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a str or None, got {layer_type!r} ({type(layer_type).__name__})")
    rope_keys = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base")
    if _get(config, "text_config") is not None and all(_get(config, key) is None for key in rope_keys):
        config = _get(config, "text_config")  # multimodal wrappers (Gemma 3, Qwen2-VL): RoPE is the text model's
    params = _get(config, "rope_parameters")
    if params is None:
        params = _get(config, "rope_scaling")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"rope_parameters / rope_scaling must be a dict or None, got {type(params).__name__}")
    params, layer_type = _layer_params(config, dict(params or {}), layer_type)
    for top, names in (
        ("rope_theta", ("rope_theta", "rotary_emb_base")),
        ("partial_rotary_factor", ("partial_rotary_factor", "rotary_pct")),
    ):
        if params.get(top) is None and layer_type is None:
            found = [_get(config, name) for name in names if _get(config, name) is not None]
            if found:
                params[top] = found[0]
    base = params.pop("rope_theta", None)
    base = DEFAULT_BASE if base is None else check_real("rope_theta", base, greater_than=1.0)
    fraction = params.pop("partial_rotary_factor", None)
    spec_class = _spec_class(params)
    fields = {field.name for field in dataclasses.fields(spec_class)}
    max_pos, original = _get(config, "max_position_embeddings"), _get(config, "original_max_position_embeddings")
    if spec_class.original_is_max_position and max_pos is not None:
        params["original_max_position_embeddings"] = max_pos  # transformers' dynamic NTK reads only this one
    elif "original_max_position_embeddings" in fields and original is not None:
        params["original_max_position_embeddings"] = original  # transformers: the top-level value wins
    if "original_max_position_embeddings" in fields and params.get("original_max_position_embeddings") is None:
        params["original_max_position_embeddings"] = max_pos  # transformers' fallback
    if "max_position_embeddings" in fields and params.get("factor") is None and max_pos is not None:
        params["max_position_embeddings"] = max_pos
    head_dim = _head_dim(config, layer_type)
    rotary_dim = _get(config, "rotary_dim")  # GPT-J, CodeGen: the number of rotated features per head
    if rotary_dim is not None:
        rotary_dim = check_int("rotary_dim", rotary_dim, minimum=2)
        if head_dim is None:
            raise ValueError(f"rotary_dim = {rotary_dim} needs the head dimension, which this config does not give")
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim must be <= the head dimension {head_dim}, got {rotary_dim}")
        if fraction is not None and fraction * head_dim != rotary_dim:
            raise ValueError(
                f"rotary_dim = {rotary_dim} and partial_rotary_factor = {fraction} disagree for head dim {head_dim}"
            )
        fraction = rotary_dim / head_dim
    if fraction is not None and fraction != 1.0:
        params["partial_rotary_factor"] = fraction  # pass the FULL head_dim, the spec says how much rotates
    spec = RopeScaling.from_dict(params)
    if head_dim is not None:  # validate now, so that a bad config fails here and names its key
        head_dim = spec.check_head_dim(head_dim)
    return RopeSettings(base, spec, spec.partial_rotary_factor, _pairing(config), layer_type, head_dim)


# ---- Extending a trained model's context: the methods the book compares ----------------------------


def _yarn_extension(factor: float, original: dict, temperature: bool) -> dict:
    yarn = {"rope_type": "yarn", "factor": factor, **original}
    return yarn if temperature else {**yarn, "attention_factor": 1.0}


# method -> f(factor, base, head_dim, original) -> (rope_scaling dict or None, base); one line each
_EXTENSIONS = {
    "none": lambda factor, base, d, original: (None, base),
    "PI": lambda factor, base, d, original: ({"rope_type": "linear", "factor": factor}, base),
    "NTK": lambda factor, base, d, original: (None, base * factor ** (d / (d - 2))),
    "dynamic NTK": lambda factor, base, d, original: ({"rope_type": "dynamic", "factor": 1.0, **original}, base),
    "YaRN": lambda factor, base, d, original: (_yarn_extension(factor, original, True), base),
    "YaRN, no tau": lambda factor, base, d, original: (_yarn_extension(factor, original, False), base),
    "Llama 3": lambda factor, base, d, original: (
        {"rope_type": "llama3", "factor": factor, **original, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        base,
    ),
}
#: the context-extension methods of chapters 10 and 13, in the order the book lists them
EXTENSION_METHODS = tuple(_EXTENSIONS)


def extension_settings(
    method: str, factor: float, *, base: float, head_dim: int, original_max_position_embeddings: int
) -> tuple[dict | None, float]:
    """``(rope_scaling dict or None, base)`` that extends a RoPE model trained at ``L_0`` to ``factor * L_0``.

    Book: chapter 10 (``book/10_extension.ipynb``) and the real-text chapter (``book/13_real_text.ipynb``).
    Give the result to :func:`posenc.with_rope_scaling` (``scaling, base = extension_settings(...)``,
    ``with_rope_scaling(model, scaling, base=base)``). ``L_0`` is ``original_max_position_embeddings``.

    * ``"none"``: RoPE unchanged (extrapolation);
    * ``"PI"``: ``{"rope_type": "linear", "factor": factor}`` (Chen et al., arXiv:2306.15595);
    * ``"NTK"``: no scaling dict, the base raised to ``base * factor ** (d / (d - 2))`` (bloc97's rule);
    * ``"dynamic NTK"``: ``rope_type "dynamic"`` with ``factor`` 1, so that at a length ``L > L_0`` the
      base is NTK's for ``L / L_0`` (``factor`` only names the evaluation length);
    * ``"YaRN"``: ``rope_type "yarn"`` with the paper's defaults (Peng et al., arXiv:2309.00071);
      ``"YaRN, no tau"``: the same with ``attention_factor`` 1 (no temperature);
    * ``"Llama 3"``: ``rope_type "llama3"`` with Llama 3.1's ``low_freq_factor`` 1, ``high_freq_factor`` 4.
    """
    if method not in _EXTENSIONS:
        raise ValueError(f"method must be one of {EXTENSION_METHODS}, got {method!r}")
    factor = check_real("factor", factor, greater_than=0.0)
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (a longer context), got {factor:g}")
    base = check_real("base", base, greater_than=1.0)
    head_dim = check_int("head_dim", head_dim, minimum=4)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    length = check_int("original_max_position_embeddings", original_max_position_embeddings, minimum=1)
    return _EXTENSIONS[method](factor, base, head_dim, {"original_max_position_embeddings": length})
