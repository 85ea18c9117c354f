"""Tests of posenc.tasks: lag-copy batches, the training loop and the per-position accuracy."""

import math

import pytest
import torch
from torch import nn

from posenc import TinyTransformer
from posenc.tasks import (
    IGNORE_INDEX,
    WithStartToken,
    accuracy_per_position,
    lag_copy_accuracy,
    lag_copy_batch,
    lag_copy_targets,
    train,
)

VOCAB, LAG = 8, 3


class Oracle(nn.Module):
    """Logits that put all the mass on the token ``lag`` places back (on token 0 before that)."""

    def __init__(self, lag: int, vocab_size: int):
        super().__init__()
        self.lag, self.vocab_size = lag, vocab_size
        self.unused = nn.Parameter(torch.zeros(()))  # gives the model a device

    def forward(self, tokens):
        previous = torch.roll(tokens, self.lag, dims=1)  # (b, s)
        return nn.functional.one_hot(previous, self.vocab_size).float() + 0 * self.unused  # (b, s, v)


class Constant(nn.Module):
    """Always predicts token 0; ``bias`` is trainable so that train() can run on it."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size).index_fill(0, torch.tensor([0]), 5.0))

    def forward(self, tokens):
        return self.bias.expand(*tokens.shape, -1)  # (b, s, v)


class Recorder(nn.Module):
    """A trainable constant model that records the batches it is shown."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.seen = []

    def forward(self, tokens):
        self.seen.append(tokens.clone())
        return self.bias.expand(*tokens.shape, -1)


def test_a_batch_pairs_each_position_with_the_token_lag_places_back():
    tokens, targets, mask = lag_copy_batch(torch.Generator().manual_seed(0), 4, 10, vocab_size=VOCAB, lag=LAG)
    assert tokens.shape == targets.shape == mask.shape == (4, 10)
    assert tokens.dtype == targets.dtype == torch.int64 and mask.dtype == torch.bool
    assert int(tokens.min()) >= 0 and int(tokens.max()) < VOCAB
    assert mask[:, :LAG].logical_not().all() and mask[:, LAG:].all()
    assert (targets[:, :LAG] == IGNORE_INDEX).all()
    for t in range(LAG, 10):
        assert torch.equal(targets[:, t], tokens[:, t - LAG])


def test_a_batch_is_the_generators_randint_draw_and_moves_to_the_device():
    # The contract that lets the book's chapters keep their batches: tokens = torch.randint(v, (b, s)).
    tokens, _, _ = lag_copy_batch(torch.Generator().manual_seed(5), 3, 7, vocab_size=VOCAB, lag=LAG, device="meta")
    assert tokens.device.type == "meta"
    tokens, _, _ = lag_copy_batch(torch.Generator().manual_seed(5), 3, 7, vocab_size=VOCAB, lag=LAG)
    assert torch.equal(tokens, torch.randint(VOCAB, (3, 7), generator=torch.Generator().manual_seed(5)))


def test_targets_of_given_tokens():
    targets, mask = lag_copy_targets(torch.tensor([[5, 6, 7, 1, 2]]), lag=2)
    assert targets.tolist() == [[IGNORE_INDEX, IGNORE_INDEX, 5, 6, 7]]
    assert mask.tolist() == [[False, False, True, True, True]]


def test_a_perfect_model_scores_one_wherever_a_target_exists():
    accuracy = accuracy_per_position(Oracle(LAG, VOCAB), length=12, lag=LAG, vocab_size=VOCAB, batch=64, seed=0)
    assert accuracy.shape == (12,)
    assert accuracy[:LAG].isnan().all()
    assert torch.equal(accuracy[LAG:], torch.ones(12 - LAG))


def test_a_constant_model_scores_chance():
    accuracy = accuracy_per_position(Constant(VOCAB), length=40, lag=LAG, vocab_size=VOCAB, batch=512, seed=1)
    assert accuracy[:LAG].isnan().all()
    assert abs(accuracy.nanmean().item() - 1 / VOCAB) < 0.02  # 512 x 37 draws: standard error ~0.002
    assert (accuracy[LAG:] < 3 / VOCAB).all()


