"""A tiny decoder-only transformer whose position scheme is one argument, for the book's lab.

Book: the lab (``book/09_lab.ipynb``). Each scheme is one small module in a registry,
:data:`POSITION_SCHEME_CLASSES` (name -> class), built from posenc's own functions:

============  =====================  ==========================  =====================================  =============
position      enters at (hook)       built from (posenc)         position_options                       book/
============  =====================  ==========================  =====================================  =============
"none"        nowhere (NoPE)         the causal mask alone       none                                   07_beyond
"sinusoidal"  input (embed)          sinusoidal_encoding         base                                   02_sinusoidal
"learned"     input (embed)          LearnedPositionalEmbedding  max_positions                          03_learned
"shaw"        keys, values (attend)  shaw_attention (per layer)  max_relative                           04_relative
"t5"          logits (bias, shared)  T5RelativeBias              num_buckets, max_distance              04_relative
"alibi"       logits (bias, shared)  alibi_bias                  none                                   07_beyond
"rope"        q and k (rotate)       RotaryEmbedding             base, pairing, max_positions, scaling  06_rope
"irope"       q and k (attend, per   RotaryEmbedding on the      nope_every, base, max_positions        08_variants
              layer)                 layers of irope_layers
============  =====================  ==========================  =====================================  =============

A scheme's options go in ``position_options``, e.g.
``TinyTransformer(16, position="rope", position_options={"base": 500.0})``; an option the scheme
does not have raises. Blocks are pre-norm (LayerNorm, causal attention, residual; LayerNorm, MLP,
residual). All weights are initialised from an explicit seed, by module type (see
:meth:`TinyTransformer.initialise`).

Shapes:
    b: batch, s: sequence length, c: model width (``dim``), h: heads, d: head dim (``c / h``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._checks import check_int, check_real, check_tensor, has_values
from posenc.alibi import alibi_bias
from posenc.attention import scaled_dot_product_attention
from posenc.learned import LearnedPositionalEmbedding
from posenc.relative import T5RelativeBias, shaw_attention
from posenc.rope import RotaryEmbedding
from posenc.sinusoidal import sinusoidal_encoding

__all__ = [
    "POSITION_SCHEMES",
    "POSITION_SCHEME_CLASSES",
    "ALiBi",
    "InterleavedRoPE",
    "LearnedAbsolute",
    "ModelShape",
    "NoPE",
    "PositionScheme",
    "RoPE",
    "ShawRelative",
    "Sinusoidal",
    "T5Bias",
    "TinyTransformer",
    "default_device",
    "irope_layers",
    "with_rope_scaling",
]


def default_device() -> torch.device:
    """A CUDA GPU when one is present (as in Colab), otherwise the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass(frozen=True)
class ModelShape:
    """The sizes a scheme needs to build its parameters: width ``c``, heads ``h``, layers."""

    dim: int
    num_heads: int
    num_layers: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads


# ---- Position schemes: one small module each, four hooks with "do nothing" defaults ----------------


class PositionScheme(nn.Module):
    """Base class of the schemes, and NoPE itself: every hook leaves the model unchanged.

    A scheme is built as ``cls(shape, **options)``; its options are keyword-only arguments.
    The model calls, per forward pass:

    * ``embed(x, positions)`` once, on the token embeddings;
    * ``bias(q_len, k_len)`` once; the result (or None) is shared by every layer;
    * ``rotate(q, k, positions)`` and ``attend(layer, q, k, v, bias)`` in each layer; ``attend``
      returns the output and the attention weights (the model keeps the weights only for
      :meth:`TinyTransformer.attention_weights`).

    Shapes:
        x ``(b, s, c)``; positions ``(s,)``; q, k, v ``(b, h, s, d)``; bias ``(h, s_q, s_k)``;
        ``attend`` returns output ``(b, h, s, d)`` and weights ``(b, h, s, s)``.
    """

    def __init__(self, shape: ModelShape):
        super().__init__()
        self.shape = shape

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x  # (b, s, c)

    def bias(self, q_len: int, k_len: int) -> Tensor | None:
        return None

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        return scaled_dot_product_attention(q, k, v, bias=bias, causal=True)  # (b, h, s, d), (b, h, s, s)


