"""Tests of posenc.mrope: M-RoPE against transformers' Qwen2-VL (sectioned) and Qwen3-VL (interleaved),
text tokens reduce to 1D RoPE, each axis relative on its own (2D RoPE and M-RoPE), a decode step equals
the last row, the exact-position limit of each dtype, and clear errors."""

import pytest
import torch

from posenc import Linear, apply_rope
from posenc.mrope import (
    QWEN2VL_MROPE_SECTION,
    QWEN3VL_MROPE_SECTION,
    apply_mrope,
    apply_rope_2d,
    mrope_axes,
    mrope_cos_sin,
)

SECTIONS = (2, 3, 3)  # 8 pairs, head dim 16


def _x(b=2, h=3, s=10, d=16, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, s, d, generator=gen, dtype=torch.float64).to(dtype)


def _grid_positions(s=10, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50, (3, s), generator=gen)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_text_tokens_reduce_to_1d_rope(dtype):
    x, pos = _x(dtype=dtype), torch.arange(5, 15)
    same = torch.stack((pos, pos, pos))  # (3, s): t = h = w for text tokens
    assert torch.equal(apply_mrope(x, same, sections=SECTIONS), apply_rope(x, pos))
    d128 = _x(s=4, d=128, dtype=dtype)
    pos = torch.tensor([0, 7, 300, 9000])
    out = apply_mrope(d128, torch.stack((pos,) * 3), sections=QWEN2VL_MROPE_SECTION)
    assert torch.equal(out, apply_rope(d128, pos))


def test_each_pair_reads_its_sections_axis():
    pos = _grid_positions()
    inv_freq = torch.rand(8, dtype=torch.float64)
    cos, _ = mrope_cos_sin(pos, inv_freq, SECTIONS, dtype=torch.float64)  # (s, 8)
    axis = [0, 0, 1, 1, 1, 2, 2, 2]
    for i, a in enumerate(axis):
        assert torch.allclose(cos[:, i], torch.cos(pos[a].double() * inv_freq[i]))


def test_score_depends_on_the_differences_axis_by_axis():
    q, k = _x(s=1), _x(s=1, seed=1)
    shift = torch.tensor([[3], [5], [11]])
    m, n = torch.tensor([[2], [4], [6]]), torch.tensor([[9], [1], [0]])

    def score(a, b):
        return (apply_mrope(q, a, sections=SECTIONS) * apply_mrope(k, b, sections=SECTIONS)).sum()

    assert torch.allclose(score(m, n), score(m + shift, n + shift))
    moved = n + torch.tensor([[0], [0], [1]])  # one step along the width axis changes the score
    assert not torch.allclose(score(m, n), score(m, moved))


def test_rope_2d_is_relative_in_rows_and_cols_and_matches_mrope_layout():
    q, k = _x(s=1), _x(s=1, seed=1)

    def score(rm, cm, rn, cn):
        t = torch.tensor
        qa = apply_rope_2d(q, t([rm]), t([cm]))
        ka = apply_rope_2d(k, t([rn]), t([cn]))
        return (qa * ka).sum()

    assert torch.allclose(score(1, 2, 3, 7), score(11, 22, 13, 27))
    assert not torch.allclose(score(1, 2, 3, 7), score(1, 2, 7, 3))  # rows and columns are not mixed up
    # rows only: the first d/4 pairs turn like a d/2-dimensional RoPE; the columns' pairs stand still
    x, rows = _x(), torch.arange(10)
    out = apply_rope_2d(x, rows, torch.zeros(10, dtype=torch.long))
    quarter = x.shape[-1] // 4
    first = torch.cat((x[..., :quarter], x[..., 2 * quarter : 3 * quarter]), dim=-1)  # pairs j < d/4
    ref = apply_rope(first, rows)
    assert torch.allclose(out[..., :quarter], ref[..., :quarter])
    assert torch.allclose(out[..., 2 * quarter : 3 * quarter], ref[..., quarter:])
    assert torch.equal(out[..., quarter : 2 * quarter], x[..., quarter : 2 * quarter])


def test_decode_step_equals_last_row_of_the_full_pass():
    x, pos = _x(), _grid_positions()
    full = apply_mrope(x, pos, sections=SECTIONS)
    step = apply_mrope(x[:, :, -1:], pos[:, -1:], sections=SECTIONS)
    assert torch.equal(step, full[:, :, -1:])


def test_batched_positions_match_one_sequence_at_a_time():
    x = _x(b=2)
    pos = torch.stack((_grid_positions(seed=2), _grid_positions(seed=3)), dim=1)  # (3, b, s)
    out = apply_mrope(x, pos, sections=SECTIONS)
    for i in range(2):
        assert torch.equal(out[i : i + 1], apply_mrope(x[i : i + 1], pos[:, i], sections=SECTIONS))


def test_matches_transformers_qwen2_vl():
    pytest.importorskip("transformers")
    qwen = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig

    d, heads = 16, 2
    config = Qwen2VLTextConfig(
        hidden_size=d * heads,
        num_attention_heads=heads,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(SECTIONS)},
    )
    rotary = qwen.Qwen2VLRotaryEmbedding(config)
    q, k = _x(b=1, h=heads, dtype=torch.float32), _x(b=1, h=heads, dtype=torch.float32, seed=4)
    pos = _grid_positions()[:, None]  # (3, b, s)
    cos, sin = rotary(q, pos)
    q_ref, k_ref = qwen.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_mrope(q, pos, sections=SECTIONS), q_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(apply_mrope(k, pos, sections=SECTIONS), k_ref, rtol=1e-6, atol=1e-6)


