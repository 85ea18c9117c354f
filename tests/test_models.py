"""Tests of posenc.models.TinyTransformer: every scheme builds, trains every parameter, never looks ahead."""

import pytest
import torch
from torch import nn

from posenc import (
    POSITION_SCHEMES,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    T5RelativeBias,
    TinyTransformer,
    alibi_bias,
    default_device,
    relative_positions,
    scaled_dot_product_attention,
    sinusoidal_encoding,
    t5_relative_bucket,
)
from posenc.models import POSITION_SCHEME_CLASSES, InterleavedRoPE, ModelShape, PositionScheme

VOCAB, DIM, HEADS, LAYERS = 16, 32, 4, 2


def _model(position, **kwargs):
    return TinyTransformer(
        VOCAB, position=position, dim=DIM, num_heads=HEADS, num_layers=LAYERS, device="cpu", **kwargs
    )


def _tokens(seed, shape=(3, 20)):
    return torch.randint(VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def test_the_registry_and_the_names_agree():
    assert POSITION_SCHEMES == ("none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope", "irope")
    assert tuple(POSITION_SCHEME_CLASSES) == POSITION_SCHEMES
    for position in POSITION_SCHEMES:
        assert isinstance(_model(position).scheme, POSITION_SCHEME_CLASSES[position])


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_every_trainable_parameter_gets_a_gradient_from_a_loss_over_all_positions(position):
    model = _model(position)
    tokens = _tokens(0)
    logits = model(tokens)
    assert logits.shape == (3, 20, VOCAB) and torch.isfinite(logits).all()
    model.loss(tokens, tokens, torch.ones_like(tokens, dtype=torch.bool)).backward()
    missing = [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]
    zero = [name for name, p in model.named_parameters() if p.grad is not None and not p.grad.abs().sum() > 0]
    assert not missing, f"{position}: no gradient reaches {missing}"
    assert not zero, f"{position}: an all-zero gradient reaches {zero}"


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_changing_a_future_token_never_changes_an_earlier_output(position):
    model = _model(position).eval()
    tokens = _tokens(1, (2, 18))
    with torch.no_grad():
        before = model(tokens)
        for t in (0, 5, 17):
            changed = tokens.clone()
            changed[:, t] = (changed[:, t] + 1) % VOCAB
            after = model(changed)
            torch.testing.assert_close(after[:, :t], before[:, :t])  # positions before t are unaffected
            assert not torch.allclose(after[:, t:], before[:, t:])  # and the change is seen from t on


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_a_prefix_gives_the_first_rows_of_the_full_sequence(position):
    # What incremental decoding relies on: positions start at 0 and nothing depends on later tokens or length.
    model = _model(position).eval()
    tokens = _tokens(2, (2, 20))
    with torch.no_grad():
        full = model(tokens)
        for length in (1, 7, 19):
            torch.testing.assert_close(model(tokens[:, :length]), full[:, :length], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_same_seed_same_model_and_the_global_generator_is_left_alone(position):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = _model(position, seed=7), _model(position, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name
    c = _model(position, seed=8)
    assert not torch.equal(a.head.weight, c.head.weight)


@pytest.mark.parametrize("position", POSITION_SCHEMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_scheme_runs_in_half_precision(position, dtype):
    if dtype == torch.float16 and default_device().type == "cpu":
        pytest.skip("float16 matmuls are a GPU format; bfloat16 covers the cast on the CPU")
    device = default_device()
    model = TinyTransformer(VOCAB, position=position, dim=DIM, num_heads=HEADS, seed=0, device=device)
    reference = model(_tokens(3).to(device)).float()
    logits = model.to(dtype)(_tokens(3).to(device))  # the bias follows the activations' dtype and device
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    assert (logits.float() - reference).abs().max() < 0.1, "half precision should agree with float32 roughly"


@pytest.mark.parametrize(
    ("position", "options", "check"),
    [
        ("sinusoidal", {"base": 100.0}, lambda s: s.base == 100.0),
        ("learned", {"max_positions": 40}, lambda s: s.table.weight.shape == (40, DIM)),
        ("shaw", {"max_relative": 2}, lambda s: s.layers[0].rel_k.shape == (5, DIM // HEADS)),
        ("t5", {"num_buckets": 8}, lambda s: s.relative.weight.shape == (8, HEADS)),
        ("t5", {"max_distance": 18}, lambda s: s.relative.max_distance == 18),
        ("rope", {"base": 500.0}, lambda s: s.rotary.base == 500.0),
        ("rope", {"pairing": "interleaved"}, lambda s: s.rotary.pairing == "interleaved"),
        ("irope", {"nope_every": 1}, lambda s: s.rope_layers == (False, False)),
        ("irope", {"base": 500.0}, lambda s: s.rotary.base == 500.0),
    ],
)
def test_each_scheme_option_is_reachable_and_changes_the_output(position, options, check):
    tokens = _tokens(4, (2, 24))
    default, changed = _model(position), _model(position, position_options=options)
    assert check(changed.scheme), changed.scheme
    assert not torch.allclose(default(tokens), changed(tokens)), f"{position} {options} changed nothing"


def test_size_options_bound_the_sequence_length():
    tokens = _tokens(5, (1, 30))
    with pytest.raises(ValueError, match="max_positions=24"):
        _model("learned", position_options={"max_positions": 24})(tokens)
    with pytest.raises(ValueError, match="max_positions=24"):
        _model("rope", position_options={"max_positions": 24})(tokens)
    with pytest.raises(ValueError, match="max_positions=24"):
        _model("irope", position_options={"max_positions": 24})(tokens)
    for position in set(POSITION_SCHEMES) - {"learned"}:  # with default options only the table is bounded (64)
        assert torch.isfinite(_model(position)(tokens)).all()


def test_the_hooks_call_the_package_functions():
    x, positions = torch.zeros(1, 10, DIM), torch.arange(10)
    torch.testing.assert_close(_model("sinusoidal").scheme.embed(x, positions)[0], sinusoidal_encoding(positions, DIM))
    torch.testing.assert_close(_model("alibi").scheme.bias(10, 10), alibi_bias(HEADS, 10, 10))
    t5 = _model("t5").scheme
    assert isinstance(t5.relative, T5RelativeBias) and not t5.relative.bidirectional
    # T5: B[h, i, j] = phi[bucket(j - i), h], causal buckets, read from the table by hand
    buckets = t5_relative_bucket(relative_positions(10, 10), bidirectional=False, num_buckets=32, max_distance=128)
    torch.testing.assert_close(t5.bias(10, 10), t5.relative.weight[buckets].permute(2, 0, 1))
    assert isinstance(_model("rope").scheme.rotary, RotaryEmbedding)
    assert isinstance(_model("learned").scheme.table, LearnedPositionalEmbedding)
    assert not list(_model("none").scheme.parameters()) and not list(_model("alibi").scheme.parameters())


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_initialisation_follows_the_module_type(position):
    model = TinyTransformer(VOCAB, position=position, dim=64, num_heads=HEADS, device="cpu")
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert abs(module.weight.std().item() - 0.02) < 0.003, name
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
        elif isinstance(module, nn.LayerNorm):
            assert torch.equal(module.weight, torch.ones_like(module.weight)), name
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
        elif isinstance(module, (nn.Embedding, LearnedPositionalEmbedding)):
            assert abs(module.weight.std().item() - 0.02) < 0.003, name
        elif isinstance(module, T5RelativeBias):
            assert abs(module.weight.std().item() - 64**-0.5) < 0.03, name  # T5: N(0, 1 / d_model)
    if position == "shaw":
        for tables in model.scheme.layers:
            for table in (tables.rel_k, tables.rel_v):
                assert abs(table.std().item() - 0.02) < 0.004


def test_a_registered_scheme_is_used_and_its_parameters_need_an_initialisation_rule(monkeypatch):
    class Constant(PositionScheme):
        def __init__(self, shape: ModelShape, *, value: float = 1.0):
            super().__init__(shape)
            self.value = value

        def embed(self, x, positions):
            return x + self.value

    monkeypatch.setitem(POSITION_SCHEME_CLASSES, "constant", Constant)
    model = TinyTransformer(
        VOCAB, position="constant", position_options={"value": 3.0}, dim=8, num_heads=2, device="cpu"
    )
    assert model.scheme.value == 3.0

    class Raw(PositionScheme):
        def __init__(self, shape: ModelShape):
            super().__init__(shape)
            self.offset = nn.Parameter(torch.zeros(shape.dim))

    monkeypatch.setitem(POSITION_SCHEME_CLASSES, "raw", Raw)
    with pytest.raises(TypeError, match="no initialisation rule for Raw"):
        TinyTransformer(VOCAB, position="raw", dim=8, num_heads=2, device="cpu")


def test_schemes_differ():
    tokens = _tokens(6, (1, 12))
    outputs = {p: _model(p, seed=0)(tokens) for p in POSITION_SCHEMES}
    assert not torch.allclose(outputs["none"], outputs["rope"])
    assert not torch.allclose(outputs["t5"], outputs["alibi"])


def test_the_model_is_built_on_the_default_device():
    model = TinyTransformer(8, position="none", dim=8, num_heads=2)
    assert next(model.parameters()).device.type == default_device().type


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"position": "xpos"}, ValueError, "position must be one of"),
        ({"position": "none", "dim": 30, "num_heads": 4}, ValueError, "dim must be divisible by num_heads"),
        ({"position": "rope", "dim": 12, "num_heads": 4}, ValueError, "rope needs an even head dim"),
        ({"position": "irope", "dim": 12, "num_heads": 4}, ValueError, "irope needs an even head dim"),
        ({"position": "irope", "position_options": {"nope_every": 0}}, ValueError, "nope_every must be >= 1"),
        ({"position": "none", "num_layers": 0}, ValueError, "num_layers must be >= 1"),
        ({"position": "none", "num_layers": 2**16 + 1}, ValueError, r"num_layers must be <= 2\*\*16, got 65537"),
        ({"position": "none", "seed": 1.5}, TypeError, "seed must be an integer"),
        ({"position": "rope", "position_options": {"bse": 500.0}}, ValueError, r"unknown \['bse'\]"),
        ({"position": "alibi", "position_options": {"slopes": [1.0]}}, ValueError, r"'alibi' may be \(none\)"),
        ({"position": "learned", "position_options": {"max_positions": 0}}, ValueError, "max_positions must be >= 1"),
        ({"position": "shaw", "position_options": {"max_relative": 0}}, ValueError, "max_relative must be >= 1"),
        ({"position": "t5", "position_options": {"num_buckets": 0}}, ValueError, "num_buckets must be >= 1"),
        ({"position": "rope", "position_options": {"base": 1.0}}, ValueError, "base must be > 1"),
        ({"position": "rope", "position_options": {"pairing": "zigzag"}}, ValueError, "pairing"),
        ({"position": "sinusoidal", "position_options": {"base": "1e4"}}, TypeError, "base must be a real number"),
        ({"position": "none", "position_options": [("base", 1)]}, TypeError, "position_options must be a mapping"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        TinyTransformer(VOCAB, device="cpu", **kwargs)


def test_bad_tokens_raise_clear_errors():
    model = _model("none")
    with pytest.raises(ValueError, match=r"tokens must be in \[0, 16\)"):
        model(torch.tensor([[0, 16]]))
    with pytest.raises(TypeError, match="tokens must be int64"):
        model(torch.tensor([[0, 1]], dtype=torch.int32))
    with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
        model(torch.tensor([0, 1]))


def test_initialise_needs_a_generator():
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator, got int"):
        _model("none").initialise(0)


def test_loss_and_forward_name_bad_arguments():
    model = _model("none")
    tokens = torch.zeros(2, 5, dtype=torch.long)
    mask = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask selects no position"):
        model.loss(tokens, tokens, torch.zeros_like(mask))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        model.loss(tokens, tokens, mask.long())
    with pytest.raises(ValueError, match="must share one shape"):
        model.loss(tokens, tokens[:, :4], mask)
    with pytest.raises(ValueError, match=r"tokens must hold at least one sequence of at least one token, got \(2, 0\)"):
        model(tokens[:, :0])


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_every_scheme_traces_shapes_on_the_meta_device(position):
    # A meta model has shapes and no data: value checks must step aside, not fail inside torch.
    model = TinyTransformer(VOCAB, position=position, dim=DIM, num_heads=HEADS, num_layers=LAYERS, device="meta")
    logits = model(torch.zeros(2, 7, dtype=torch.long, device="meta"))
    assert logits.is_meta and logits.shape == (2, 7, VOCAB)


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_attention_weights_are_causal_distributions_of_every_layer(position):
    model = _model(position).eval()
    tokens = _tokens(2, (2, 11))
    weights = model.attention_weights(tokens)
    assert weights.shape == (LAYERS, 2, HEADS, 11, 11) and not weights.requires_grad
    torch.testing.assert_close(weights.sum(-1), torch.ones(LAYERS, 2, HEADS, 11))
    above = torch.ones(11, 11, dtype=torch.bool).triu(1)  # keys after the query
    assert (weights[..., above] == 0).all() and (weights >= 0).all()


@pytest.mark.parametrize("position", [p for p in POSITION_SCHEMES if p != "shaw"])  # Shaw adds rel_v to A v
def test_the_attention_weights_are_those_the_forward_pass_uses(position):
    # One layer written out from the returned weights A: x + proj(A v), then the MLP, the norm and the head.
    model = TinyTransformer(VOCAB, position=position, dim=DIM, num_heads=HEADS, num_layers=1, device="cpu").eval()
    tokens = _tokens(3, (2, 9))
    weights = model.attention_weights(tokens)[0]  # (b, h, s, s)
    block = model.blocks[0]
    with torch.no_grad():
        x = model.scheme.embed(model.tokens(tokens), torch.arange(9))  # (b, s, c)
        v = block.qkv(block.norm1(x)).view(2, 9, 3, HEADS, DIM // HEADS)[:, :, 2].transpose(1, 2)  # (b, h, s, d)
        x = x + block.proj((weights @ v).transpose(1, 2).reshape(2, 9, DIM))  # (b, s, c)
        expected = model.head(model.norm(x + block.mlp(block.norm2(x))))  # (b, s, vocab)
        torch.testing.assert_close(model(tokens), expected)


def test_attention_weights_match_the_formula_in_the_first_layer():
    # softmax(q k^T / sqrt(d) + B) over keys n <= m, computed from the model's own weights (T5: B = its bias).
    for position in ("none", "t5", "alibi"):
        model = _model(position).eval()
        tokens = _tokens(3, (2, 9))
        block = model.blocks[0]
        with torch.no_grad():
            x = block.norm1(model.tokens(tokens))  # no position added to the input for these schemes
            q, k, _ = block.qkv(x).view(2, 9, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)  # 3 x (b, h, s, d)
            logits = q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5  # (b, h, s, s)
            bias = model.scheme.bias(9, 9)
            if bias is not None:
                logits = logits + bias
            allowed = torch.ones(9, 9, dtype=torch.bool).tril()
            expected = torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
        torch.testing.assert_close(model.attention_weights(tokens)[0], expected), position


def test_attention_weights_check_their_tokens():
    model = _model("none")
    with pytest.raises(ValueError, match=r"tokens must be in \[0, 16\)"):
        model.attention_weights(torch.tensor([[0, 16]]))
    with pytest.raises(TypeError, match="tokens must be int64"):
        model.attention_weights(torch.tensor([[0, 1]], dtype=torch.int32))


# ---- changing a trained model's RoPE (context extension) -------------------------------------------
from posenc import with_rope_scaling  # noqa: E402


def test_with_rope_scaling_copies_the_model_and_changes_only_the_frequencies():
    model = _model("rope", position_options={"base": 100.0}).eval()
    tokens = _tokens(3)
    before = model(tokens)
    scaling = {"rope_type": "linear", "factor": 4.0}
    scaled = with_rope_scaling(model, scaling)
    assert torch.equal(model(tokens), before)  # the original is untouched
    assert scaled.scheme.rotary.rope_type == "linear" and scaled.scheme.rotary.base == 100.0
    assert not scaled.training  # the mode is kept
    head_dim = DIM // HEADS
    # Position interpolation (Chen et al., arXiv:2306.15595): theta_i / factor, theta_i = base^(-2i/d)
    expected = 1.0 / 100.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim) / 4.0
    torch.testing.assert_close(scaled.scheme.rotary.inv_freq.double(), expected, rtol=1e-6, atol=0)
    # same weights: built with the scaling from the start and given the same seed, it is the same model
    direct = _model("rope", position_options={"base": 100.0, "scaling": scaling}).eval()
    assert torch.allclose(scaled(tokens), direct(tokens))
    assert not torch.allclose(scaled(tokens), before)
    # PI with factor 4 at positions 4m is RoPE at positions m: the rotation angles agree
    assert torch.allclose(scaled.scheme.rotary.inv_freq * 4, model.scheme.rotary.inv_freq)
    # a new base alone (the NTK-aware rule) keeps the default type
    ntk = with_rope_scaling(model, base=100.0 * 4 ** (head_dim / (head_dim - 2)))
    assert ntk.scheme.rotary.rope_type == "default" and ntk.scheme.rotary.base > 100.0
    # the copy's parameters are its own
    next(scaled.parameters()).data.add_(1.0)
    assert torch.equal(model(tokens), before)


def test_with_rope_scaling_refuses_other_models_and_bad_settings():
    with pytest.raises(TypeError, match="model must be a TinyTransformer"):
        with_rope_scaling(nn.Linear(2, 2), None)
    with pytest.raises(ValueError, match="position='rope'"):
        with_rope_scaling(_model("alibi"), None)
    with pytest.raises(ValueError, match="rope_type"):
        with_rope_scaling(_model("rope"), {"rope_type": "stretch"})
    with pytest.raises(ValueError, match="base must be > 1"):
        with_rope_scaling(_model("rope"), base=0.5)


# ---- iRoPE: the layer-aware scheme -------------------------------------------------------------------


@pytest.mark.parametrize("s_q", [1, 3])
def test_irope_decode_step_equals_the_last_rows_of_the_full_pass_in_every_layer(s_q):
    scheme = _model("irope", position_options={"nope_every": 2}).scheme  # layers: RoPE, NoPE
    assert isinstance(scheme, InterleavedRoPE) and scheme.rope_layers == (True, False)
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, HEADS, 10, DIM // HEADS, generator=gen) for _ in range(3))
    for layer in (0, 1):
        full, full_weights = scheme.attend(layer, q, k, v, None)
        step, step_weights = scheme.attend(layer, q[:, :, -s_q:], k, v, None)  # default: the last s_q positions
        torch.testing.assert_close(step, full[:, :, -s_q:])
        torch.testing.assert_close(step_weights, full_weights[:, :, -s_q:])
    # The comparison has teeth: layer 0 rotates (it differs from plain attention), layer 1 does not.
    plain, _ = scaled_dot_product_attention(q, k, v, causal=True)
    assert (scheme.attend(0, q, k, v, None)[0] - plain).abs().max() > 1e-3
    torch.testing.assert_close(scheme.attend(1, q, k, v, None)[0], plain)
    # ... and the queries of a decode step sit at the last positions: rotated at 0 .. s_q - 1 they differ.
    rotary = scheme.rotary
    top_left = rotary(q[:, :, -s_q:], q[:, :, -s_q:], torch.arange(s_q))[0]
    wrong, _ = scaled_dot_product_attention(top_left, rotary(k, k, torch.arange(10))[0], v, causal=True)
    assert (wrong - scheme.attend(0, q[:, :, -s_q:], k, v, None)[0]).abs().max() > 1e-3


def test_irope_rotates_as_rope_on_its_rope_layers():
    # With RoPE in every layer (nope_every larger than the depth), iRoPE is the RoPE model, weight for weight.
    tokens = _tokens(9, (2, 12))
    every = _model("irope", position_options={"nope_every": LAYERS + 1}).eval()
    assert every.scheme.rope_layers == (True,) * LAYERS
    torch.testing.assert_close(every(tokens), _model("rope").eval()(tokens))
    none = _model("irope", position_options={"nope_every": 1}).eval()
    torch.testing.assert_close(none(tokens), _model("none").eval()(tokens))
