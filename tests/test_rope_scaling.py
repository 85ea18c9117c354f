"""Tests of posenc.rope_scaling: one spec per rope_type, the registry covers transformers' RoPE types,
real models' published RoPE settings reproduce transformers bit for bit (per layer type and pairing
included), config readers for transformers 4 and 5, errors.

transformers is imported lazily (``_tf``), so the tests of the formulas run without it."""

import dataclasses
import math

import pytest
import torch
from lazy_transformers import transformers_attr as _tf

from posenc import (
    EXTENSION_METHODS,
    ROPE_SCALINGS,
    ROPE_TYPES,
    Default,
    DynamicNTK,
    Linear,
    LongRope,
    Proportional,
    RopeScaling,
    RotaryEmbedding,
    Yarn,
    apply_rope,
    extension_settings,
    frequencies,
    rope_cos_sin,
    rope_inv_freq,
    rope_settings,
    rope_spec,
)
from posenc.variants import apply_p_rope, p_rope_inv_freq


def _phi3_factors():
    # Phi-3-mini-128k-instruct publishes 48 short and 48 long factors (head_dim 96). These are NOT the
    # published numbers but lists of the published length and shape: short ~1.0-1.2, long rising
    # monotonically from ~1 to ~60 over the slow pairs.
    short = [1.0 + 0.2 * (i / 47) ** 4 for i in range(48)]
    long = [1.0 + 59.0 * (1 - math.cos(math.pi * i / 94)) for i in range(48)]
    return short, long


_SHORT, _LONG = _phi3_factors()

# (name, config class, rotary class, config.json as published (the RoPE-relevant keys), rotary dim)
MODELS = [
    # lmsys/vicuna-7b-v1.5-16k: a Llama 2 fine-tune with linear position interpolation, legacy "type".
    (
        "vicuna-7b-v1.5-16k (Llama 2, linear)",
        "LlamaConfig",
        "models.llama.modeling_llama.LlamaRotaryEmbedding",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {"factor": 4.0, "type": "linear"},
        },
        128,
    ),
    # meta-llama/Llama-3.1-8B: llama3 frequency-dependent interpolation.
    (
        "Llama-3.1-8B (llama3)",
        "LlamaConfig",
        "models.llama.modeling_llama.LlamaRotaryEmbedding",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
        },
        128,
    ),
    # Qwen/Qwen2.5-7B-Instruct with the YaRN block its model card tells users to add (legacy "type").
    (
        "Qwen2.5-7B-Instruct (yarn)",
        "Qwen2Config",
        "models.qwen2.modeling_qwen2.Qwen2RotaryEmbedding",
        {
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
        },
        128,
    ),
    # deepseek-ai/DeepSeek-V3: YaRN with mscale/mscale_all_dim on the 64 rotary features of each head.
    (
        "DeepSeek-V3 (yarn, mscale)",
        "DeepseekV3Config",
        "models.deepseek_v3.modeling_deepseek_v3.DeepseekV3RotaryEmbedding",
        {
            "model_type": "deepseek_v3",
            "hidden_size": 7168,
            "num_attention_heads": 128,
            "qk_rope_head_dim": 64,
            "max_position_embeddings": 163840,
            "rope_theta": 10000,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
        },
        64,
    ),
    # microsoft/Phi-3-mini-128k-instruct: LongRoPE; original_max_position_embeddings at the top level.
    (
        "Phi-3-mini-128k-instruct (longrope)",
        "Phi3Config",
        "models.phi3.modeling_phi3.Phi3RotaryEmbedding",
        {
            "hidden_size": 3072,
            "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope", "short_factor": _SHORT, "long_factor": _LONG},
        },
        96,
    ),
    # mistralai/Mistral-7B-Instruct-v0.2 (and Qwen2-7B): plain RoPE with base 1e6.
    (
        "Mistral-7B-Instruct-v0.2 (default, theta 1e6)",
        "MistralConfig",
        "models.mistral.modeling_mistral.MistralRotaryEmbedding",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
        },
        128,
    ),
    # A Llama 2 7B config with dynamic NTK, as transformers' docs show it ({"type": "dynamic", "factor": 2.0}).
    (
        "Llama-2-7b + dynamic NTK",
        "LlamaConfig",
        "models.llama.modeling_llama.LlamaRotaryEmbedding",
        {
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "dynamic", "factor": 2.0},
        },
        128,
    ),
    # EleutherAI/gpt-neox-20b: 64 heads of 96, rotary_pct 0.25 -> 24 rotated features (its config.json's names).
    (
        "gpt-neox-20b (partial rotary)",
        "GPTNeoXConfig",
        "models.gpt_neox.modeling_gpt_neox.GPTNeoXRotaryEmbedding",
        {
            "hidden_size": 6144,
            "num_attention_heads": 64,
            "max_position_embeddings": 2048,
            "rotary_emb_base": 10000,
            "rotary_pct": 0.25,
        },
        24,
    ),
]
_IDS = [m[0] for m in MODELS]