def test_interleaved_layout_is_qwen3_vls_axis_map():
    axes = mrope_axes(QWEN3VL_MROPE_SECTION, "interleaved").tolist()
    assert len(axes) == 64 and axes[:6] == [0, 1, 2, 0, 1, 2] and axes[60:] == [0, 0, 0, 0]
    assert [axes.count(a) for a in range(3)] == [24, 20, 20]  # mrope_section counts pairs per axis
    assert mrope_axes(QWEN2VL_MROPE_SECTION).tolist() == [0] * 16 + [1] * 24 + [2] * 24


@pytest.mark.parametrize("layout", ["sectioned", "interleaved"])
def test_text_tokens_reduce_to_1d_rope_in_both_layouts(layout):
    x, pos = _x(d=128, s=4), torch.tensor([0, 7, 300, 9000])
    out = apply_mrope(x, torch.stack((pos,) * 3), sections=QWEN3VL_MROPE_SECTION, layout=layout, base=5e6)
    assert torch.equal(out, apply_rope(x, pos, base=5e6))


def test_matches_transformers_qwen3_vl_interleaved():
    qwen3 = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

    d, heads = 128, 2  # Qwen3-VL's head dim, mrope_section [24, 20, 20], rope_theta 5e6
    config = Qwen3VLTextConfig(
        hidden_size=d * heads,
        num_attention_heads=heads,
        head_dim=d,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": list(QWEN3VL_MROPE_SECTION),
            "mrope_interleaved": True,
        },
    )
    rotary = qwen3.Qwen3VLTextRotaryEmbedding(config)
    q, k = _x(b=1, h=heads, d=d, dtype=torch.float32), _x(b=1, h=heads, d=d, dtype=torch.float32, seed=4)
    pos = _grid_positions()[:, None]  # (3, b, s): distinct t, h, w
    cos, sin = rotary(q, pos)
    q_ref, k_ref = qwen3.apply_rotary_pos_emb(q, k, cos, sin)
    for x, ref in ((q, q_ref), (k, k_ref)):
        ours = apply_mrope(x, pos, sections=QWEN3VL_MROPE_SECTION, base=5e6, layout="interleaved")
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
        sectioned = apply_mrope(x, pos, sections=QWEN3VL_MROPE_SECTION, base=5e6)
        assert not torch.allclose(sectioned, ref, atol=1e-3)  # the layout matters


def test_exact_position_limit_follows_the_dtype():
    x64, x32 = _x(s=1), _x(s=1, dtype=torch.float32)
    far = torch.full((3, 1), 2**24 + 1)  # exact in float64 angles, not in float32 ones
    out = apply_mrope(x64, far, sections=SECTIONS)
    assert torch.equal(out, apply_rope(x64, far[0]))
    with pytest.raises(ValueError, match=r"2\*\*24 = 16777216 to be exact in torch.float32"):
        apply_mrope(x32, far, sections=SECTIONS)
    with pytest.raises(ValueError, match=r"2\*\*53 = .* to be exact in torch.float64"):
        apply_mrope(x64, torch.full((3, 1), 2**53 + 1), sections=SECTIONS)


def test_takes_a_rope_scaling_spec():
    x, pos = _x(), torch.arange(5, 15)
    same = torch.stack((pos, pos, pos))
    spec = Linear(factor=4.0)
    assert torch.equal(apply_mrope(x, same, sections=SECTIONS, scaling=spec), apply_rope(x, pos, scaling=spec))
    with pytest.raises(ValueError, match="M-RoPE rotates the whole head"):
        apply_mrope(x, same, sections=SECTIONS, scaling={"rope_type": "default", "partial_rotary_factor": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"layout": "zigzag"}, ValueError, "layout must be one of"),
        ({"layout": "interleaved", "sections": (4, 4)}, ValueError, "three axes"),
        ({"sections": (2, 3)}, ValueError, "add up"),
        ({"sections": (2, 3, 3, 0)}, ValueError, "sections"),
        ({"sections": "233"}, TypeError, "sections"),
        ({"positions": torch.zeros(2, 10, dtype=torch.long)}, ValueError, "positions must be"),
        ({"positions": torch.zeros(3, 10)}, TypeError, "positions"),
        ({"positions": -torch.ones(3, 10, dtype=torch.long)}, ValueError, ">= 0"),
        ({"base": 1.0}, ValueError, "base"),
        ({"x": torch.zeros(10, 16)}, ValueError, "x must have 4"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(kwargs, error, match):
    args = {"x": _x(), "positions": _grid_positions(), "sections": SECTIONS, "base": 10000.0} | kwargs
    x, positions = args.pop("x"), args.pop("positions")
    with pytest.raises(error, match=match):
        apply_mrope(x, positions, **args)


def test_rope_2d_bad_inputs():
    with pytest.raises(ValueError, match="divisible by 4"):
        apply_rope_2d(_x(d=6), torch.arange(10), torch.arange(10))
    with pytest.raises(ValueError, match="one shape"):
        apply_rope_2d(_x(), torch.arange(10), torch.arange(9))
    with pytest.raises(TypeError, match="cols"):
        apply_rope_2d(_x(), torch.arange(10), torch.zeros(10))
