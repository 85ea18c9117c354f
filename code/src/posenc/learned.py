"""Learned absolute position embeddings: one trainable vector per position (BERT, GPT-2).

Book: chapter 3 (``book/03_learned.ipynb``). BERT (Devlin et al., 2019, arXiv:1810.04805) and
GPT-2 (Radford et al., 2019) add a row of a trainable ``(max_positions, d)`` table to each token
embedding. The table has no row past ``max_positions - 1``: a longer input has no position
vector at all, and this module says so instead of clamping or failing with an index error.

Shapes:
    n: table size (``max_positions``), d: embedding dimension.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posenc._checks import check_int, check_integer_tensor, check_real, has_values

__all__ = ["KNOWN_TABLES", "LearnedPositionalEmbedding"]

#: ``(max_positions, d)`` of the learned position tables of well-known models, as their
#: reference configurations define them (tests compare with Hugging Face transformers' configs).
KNOWN_TABLES: dict[str, tuple[int, int]] = {
    "bert-base": (512, 768),
    "gpt2": (1024, 768),
}


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table of ``max_positions`` position vectors of size ``dim``.

    Rows are initialised from N(0, ``init_std``^2) with std 0.02 by default, BERT's initializer
    range and Hugging Face's GPT-2 (OpenAI's released GPT-2 code drew its position table with std
    0.01); pass a ``generator`` for a reproducible initialisation.

    Shapes:
        forward: positions ``(...)`` integers in ``[0, max_positions)``; returns ``(..., d)``.
    """

    def __init__(
        self, max_positions: int, dim: int, *, init_std: float = 0.02, generator: torch.Generator | None = None
    ):
        super().__init__()
        self.max_positions = check_int("max_positions", max_positions, minimum=1)
        self.dim = check_int("dim", dim, minimum=1)
        init_std = check_real("init_std", init_std, greater_than=0.0)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        weight = torch.randn(self.max_positions, self.dim, generator=generator) * init_std  # (n, d)
        self.weight = nn.Parameter(weight)

    def forward(self, positions: Tensor) -> Tensor:
        check_integer_tensor("positions", positions)
        if has_values(positions):
            lowest, highest = int(positions.min()), int(positions.max())
            if lowest < 0:
                raise ValueError(f"positions must be >= 0, got {lowest}")
            if highest >= self.max_positions:
                raise ValueError(
                    f"position {highest} is past the end of the learned table: it has "
                    f"max_positions={self.max_positions} rows (positions 0..{self.max_positions - 1}), "
                    f"and a learned table has no vector for a position it was not built with"
                )
        return self.weight[positions.long()]  # (..., d)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}, dim={self.dim}"