class NoPE(PositionScheme):
    """No position information: only the causal mask orders the tokens (``book/07_beyond.ipynb``)."""


class Sinusoidal(PositionScheme):
    """The fixed encoding of Vaswani et al. (arXiv:1706.03762) added to the input (``book/02_sinusoidal.ipynb``)."""

    def __init__(self, shape: ModelShape, *, base: float = 10000.0):
        super().__init__(shape)
        self.base = check_real("base", base, greater_than=1.0)
        if shape.dim % 2:
            raise ValueError(f"sinusoidal needs an even dim, got dim={shape.dim}")

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + sinusoidal_encoding(positions, self.shape.dim, base=self.base, dtype=x.dtype)  # (b, s, c)

    def extra_repr(self) -> str:
        return f"base={self.base:g}"


class LearnedAbsolute(PositionScheme):
    """A trainable table of ``max_positions`` vectors added to the input (``book/03_learned.ipynb``).

    A sequence longer than the table raises the table's ``ValueError``: it has no vector there.
    """

    def __init__(self, shape: ModelShape, *, max_positions: int = 64):
        super().__init__(shape)
        self.table = LearnedPositionalEmbedding(max_positions, shape.dim)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions)  # (b, s, c); raises past max_positions


class _ShawTables(nn.Module):
    """One layer's relative tables (Shaw et al., arXiv:1803.02155), shared by the heads."""

    def __init__(self, max_relative: int, head_dim: int):
        super().__init__()
        self.rel_k = nn.Parameter(torch.empty(2 * max_relative + 1, head_dim))  # (2k+1, d)
        self.rel_v = nn.Parameter(torch.empty(2 * max_relative + 1, head_dim))  # (2k+1, d)


class ShawRelative(PositionScheme):
    """Shaw et al.'s relative keys and values, one pair of tables per layer (``book/04_relative.ipynb``).

    Distances are clipped to ``[-max_relative, max_relative]``.
    """

    def __init__(self, shape: ModelShape, *, max_relative: int = 16):
        super().__init__(shape)
        self.max_relative = check_int("max_relative", max_relative, minimum=1)
        self.layers = nn.ModuleList(_ShawTables(self.max_relative, shape.head_dim) for _ in range(shape.num_layers))

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        tables = self.layers[layer]
        return shaw_attention(q, k, v, tables.rel_k, tables.rel_v, causal=True)  # (b, h, s, d), (b, h, s, s)

    def extra_repr(self) -> str:
        return f"max_relative={self.max_relative}"


class T5Bias(PositionScheme):
    """T5's bucketed relative bias (arXiv:1910.10683), computed once and shared by layers (``book/04_relative.ipynb``).

    Causal, so ``bidirectional=False``: every bucket goes to keys at or before the query.
    """

    def __init__(self, shape: ModelShape, *, num_buckets: int = 32, max_distance: int = 128):
        super().__init__(shape)
        self.relative = T5RelativeBias(
            shape.num_heads, num_buckets=num_buckets, max_distance=max_distance, bidirectional=False
        )

    def bias(self, q_len: int, k_len: int) -> Tensor:
        return self.relative(q_len, k_len)  # (h, s_q, s_k)


class ALiBi(PositionScheme):
    """ALiBi's fixed linear penalty ``-mu_h |n - m|`` on the logits (arXiv:2108.12409, ``book/07_beyond.ipynb``).

    No options: the slopes ``mu_h`` follow from the number of heads, as in the paper.
    """

    def bias(self, q_len: int, k_len: int) -> Tensor:
        return alibi_bias(self.shape.num_heads, q_len, k_len)  # (h, s_q, s_k), float32 on the CPU


class RoPE(PositionScheme):
    """Rotary embedding of queries and keys (Su et al., arXiv:2104.09864, ``book/06_rope.ipynb``).

    ``max_positions`` is the longest sequence it accepts; longer ones raise. ``scaling`` is a RoPE
    scaling dict as :class:`posenc.RotaryEmbedding` takes it (``{"rope_type": "linear", "factor": 4}``
    ...); to change it on a trained model, see :func:`with_rope_scaling`.
    """

    def __init__(
        self,
        shape: ModelShape,
        *,
        base: float = 10000.0,
        pairing: str = "half",
        max_positions: int = 4096,
        scaling: Mapping | None = None,
    ):
        super().__init__(shape)
        if shape.head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got dim // num_heads = {shape.head_dim}")
        self.rotary = RotaryEmbedding(
            shape.head_dim, max_positions=max_positions, base=base, pairing=pairing, scaling=scaling
        )

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotary(q, k, positions)  # 2 x (b, h, s, d)


