"""posenc: positional encodings for transformers, one readable function per formula.

The package behind the book *트랜스포머의 위치 인코딩*. Conventions used everywhere:

* queries, keys and values are ``(batch, heads, seq, head_dim)``, written ``(b, h, s, d)``;
* a relative position is the key position minus the query position (T5's sign).
"""

from posenc.attention import causal_mask, scaled_dot_product_attention
from posenc.learned import KNOWN_TABLES, LearnedPositionalEmbedding
from posenc.plotting import use_book_style
from posenc.sinusoidal import shift_matrix, sinusoid_frequencies, sinusoidal_encoding, sinusoidal_table

__all__ = [
    "KNOWN_TABLES",
    "LearnedPositionalEmbedding",
    "causal_mask",
    "scaled_dot_product_attention",
    "shift_matrix",
    "sinusoid_frequencies",
    "sinusoidal_encoding",
    "sinusoidal_table",
    "use_book_style",
]
__version__ = "0.1.0"