def test_accuracy_per_position_is_the_accuracy_on_the_seeded_batch():
    model = TinyTransformer(VOCAB, position="rope", dim=16, num_heads=2, num_layers=1, device="cpu")
    per_position = accuracy_per_position(model, length=9, lag=LAG, vocab_size=VOCAB, batch=32, seed=7)
    tokens, targets, mask = lag_copy_batch(torch.Generator().manual_seed(7), 32, 9, vocab_size=VOCAB, lag=LAG)
    torch.testing.assert_close(per_position, lag_copy_accuracy(model, tokens, lag=LAG), equal_nan=True)
    with torch.no_grad():
        overall = (model(tokens).argmax(-1) == targets)[mask].float().mean()
    torch.testing.assert_close(per_position.nanmean(), overall)  # chapter 7's number


def test_train_draws_a_length_then_a_batch_per_step_from_one_generator():
    recorder = Recorder(VOCAB)
    train(recorder, steps=5, batch=4, lr=1e-3, min_len=LAG + 1, max_len=12, lag=LAG, vocab_size=VOCAB, seed=3)
    generator = torch.Generator().manual_seed(3)
    for seen in recorder.seen:  # the chapter-7 loop, written out
        length = int(torch.randint(LAG + 1, 13, (1,), generator=generator))
        assert torch.equal(seen, torch.randint(VOCAB, (4, length), generator=generator))


def test_train_with_one_length_draws_no_length_and_continues_a_given_generator():
    recorder, generator = Recorder(VOCAB), torch.Generator().manual_seed(4)
    expected = torch.Generator().manual_seed(4)
    torch.rand(3, generator=generator), torch.rand(3, generator=expected)  # a generator already in use (chapter 3)
    train(recorder, steps=3, batch=2, lr=1e-3, min_len=6, max_len=6, lag=LAG, vocab_size=VOCAB, seed=generator)
    for seen in recorder.seen:
        assert torch.equal(seen, torch.randint(VOCAB, (2, 6), generator=expected))
    assert torch.equal(generator.get_state(), expected.get_state())


def test_training_reduces_the_loss_and_leaves_unused_table_rows_untouched():
    model = TinyTransformer(
        VOCAB,
        position="learned",
        position_options={"max_positions": 24},
        dim=32,
        num_heads=2,
        num_layers=1,
        device="cpu",
    )
    before = model.scheme.table.weight.detach().clone()
    losses = train(model, steps=40, batch=16, lr=3e-3, min_len=LAG + 1, max_len=12, lag=LAG, vocab_size=VOCAB, seed=0)
    assert losses.shape == (40,) and losses.dtype == torch.float32 and torch.isfinite(losses).all()
    assert losses[:10].mean() > math.log(VOCAB) - 0.2  # starts near chance: cross-entropy log(v)
    assert losses[-10:].mean() < losses[:10].mean() - 0.3
    after = model.scheme.table.weight.detach()
    assert torch.equal(after[12:], before[12:])  # never seen, no gradient, no weight decay: bit for bit
    assert not torch.equal(after[:12], before[:12])


def test_train_is_silent_unless_asked(capfd):
    kwargs = dict(steps=2, batch=2, lr=1e-3, min_len=4, max_len=5, lag=LAG, vocab_size=VOCAB, seed=0)
    train(Recorder(VOCAB), **kwargs)
    assert capfd.readouterr() == ("", "")
    train(Recorder(VOCAB), progress="rope", **kwargs)
    assert "rope" in capfd.readouterr().err


def test_a_model_with_the_wrong_logits_is_refused():
    with pytest.raises(ValueError, match=r"logits \(b, s, vocab_size\) = \(2, 5, 9\)"):
        train(Constant(VOCAB), steps=1, batch=2, lr=1e-3, min_len=5, max_len=5, lag=LAG, vocab_size=9, seed=0)


