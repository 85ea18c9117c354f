"""Tests of posenc.rope_scaling: the registry covers transformers' RoPE types, real models' published
RoPE settings reproduce transformers bit for bit, config readers for transformers 4 and 5, errors."""

import math

import pytest
import torch
from transformers import DeepseekV3Config, GPTNeoXConfig, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek_v3
from transformers.models.gpt_neox import modeling_gpt_neox as gpt_neox
from transformers.models.llama import modeling_llama as llama
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen2 import modeling_qwen2 as qwen2

from posenc import ROPE_SCALINGS, ROPE_TYPES, apply_rope, rope_cos_sin, rope_inv_freq, rope_settings
from posenc.rope_scaling import _CHECKS


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
        LlamaConfig,
        llama.LlamaRotaryEmbedding,
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
        LlamaConfig,
        llama.LlamaRotaryEmbedding,
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
        Qwen2Config,
        qwen2.Qwen2RotaryEmbedding,
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
        DeepseekV3Config,
        deepseek_v3.DeepseekV3RotaryEmbedding,
        {
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
        Phi3Config,
        phi3.Phi3RotaryEmbedding,
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
        MistralConfig,
        mistral.MistralRotaryEmbedding,
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
        LlamaConfig,
        llama.LlamaRotaryEmbedding,
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
        GPTNeoXConfig,
        gpt_neox.GPTNeoXRotaryEmbedding,
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
    kwargs = dict(config_json)
    if "rotary_pct" in kwargs:  # transformers 5 spells GPT-NeoX's settings the new way
        kwargs["rope_theta"], kwargs["partial_rotary_factor"] = kwargs.pop("rotary_emb_base"), kwargs.pop("rotary_pct")
    if kwargs.get("rope_scaling") is None:
        kwargs.pop("rope_scaling", None)
    return cls(**kwargs)


def _head_dim(config_json):
    return config_json.get("qk_rope_head_dim") or config_json["hidden_size"] // config_json["num_attention_heads"]


def test_registry_covers_every_rope_type_of_transformers():
    assert set(ROPE_TYPES) == {"default", *ROPE_INIT_FUNCTIONS}
    assert tuple(ROPE_SCALINGS) == ROPE_TYPES and set(_CHECKS) == set(ROPE_SCALINGS)
    for name, formula in ROPE_SCALINGS.items():
        assert "arXiv:" in formula.__doc__ or "no paper" in formula.__doc__.lower(), name  # each cites its source


@pytest.mark.parametrize(("name", "cls", "rotary_cls", "config_json", "rotary_dim"), MODELS, ids=_IDS)
def test_settings_read_alike_from_config_json_transformers4_and_transformers5(
    name, cls, rotary_cls, config_json, rotary_dim
):
    from_json = rope_settings(config_json)
    from_v5 = rope_settings(_transformers5(cls, config_json))
    from_v4 = rope_settings(Transformers4Config(**config_json))
    assert from_json == from_v5 == from_v4
    assert from_json.rotary_fraction * _head_dim(config_json) == rotary_dim
    assert "type" not in from_json.scaling and "rope_theta" not in from_json.scaling


@pytest.mark.parametrize(("name", "cls", "rotary_cls", "config_json", "rotary_dim"), MODELS, ids=_IDS)
def test_published_settings_reproduce_transformers_exactly(name, cls, rotary_cls, config_json, rotary_dim):
    config = _transformers5(cls, config_json)
    base, scaling, _ = rope_settings(config_json)  # what a user copies from config.json
    head_dim = _head_dim(config_json)
    rope_type = scaling["rope_type"]
    original = scaling.get("original_max_position_embeddings", config.max_position_embeddings)
    for seq_len in (None, original // 2, min(4 * original, 2**20)):
        if rope_type == "default":
            theirs, their_scale = rotary_cls.compute_default_rope_parameters(config)
        else:
            length = None if seq_len is None else torch.tensor(seq_len)  # models pass max(position_ids) + 1
            theirs, their_scale = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=length)
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
    base, scaling, _ = rope_settings(config)  # the 5.x object, as the notebooks read it
    head_dim = _head_dim(config_json)
    original = scaling.get("original_max_position_embeddings", config.max_position_embeddings)
    end = 16 if where == "start" else min(2 * original, config.max_position_embeddings)
    positions = torch.arange(end - 16, end)
    x = torch.randn(1, 2, 16, head_dim, generator=torch.Generator().manual_seed(0))
    cos, sin = rotary_cls(config)(x, positions[None])  # (1, s, r), with the attention scale
    inv_freq, scale = rope_inv_freq(head_dim, base=base, scaling=scaling, seq_len=end)  # length: max(positions) + 1
    ours_cos, ours_sin = rope_cos_sin(positions, inv_freq, attention_scale=scale)
    torch.testing.assert_close(torch.cat((ours_cos, ours_cos), -1), cos[0], rtol=0, atol=2e-6)
    torch.testing.assert_close(torch.cat((ours_sin, ours_sin), -1), sin[0], rtol=0, atol=2e-6)
    # and the whole rotation, half pairing (transformers' rotate_half), on the rotated features
    expected = llama.apply_rotary_pos_emb(x[..., :rotary_dim], x[..., :rotary_dim], cos, sin)[0]
    torch.testing.assert_close(
        apply_rope(x, positions, base=base, scaling=scaling)[..., :rotary_dim], expected, rtol=1e-5, atol=1e-5
    )


def test_legacy_type_and_rope_theta_inside_the_dict_are_accepted():
    legacy = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    modern = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    a = rope_inv_freq(128, base=1e6, scaling=legacy)
    b = rope_inv_freq(128, scaling=modern)  # base from rope_theta
    c = rope_inv_freq(128, base=1e6, scaling={**modern, "type": "yarn"})  # both keys, agreeing
    assert torch.equal(a[0], b[0]) and torch.equal(a[0], c[0]) and a[1] == b[1] == c[1]
    assert torch.equal(rope_inv_freq(64, scaling=LlamaConfig().rope_parameters)[0], rope_inv_freq(64, base=10000.0)[0])


def test_phi3_longrope_switches_factors_at_the_original_length():
    _, scaling, _ = rope_settings(MODELS[4][3])
    assert scaling["original_max_position_embeddings"] == 4096 and scaling["max_position_embeddings"] == 131072
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
            "beta_fast'\\] must be > beta_slow",
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
            "high_freq_factor'\\] must be > low_freq_factor",
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
            "per-layer rope_parameters",
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
    from transformers import GPTJConfig

    published = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}
    for config in (published, GPTJConfig()):
        settings = rope_settings(config)
        assert settings.rotary_fraction == 64 / 256
        assert settings.scaling["partial_rotary_factor"] == 64 / 256
    with pytest.raises(ValueError, match="rotary_dim must be <= the head dimension 256, got 512"):
        rope_settings({**published, "rotary_dim": 512})
    with pytest.raises(ValueError, match=r"rotary_dim = 64 and partial_rotary_factor = 0\.5 disagree"):
        rope_settings({**published, "partial_rotary_factor": 0.5})


def test_rope_settings_reads_early_phi3_su_as_longrope_and_names_a_bad_rope_scaling():
    factors = [1.0] * 48
    su = {"type": "su", "short_factor": factors, "long_factor": factors}
    config = {"rope_scaling": su, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096}
    assert rope_settings(config).scaling["rope_type"] == "longrope"
    with pytest.raises(TypeError, match="rope_parameters / rope_scaling must be a dict or None, got list"):
        rope_settings({"rope_scaling": [1, 2]})
