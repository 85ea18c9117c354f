r"""RoPE scaling: one small pure function per ``rope_type``, and reading a model's RoPE settings.

Book: chapter 6 (``book/06_rope.ipynb``) for ``default``; the RoPE scaling atlas of chapter 7
(``book/07_beyond.ipynb``) for the others.

Every function of :data:`ROPE_SCALINGS` has the signature of transformers' ``ROPE_INIT_FUNCTIONS``
reduced to what the formula needs::

    (head_dim, base, params, seq_len) -> (inv_freq (d/2,) float32, attention_scale float)

``head_dim`` is the rotated dimension ``d``, ``base`` the RoPE base, ``params`` the validated
parameters of that type (defaults filled in), ``seq_len`` the length being processed (``None``:
the model's configuration time). ``attention_scale`` multiplies cos and sin (1.0 except for YaRN
and LongRoPE). They are unchecked kernels: :func:`posenc.rope_inv_freq` validates ``params`` once,
with the checker of the same ``rope_type`` (``_CHECKS``), then dispatches here. All of them start
from the one formula :math:`\theta_i = \text{base}^{-2i/d}` of :func:`posenc.sinusoid_frequencies`.

Parameters are given as transformers gives them: a dict with ``rope_type`` (or the legacy key
``"type"`` of older ``config.json`` files), optionally ``rope_theta`` (transformers 5's
``rope_parameters``) and ``partial_rotary_factor``, and the keys of the type. Two values live in
a model's config at the top level rather than in its ``rope_scaling``; posenc reads them from the
dict, and :func:`rope_settings` copies them there from a config:

* ``original_max_position_embeddings`` (``L_0``, the pre-training context), required by
  ``dynamic``, ``yarn``, ``llama3`` and ``longrope`` (transformers' dynamic NTK reads it from the
  top-level ``max_position_embeddings``; Phi-3 keeps it at the top level);
* ``max_position_embeddings`` (the extended context), read only by ``longrope`` (and ``yarn``)
  when ``factor`` is absent, as ``factor = max_position_embeddings / L_0`` (Phi-3's configs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import torch
from torch import Tensor

from posenc._checks import check_even_dim, check_int, check_real
from posenc.sinusoidal import _frequencies

__all__ = ["ROPE_SCALINGS", "ROPE_TYPES", "RopeSettings", "rope_settings"]

DEFAULT_BASE = 10000.0


# --- the formulas: (head_dim, base, params, seq_len) -> (inv_freq, attention_scale) -------------


def default_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""RoPE's own frequencies (RoFormer, arXiv:2104.09864; chapter 6).

    .. math:: \theta_i = \text{base}^{-2i/d}, \quad 0 \le i < d/2.
    """
    return _frequencies(head_dim, base), 1.0  # (d/2,)


