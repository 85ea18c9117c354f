"""Tests of posenc.models.TinyTransformer: every scheme builds and runs, and never looks ahead."""

import pytest
import torch

from posenc import POSITION_SCHEMES, TinyTransformer, default_device


def _model(position, **kwargs):
    return TinyTransformer(16, position=position, dim=32, num_heads=4, num_layers=2, max_positions=24, device="cpu", **kwargs)


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_every_scheme_builds_and_runs_forward(position):
    model = _model(position)
    tokens = torch.randint(16, (3, 20), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (3, 20, 16) and torch.isfinite(logits).all()
    loss = model.loss(tokens, tokens, torch.ones_like(tokens, dtype=torch.bool))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad and p.grad is not None)


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_changing_a_future_token_never_changes_an_earlier_output(position):
    model = _model(position).eval()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(16, (2, 18), generator=gen)
    with torch.no_grad():
        before = model(tokens)
        for t in (0, 5, 17):
            changed = tokens.clone()
            changed[:, t] = (changed[:, t] + 1) % 16
            after = model(changed)
            torch.testing.assert_close(after[:, :t], before[:, :t])  # positions before t are unaffected
            assert not torch.allclose(after[:, t:], before[:, t:])  # and the change is seen from t on


@pytest.mark.parametrize("position", POSITION_SCHEMES)
def test_same_seed_same_model_and_the_global_generator_is_left_alone(position):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = _model(position, seed=7), _model(position, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name
    c = _model(position, seed=8)
    assert not torch.equal(a.head.weight, c.head.weight)


def test_learned_table_fails_loudly_past_its_size_and_others_do_not():
    tokens = torch.randint(16, (1, 30), generator=torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match="max_positions=24"):
        _model("learned")(tokens)
    for position in set(POSITION_SCHEMES) - {"learned"}:
        assert torch.isfinite(_model(position)(tokens)).all()


def test_schemes_differ():
    tokens = torch.randint(16, (1, 12), generator=torch.Generator().manual_seed(3))
    outputs = {p: _model(p, seed=0)(tokens) for p in POSITION_SCHEMES}
    assert not torch.allclose(outputs["none"], outputs["rope"])
    assert not torch.allclose(outputs["t5"], outputs["alibi"])


def test_default_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert default_device().type == expected
    assert next(TinyTransformer(8, position="none", dim=8, num_heads=2).parameters()).device.type == expected


@pytest.mark.parametrize(("kwargs", "error", "pattern"), [
    ({"position": "xpos"}, ValueError, "position must be one of"),
    ({"position": "none", "dim": 30, "num_heads": 4}, ValueError, "dim must be divisible by num_heads"),
    ({"position": "rope", "dim": 12, "num_heads": 4}, ValueError, "rope needs an even head dim"),
    ({"position": "none", "num_layers": 0}, ValueError, "num_layers must be >= 1"),
    ({"position": "none", "seed": 1.5}, TypeError, "seed must be an integer"),
])
def test_bad_arguments_raise_clear_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        TinyTransformer(16, device="cpu", **kwargs)


def test_bad_tokens_raise_clear_errors():
    model = _model("none")
    with pytest.raises(ValueError, match=r"tokens must be in \[0, 16\)"):
        model(torch.tensor([[0, 16]]))
    with pytest.raises(TypeError, match="tokens must be int64"):
        model(torch.tensor([[0, 1]], dtype=torch.int32))
    with pytest.raises(ValueError, match="tokens must have 2 dimensions"):
        model(torch.tensor([0, 1]))