class Transformers4Config:
    """A faithful stand-in for a transformers 4.x config: config.json keys become attributes, and
    (like 4.x's Llama/Qwen2/Phi3 configs) a legacy "type" is copied to "rope_type" beside it."""

    def __init__(self, **kwargs):
        kwargs.setdefault("rope_theta", kwargs.get("rotary_emb_base", 10000.0))
        kwargs.setdefault("rope_scaling", None)
        kwargs.setdefault("partial_rotary_factor", kwargs.get("rotary_pct", 1.0))
        for key, value in kwargs.items():
            setattr(self, key, value)
        if self.rope_scaling is not None and "type" in self.rope_scaling:
            self.rope_scaling = {**self.rope_scaling, "rope_type": self.rope_scaling["type"]}


def _transformers5(cls, config_json):
    cls = _tf(cls) if isinstance(cls, str) else cls
    kwargs = {k: v for k, v in config_json.items() if k != "model_type"}
    if "rotary_pct" in kwargs:  # transformers 5 spells GPT-NeoX's settings the new way
        kwargs["rope_theta"], kwargs["partial_rotary_factor"] = kwargs.pop("rotary_emb_base"), kwargs.pop("rotary_pct")
    if kwargs.get("rope_scaling") is None:
        kwargs.pop("rope_scaling", None)
    return cls(**kwargs)


def _head_dim(config_json):
    return config_json.get("qk_rope_head_dim") or config_json["hidden_size"] // config_json["num_attention_heads"]