_GOOD = dict(steps=1, batch=2, lr=1e-3, min_len=4, max_len=5, lag=LAG, vocab_size=VOCAB, seed=0)


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        ({"lag": 0}, ValueError, "lag must be >= 1, got 0"),
        ({"vocab_size": 1}, ValueError, "vocab_size must be >= 2, got 1"),
        ({"min_len": 3}, ValueError, "min_len must be > lag = 3"),
        ({"max_len": 3}, ValueError, "max_len must be >= min_len = 4"),
        ({"steps": 0}, ValueError, "steps must be >= 1, got 0"),
        ({"batch": 2.0}, TypeError, "batch must be an integer"),
        ({"lr": 0.0}, ValueError, "lr must be > 0"),
        ({"weight_decay": -0.1}, ValueError, "weight_decay must be >= 0"),
        ({"seed": "0"}, TypeError, "seed must be an integer or a torch.Generator"),
        ({"progress": 1}, TypeError, "progress must be a bool or a label"),
        ({"lag": None}, ValueError, "task 'lag_copy' needs lag"),
        ({"task": "marker_recall"}, ValueError, "task 'marker_recall' has no lag"),
        (
            {"task": "marker_recall", "lag": None, "min_len": 2},
            ValueError,
            "min_len must be >= 3 for task 'marker_recall'",
        ),
        ({"task": "copy"}, ValueError, "task must be one of"),
        (
            {"task": "associative_recall", "lag": None, "min_len": 8, "max_len": 12, "vocab_size": 16},
            ValueError,
            "min_len must be >= 9",
        ),
        ({"task": "passkey", "lag": 2, "vocab_size": 16}, ValueError, "task 'passkey' has no lag"),
    ],
)
def test_train_validates_its_arguments(change, error, pattern):
    with pytest.raises(error, match=pattern):
        train(Recorder(VOCAB), **{**_GOOD, **change})


def test_train_needs_a_module_with_parameters():
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        train(lambda tokens: tokens, **_GOOD)
    with pytest.raises(ValueError, match="model has no parameters"):
        train(nn.Identity(), **_GOOD)


_NO_TARGET = r"length must be > lag = 3 \(a sequence needs at least one target\), got 3"


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: lag_copy_batch(torch.Generator(), 2, 3, vocab_size=VOCAB, lag=LAG), ValueError, _NO_TARGET),
        (lambda: lag_copy_batch(0, 2, 5, vocab_size=VOCAB, lag=LAG), TypeError, "generator must be a torch.Generator"),
        (
            lambda: lag_copy_batch(torch.Generator(), 0, 5, vocab_size=VOCAB, lag=LAG),
            ValueError,
            "batch must be >= 1, got 0",
        ),
        (
            lambda: lag_copy_batch(torch.Generator(), 2, 5, vocab_size=True, lag=LAG),
            TypeError,
            "vocab_size must be an integer",
        ),
        (lambda: lag_copy_targets(torch.zeros(2, 3, dtype=torch.long), lag=3), ValueError, "longer than lag = 3"),
        (lambda: lag_copy_targets(torch.zeros(2, 5), lag=3), TypeError, "tokens must be int64"),
        (
            lambda: lag_copy_targets(torch.zeros(5, dtype=torch.long), lag=3),
            ValueError,
            "tokens must have 2 dimensions",
        ),
        (
            lambda: accuracy_per_position(Constant(VOCAB), length=3, lag=LAG, vocab_size=VOCAB, seed=0),
            ValueError,
            "length must be > lag = 3",
        ),
        (
            lambda: accuracy_per_position(Constant(VOCAB), length=5, lag=LAG, vocab_size=VOCAB, seed=0.5),
            TypeError,
            "seed must be an integer",
        ),
    ],
)
def test_batches_and_accuracy_validate_their_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_a_model_that_cannot_take_the_length_raises_instead_of_scoring():
    model = TinyTransformer(
        VOCAB, position="learned", position_options={"max_positions": 8}, dim=8, num_heads=2, device="cpu"
    )
    with pytest.raises(ValueError, match="max_positions=8"):
        accuracy_per_position(model, length=12, lag=LAG, vocab_size=VOCAB, batch=4, seed=0)


def test_train_refuses_float16_and_frozen_models_instead_of_corrupting_them():
    from posenc import TinyTransformer
    from posenc.tasks import train

    task = dict(steps=1, batch=2, lr=1e-3, min_len=3, max_len=3, lag=1, vocab_size=10, seed=0)
    model = TinyTransformer(10, position="none", dim=16, num_heads=2, device="cpu").half()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"model has torch\.float16 parameters"):
        train(model, **task)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # untouched
    frozen = TinyTransformer(10, position="none", dim=16, num_heads=2, device="cpu").requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter that requires grad"):
        train(frozen, **task)
    bf16 = TinyTransformer(10, position="rope", dim=16, num_heads=2, device="cpu").bfloat16()
    assert torch.isfinite(train(bf16, **task)).all()  # bfloat16 trains


