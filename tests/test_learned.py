"""Tests of posenc.learned: the table, its hard end, and the sizes of real models."""

import inspect

import pytest
import torch

from posenc import KNOWN_TABLES, LearnedPositionalEmbedding


def test_forward_looks_up_rows():
    table = LearnedPositionalEmbedding(16, 4, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([[0, 3], [15, 3]])
    out = table(positions)
    assert out.shape == (2, 2, 4)
    assert torch.equal(out[0, 1], table.weight[3]) and torch.equal(out[1, 0], table.weight[15])


def test_parameters_and_initialisation():
    table = LearnedPositionalEmbedding(1024, 768, generator=torch.Generator().manual_seed(0))
    assert sum(p.numel() for p in table.parameters()) == 1024 * 768
    assert table.weight.std().item() == pytest.approx(0.02, rel=0.01)
    again = LearnedPositionalEmbedding(1024, 768, generator=torch.Generator().manual_seed(0))
    assert torch.equal(table.weight, again.weight)


def test_gradient_reaches_only_the_rows_used():
    table = LearnedPositionalEmbedding(8, 3, generator=torch.Generator().manual_seed(0))
    table(torch.tensor([1, 2, 2])).sum().backward()
    used = table.weight.grad.abs().sum(-1) > 0
    assert used.tolist() == [False, True, True, False, False, False, False, False]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_dtypes(dtype):
    table = LearnedPositionalEmbedding(8, 3)
    assert table(torch.arange(8, dtype=dtype)).shape == (8, 3)


def test_position_past_the_table_names_the_table_size():
    table = LearnedPositionalEmbedding(1024, 8)
    table(torch.tensor([1023]))  # the last row exists
    with pytest.raises(ValueError, match=r"position 1024 is past the end.*max_positions=1024.*0\.\.1023"):
        table(torch.arange(1025))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda t: t(torch.tensor([-1, 2])), ValueError, "positions must be >= 0, got -1"),
        (lambda t: t(torch.tensor([0.0, 1.0])), TypeError, "positions must be an integer tensor, got torch.float32"),
        (lambda t: t([0, 1]), TypeError, "positions must be a torch.Tensor"),
        (lambda t: LearnedPositionalEmbedding(0, 4), ValueError, "max_positions must be >= 1, got 0"),
        (lambda t: LearnedPositionalEmbedding(4, -2), ValueError, "dim must be >= 1, got -2"),
        (lambda t: LearnedPositionalEmbedding(4, 2, init_std=0), ValueError, "init_std must be > 0"),
        (lambda t: LearnedPositionalEmbedding(4, 2, generator=0), TypeError, "generator must be a torch.Generator"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(LearnedPositionalEmbedding(8, 3))


def test_known_tables_match_the_reference_configurations():
    transformers = pytest.importorskip("transformers")  # test-only dependency, pinned in requirements.txt

    bert, gpt2 = transformers.BertConfig(), transformers.GPT2Config()
    assert KNOWN_TABLES["bert-base"] == (bert.max_position_embeddings, bert.hidden_size) == (512, 768)
    assert KNOWN_TABLES["gpt2"] == (gpt2.n_positions, gpt2.n_embd) == (1024, 768)


def test_default_initialisation_matches_bert_and_gpt2():
    transformers = pytest.importorskip("transformers")  # test-only dependency, pinned in requirements.txt

    assert transformers.BertConfig().initializer_range == transformers.GPT2Config().initializer_range == 0.02
    assert inspect.signature(LearnedPositionalEmbedding).parameters["init_std"].default == 0.02