def test_registry_covers_every_rope_type_of_transformers():
    assert set(ROPE_TYPES) == {"default", *_tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")}


def test_registry_maps_each_rope_type_to_one_frozen_spec_citing_its_source():
    assert tuple(ROPE_SCALINGS) == ROPE_TYPES
    for name, spec_class in ROPE_SCALINGS.items():
        assert spec_class.rope_type == name and issubclass(spec_class, RopeScaling)
        assert dataclasses.is_dataclass(spec_class) and spec_class.__dataclass_params__.frozen, name
        doc = spec_class.__doc__
        assert "arXiv:" in doc or "no paper" in doc.lower(), name  # each cites its source
    with pytest.raises(dataclasses.FrozenInstanceError):
        Linear(factor=2.0).factor = 4.0


def test_specs_and_dicts_are_one_door():
    # a spec, the dict of the same keys and transformers 5's rope_parameters give the same frequencies
    yarn = Yarn(factor=4, original_max_position_embeddings=32768)
    assert RopeScaling.from_dict({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}) == yarn
    assert rope_spec(
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    ) == (
        yarn,
        1e6,
    )
    assert RopeScaling.from_dict(yarn.to_dict()) == yarn
    assert torch.equal(rope_inv_freq(128, base=1e6, scaling=yarn)[0], yarn.inv_freq(128, 1e6))
    assert rope_spec(None) == (Default(), 10000.0)
    # the length-dependent types say so; nothing else does
    assert {t for t, c in ROPE_SCALINGS.items() if c.length_dependent} == {"dynamic", "longrope"}


def test_every_spec_builds_on_the_one_frequency_formula():
    d, base = 64, 5e5
    theta = frequencies(d, base)
    assert torch.equal(Default().inv_freq(d, base), theta)
    assert torch.equal(Linear(factor=4).inv_freq(d, base), theta / 4)
    assert torch.equal(DynamicNTK(factor=2, original_max_position_embeddings=64).inv_freq(d, base, 64), theta)
    assert torch.equal(Default(partial_rotary_factor=0.25).inv_freq(d, base), frequencies(16, base))
    assert torch.equal(Proportional(partial_rotary_factor=0.25).inv_freq(d, base)[:8], theta[:8])


def test_p_rope_is_the_proportional_type_bit_for_bit():
    for d, p, base in ((64, 0.25, 1e4), (128, 0.75, 5e5), (256, 0.25, 1e6), (16, 0.0, 1e4), (16, 1.0, 1e4)):
        spec = Proportional(partial_rotary_factor=p)
        assert torch.equal(p_rope_inv_freq(d, p=p, base=base), spec.inv_freq(d, base))
    x = torch.randn(1, 2, 5, 64, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(5)
    assert torch.equal(
        apply_p_rope(x, pos, p=0.25), apply_rope(x, pos, scaling=Proportional(partial_rotary_factor=0.25))
    )
    with pytest.raises(TypeError, match=r"positions must be a torch\.Tensor, got list"):
        apply_p_rope(x, [0, 1, 2, 3, 4], p=0.25)


@pytest.mark.parametrize(("name", "cls", "rotary_cls", "config_json", "rotary_dim"), MODELS, ids=_IDS)
def test_settings_read_alike_from_config_json_transformers4_and_transformers5(
    name, cls, rotary_cls, config_json, rotary_dim
):
    from_json = rope_settings(config_json)
    from_v5 = rope_settings(_transformers5(cls, config_json))
    from_v4 = rope_settings(Transformers4Config(**config_json))
    assert from_json == from_v5 == from_v4
    assert from_json.rotary_fraction * _head_dim(config_json) == rotary_dim
    assert isinstance(from_json.scaling, RopeScaling) and from_json.head_dim == _head_dim(config_json)


@pytest.mark.parametrize(("name", "cls", "rotary_cls", "config_json", "rotary_dim"), MODELS, ids=_IDS)
def test_published_settings_reproduce_transformers_exactly(name, cls, rotary_cls, config_json, rotary_dim):
    config = _transformers5(cls, config_json)
    base, scaling, _ = rope_settings(config_json)  # what a user copies from config.json
    head_dim = _head_dim(config_json)
    rope_type = scaling.rope_type
    original = getattr(scaling, "original_max_position_embeddings", None) or config.max_position_embeddings
    for seq_len in (None, original // 2, min(4 * original, 2**20)):
        if rope_type == "default":
            theirs, their_scale = _tf(rotary_cls).compute_default_rope_parameters(config)
        else:
            length = None if seq_len is None else torch.tensor(seq_len)  # models pass max(position_ids) + 1
            theirs, their_scale = _tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")[rope_type](
                config, None, seq_len=length
            )
        ours, our_scale = rope_inv_freq(head_dim, base=base, scaling=scaling, seq_len=seq_len)
        assert ours.shape == (rotary_dim // 2,)
        assert torch.equal(ours, theirs), (name, seq_len)
        assert our_scale == pytest.approx(their_scale, rel=1e-12), (name, seq_len)


@pytest.mark.parametrize(("name", "cls", "rotary_cls", "config_json", "rotary_dim"), MODELS, ids=_IDS)
@pytest.mark.parametrize("where", ["start", "beyond the original context"])
def test_published_settings_rotate_like_the_models_rotary_embedding(
    name, cls, rotary_cls, config_json, rotary_dim, where
):
    config = _transformers5(cls, config_json)
    settings = rope_settings(config)  # the 5.x object, as the notebooks read it
    base, scaling, _ = settings
    head_dim = _head_dim(config_json)
    original = getattr(scaling, "original_max_position_embeddings", None) or config.max_position_embeddings
    end = 16 if where == "start" else min(2 * original, config.max_position_embeddings)
    positions = torch.arange(end - 16, end)
    x = torch.randn(1, 2, 16, head_dim, generator=torch.Generator().manual_seed(0))
    cos, sin = _tf(rotary_cls)(config)(x, positions[None])  # (1, s, r), with the attention scale
    inv_freq, scale = rope_inv_freq(head_dim, base=base, scaling=scaling, seq_len=end)  # length: max(positions) + 1
    ours_cos, ours_sin = rope_cos_sin(positions, inv_freq, attention_scale=scale)
    torch.testing.assert_close(torch.cat((ours_cos, ours_cos), -1), cos[0], rtol=0, atol=2e-6)
    torch.testing.assert_close(torch.cat((ours_sin, ours_sin), -1), sin[0], rtol=0, atol=2e-6)
    # and the whole rotation, in the model's own pairing, on the rotated features
    if settings.pairing == "interleaved":  # DeepSeek-V3 (rope_interleave)
        rotation = _tf("models.deepseek_v3.modeling_deepseek_v3.apply_rotary_pos_emb_interleave")
    else:
        rotation = _tf("models.llama.modeling_llama.apply_rotary_pos_emb")
    expected = rotation(x[..., :rotary_dim], x[..., :rotary_dim], cos, sin)[0]
    ours = apply_rope(x, positions, base=base, scaling=scaling, pairing=settings.pairing)
    rotated = ours[..., :rotary_dim]
    if settings.pairing == "interleaved":  # transformers writes DeepSeek's rotated pairs de-interleaved (a', b'):
        rotated = torch.cat((rotated[..., 0::2], rotated[..., 1::2]), dim=-1)  # a fixed permutation, scores unchanged
    torch.testing.assert_close(rotated, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours, RotaryEmbedding.from_settings(settings, max_positions=end)(x, x, positions)[0])


def test_legacy_type_and_rope_theta_inside_the_dict_are_accepted():
    legacy = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    modern = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    a = rope_inv_freq(128, base=1e6, scaling=legacy)
    b = rope_inv_freq(128, scaling=modern)  # base from rope_theta
    c = rope_inv_freq(128, base=1e6, scaling={**modern, "type": "yarn"})  # both keys, agreeing
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0]) and a[1] == b[1] == c[1]
    llama_config = _tf("LlamaConfig")()
    assert torch.equal(rope_inv_freq(64, scaling=llama_config.rope_parameters)[0], rope_inv_freq(64, base=10000.0)[0])


def test_phi3_longrope_switches_factors_at_the_original_length():
    _, scaling, _ = rope_settings(MODELS[4][3])
    assert scaling.original_max_position_embeddings == 4096 and scaling.max_position_embeddings == 131072
    short, scale = rope_inv_freq(96, scaling=scaling, seq_len=4096)
    long, _ = rope_inv_freq(96, scaling=scaling, seq_len=4097)
    theta = rope_inv_freq(96)[0]
    torch.testing.assert_close(short, theta / torch.tensor(_SHORT), rtol=1e-6, atol=0)
    torch.testing.assert_close(long, theta / torch.tensor(_LONG), rtol=1e-6, atol=0)
    assert scale == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


_LONGROPE = {
    "rope_type": "longrope",
    "original_max_position_embeddings": 64,
    "factor": 4.0,
    "short_factor": [1.0] * 4,
    "long_factor": [2.0] * 4,
}


@pytest.mark.parametrize(
    ("scaling", "kwargs", "error", "pattern"),
    [
        ({"rope_type": "ntk"}, {}, ValueError, "rope_type.*must be one of.*got 'ntk'"),
        (
            {"type": "linear", "rope_type": "yarn", "factor": 2},
            {},
            ValueError,
            "scaling\\['type'\\] = 'linear' and scaling\\['rope_type'\\] = 'yarn' disagree",
        ),
        (
            {"rope_type": "default", "rope_theta": 5e5},
            {"base": 1e4},
            ValueError,
            "base=10000 and scaling\\['rope_theta'\\]=500000 disagree",
        ),
        ({"rope_type": "default", "rope_theta": 1.0}, {}, ValueError, "scaling\\['rope_theta'\\] must be > 1"),
        (
            {"rope_type": "default", "rope_theta": "1e4"},
            {},
            TypeError,
            "scaling\\['rope_theta'\\] must be a real number",
        ),
        ({"rope_type": "linear"}, {}, ValueError, "needs the key 'factor'"),
        (
            {"rope_type": "default", "mrope_section": [16, 24, 24], "type": "mrope"},
            {},
            ValueError,
            "Qwen2-VL's multimodal RoPE.*posenc.mrope.apply_mrope",
        ),
        ({"rope_type": "linear", "factor": 0.5}, {}, ValueError, "scaling\\['factor'\\] must be >= 1.*0.5"),
        (
            {"rope_type": "linear", "factor": float("nan")},
            {},
            ValueError,
            "scaling\\['factor'\\] must be finite, got nan",
        ),
        ({"rope_type": "linear", "factor": True}, {}, TypeError, "scaling\\['factor'\\] must be a real number"),
        ({"rope_type": "linear", "factr": 2}, {}, ValueError, "unknown key\\(s\\) \\['factr'\\]"),
        (
            {"rope_type": "dynamic", "factor": 2.0},
            {},
            ValueError,
            "needs scaling\\['original_max_position_embeddings'\\]",
        ),
        (
            {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64},
            {"head_dim": 2},
            ValueError,
            "head_dim > 2",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1.5},
            {},
            TypeError,
            "original_max_position_embeddings'\\] must be an integer",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "truncate": "no"},
            {},
            TypeError,
            "scaling\\['truncate'\\] must be a bool, got 'no'",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "beta_fast": 1, "beta_slow": 2},
            {},
            ValueError,
            "beta_fast'\\] must be >= beta_slow, got 1 < 2",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64, "mscale": -1},
            {},
            ValueError,
            "scaling\\['mscale'\\] must be > 0",
        ),
        (
            {
                "rope_type": "llama3",
                "factor": 8,
                "original_max_position_embeddings": 8192,
                "low_freq_factor": 4,
                "high_freq_factor": 1,
            },
            {},
            ValueError,
            "high_freq_factor'\\] must be >= low_freq_factor, got 1 < 4",
        ),
        (
            {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 8192, "low_freq_factor": 1},
            {},
            ValueError,
            "needs the key 'high_freq_factor'",
        ),
        (
            {**_LONGROPE, "short_factor": [1.0] * 3},
            {},
            ValueError,
            "scaling\\['short_factor'\\] must have head_dim/2 = 4 entries, got 3",
        ),
        ({**_LONGROPE, "long_factor": 2.0}, {}, TypeError, "scaling\\['long_factor'\\] must be a list"),
        ({**_LONGROPE, "short_mscale": 1.2}, {}, ValueError, "both 'short_mscale' and 'long_mscale' or neither"),
        (
            {**_LONGROPE, "long_factor": [2.0, 2.0, 0.0, 2.0]},
            {},
            ValueError,
            "scaling\\['long_factor'\\]\\[2\\] must be > 0",
        ),
        (
            {k: v for k, v in _LONGROPE.items() if k != "factor"},
            {},
            ValueError,
            "longrope' needs scaling\\['factor'\\], scaling\\['attention_factor'\\] or",
        ),
        (
            {"rope_type": "default", "partial_rotary_factor": 1.5},
            {},
            ValueError,
            "partial_rotary_factor'\\] must be in \\(0, 1\\], got 1.5",
        ),
        (
            {"rope_type": "default", "partial_rotary_factor": 0.4},
            {},
            ValueError,
            "8 \\* 0.4 must be an even rotary dimension >= 2, got 3",
        ),
    ],
)
def test_bad_scalings_raise_errors_that_name_the_key(scaling, kwargs, error, pattern):
    head_dim = kwargs.pop("head_dim", 8)
    with pytest.raises(error, match=pattern):
        rope_inv_freq(head_dim, scaling=scaling, **kwargs)