def test_a_start_token_goes_in_front_and_its_output_and_logit_are_dropped():
    inner = TinyTransformer(VOCAB + 1, position="rope", dim=16, num_heads=2, num_layers=1, device="cpu").eval()
    model = WithStartToken(inner, start_token=VOCAB)
    assert not list(model.parameters(recurse=False))  # nothing of its own
    tokens = torch.randint(VOCAB, (3, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(tokens)
        full = inner(torch.cat([torch.full((3, 1), VOCAB), tokens], dim=1))  # (b, s + 1, v + 1)
    assert logits.shape == (3, 7, VOCAB)
    torch.testing.assert_close(logits, full[:, 1:, :VOCAB])


def test_with_a_start_token_the_task_is_unchanged():
    # The oracle looks `lag` places back in the sequence it sees, start token included: position m of the
    # task still gets x_{m - lag}, so accuracy_per_position scores 1 wherever a target exists.
    model = WithStartToken(Oracle(LAG, VOCAB + 1), start_token=VOCAB)
    accuracy = accuracy_per_position(model, length=12, lag=LAG, vocab_size=VOCAB, batch=32, seed=0)
    assert accuracy[:LAG].isnan().all() and torch.equal(accuracy[LAG:], torch.ones(12 - LAG))
    inner = TinyTransformer(VOCAB + 1, position="none", dim=16, num_heads=2, num_layers=1, device="cpu")
    losses = train(
        WithStartToken(inner, VOCAB), steps=3, batch=4, lr=1e-3, min_len=4, max_len=6, lag=LAG, vocab_size=VOCAB, seed=0
    )  # logits over the task's VOCAB tokens: train accepts them
    assert torch.isfinite(losses).all()


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: WithStartToken(lambda t: t, 8), TypeError, r"model must be a torch\.nn\.Module"),
        (lambda: WithStartToken(Oracle(LAG, VOCAB + 1), 0), ValueError, "start_token must be >= 1, got 0"),
        (lambda: WithStartToken(Oracle(LAG, VOCAB + 1), 8.0), TypeError, "start_token must be an integer"),
        (
            lambda: WithStartToken(Oracle(LAG, VOCAB + 1), VOCAB)(torch.tensor([[0, VOCAB]])),
            ValueError,
            r"tokens must be task tokens in \[0, start_token=8\), got values 0..8",
        ),
        (
            lambda: WithStartToken(Oracle(LAG, VOCAB + 1), VOCAB)(torch.zeros(1, 4)),
            TypeError,
            "tokens must be int64",
        ),
        (
            lambda: WithStartToken(Constant(VOCAB), VOCAB)(torch.zeros(1, 4, dtype=torch.long)),
            ValueError,
            r"logits over start_token \+ 1 = 9 tokens, got 8",
        ),
    ],
)
def test_a_start_token_wrapper_validates_its_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ---- marker recall --------------------------------------------------------------------------------
from posenc.tasks import MARKER, TASKS, marker_recall_batch  # noqa: E402


def test_marker_recall_puts_one_marker_and_asks_for_the_token_after_it_from_two_places_on():
    tokens, targets, mask = marker_recall_batch(torch.Generator().manual_seed(0), 64, 12, vocab_size=VOCAB)
    assert TASKS[:2] == ("lag_copy", "marker_recall") and MARKER == 0
    assert ((tokens == MARKER).sum(1) == 1).all()  # exactly one marker per row
    where = (tokens == MARKER).int().argmax(1)  # (b,)
    assert int(where.max()) <= 12 - 2 and len(set(where.tolist())) > 5  # drawn over [0, s - 2]
    for row in range(64):
        p = int(where[row])
        assert mask[row].tolist() == [m >= p + 2 for m in range(12)]
        assert (targets[row, p + 2 :] == tokens[row, p + 1]).all()
        assert (targets[row, : p + 2] == IGNORE_INDEX).all()
    assert int(tokens.max()) < VOCAB


