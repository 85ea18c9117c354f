"""posenc: positional encodings for transformers, one readable function per formula.

The package behind the book *트랜스포머의 위치 인코딩*. Conventions used everywhere:

* queries, keys and values are ``(batch, heads, seq, head_dim)``, written ``(b, h, s, d)``;
* a relative position is the key position minus the query position (T5's sign);
* query ``i`` sits at position ``offset + i``, with ``offset = s_k - s_q`` by default (the queries
  are the last ``s_q`` of ``s_k`` positions): see :mod:`posenc.positions`.

``import posenc`` does not import matplotlib: :mod:`posenc.plotting` (and ``posenc.use_book_style``)
load on first use.
"""

import importlib

from posenc import analysis, records, stats, tasks
from posenc.alibi import alibi_bias, alibi_slopes
from posenc.analysis import alias_distance, carrying_pairs, rope_pair_logits
from posenc.attention import causal_mask, scaled_dot_product_attention
from posenc.learned import KNOWN_TABLES, LearnedPositionalEmbedding
from posenc.models import POSITION_SCHEME_CLASSES, POSITION_SCHEMES, TinyTransformer, default_device, with_rope_scaling
from posenc.positions import resolve_offset
from posenc.profiling import tensor_memory_peak
from posenc.relative import (
    T5RelativeBias,
    relative_positions,
    shaw_attention,
    shaw_attention_naive,
    shaw_relative_indices,
    t5_exact_zone,
    t5_relative_bucket,
)
from posenc.rope import (
    PAIRINGS,
    ROPE_TYPES,
    RotaryEmbedding,
    apply_rope,
    rope_cos_sin,
    rope_inv_freq,
    rope_rotate,
    rope_rotate_reference,
)
from posenc.rope_scaling import (
    EXTENSION_METHODS,
    ROPE_SCALINGS,
    Default,
    DynamicNTK,
    Linear,
    Llama3,
    LongRope,
    Proportional,
    RopeScaling,
    RopeSettings,
    Yarn,
    extension_settings,
    rope_settings,
    rope_spec,
)
from posenc.sinusoidal import frequencies, shift_matrix, sinusoid_frequencies, sinusoidal_encoding, sinusoidal_table
from posenc.stats import PairedComparison, bonferroni_confidence, paired_comparison, paired_comparisons
from posenc.xpos import XPOS_ROLES, apply_xpos, xpos_zeta

__all__ = [
    "EXTENSION_METHODS",
    "KNOWN_TABLES",
    "PAIRINGS",
    "POSITION_SCHEMES",
    "POSITION_SCHEME_CLASSES",
    "ROPE_SCALINGS",
    "ROPE_TYPES",
    "XPOS_ROLES",
    "Default",
    "DynamicNTK",
    "LearnedPositionalEmbedding",
    "Linear",
    "Llama3",
    "LongRope",
    "PairedComparison",
    "Proportional",
    "RopeScaling",
    "RopeSettings",
    "RotaryEmbedding",
    "T5RelativeBias",
    "TinyTransformer",
    "Yarn",
    "alias_distance",
    "alibi_bias",
    "alibi_slopes",
    "analysis",
    "apply_rope",
    "apply_xpos",
    "bonferroni_confidence",
    "carrying_pairs",
    "causal_mask",
    "default_device",
    "extension_settings",
    "frequencies",
    "paired_comparison",
    "paired_comparisons",
    "records",
    "relative_positions",
    "resolve_offset",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_pair_logits",
    "rope_rotate",
    "rope_rotate_reference",
    "rope_settings",
    "rope_spec",
    "scaled_dot_product_attention",
    "shaw_attention",
    "shaw_attention_naive",
    "shaw_relative_indices",
    "shift_matrix",
    "sinusoid_frequencies",
    "sinusoidal_encoding",
    "sinusoidal_table",
    "stats",
    "t5_exact_zone",
    "t5_relative_bucket",
    "tasks",
    "tensor_memory_peak",
    "use_book_style",
    "with_rope_scaling",
    "xpos_zeta",
]
__version__ = "1.1.0"

# Loaded on first use, so that `import posenc` stays free of matplotlib (PEP 562).
_LAZY = {"plotting": ("posenc.plotting", None), "use_book_style": ("posenc.plotting", "use_book_style")}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