def linear_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""Position interpolation, PI (Chen et al., arXiv:2306.15595; chapter 7).

    Positions are squeezed by ``factor`` :math:`\alpha` into the trained range, which is the same as
    dividing every frequency: :math:`\theta'_i = \theta_i / \alpha`.
    """
    return _frequencies(head_dim, base) / params["factor"], 1.0  # (d/2,)


def dynamic_ntk_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""Dynamic NTK-aware scaling (chapter 7).

    No paper: "NTK-Aware Scaled RoPE" was posted by bloc97 on Reddit r/LocalLLaMA (June 2023) and
    made dynamic by emozilla ("Dynamically Scaled RoPE", same forum); YaRN (arXiv:2309.00071, sec. 3)
    writes both up. The base grows with the length :math:`L` beyond :math:`L_0` so that the slowest
    pair is interpolated while the fastest barely changes:

    .. math:: \text{base}' = \text{base}\,\bigl(s L / L_0 - (s - 1)\bigr)^{d/(d-2)}, \qquad L > L_0;

    for :math:`L \le L_0` (or ``seq_len=None``) the frequencies are RoPE's own. The grown base is
    computed as a float32 tensor, as transformers' models do (they pass the length as a tensor).
    """
    original = params["original_max_position_embeddings"]
    if seq_len is None or seq_len <= original:
        return _frequencies(head_dim, base), 1.0  # within the original context: unchanged
    factor = params["factor"]
    grown = base * ((factor * torch.tensor(seq_len) / original) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return _frequencies(head_dim, grown), 1.0  # (d/2,)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    # YaRN's temperature: sqrt(1/tau) = 0.1 ln(alpha) + 1 (arXiv:2309.00071, eq. 22).
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""YaRN (Peng et al., arXiv:2309.00071; chapter 7): NTK-by-parts interpolation plus a temperature.

    Pair ``i`` turns :math:`r_i = L_0 \theta_i / 2\pi` times within the original context. Pairs
    turning more than ``beta_fast`` times keep :math:`\theta_i`, pairs turning fewer than
    ``beta_slow`` times are interpolated to :math:`\theta_i / \alpha`, and a linear ramp :math:`w_i`
    blends the pairs in between:

    .. math:: \theta'_i = (1 - w_i)\,\theta_i / \alpha + w_i\,\theta_i.

    cos and sin are multiplied by ``attention_factor``, by default :math:`0.1 \ln \alpha + 1`, or with
    DeepSeek's ``mscale``/``mscale_all_dim`` the ratio of two such terms (1.0 when they are equal:
    DeepSeek-V3 applies its temperature in the softmax scale instead). Arithmetic follows
    transformers (float32 frequencies, float64 Python scalars).
    """
    factor, original = params["factor"], params["original_max_position_embeddings"]
    attention_factor = params["attention_factor"]
    if attention_factor is None:
        if params["mscale"] and params["mscale_all_dim"]:
            attention_factor = _yarn_mscale(factor, params["mscale"]) / _yarn_mscale(factor, params["mscale_all_dim"])
        else:
            attention_factor = _yarn_mscale(factor)

    def correction_dim(num_rotations: float) -> float:
        # The (fractional) pair index whose wavelength fits num_rotations times into L_0.
        return (head_dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(params["beta_fast"]), correction_dim(params["beta_slow"])
    if params["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp, as transformers does
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (d/2,)
    theta = _frequencies(head_dim, base)  # (d/2,)
    interpolated = _frequencies(head_dim, base, divided_by=factor)  # theta_i / alpha, rounded as transformers does
    keep = 1 - ramp  # w_i: 1 keeps theta_i (fast pairs), 0 interpolates (slow pairs)
    return interpolated * (1 - keep) + theta * keep, float(attention_factor)


def llama3_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""Llama 3.1's frequency-dependent interpolation (Llama 3 paper, arXiv:2407.21783; chapter 7).

    With wavelength :math:`\lambda_i = 2\pi/\theta_i`, :math:`\lambda_{lo} = L_0 / \text{low\_freq\_factor}`
    and :math:`\lambda_{hi} = L_0 / \text{high\_freq\_factor}`: pairs with :math:`\lambda_i < \lambda_{hi}`
    keep :math:`\theta_i`, pairs with :math:`\lambda_i > \lambda_{lo}` get :math:`\theta_i / \alpha`, and in
    between, with :math:`w_i = (L_0/\lambda_i - \text{low}) / (\text{high} - \text{low})`,

    .. math:: \theta'_i = (1 - w_i)\,\theta_i / \alpha + w_i\,\theta_i.
    """
    theta = _frequencies(head_dim, base)  # (d/2,)
    factor, original = params["factor"], params["original_max_position_embeddings"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    wavelen = 2 * math.pi / theta
    scaled = torch.where(wavelen > original / low, theta / factor, theta)  # long waves: interpolate
    smooth = (original / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < original / high) * ~(wavelen > original / low)
    return torch.where(is_medium, blended, scaled), 1.0  # (d/2,)


def longrope_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""LongRoPE (Ding et al., arXiv:2402.13753), as shipped in Phi-3 (arXiv:2404.14219); chapter 7.

    Each pair has its own searched rescale factor :math:`\lambda_i`: ``long_factor`` when the
    length exceeds :math:`L_0`, ``short_factor`` otherwise (also for ``seq_len=None``):

    .. math:: \theta'_i = \theta_i / \lambda_i, \qquad
              \text{attention\_scale} = \sqrt{1 + \ln \alpha / \ln L_0}\ \ (1 \text{ if } \alpha \le 1),

    with :math:`\alpha` = ``factor``, or ``max_position_embeddings / L_0`` when ``factor`` is absent,
    unless ``attention_factor`` is given.
    """
    original = params["original_max_position_embeddings"]
    attention_factor = params["attention_factor"]
    if attention_factor is None:
        factor = params["factor"]
        if factor is None:
            factor = params["max_position_embeddings"] / original
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    chosen = params["long_factor"] if seq_len is not None and seq_len > original else params["short_factor"]
    rescale = torch.tensor(chosen, dtype=torch.float32)  # (d/2,): lambda_i
    return _frequencies(head_dim, base, divided_by=rescale), float(attention_factor)  # (d/2,)


def proportional_inv_freq(head_dim: int, base: float, params: dict, seq_len: int | None) -> tuple[Tensor, float]:
    r"""transformers' "proportional" RoPE (no paper: ``_compute_proportional_rope_parameters``).

    Only the first :math:`r = \lfloor p\,d/2 \rfloor` pairs (``partial_rotary_factor`` :math:`p`)
    rotate, with the frequencies of the FULL head dimension; the other pairs get frequency 0 (no
    rotation), so the result keeps ``d/2`` entries. All are divided by ``factor`` (default 1):

    .. math:: \theta'_i = \text{base}^{-2i/d} / \alpha \ (i < r), \qquad \theta'_i = 0 \ (i \ge r).
    """
    rotated = int(params["partial_rotary_factor"] * head_dim // 2)
    theta = _frequencies(head_dim, base)[:rotated]  # (r,)
    inv_freq = torch.cat((theta, torch.zeros(head_dim // 2 - rotated)))  # (d/2,)
    return inv_freq / params["factor"], 1.0


#: The registry: rope_type -> its formula, one signature for all (transformers' ``ROPE_INIT_FUNCTIONS``
#: plus ``"default"``). ``"axial"`` (2-D positions of vision models) is out of this book's scope.
ROPE_SCALINGS: Mapping[str, Callable[[int, float, dict, int | None], tuple[Tensor, float]]] = MappingProxyType(
    {
        "default": default_inv_freq,
        "linear": linear_inv_freq,
        "dynamic": dynamic_ntk_inv_freq,
        "yarn": yarn_inv_freq,
        "llama3": llama3_inv_freq,
        "longrope": longrope_inv_freq,
        "proportional": proportional_inv_freq,
    }
)
ROPE_TYPES = tuple(ROPE_SCALINGS)

#: Types whose frequencies depend on the length processed (``seq_len``).
LENGTH_DEPENDENT = ("dynamic", "longrope")


# --- validation: one checker per rope_type ---------------------------------------------------------


def _key(name: str) -> str:
    return f"scaling[{name!r}]"


def _factor(params: Mapping, *, required: bool = True) -> float | None:
    value = params.get("factor")
    if value is None and not required:
        return None
    if "factor" not in params:
        raise ValueError(f"scaling needs the key 'factor' for rope_type {params['rope_type']!r}")
    value = check_real(_key("factor"), value)
    if value < 1:
        raise ValueError(f"{_key('factor')} must be >= 1 (it stretches the context), got {value:g}")
    return value


def _original(params: Mapping) -> int:
    if params.get("original_max_position_embeddings") is None:
        raise ValueError(
            f"rope_type {params['rope_type']!r} needs scaling['original_max_position_embeddings'] (the pre-training "
            "context; a model's config.json may keep it, or max_position_embeddings, at the top level: "
            "posenc.rope_settings(config) copies it into the dict)"
        )
    return check_int(_key("original_max_position_embeddings"), params["original_max_position_embeddings"], minimum=1)


def _optional_real(params: Mapping, name: str, default: float | None, greater_than: float = 0.0) -> float | None:
    value = params.get(name)
    return default if value is None else check_real(_key(name), value, greater_than=greater_than)


def _check_default(params: Mapping, head_dim: int) -> dict:
    return {}


def _check_linear(params: Mapping, head_dim: int) -> dict:
    return {"factor": _factor(params)}


def _check_dynamic(params: Mapping, head_dim: int) -> dict:
    if head_dim <= 2:
        raise ValueError(f"rope_type 'dynamic' needs head_dim > 2 (its exponent is d/(d-2)), got {head_dim}")
    return {"factor": _factor(params), "original_max_position_embeddings": _original(params)}


def _check_yarn(params: Mapping, head_dim: int) -> dict:
    out = {"original_max_position_embeddings": _original(params)}
    factor = _factor(params, required=params.get("max_position_embeddings") is None)
    if factor is None:  # DeepSeek-style: the ratio of the extended to the original context
        max_pos = check_int(_key("max_position_embeddings"), params["max_position_embeddings"], minimum=1)
        factor = max_pos / out["original_max_position_embeddings"]
    out["factor"] = factor
    out["beta_fast"] = _optional_real(params, "beta_fast", 32.0)
    out["beta_slow"] = _optional_real(params, "beta_slow", 1.0)
    if not out["beta_fast"] > out["beta_slow"]:
        raise ValueError(f"{_key('beta_fast')} must be > beta_slow, got {out['beta_fast']:g} <= {out['beta_slow']:g}")
    for name in ("attention_factor", "mscale", "mscale_all_dim"):
        out[name] = _optional_real(params, name, None)
    truncate = params.get("truncate", True)
    if not isinstance(truncate, bool):
        raise TypeError(f"{_key('truncate')} must be a bool, got {truncate!r} ({type(truncate).__name__})")
    out["truncate"] = truncate
    return out


def _check_llama3(params: Mapping, head_dim: int) -> dict:
    out = {"factor": _factor(params), "original_max_position_embeddings": _original(params)}
    for name in ("low_freq_factor", "high_freq_factor"):
        if params.get(name) is None:
            raise ValueError(f"rope_type 'llama3' needs the key {name!r}")
        out[name] = check_real(_key(name), params[name], greater_than=0.0)
    if not out["high_freq_factor"] > out["low_freq_factor"]:
        raise ValueError(
            f"{_key('high_freq_factor')} must be > low_freq_factor, "
            f"got {out['high_freq_factor']:g} <= {out['low_freq_factor']:g}"
        )
    return out


def _factor_list(params: Mapping, name: str, length: int) -> list[float]:
    value = params.get(name)
    if isinstance(value, Tensor):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{_key(name)} must be a list of {length} numbers (one per pair), got {type(value).__name__}")
    if len(value) != length:
        raise ValueError(f"{_key(name)} must have head_dim/2 = {length} entries, got {len(value)}")
    return [check_real(f"{_key(name)}[{i}]", v, greater_than=0.0) for i, v in enumerate(value)]


def _check_longrope(params: Mapping, head_dim: int) -> dict:
    out = {"original_max_position_embeddings": _original(params)}
    out["short_factor"] = _factor_list(params, "short_factor", head_dim // 2)
    out["long_factor"] = _factor_list(params, "long_factor", head_dim // 2)
    out["attention_factor"] = _optional_real(params, "attention_factor", None)
    out["factor"] = _factor(params, required=False)
    out["max_position_embeddings"] = None
    if params.get("max_position_embeddings") is not None:
        out["max_position_embeddings"] = check_int(
            _key("max_position_embeddings"), params["max_position_embeddings"], minimum=1
        )
    if out["attention_factor"] is None and out["factor"] is None and out["max_position_embeddings"] is None:
        raise ValueError(
            "rope_type 'longrope' needs scaling['factor'], scaling['attention_factor'] or "
            "scaling['max_position_embeddings'] (Phi-3 keeps max_position_embeddings at the top level of its "
            "config: posenc.rope_settings(config) copies it)"
        )
    return out


def _check_proportional(params: Mapping, head_dim: int) -> dict:
    factor = _factor(params, required=False)
    return {"factor": 1.0 if factor is None else factor, "partial_rotary_factor": params["partial_rotary_factor"]}


_CHECKS: dict[str, Callable[[Mapping, int], dict]] = {
    "default": _check_default,
    "linear": _check_linear,
    "dynamic": _check_dynamic,
    "yarn": _check_yarn,
    "llama3": _check_llama3,
    "longrope": _check_longrope,
    "proportional": _check_proportional,
}
_ALLOWED = {  # the keys each type reads, besides rope_type/type/rope_theta/partial_rotary_factor
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "mscale",
        "mscale_all_dim",
        "truncate",
    ),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": (
        "short_factor",
        "long_factor",
        "original_max_position_embeddings",
        "max_position_embeddings",
        "factor",
        "attention_factor",
    ),
    "proportional": ("factor",),
}
_COMMON = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


class _Rope(NamedTuple):
    """Validated RoPE settings: what the private kernels need."""

    rope_type: str
    params: dict
    base: float
    head_dim: int  # the full head dimension
    rotary_dim: int  # the rotated leading features (== head_dim unless partial_rotary_factor < 1)


def _resolve(head_dim: object, base: object, scaling: object) -> _Rope:
    """Validate (head_dim, base, scaling) once, at a public boundary."""
    head_dim = check_even_dim("head_dim", head_dim)
    if scaling is None:
        scaling = {}
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be a dict (a model's rope_scaling or rope_parameters) or None, got {type(scaling).__name__}"
        )
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if "rope_type" in scaling and "type" in scaling and scaling["type"] != scaling["rope_type"]:
        raise ValueError(
            f"scaling['type'] = {scaling['type']!r} and scaling['rope_type'] = {scaling['rope_type']!r} disagree"
        )
    if rope_type not in ROPE_SCALINGS:
        raise ValueError(f"scaling['rope_type'] must be one of {ROPE_TYPES}, got {rope_type!r}")
    allowed = {*_COMMON, *_ALLOWED[rope_type]}
    unknown = sorted(set(scaling) - allowed, key=str)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} for rope_type {rope_type!r}; allowed: {sorted(allowed)}")

    theta = scaling.get("rope_theta")
    if theta is not None:
        theta = check_real("scaling['rope_theta']", theta, greater_than=1.0)
    if base is None:
        base = DEFAULT_BASE if theta is None else theta
    else:
        base = check_real("base", base, greater_than=1.0)
        if theta is not None and theta != base:
            raise ValueError(f"base={base:g} and scaling['rope_theta']={theta:g} disagree; give one of them")

    fraction = scaling.get("partial_rotary_factor")
    fraction = 1.0 if fraction is None else check_real("scaling['partial_rotary_factor']", fraction, greater_than=0.0)
    if fraction > 1:
        raise ValueError(f"scaling['partial_rotary_factor'] must be in (0, 1], got {fraction:g}")
    params = {"rope_type": rope_type, **{k: v for k, v in scaling.items() if k not in _COMMON}}
    rotary_dim = head_dim
    if rope_type == "proportional":
        params["partial_rotary_factor"] = fraction  # rotates a part, but keeps all d/2 frequencies
    else:
        rotary_dim = int(head_dim * fraction)  # GPT-NeoX: rotate the first rotary_dim features
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"head_dim * scaling['partial_rotary_factor'] = {head_dim} * {fraction:g} must be an even rotary "
                f"dimension >= 2, got {rotary_dim}"
            )
    return _Rope(rope_type, _CHECKS[rope_type](params, rotary_dim), base, head_dim, rotary_dim)


def _inv_freq(rope: _Rope, seq_len: int | None) -> tuple[Tensor, float]:
    """Unchecked dispatch through the registry: (r/2,) float32 frequencies and the attention scale."""
    return ROPE_SCALINGS[rope.rope_type](rope.rotary_dim, rope.base, rope.params, seq_len)


# --- reading a model's settings ----------------------------------------------------------------------


class RopeSettings(NamedTuple):
    """A model's RoPE settings in posenc's terms (see :func:`rope_settings`)."""

    base: float  #: the RoPE base (rope_theta)
    scaling: dict  #: for ``scaling=``: rope_type, its keys, partial_rotary_factor if < 1; no rope_theta
    rotary_fraction: float  #: the rotated share of each head (GPT-NeoX: 0.25), also in ``scaling``


def _get(config: object, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def rope_settings(config: object) -> RopeSettings:
    """Read a model's RoPE settings from a transformers config (4.x or 5.x) or a ``config.json`` dict.

    Understands transformers 5's ``config.rope_parameters`` (``rope_theta`` and
    ``partial_rotary_factor`` inside the dict), transformers 4's ``config.rope_theta`` +
    ``config.rope_scaling`` (legacy key ``"type"`` included) + ``config.partial_rotary_factor``, and
    GPT-NeoX's older ``rotary_emb_base``/``rotary_pct``. The top-level ``max_position_embeddings`` and
    ``original_max_position_embeddings`` are copied into ``scaling`` where the type needs them
    (see the module docstring), so that ``rope_inv_freq(head_dim, base=s.base, scaling=s.scaling)``,
    ``apply_rope`` and ``RotaryEmbedding`` reproduce the model with its FULL ``head_dim``: a partial
    rotation (``rotary_fraction < 1``) is carried in ``scaling["partial_rotary_factor"]``. The result
    is validated when the config tells the head dimension. Book: chapter 6.

    Example::

        base, scaling, fraction = posenc.rope_settings(transformers.LlamaConfig())
    """
    if not isinstance(config, Mapping) and not hasattr(config, "__dict__"):
        raise TypeError(f"config must be a transformers config or a config.json dict, got {type(config).__name__}")
    params = _get(config, "rope_parameters")
    if params is None:
        params = _get(config, "rope_scaling")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"rope_parameters / rope_scaling must be a dict or None, got {type(params).__name__}")
    params = dict(params or {})
    if params.get("type") == "su":  # early Phi-3 config.json files; transformers reads "su" as longrope
        params["type"] = "longrope"
    if any(isinstance(v, Mapping) for v in params.values()):
        raise ValueError(f"per-layer rope_parameters (keys {sorted(params)}) are not supported; pass one layer's dict")
    for top, names in (
        ("rope_theta", ("rope_theta", "rotary_emb_base")),
        ("partial_rotary_factor", ("partial_rotary_factor", "rotary_pct")),
    ):
        if params.get(top) is None:
            found = [_get(config, name) for name in names if _get(config, name) is not None]
            if found:
                params[top] = found[0]
    base = params.pop("rope_theta", None)
    fraction = params.pop("partial_rotary_factor", None)
    rope_type = params.pop("type", None)
    params["rope_type"] = params.get("rope_type") or rope_type or "default"
    if rope_type is not None and rope_type != params["rope_type"]:
        raise ValueError(f"rope_scaling['type'] = {rope_type!r} and ['rope_type'] = {params['rope_type']!r} disagree")
    max_pos, original = _get(config, "max_position_embeddings"), _get(config, "original_max_position_embeddings")
    kind = params["rope_type"]
    if kind == "dynamic" and max_pos is not None:
        params["original_max_position_embeddings"] = max_pos  # transformers' dynamic NTK reads only this one
    if kind in ("yarn", "llama3", "longrope") and original is not None:
        params["original_max_position_embeddings"] = original  # transformers: the top-level value wins
    if kind in ("yarn", "llama3", "longrope") and params.get("original_max_position_embeddings") is None:
        params["original_max_position_embeddings"] = max_pos  # transformers' fallback
    if kind in ("longrope", "yarn") and params.get("factor") is None and max_pos is not None:
        params["max_position_embeddings"] = max_pos
    if kind == "proportional":
        params["partial_rotary_factor"] = fraction
        fraction = None
    base = DEFAULT_BASE if base is None else check_real("rope_theta", base, greater_than=1.0)
    head_dim = _get(config, "qk_rope_head_dim") or _get(config, "head_dim")  # DeepSeek: the rotated part
    width = _get(config, "hidden_size") or _get(config, "n_embd")  # config.json of GPT-J/GPT-2 style: n_embd, n_head
    heads = _get(config, "num_attention_heads") or _get(config, "n_head")
    if head_dim is None and width and heads:
        head_dim = width // heads
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
    fraction = 1.0 if fraction is None else check_real("partial_rotary_factor", fraction, greater_than=0.0)
    if fraction != 1.0:
        params["partial_rotary_factor"] = fraction  # GPT-NeoX: pass the FULL head_dim, the dict says how much rotates
    if head_dim is not None:  # validate now, so that a bad config fails here and names its key
        _resolve(head_dim, base, params)
    return RopeSettings(base, params, fraction)