def test_marker_recall_at_a_fixed_place_makes_the_position_the_distance():
    tokens, targets, mask = marker_recall_batch(
        torch.Generator().manual_seed(1), 5, 9, vocab_size=VOCAB, marker_at=0, device="cpu"
    )
    assert (tokens[:, 0] == MARKER).all() and not (tokens[:, 1:] == MARKER).any()
    assert (targets[:, 2:] == tokens[:, 1:2]).all() and not mask[:, :2].any() and mask[:, 2:].all()


class MarkerOracle(nn.Module):
    """Recalls the token after the first marker; token 1 where no marker has been seen."""

    def __init__(self, vocab_size: int, *, wrong_from: int | None = None):
        super().__init__()
        self.vocab_size, self.wrong_from = vocab_size, wrong_from
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        where = (tokens == MARKER).int().argmax(1)  # (b,)
        value = tokens[torch.arange(len(tokens)), (where + 1).clamp(max=tokens.shape[1] - 1)]
        answer = value[:, None].expand_as(tokens).clone()
        if self.wrong_from is not None:
            answer[:, self.wrong_from :] = (answer[:, self.wrong_from :] % (self.vocab_size - 1)) + 1  # always wrong
        return nn.functional.one_hot(answer, self.vocab_size).float() + 0 * self.unused


def test_marker_recall_accuracy_per_position_reads_each_distance():
    perfect = accuracy_per_position(MarkerOracle(VOCAB), length=10, vocab_size=VOCAB, seed=0, task="marker_recall")
    assert perfect[:2].isnan().all() and (perfect[2:] == 1).all()
    failing = accuracy_per_position(
        MarkerOracle(VOCAB, wrong_from=6), length=10, vocab_size=VOCAB, seed=0, task="marker_recall", batch=32
    )
    assert (failing[2:6] == 1).all() and (failing[6:] == 0).all()


def test_a_model_learns_marker_recall_with_train():
    # The smallest setting that learns it in every seed tried (0-3: 0.79-0.85 after, 0.11-0.14 before; a
    # few seconds): two layers (one finds the marker's successor, one reads it), lengths up to 8.
    model = TinyTransformer(VOCAB, position="rope", dim=16, num_heads=2, num_layers=2, seed=0, device="cpu")
    before = accuracy_per_position(model, length=8, vocab_size=VOCAB, seed=5, task="marker_recall").nanmean()
    losses = train(
        model, steps=150, batch=32, lr=1e-2, min_len=3, max_len=8, vocab_size=VOCAB, seed=0, task="marker_recall"
    )
    after = accuracy_per_position(model, length=8, vocab_size=VOCAB, seed=5, task="marker_recall").nanmean()
    assert losses[-20:].mean() < 0.5 * losses[:20].mean()
    assert before < 0.3 < 0.6 < after  # chance is 1 / (VOCAB - 1)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: marker_recall_batch(torch.Generator(), 2, 2, vocab_size=VOCAB), ValueError, "length must be >= 3"),
        (lambda: marker_recall_batch(torch.Generator(), 2, 5, vocab_size=2), ValueError, "vocab_size must be >= 3"),
        (
            lambda: marker_recall_batch(torch.Generator(), 2, 5, vocab_size=VOCAB, marker_at=3),
            ValueError,
            r"marker_at must be <= length - 3 = 2",
        ),
        (lambda: marker_recall_batch(0, 2, 5, vocab_size=VOCAB), TypeError, "generator must be a torch.Generator"),
        (
            lambda: accuracy_per_position(Constant(VOCAB), length=5, vocab_size=VOCAB, seed=0, task="copy"),
            ValueError,
            "task must be one of",
        ),
    ],
)
def test_marker_recall_validates_its_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# ---- content retrieval: associative recall and the passkey ----------------------------------------------
from posenc.tasks import (  # noqa: E402
    PASSKEY_QUERY,
    associative_recall_batch,
    associative_recall_vocabulary,
    passkey_accuracy,
    passkey_batch,
    passkey_depths,
    passkey_vocabulary,
)


def test_tasks_list_the_content_retrieval_tasks():
    assert TASKS == ("lag_copy", "marker_recall", "associative_recall", "passkey", "text")