@pytest.mark.parametrize(
    ("config", "error", "pattern"),
    [
        ("llama", TypeError, "config must be a transformers config or a config.json dict"),
        ({"rope_scaling": {"type": "linear", "rope_type": "yarn", "factor": 2.0}}, ValueError, "disagree"),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "default"},
                    "sliding_attention": {"rope_type": "default"},
                }
            },
            ValueError,
            "per layer type \\['full_attention', 'sliding_attention'\\].*pass layer_type=",
        ),
        ({"rope_theta": 0.5}, ValueError, "rope_theta must be > 1"),
        (
            {"hidden_size": 64, "num_attention_heads": 8, "rope_scaling": {"type": "linear", "factor": 0.5}},
            ValueError,
            "factor'\\] must be >= 1",
        ),
    ],
)
def test_bad_configs_raise_clear_errors(config, error, pattern):
    with pytest.raises(error, match=pattern):
        rope_settings(config)


def test_rope_settings_reads_gptj_rotary_dim_as_a_fraction():
    # GPT-J-6B rotates rotary_dim = 64 of its 4096 / 16 = 256 features per head (config.json keys n_embd, n_head).
    published = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}
    for config in (published, _tf("GPTJConfig")()):
        settings = rope_settings(config)
        assert settings.rotary_fraction == 64 / 256
        assert settings.scaling.partial_rotary_factor == 64 / 256
    with pytest.raises(ValueError, match="rotary_dim must be <= the head dimension 256, got 512"):
        rope_settings({**published, "rotary_dim": 512})
    with pytest.raises(ValueError, match=r"rotary_dim = 64 and partial_rotary_factor = 0\.5 disagree"):
        rope_settings({**published, "partial_rotary_factor": 0.5})