# The most layers a lab model or irope_layers builds (one block, one flag each): far above any published model.
MAX_LAYERS = 2**16


def irope_layers(num_layers: int, *, nope_every: int = 4) -> tuple[bool, ...]:
    """Which layers use RoPE (True) and which none (False): layer ``l`` is NoPE when ``(l+1) % nope_every == 0``.

    This is transformers' ``Llama4TextConfig.no_rope_layers`` built from ``no_rope_layer_interval``
    (Llama 4's "iRoPE", ``book/08_variants.ipynb``). ``num_layers`` is at most :data:`MAX_LAYERS`
    (``2**16``; published models have a few hundred).
    """
    num_layers = check_int("num_layers", num_layers, minimum=1, maximum=MAX_LAYERS)
    nope_every = check_int("nope_every", nope_every, minimum=1)
    return tuple((layer + 1) % nope_every != 0 for layer in range(num_layers))


class InterleavedRoPE(PositionScheme):
    """RoPE in most layers, none in every ``nope_every``-th (Llama 4's iRoPE, ``book/08_variants.ipynb``).

    The layer pattern is :func:`irope_layers`. The rotation happens in ``attend``, the hook that
    knows its layer: on a RoPE layer it rotates keys at positions ``0 .. s_k - 1`` and queries at the
    last ``s_q`` of them (:mod:`posenc.positions`; in the model ``s_q = s_k``, so a decode step with
    ``s_q = 1`` gives the last row of the full pass), on a NoPE layer it attends without position.
    Llama 4's chunked attention on RoPE layers and its query temperature on NoPE layers
    (:func:`posenc.variants.llama4_attention_scale`) are left out: at the lab's lengths (far below
    8192) both change nothing. The scheme holds no parameters: a model built with it has the NoPE
    model's weights for the same seed.
    """

    def __init__(self, shape: ModelShape, *, nope_every: int = 4, base: float = 10000.0, max_positions: int = 4096):
        super().__init__(shape)
        if shape.head_dim % 2:
            raise ValueError(f"irope needs an even head dim, got dim // num_heads = {shape.head_dim}")
        self.rope_layers = irope_layers(shape.num_layers, nope_every=nope_every)
        self.rotary = RotaryEmbedding(shape.head_dim, max_positions=max_positions, base=base)

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        if self.rope_layers[layer]:
            s_q, s_k = q.shape[2], k.shape[2]
            keys = torch.arange(s_k, device=k.device)  # (s_k,): key positions
            q = self.rotary(q, q, keys[s_k - s_q :])[0]  # (b, h, s_q, d): the last s_q positions
            k = self.rotary(k, k, keys)[0]  # (b, h, s_k, d)
        return super().attend(layer, q, k, v, bias)  # (b, h, s_q, d), (b, h, s_q, s_k)

    def extra_repr(self) -> str:
        return "layers=" + "".join("R" if rope else "N" for rope in self.rope_layers)


POSITION_SCHEME_CLASSES: dict[str, type[PositionScheme]] = {
    "none": NoPE,
    "sinusoidal": Sinusoidal,
    "learned": LearnedAbsolute,
    "shaw": ShawRelative,
    "t5": T5Bias,
    "alibi": ALiBi,
    "rope": RoPE,
    "irope": InterleavedRoPE,
}
POSITION_SCHEMES = tuple(POSITION_SCHEME_CLASSES)