def test_associative_recall_targets_are_the_value_of_each_queried_key():
    keys, values = associative_recall_vocabulary(16)
    assert (keys, values) == (range(8), range(8, 16))
    tokens, targets, mask = associative_recall_batch(torch.Generator().manual_seed(0), 64, 20, vocab_size=16)
    assert tokens.shape == targets.shape == mask.shape == (64, 20) and tokens.dtype == torch.int64
    for row in range(64):
        pairs = tokens[row, :8].tolist()
        row_keys, row_values = pairs[0::2], pairs[1::2]
        assert len(set(row_keys)) == 4 and all(k in keys for k in row_keys)  # 4 distinct keys
        assert all(v in values for v in row_values)
        lookup = dict(zip(row_keys, row_values, strict=True))
        for m in range(20):
            if m < 8:
                assert not mask[row, m] and targets[row, m] == IGNORE_INDEX
            else:
                query = int(tokens[row, m])
                assert mask[row, m] and query in lookup  # a key of this row
                assert int(targets[row, m]) == lookup[query]
    # the queries are spread over the pairs, not always the first one
    first_key = tokens[:, :1]
    assert 0.15 < (tokens[:, 8:] == first_key).float().mean() < 0.35


def test_associative_recall_is_determined_by_its_generator():
    one = associative_recall_batch(torch.Generator().manual_seed(3), 8, 12, vocab_size=10, num_pairs=2)
    two = associative_recall_batch(torch.Generator().manual_seed(3), 8, 12, vocab_size=10, num_pairs=2)
    other = associative_recall_batch(torch.Generator().manual_seed(4), 8, 12, vocab_size=10, num_pairs=2)
    assert all(torch.equal(x, y) for x, y in zip(one, two, strict=True))
    assert not torch.equal(one[0], other[0])
    assert not one[2][:, :4].any() and one[2][:, 4:].all()  # 2 pairs: targets from position 4


def _passkey_parts(tokens, key_length):
    """Independent reading of one passkey row: marker place, key, query place."""
    row = tokens.tolist()
    assert row.count(MARKER) == 1 and row.count(PASSKEY_QUERY) == 1
    p, q = row.index(MARKER), row.index(PASSKEY_QUERY)
    return p, row[p + 1 : p + 1 + key_length], q


@pytest.mark.parametrize("depth", [None, 0, 5, 14])
def test_passkey_hides_the_key_at_its_depth_and_asks_for_it_at_the_end(depth):
    digits, filler = passkey_vocabulary(16)
    assert (digits, filler) == (range(2, 9), range(9, 16))
    length, k = 22, 3
    tokens, targets, mask = passkey_batch(
        torch.Generator().manual_seed(1), 32, length, vocab_size=16, key_length=k, depth=depth
    )
    assert tokens.shape == targets.shape == mask.shape == (32, length)
    places = set()
    for row in range(32):
        p, key, q = _passkey_parts(tokens[row], k)
        places.add(p)
        assert q == length - k - 1 and (depth is None or p == depth) and p + k < q
        assert len(set(key)) == k and all(d in digits for d in key)  # distinct digits
        assert tokens[row, q + 1 :].tolist() == key  # the answer, teacher-forced
        expected = [IGNORE_INDEX] * length
        expected[q : q + k] = key  # d_1 at the query, then d_{j+1} at q + j
        assert targets[row].tolist() == expected
        assert mask[row].tolist() == [x != IGNORE_INDEX for x in expected]
        rest = [t for m, t in enumerate(tokens[row].tolist()) if not (p <= m <= p + k or m >= q)]
        assert all(t in filler for t in rest)
    if depth is None:  # drawn over [0, s - 2k - 2]
        assert len(places) > 5 and max(places) <= length - 2 * k - 2


def test_passkey_is_determined_by_its_generator():
    one = passkey_batch(torch.Generator().manual_seed(2), 4, 16, vocab_size=12)
    two = passkey_batch(torch.Generator().manual_seed(2), 4, 16, vocab_size=12)
    assert all(torch.equal(x, y) for x, y in zip(one, two, strict=True))
    assert not torch.equal(one[0], passkey_batch(torch.Generator().manual_seed(3), 4, 16, vocab_size=12)[0])