def test_rope_settings_reads_early_phi3_su_as_longrope_and_names_a_bad_rope_scaling():
    factors = [1.0] * 48
    su = {"type": "su", "short_factor": factors, "long_factor": factors}
    config = {"rope_scaling": su, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096}
    assert rope_settings(config).scaling.rope_type == "longrope"
    with pytest.raises(TypeError, match="rope_parameters / rope_scaling must be a dict or None, got list"):
        rope_settings({"rope_scaling": [1, 2]})


# ---- 2024-2026 configs: per-layer types, pairing, and what transformers accepts ---------------------

# google/gemma-3-27b-it and google/gemma-3-4b-it: text_config as published (RoPE-relevant keys); the
# bases are transformers' defaults, which these config.json files leave implicit (global 1e6, local 1e4).
GEMMA3 = {
    "27B": {"model_type": "gemma3_text", "hidden_size": 5376, "num_attention_heads": 32, "head_dim": 128},
    "4B": {"model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256},
}
for _c in GEMMA3.values():
    _c.update(
        max_position_embeddings=131072,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
    )
# answerdotai/ModernBERT-base
MODERNBERT = {
    "model_type": "modernbert",
    "hidden_size": 768,
    "num_attention_heads": 12,
    "max_position_embeddings": 8192,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0,
    "global_attn_every_n_layers": 3,
}


def _their_per_layer_cos_sin(config, rotary_path, layer_type, x, positions):
    return _tf(rotary_path)(config)(x, positions[None], layer_type)  # (1, s, d) each


@pytest.mark.parametrize("size", sorted(GEMMA3))
@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_gemma3_reads_each_layer_types_base_and_scaling(size, layer_type):
    published = {"model_type": "gemma3", "text_config": GEMMA3[size]}  # the multimodal wrapper's config.json
    with pytest.raises(ValueError, match=r"per layer type \['full_attention', 'sliding_attention'\]"):
        rope_settings(published)
    settings = rope_settings(published, layer_type=layer_type)
    expected = (10000.0, Default()) if layer_type == "sliding_attention" else (1e6, Linear(factor=8.0))
    assert (settings.base, settings.scaling) == expected and settings.layer_type == layer_type
    config = _tf("Gemma3TextConfig")(**{k: v for k, v in GEMMA3[size].items() if k != "model_type"})
    assert rope_settings(config, layer_type=layer_type) == settings  # transformers 5's object reads alike
    d = GEMMA3[size]["head_dim"]
    x, positions = torch.randn(1, 2, 8, d, generator=torch.Generator().manual_seed(0)), torch.arange(5000, 5008)
    cos, sin = _their_per_layer_cos_sin(
        config, "models.gemma3.modeling_gemma3.Gemma3RotaryEmbedding", layer_type, x, positions
    )
    expected = _tf("models.gemma3.modeling_gemma3.apply_rotary_pos_emb")(x, x, cos, sin)[0]
    ours = apply_rope(x, positions, base=settings.base, scaling=settings.scaling, pairing=settings.pairing)
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-6)


@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_modernbert_reads_its_local_and_global_bases(layer_type):
    settings = rope_settings(MODERNBERT, layer_type=layer_type)
    assert settings.base == (160000.0 if layer_type == "full_attention" else 10000.0)
    config = _tf("ModernBertConfig")(**{k: v for k, v in MODERNBERT.items() if k != "model_type"})
    assert rope_settings(config, layer_type=layer_type) == settings
    with pytest.raises(ValueError, match="pass layer_type="):
        rope_settings(config)
    x, positions = torch.randn(1, 2, 8, 64, generator=torch.Generator().manual_seed(0)), torch.arange(8)
    cos, sin = _their_per_layer_cos_sin(
        config, "models.modernbert.modeling_modernbert.ModernBertRotaryEmbedding", layer_type, x, positions
    )
    expected = _tf("models.modernbert.modeling_modernbert.apply_rotary_pos_emb")(x, x, cos, sin)[0]
    torch.testing.assert_close(apply_rope(x, positions, base=settings.base), expected, rtol=0, atol=2e-6)