def _scheme_options(cls: type[PositionScheme]) -> tuple[str, ...]:
    """The keyword-only options of a scheme's constructor."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


# ---- The model --------------------------------------------------------------------------------------


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def attend(
        self, x: Tensor, scheme: PositionScheme, layer: int, positions: Tensor, bias: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        b, s, c = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, c // self.num_heads)  # (b, s, 3, h, d)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (b, h, s, d)
        q, k = scheme.rotate(q, k, positions)
        out, weights = scheme.attend(layer, q, k, v, bias)  # (b, h, s, d), (b, h, s, s)
        return self.proj(out.transpose(1, 2).reshape(b, s, c)), weights  # (b, s, c), (b, h, s, s)

    def forward(
        self, x: Tensor, scheme: PositionScheme, layer: int, positions: Tensor, bias: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        out, weights = self.attend(self.norm1(x), scheme, layer, positions, bias)
        x = x + out
        return x + self.mlp(self.norm2(x)), weights  # (b, s, c), (b, h, s, s)


class TinyTransformer(nn.Module):
    """A small causal language model; ``position`` names one of :data:`POSITION_SCHEME_CLASSES`.

    ``position_options`` are that scheme's own keyword arguments (see the module's table), e.g.
    ``{"max_positions": 32}`` for ``"learned"`` or ``{"base": 500.0, "pairing": "interleaved"}``
    for ``"rope"``; an unknown option raises ``ValueError``. The scheme module is ``model.scheme``.

    Shapes:
        forward: tokens ``(b, s)`` int64 in ``[0, vocab_size)``; returns logits ``(b, s, vocab_size)``.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        position: str,
        position_options: Mapping[str, object] | None = None,
        dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        seed: int = 0,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        if position not in POSITION_SCHEME_CLASSES:
            raise ValueError(f"position must be one of {tuple(POSITION_SCHEME_CLASSES)}, got {position!r}")
        if position_options is not None and not isinstance(position_options, Mapping):
            raise TypeError(f"position_options must be a mapping or None, got {type(position_options).__name__}")
        options = dict(position_options or {})
        cls = POSITION_SCHEME_CLASSES[position]
        unknown = sorted(set(options) - set(_scheme_options(cls)))
        if unknown:
            raise ValueError(
                f"position_options for {position!r} may be {_scheme_options(cls) or '(none)'}, got unknown {unknown}"
            )
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.dim = check_int("dim", dim, minimum=2)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        num_layers = check_int("num_layers", num_layers, minimum=1, maximum=MAX_LAYERS)  # one block each
        seed = check_int("seed", seed)
        if dim % num_heads:
            raise ValueError(f"dim must be divisible by num_heads, got dim={dim}, num_heads={num_heads}")
        self.position = position

        # PyTorch layers draw their default initialisation from the global generator; fork it so that
        # building a model leaves the caller's random state alone, then initialise from `seed`.
        with torch.random.fork_rng(devices=[]):
            self.tokens = nn.Embedding(vocab_size, dim)
            self.scheme = cls(ModelShape(dim, num_heads, num_layers), **options)
            self.blocks = nn.ModuleList(_Block(dim, num_heads) for _ in range(num_layers))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab_size)
        self.initialise(torch.Generator().manual_seed(seed))
        self.to(default_device() if device is None else device)

    @torch.no_grad()
    def initialise(self, generator: torch.Generator) -> None:
        """Initialise every parameter by the type of the module that holds it, drawing from ``generator``.

        GPT-2 style (std 0.02) for the weights: ``nn.Linear`` weight N(0, 0.02^2) and bias 0,
        ``nn.Embedding`` and the learned position table N(0, 0.02^2), ``nn.LayerNorm`` (1, 0), Shaw's
        tables N(0, 0.02^2) like any embedding table. T5's bias table as T5 does it (Hugging Face
        ``T5PreTrainedModel._init_weights``): N(0, 1/c), std ``dim ** -0.5``, so that the position
        bias starts on the scale of a logit instead of near zero. A module type with parameters and
        no rule here raises, so no parameter is silently left at PyTorch's default.
        """
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        std = 0.02
        for module in self.modules():
            own = list(module.parameters(recurse=False))
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, std, generator=generator)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, (nn.Embedding, LearnedPositionalEmbedding)):
                module.weight.normal_(0.0, std, generator=generator)
            elif isinstance(module, _ShawTables):
                module.rel_k.normal_(0.0, std, generator=generator)
                module.rel_v.normal_(0.0, std, generator=generator)
            elif isinstance(module, T5RelativeBias):
                module.weight.normal_(0.0, self.dim**-0.5, generator=generator)
            elif own:
                raise TypeError(f"no initialisation rule for {type(module).__name__}, which holds parameters")

    def forward(self, tokens: Tensor) -> Tensor:
        logits, _ = self._run(tokens)
        return logits  # (b, s, vocab)

    @torch.no_grad()
    def attention_weights(self, tokens: Tensor) -> Tensor:
        """The attention weights ``a_mn`` of every layer for ``tokens`` (no gradients kept).

        Row ``m`` of ``weights[layer, i, head]`` is how query ``m`` of sequence ``i`` spreads its
        attention over the keys ``n <= m`` (zero above the diagonal: the causal mask); each row
        sums to 1. It runs the same forward pass as :meth:`forward`. The lab (``book/09_lab.ipynb``) reads from it
        how much attention goes to keys at distances the training never reached.

        Shapes:
            tokens ``(b, s)`` int64; returns ``(num_layers, b, h, s, s)`` in the model's dtype.
        """
        _, weights = self._run(tokens)
        return torch.stack(weights)  # (layers, b, h, s, s)

    def _run(self, tokens: Tensor) -> tuple[Tensor, list[Tensor]]:
        check_tensor("tokens", tokens, ndim=2)
        if tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be int64, got {tokens.dtype}")
        if 0 in tokens.shape:
            raise ValueError(f"tokens must hold at least one sequence of at least one token, got {tuple(tokens.shape)}")
        if has_values(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(
                f"tokens must be in [0, {self.vocab_size}), got values {int(tokens.min())}..{int(tokens.max())}"
            )
        s = tokens.shape[1]
        positions = torch.arange(s, device=tokens.device)  # (s,)
        x = self.scheme.embed(self.tokens(tokens), positions)  # (b, s, c)
        bias = self.scheme.bias(s, s)  # (h, s, s) or None: computed once, shared by every layer, as in T5
        if bias is not None:
            # Same device as the activations; the dtype stays float32 (attention adds it in float32,
            # so a bf16 model does not round neighbouring ALiBi distances to one value).
            bias = bias.to(device=x.device)
        weights = []
        for layer, block in enumerate(self.blocks):
            x, layer_weights = block(x, self.scheme, layer, positions, bias)  # (b, s, c), (b, h, s, s)
            weights.append(layer_weights)
        return self.head(self.norm(x)), weights  # (b, s, vocab), layers x (b, h, s, s)

    def loss(self, tokens: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
        """Mean cross-entropy over the positions where ``mask`` is true. Shapes: all ``(b, s)``."""
        check_tensor("targets", targets, ndim=2)
        check_tensor("mask", mask, ndim=2)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True where a target exists), got {mask.dtype}")
        if targets.shape != tokens.shape or mask.shape != tokens.shape:
            raise ValueError(
                f"tokens, targets and mask must share one shape (b, s), got {tuple(tokens.shape)}, "
                f"{tuple(targets.shape)} and {tuple(mask.shape)}"
            )
        if not mask.any():
            raise ValueError("mask selects no position: the mean loss over no targets is undefined")
        logits = self(tokens)
        return F.cross_entropy(logits[mask], targets[mask])


def with_rope_scaling(
    model: TinyTransformer, scaling: Mapping | None = None, *, base: float | None = None
) -> TinyTransformer:
    """A copy of a RoPE ``model`` whose rotation uses ``scaling`` (and ``base``); ``model`` is unchanged.

    This is what extending a trained model's context does: the weights stay, only the frequencies
    (and, for YaRN, the attention scale) change. ``scaling`` is a dict as for
    :class:`posenc.RotaryEmbedding` (``None``: RoPE's own frequencies); ``base=None`` keeps the
    model's base, so the NTK-aware rule is ``base=model_base * alpha ** (d / (d - 2))``. Pairing and
    ``max_positions`` are kept. The copy has the original's parameters (copied, on the same device)
    and mode (train/eval). Book: the context-extension chapter (``book/10_extension.ipynb``).
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if model.position != "rope":
        raise ValueError(f"model must use position='rope' to rescale RoPE, got position={model.position!r}")
    old = model.scheme.rotary
    rotary = RotaryEmbedding(
        old.head_dim,
        max_positions=old.max_positions,
        base=old.base if base is None else base,
        pairing=old.pairing,
        scaling=scaling,
    ).to(old.inv_freq.device)
    copy = deepcopy(model)
    copy.scheme.rotary = rotary
    return copy