class PasskeyOracle(nn.Module):
    """Answers the passkey by reading the key after the marker; wrong when the marker is deeper than ``up_to``."""

    def __init__(self, vocab_size: int, key_length: int, up_to: int | None = None):
        super().__init__()
        self.vocab_size, self.key_length, self.up_to = vocab_size, key_length, up_to
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        b, s = tokens.shape
        answer = torch.zeros(b, s, dtype=torch.long)
        for row in range(b):
            p, key, q = _passkey_parts(tokens[row], self.key_length)
            if self.up_to is None or p <= self.up_to:
                answer[row, q : q + self.key_length] = torch.tensor(key)
        return nn.functional.one_hot(answer, self.vocab_size).float() + 0 * self.unused  # (b, s, v)


def test_passkey_accuracy_reads_each_depth():
    perfect = passkey_accuracy(PasskeyOracle(16, 3), length=24, depths=[0, 8, 16], vocab_size=16, seed=0, batch=16)
    assert perfect.tolist() == [1.0, 1.0, 1.0]
    shallow = passkey_accuracy(
        PasskeyOracle(16, 3, up_to=8), length=24, depths=(0, 8, 9, 16), vocab_size=16, seed=0, batch=16
    )
    assert shallow.tolist() == [1.0, 1.0, 0.0, 0.0]


class FirstDigitMissed(PasskeyOracle):
    """The oracle, but its answer at the query token (the first digit) is always the filler id 15."""

    def forward(self, tokens):
        logits = super().forward(tokens)
        for row in range(tokens.shape[0]):
            _, _, q = _passkey_parts(tokens[row], self.key_length)
            logits[row, q] = nn.functional.one_hot(torch.tensor(15), self.vocab_size).float()
        return logits


def test_passkey_accuracy_per_digit_separates_the_first_digit():
    # the first digit (fetched from the marker's place) apart from those that follow a shown digit;
    # their mean is the default result, at every depth
    args = dict(length=24, depths=[0, 8, 16], vocab_size=16, seed=0, batch=16)
    digits = passkey_accuracy(FirstDigitMissed(16, 3), per_digit=True, **args)
    assert digits.shape == (3, 3) and digits.tolist() == [[0.0, 1.0, 1.0]] * 3
    together = passkey_accuracy(FirstDigitMissed(16, 3), **args)
    assert torch.allclose(together, digits.mean(-1))
    shallow = passkey_accuracy(PasskeyOracle(16, 2, up_to=8), key_length=2, per_digit=True, **args)
    assert shallow.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    with pytest.raises(TypeError, match="per_digit"):
        passkey_accuracy(PasskeyOracle(16, 3), per_digit="yes", **args)