@pytest.mark.parametrize("layer_type", ["sliding_attention", "full_attention"])
def test_gemma4_reads_proportional_rope_and_the_global_head_dim(layer_type):
    config = _tf("Gemma4TextConfig")()  # transformers' defaults: the layout of Gemma 4's published configs
    settings = rope_settings(config, layer_type=layer_type)
    published = {  # config.json spelling of the same settings
        "model_type": "gemma4_text",
        "head_dim": 256,
        "global_head_dim": 512,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    }
    assert rope_settings(published, layer_type=layer_type) == settings
    if layer_type == "full_attention":
        assert (settings.base, settings.scaling, settings.head_dim) == (
            1e6,
            Proportional(partial_rotary_factor=0.25),
            512,
        )
    else:
        assert (settings.base, settings.scaling, settings.head_dim) == (1e4, Default(), 256)
    d = settings.head_dim
    x, positions = torch.randn(1, 2, 8, d, generator=torch.Generator().manual_seed(0)), torch.arange(100, 108)
    rotary = _tf("models.gemma4.modeling_gemma4.Gemma4TextRotaryEmbedding")(config)
    cos, sin = rotary(x, positions[None], layer_type)
    expected = _tf("models.gemma4.modeling_gemma4.apply_rotary_pos_emb")(x, cos, sin, unsqueeze_dim=1)
    ours = RotaryEmbedding.from_settings(settings, max_positions=128)(x, x, positions)[0]
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-6)


def test_llama4_scout_llama3_scaling_with_equal_frequency_factors():
    # meta-llama/Llama-4-Scout-17B-16E: high_freq_factor == low_freq_factor, a hard switch between the bands.
    published = {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "head_dim": 128,
        "max_position_embeddings": 10485760,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 16.0,
            "high_freq_factor": 1.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    }
    base, scaling, _ = rope_settings(published)
    config = _transformers5("Llama4TextConfig", {k: v for k, v in published.items() if k != "model_type"})
    theirs, their_scale = _tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")["llama3"](config, None)
    ours, our_scale = rope_inv_freq(128, base=base, scaling=scaling)
    assert torch.equal(ours, theirs) and our_scale == their_scale
    theta = frequencies(128, base)
    long_wave = 2 * math.pi / theta > 8192  # the switch: these pairs are interpolated, the others keep theta
    assert long_wave.any() and (~long_wave).any()
    assert torch.equal(ours, torch.where(long_wave, theta / 16, theta))


def test_kimi_k2_yarn_with_equal_betas():
    # moonshotai/Kimi-K2-Instruct-0905 (DeepSeek-V3 architecture): beta_fast == beta_slow == 1.
    published = {
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "qk_rope_head_dim": 64,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "factor": 64.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "type": "yarn",
        },
    }
    settings = rope_settings(published)
    assert settings.pairing == "interleaved" and settings.head_dim == 64
    config = _transformers5("DeepseekV3Config", {k: v for k, v in published.items() if k != "model_type"})
    theirs, their_scale = _tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")["yarn"](config, None)
    ours, our_scale = rope_inv_freq(64, base=settings.base, scaling=settings.scaling)
    assert torch.equal(ours, theirs) and our_scale == their_scale == 1.0


@pytest.mark.parametrize(("mscale", "mscale_all_dim"), [(0.707, 0), (0, 0.707), (0.707, 0.707), (1.0, 0.0)])
def test_yarn_mscale_zero_means_absent_as_in_transformers(mscale, mscale_all_dim):
    scaling = {
        "rope_type": "yarn",
        "factor": 40.0,
        "original_max_position_embeddings": 4096,
        "mscale": mscale,
        "mscale_all_dim": mscale_all_dim,
    }
    config = _transformers5(
        "DeepseekV3Config",
        {"hidden_size": 1024, "num_attention_heads": 16, "qk_rope_head_dim": 64, "rope_scaling": scaling},
    )
    theirs, their_scale = _tf("modeling_rope_utils.ROPE_INIT_FUNCTIONS")["yarn"](config, None)
    ours, our_scale = rope_inv_freq(64, scaling=scaling)
    assert torch.equal(ours, theirs) and our_scale == pytest.approx(their_scale, rel=1e-12)
    if 0 in (mscale, mscale_all_dim):
        assert our_scale == pytest.approx(0.1 * math.log(40.0) + 1.0)  # the paper's default temperature


def _phimoe_published():
    # microsoft/Phi-3.5-MoE-instruct: head_dim 4096 / 32 = 128, 64 factors per list. The factor lists here
    # have the published length and shape but are not the published numbers; the mscale is the
    # published value as we remember it (not verified against the file).
    short = [1.0 + 0.05 * (i / 63) ** 2 for i in range(64)]
    long = [1.0 + 40.0 * (1 - math.cos(math.pi * i / 126)) for i in range(64)]
    return {
        "model_type": "phimoe",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": short,
            "long_factor": long,
            "short_mscale": 1.243163121016122,
            "long_mscale": 1.243163121016122,
            "original_max_position_embeddings": 4096,
        },
    }