def test_passkey_depths_span_the_first_token_to_just_before_the_query():
    # length 32, key 3: the query at 28, the marker's last place 32 - 8 = 24 (marker + key end at 27)
    assert passkey_depths(32, [0, 0.25, 0.5, 0.75, 1]) == [0, 6, 12, 18, 24]
    assert passkey_depths(256, (0, 1), key_length=3) == [0, 248]
    assert passkey_depths(10, [0.5], key_length=4) == [0]  # the shortest length: one place only
    # the deepest depth is one passkey_batch accepts, one more is refused
    for length, k in [(32, 3), (57, 2)]:
        deepest = passkey_depths(length, [1], key_length=k)[0]
        passkey_batch(torch.Generator().manual_seed(0), 1, length, vocab_size=16, key_length=k, depth=deepest)
        with pytest.raises(ValueError, match="depth must be <="):
            passkey_batch(torch.Generator().manual_seed(0), 1, length, vocab_size=16, key_length=k, depth=deepest + 1)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "pattern"),
    [
        ((7, [0.5]), {}, ValueError, "length must be >= 2 \\* key_length \\+ 2 = 8, got 7"),
        ((32, [1.5]), {}, ValueError, "fractions\\[\\] must be in \\[0, 1\\].*got 1.5"),
        ((32, [-0.1]), {}, ValueError, "got -0.1"),
        ((32, []), {}, ValueError, "at least one fraction"),
        ((32, 0.5), {}, TypeError, "fractions must be a sequence"),
        ((32, "0.5"), {}, TypeError, "fractions must be a sequence"),
        ((32, ["0.5"]), {}, TypeError, "fractions\\[\\] must be a real number"),
        ((32.0, [0.5]), {}, TypeError, "length"),
        ((32, [0.5]), {"key_length": 0}, ValueError, "key_length"),
    ],
)
def test_passkey_depths_rejects_bad_input(args, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        passkey_depths(*args, **kwargs)


def test_associative_recall_accuracy_per_position_and_passkey_refusal():
    class Recall(nn.Module):
        def __init__(self):
            super().__init__()
            self.unused = nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            answer = torch.zeros_like(tokens)
            for row in range(tokens.shape[0]):
                lookup = dict(zip(tokens[row, 0:8:2].tolist(), tokens[row, 1:8:2].tolist(), strict=True))
                answer[row, 8:] = torch.tensor([lookup[t] for t in tokens[row, 8:].tolist()])
            return nn.functional.one_hot(answer, 16).float() + 0 * self.unused

    accuracy = accuracy_per_position(Recall(), length=14, vocab_size=16, seed=0, task="associative_recall", batch=8)
    assert accuracy[:8].isnan().all() and (accuracy[8:] == 1).all()
    with pytest.raises(ValueError, match="passkey_accuracy"):
        accuracy_per_position(Recall(), length=14, vocab_size=16, seed=0, task="passkey")


def _learn(task, steps, length, vocab, lr):
    model = TinyTransformer(vocab, position="rope", dim=32, num_heads=2, num_layers=2, seed=0, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # about 4 s of one core each
    try:
        losses = train(
            model, steps=steps, batch=32, lr=lr, min_len=length, max_len=length, vocab_size=vocab, seed=0, task=task
        )
    finally:
        torch.set_num_threads(threads)
    return model.eval(), losses


def test_a_tiny_model_gets_associative_recall_well_above_chance_with_train():
    # 10 tokens: 5 keys, 5 values; 4 pairs; chance is 1/5. In 300 steps the model reaches about half:
    # above what knowing the row's values alone gives (about 1/3), short of full recall, which takes
    # longer training (the recorded lab experiment does not include this task for that reason).
    model, losses = _learn("associative_recall", 300, 24, 10, 5e-3)
    after = accuracy_per_position(model, length=24, vocab_size=10, seed=5, task="associative_recall").nanmean()
    assert losses[-20:].mean() < 0.7 * losses[:20].mean()
    assert after > 0.42  # > 2 x chance


def test_a_tiny_model_learns_the_passkey_with_train():
    # 10 tokens: 4 digits, 4 filler; 3-digit keys: chance for the first digit is 1/4
    model, losses = _learn("passkey", 300, 12, 10, 3e-3)
    accuracy = passkey_accuracy(model, length=12, depths=[0, 2, 4], vocab_size=10, seed=5)
    assert losses[-20:].mean() < 0.1 * losses[:20].mean()
    assert (accuracy > 0.95).all()


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: associative_recall_batch(torch.Generator(), 2, 8, vocab_size=16),
            ValueError,
            r"length must be > 2 \* num_pairs = 8",
        ),
        (
            lambda: associative_recall_batch(torch.Generator(), 2, 20, vocab_size=16, num_pairs=9),
            ValueError,
            "num_pairs must be <= 8",
        ),
        (
            lambda: associative_recall_batch(torch.Generator(), 2, 20, vocab_size=3),
            ValueError,
            "vocab_size must be >= 4",
        ),
        (
            lambda: associative_recall_batch(None, 2, 20, vocab_size=16),
            TypeError,
            "generator must be a torch.Generator",
        ),
        (
            lambda: passkey_batch(torch.Generator(), 2, 7, vocab_size=16),
            ValueError,
            r"length must be >= 2 \* key_length",
        ),
        (
            lambda: passkey_batch(torch.Generator(), 2, 20, vocab_size=16, key_length=8),
            ValueError,
            "key_length must be <= 7",
        ),
        (
            lambda: passkey_batch(torch.Generator(), 2, 20, vocab_size=16, depth=13),
            ValueError,
            "depth must be <= length - 2 \\* key_length - 2 = 12",
        ),
        (lambda: passkey_batch(torch.Generator(), 2, 20, vocab_size=16, depth=-1), ValueError, "depth must be >= 0"),
        (
            lambda: passkey_accuracy(Constant(16), length=20, depths=[], vocab_size=16, seed=0),
            ValueError,
            "at least one depth",
        ),
        (
            lambda: passkey_accuracy(Constant(16), length=20, depths=3, vocab_size=16, seed=0),
            TypeError,
            "depths must be a sequence",
        ),
    ],
)
def test_content_retrieval_tasks_validate_their_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