def test_phi35_moe_longrope_with_mscales_matches_transformers_up_to_the_original_context():
    published = _phimoe_published()
    settings = rope_settings(published)
    assert isinstance(settings.scaling, LongRope) and settings.scaling.short_mscale == 1.243163121016122
    config = _transformers5("PhimoeConfig", {k: v for k, v in published.items() if k != "model_type"})
    rotary = _tf("models.phimoe.modeling_phimoe.PhimoeRotaryEmbedding")(config)
    x = torch.randn(1, 2, 8, 128, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(4088, 4096)  # up to L_0: short factors, short_mscale
    cos, sin = rotary(x, positions[None])
    inv_freq, scale = rope_inv_freq(128, base=settings.base, scaling=settings.scaling, seq_len=4096)
    ours_cos, ours_sin = rope_cos_sin(positions, inv_freq, attention_scale=scale)
    assert scale == 1.243163121016122
    torch.testing.assert_close(torch.cat((ours_cos, ours_cos), -1), cos[0], rtol=0, atol=2e-6)
    torch.testing.assert_close(torch.cat((ours_sin, ours_sin), -1), sin[0], rtol=0, atol=2e-6)


def test_phi35_moe_past_the_original_context_follows_the_longrope_formula():
    # transformers 5.23's PhimoeRotaryEmbedding keeps the short factors past L_0 (its forward recomputes
    # the frequencies without the length); posenc follows the formula: long factors and long_mscale.
    published = _phimoe_published()
    scaling = rope_settings(published).scaling
    inv_freq, scale = rope_inv_freq(128, scaling=scaling, seq_len=4097)
    long = torch.tensor(published["rope_scaling"]["long_factor"])
    torch.testing.assert_close(inv_freq, frequencies(128, 10000.0) / long, rtol=1e-6, atol=0)
    assert scale == published["rope_scaling"]["long_mscale"]


@pytest.mark.parametrize(
    ("config", "rotation", "rotary_dim"),
    [
        # EleutherAI/gpt-j-6b: rotate_every_two on the first rotary_dim = 64 of 256 features
        ({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}, "gptj", 64),
        # THUDM/glm-4-9b-hf: interleaved pairs on half of each head
        (
            {
                "model_type": "glm",
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "head_dim": 128,
                "partial_rotary_factor": 0.5,
            },
            "glm",
            64,
        ),
        # CohereForAI/c4ai-command-r-v01: interleaved pairs, whole head
        (
            {"model_type": "cohere", "hidden_size": 8192, "num_attention_heads": 64, "rope_theta": 8000000.0},
            "cohere",
            128,
        ),
    ],
    ids=["gpt-j", "glm", "cohere"],
)
def test_pairing_is_read_from_the_model_family(config, rotation, rotary_dim):
    settings = rope_settings(config)
    assert settings.pairing == "interleaved"
    d = settings.head_dim
    x, positions = torch.randn(1, 2, 6, d, generator=torch.Generator().manual_seed(0)), torch.arange(20, 26)
    theta = rope_inv_freq(d, base=settings.base, scaling=settings.scaling)[0]  # (r/2,)
    angles = positions[:, None].float() * theta  # (s, r/2)
    if rotation == "gptj":
        sincos = torch.cat((angles.sin(), angles.cos()), -1)[None]  # GPT-J's embed_positions layout
        sin, cos = torch.split(sincos, rotary_dim // 2, dim=-1)
        xt = x.transpose(1, 2)  # GPT-J rotates (b, s, h, d)
        module = _tf("models.gptj.modeling_gptj")
        expected = torch.cat((module.apply_rotary_pos_emb(xt[..., :rotary_dim], sin, cos), xt[..., rotary_dim:]), -1)
        expected = expected.transpose(1, 2)
    else:
        # (1, s, r): what their rotary embedding returns (Cohere repeats each angle, GLM concatenates)
        emb = (angles.repeat_interleave(2, -1) if rotation == "cohere" else torch.cat((angles, angles), -1))[None]
        module = _tf(f"models.{rotation}.modeling_{rotation}")
        expected = module.apply_rotary_pos_emb(x, x, emb.cos(), emb.sin())[0]
    ours = apply_rope(x, positions, base=settings.base, scaling=settings.scaling, pairing=settings.pairing)
    torch.testing.assert_close(ours, expected, rtol=0, atol=2e-6)


def test_deepseek_v3_reads_rope_interleave():
    assert rope_settings(_tf("DeepseekV3Config")()).pairing == "interleaved"  # transformers' default: True
    assert rope_settings(_tf("DeepseekV3Config")(rope_interleave=False)).pairing == "half"
    assert rope_settings({"model_type": "deepseek_v3"}).pairing == "interleaved"
    assert rope_settings({"model_type": "llama"}).pairing == rope_settings({}).pairing == "half"


def test_qwen2_vl_points_to_mrope_instead_of_a_disagreement():
    published = {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    config = _transformers5("Qwen2VLTextConfig", {k: v for k, v in published.items() if k != "model_type"})
    assert config.rope_parameters["type"] == "mrope" and config.rope_parameters["rope_type"] == "default"
    for source in (published, config, _tf("Qwen2VLConfig")(text_config=config.to_dict())):
        with pytest.raises(ValueError, match=r"multimodal RoPE.*posenc\.mrope\.apply_mrope") as caught:
            rope_settings(source)
        assert "disagree" not in str(caught.value)


def test_layer_type_errors_name_the_choices():
    with pytest.raises(
        ValueError, match=r"layer_type must be one of \['full_attention', 'sliding_attention'\], got 'x'"
    ):
        rope_settings(MODERNBERT, layer_type="x")
    with pytest.raises(ValueError, match="one RoPE setting for all layers"):
        rope_settings({"rope_theta": 1e4}, layer_type="full_attention")
    with pytest.raises(TypeError, match="layer_type must be a str or None, got 3"):
        rope_settings(MODERNBERT, layer_type=3)


def test_settings_unpack_as_the_triple_of_posenc_1_0():
    base, scaling, fraction = rope_settings({"rope_theta": 5e5, "rope_scaling": {"rope_type": "linear", "factor": 2}})
    assert (base, scaling, fraction) == (5e5, Linear(factor=2.0), 1.0)


@pytest.mark.parametrize("model_type", ["llama4_text", "llama4"])
def test_llama4_rotates_neighbouring_pairs_as_transformers_does(model_type):
    # transformers' Llama 4 views (2i, 2i + 1) as one complex number (apply_rotary_emb): interleaved pairing.
    published = {"model_type": model_type, "head_dim": 128, "rope_theta": 500000.0}
    assert rope_settings(published).pairing == "interleaved"
    llama4 = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    config = llama4.Llama4TextConfig(head_dim=128, num_attention_heads=2, hidden_size=256, rope_theta=500000.0)
    settings = rope_settings(config)
    assert settings.pairing == "interleaved"
    x = torch.randn(1, 4, 2, 128, generator=torch.Generator().manual_seed(0))  # (b, s, h, d), Llama 4's layout
    positions = torch.arange(100, 104)
    freqs_cis = llama4.Llama4TextRotaryEmbedding(config)(x, positions[None])  # (1, s, d/2) complex
    theirs, _ = llama4.apply_rotary_emb(x, x, freqs_cis)
    ours = apply_rope(x.transpose(1, 2), positions, base=settings.base, scaling=settings.scaling, pairing="interleaved")
    torch.testing.assert_close(ours.transpose(1, 2), theirs, rtol=0, atol=2e-5)


# ---- extension_settings: the context-extension recipes of chapters 10 and 13 --------------------------


def test_extension_settings_give_each_methods_published_recipe():
    def settings(method, factor=4.0):
        return extension_settings(method, factor, base=100.0, head_dim=16, original_max_position_embeddings=32)

    original = {"original_max_position_embeddings": 32}
    assert EXTENSION_METHODS == ("none", "PI", "NTK", "dynamic NTK", "YaRN", "YaRN, no tau", "Llama 3")
    assert settings("none") == (None, 100.0)
    assert settings("PI") == ({"rope_type": "linear", "factor": 4.0}, 100.0)
    scaling, base = settings("NTK")
    assert scaling is None and base == pytest.approx(100.0 * 4.0 ** (16 / 14))
    assert settings("dynamic NTK") == ({"rope_type": "dynamic", "factor": 1.0, **original}, 100.0)
    assert settings("YaRN") == ({"rope_type": "yarn", "factor": 4.0, **original}, 100.0)
    assert settings("YaRN, no tau") == (
        {"rope_type": "yarn", "factor": 4.0, **original, "attention_factor": 1.0},
        100.0,
    )
    bands = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert settings("Llama 3") == ({"rope_type": "llama3", "factor": 4.0, **original, **bands}, 100.0)


def test_extension_settings_build_valid_scalings_whose_frequencies_follow_each_rule():
    theta = rope_inv_freq(16, base=100.0)[0]
    for method in EXTENSION_METHODS:
        scaling, base = extension_settings(method, 4, base=100.0, head_dim=16, original_max_position_embeddings=32)
        inv_freq, _ = rope_inv_freq(16, base=base, scaling=scaling, seq_len=128)
        ratio = inv_freq / theta  # (8,)
        if method == "none":
            assert torch.equal(ratio, torch.ones(8))
        elif method == "PI":
            torch.testing.assert_close(ratio, torch.full((8,), 0.25))
        elif method in ("NTK", "dynamic NTK"):  # at L = 4 L_0 dynamic NTK is NTK; the fastest pair is kept
            assert ratio[0] == 1 and (ratio[1:] < 1).all() and ratio[-1] == pytest.approx(0.25, rel=1e-5)
        else:  # YaRN and Llama 3 keep the fastest pair and interpolate the slow ones by 1/4
            assert ratio[0] == 1 and torch.allclose(ratio[3:], torch.tensor(0.25))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"method": "ntk"}, "method must be one of"),
        ({"factor": 0.5}, "factor must be >= 1"),
        ({"factor": "2"}, "factor"),
        ({"base": 1.0}, "base"),
        ({"head_dim": 15}, "head_dim must be even, got 15"),
        ({"original_max_position_embeddings": 0}, "original_max_position_embeddings"),
    ],
)
def test_extension_settings_refuse_bad_arguments(arguments, message):
    call = {"method": "PI", "factor": 2, "base": 100.0, "head_dim": 16, "original_max_position_embeddings": 32}
    call.update(arguments)
    method = call.pop("method")
    factor = call.pop("factor")
    with pytest.raises((TypeError, ValueError), match=message):
        extension_settings(method, factor, **call)
