"""Probe tasks for position schemes: lag copy, marker recall, associative recall and a passkey.

**Lag copy** (``task="lag_copy"``; ``book/03_learned.ipynb`` and the lab): at position ``t``,
predict the token at ``t - lag``. A model solves it only if it knows *where* each token is relative
to the others, which makes it a clean probe of a position scheme: train on short sequences, then
read the accuracy position by position, inside and past the training length.

**Marker recall** (``task="marker_recall"``; the context-extension chapter,
``book/10_extension.ipynb``): one :data:`MARKER` token (id 0) sits at a position ``p``; from
``p + 2`` on, every position must output the token right after it, ``x_{p+1}``. It needs both a
distance-1 look (which token follows the marker) and a look back over any distance (where the
marker was), so it fails when a model meets distances it never trained on.

* :func:`lag_copy_batch`, :func:`marker_recall_batch` draw random tokens with their targets and
  mask (explicit generator);
* :func:`train` fits any model ``forward(tokens) -> logits`` with AdamW, one random length per step;
* :func:`lag_copy_accuracy` and :func:`accuracy_per_position` read the accuracy at each position;
* :func:`associative_recall_batch` and :func:`passkey_batch` (with :func:`passkey_accuracy`, per
  depth) retrieve a token found by its content, far back: see the section at the end of the module;
* :class:`WithStartToken` puts a fixed start token (BOS) in front of every sequence a model sees.

Targets that do not exist (the first ``lag`` positions; up to ``p + 1`` in marker recall) hold
:data:`IGNORE_INDEX` (-100, the value ``F.cross_entropy`` ignores by default) and are false in
``mask``.

Shapes:
    b: batch, s: sequence length (``length``), v: vocabulary size.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._checks import check_bool, check_int, check_real, check_tensor, has_values

__all__ = [
    "IGNORE_INDEX",
    "MARKER",
    "PASSKEY_QUERY",
    "TASKS",
    "WithStartToken",
    "accuracy_per_position",
    "associative_recall_batch",
    "associative_recall_vocabulary",
    "lag_copy_accuracy",
    "lag_copy_batch",
    "lag_copy_targets",
    "marker_recall_batch",
    "passkey_accuracy",
    "passkey_batch",
    "passkey_depths",
    "passkey_vocabulary",
    "train",
]

IGNORE_INDEX = -100
MARKER = 0  #: the marker token of marker recall; the other tokens are 1 .. vocab_size - 1
TASKS = ("lag_copy", "marker_recall", "associative_recall", "passkey", "text")


def _check_task(vocab_size: object, lag: object) -> tuple[int, int]:
    return check_int("vocab_size", vocab_size, minimum=2), check_int("lag", lag, minimum=1)


def _check_length(name: str, length: object, lag: int) -> int:
    length = check_int(name, length, minimum=1)
    if length <= lag:
        raise ValueError(f"{name} must be > lag = {lag} (a sequence needs at least one target), got {length}")
    return length


def _check_generator(name: str, value: object) -> torch.Generator:
    if not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator, got {type(value).__name__}")
    return value


def _model_device(model: object) -> torch.device:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    parameter = next(model.parameters(), None)
    if parameter is None:
        raise ValueError("model has no parameters (its device is where batches go, and train needs something to fit)")
    return parameter.device


def lag_copy_targets(tokens: Tensor, *, lag: int) -> tuple[Tensor, Tensor]:
    """Targets ``y_t = x_{t - lag}`` and the mask of positions that have one (``t >= lag``).

    Shapes:
        tokens ``(b, s)`` int64; returns targets ``(b, s)`` int64 (``IGNORE_INDEX`` where
        ``t < lag``) and mask ``(b, s)`` bool, on the tokens' device.
    """
    check_tensor("tokens", tokens, ndim=2)
    if tokens.dtype != torch.int64:
        raise TypeError(f"tokens must be int64, got {tokens.dtype}")
    lag = check_int("lag", lag, minimum=1)
    b, s = tokens.shape
    if s <= lag:
        raise ValueError(f"tokens must be longer than lag = {lag}, got shape {tuple(tokens.shape)}")
    targets = torch.full_like(tokens, IGNORE_INDEX)  # (b, s)
    targets[:, lag:] = tokens[:, :-lag]  # y_t = x_{t - lag}
    mask = torch.zeros(b, s, dtype=torch.bool, device=tokens.device)
    mask[:, lag:] = True
    return targets, mask


def lag_copy_batch(
    generator: torch.Generator,
    batch: int,
    length: int,
    *,
    vocab_size: int,
    lag: int,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """A batch of uniformly random tokens with their lag-copy targets and mask.

    The tokens are drawn on the generator's device, ``torch.randint(vocab_size, (batch, length))``,
    then moved to ``device`` (default: stay there), so a CPU generator gives the same batch for a
    CPU and a GPU model.

    Shapes:
        returns tokens ``(b, s)`` int64 in ``[0, v)``, targets ``(b, s)`` int64, mask ``(b, s)`` bool.
    """
    generator = _check_generator("generator", generator)
    vocab_size, lag = _check_task(vocab_size, lag)
    batch = check_int("batch", batch, minimum=1)
    length = _check_length("length", length, lag)
    tokens = torch.randint(vocab_size, (batch, length), generator=generator, device=generator.device)  # (b, s)
    if device is not None:
        tokens = tokens.to(device)
    targets, mask = lag_copy_targets(tokens, lag=lag)
    return tokens, targets, mask


def marker_recall_batch(
    generator: torch.Generator,
    batch: int,
    length: int,
    *,
    vocab_size: int,
    marker_at: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """A batch of the marker-recall task: one :data:`MARKER` per sequence; recall the token after it.

    Tokens are ``torch.randint(1, vocab_size, (batch, length))`` (never the marker), then each row
    ``i`` gets the marker at ``p_i``: ``marker_at`` for every row, or (``None``) one
    ``torch.randint(0, length - 1, (batch,))`` draw, i.e. uniform in ``[0, length - 2]``. Both draws
    come from ``generator``, on its device, then move to ``device``. The target of position ``m`` is
    ``x_{p_i + 1}`` for ``m >= p_i + 2``; earlier positions have none (``IGNORE_INDEX``, mask false).
    With ``marker_at=0`` the value token is at position 1, so position ``m`` recalls it over the
    distance ``m - 1``: accuracy per position is accuracy per distance.

    Shapes:
        returns tokens ``(b, s)`` int64 in ``[0, v)``, targets ``(b, s)`` int64, mask ``(b, s)`` bool.
    """
    generator = _check_generator("generator", generator)
    vocab_size = check_int("vocab_size", vocab_size, minimum=3)
    batch = check_int("batch", batch, minimum=1)
    length = check_int("length", length, minimum=3)
    if marker_at is not None:
        marker_at = check_int("marker_at", marker_at, minimum=0)
        if marker_at > length - 3:
            raise ValueError(
                f"marker_at must be <= length - 3 = {length - 3} (a target needs position marker_at + 2), "
                f"got {marker_at}"
            )
    tokens = torch.randint(1, vocab_size, (batch, length), generator=generator, device=generator.device)  # (b, s)
    if marker_at is None:
        where = torch.randint(0, length - 2, (batch,), generator=generator, device=generator.device)  # (b,)
    else:
        where = torch.full((batch,), marker_at, device=generator.device)
    rows = torch.arange(batch, device=generator.device)
    tokens[rows, where] = MARKER
    value = tokens[rows, where + 1]  # (b,) the token to recall
    mask = torch.arange(length, device=generator.device) >= (where + 2)[:, None]  # (b, s)
    targets = torch.where(mask, value[:, None], torch.full_like(tokens, IGNORE_INDEX))
    if device is not None:
        tokens, targets, mask = tokens.to(device), targets.to(device), mask.to(device)
    return tokens, targets, mask


def _task_batches(task: object, vocab_size: object, lag: object):
    """Validate (task, vocab_size, lag); return ``draw(generator, batch, length, device)`` and the shortest length."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task == "lag_copy":
        if lag is None:
            raise ValueError("task 'lag_copy' needs lag, the distance to copy from")
        vocab_size, lag = _check_task(vocab_size, lag)

        def draw(generator, batch, length, device):
            return lag_copy_batch(generator, batch, length, vocab_size=vocab_size, lag=lag, device=device)

        return draw, lag + 1
    if lag is not None:
        raise ValueError(f"task {task!r} has no lag, got lag={lag!r}")
    if task == "associative_recall":  # default num_pairs = 4: the shortest sequence is 2 * 4 + 1
        vocab_size = check_int("vocab_size", vocab_size, minimum=10)

        def draw(generator, batch, length, device):
            return associative_recall_batch(generator, batch, length, vocab_size=vocab_size, device=device)

        return draw, 9
    if task == "passkey":  # default key_length = 3: the shortest sequence is 2 * 3 + 2
        vocab_size = check_int("vocab_size", vocab_size, minimum=8)

        def draw(generator, batch, length, device):
            return passkey_batch(generator, batch, length, vocab_size=vocab_size, device=device)

        return draw, 8
    if task == "text":  # next-byte prediction on posenc's corpus (posenc.corpus)
        from posenc.corpus import VOCAB_SIZE, text_batch

        if vocab_size != VOCAB_SIZE:
            raise ValueError(f"task 'text' reads bytes: vocab_size must be {VOCAB_SIZE}, got {vocab_size!r}")

        def draw(generator, batch, length, device):
            return text_batch(generator, batch, length, device=device)

        return draw, 1
    vocab_size = check_int("vocab_size", vocab_size, minimum=3)

    def draw(generator, batch, length, device):
        return marker_recall_batch(generator, batch, length, vocab_size=vocab_size, device=device)

    return draw, 3


def train(
    model: nn.Module,
    *,
    steps: int,
    batch: int,
    lr: float,
    min_len: int,
    max_len: int,
    vocab_size: int,
    seed: int | torch.Generator,
    lag: int | None = None,
    task: str = "lag_copy",
    weight_decay: float = 0.0,
    progress: bool | str = False,
) -> Tensor:
    """Fit ``model`` to a task of :data:`TASKS` with AdamW; return the training loss of every step.

    ``task="lag_copy"`` (the default) needs ``lag``; ``task="marker_recall"`` takes none (the
    marker's place is drawn per sequence, :func:`marker_recall_batch`); ``"associative_recall"`` and
    ``"passkey"`` take none either and use their batch functions' defaults (4 pairs; a 3-digit key
    at a depth drawn per sequence); ``"text"`` is next-byte prediction on posenc's real-text corpus
    (:func:`posenc.corpus.text_batch`, ``vocab_size`` 256). Each step draws a length
    uniformly from ``[min_len, max_len]`` (one ``torch.randint`` call; none when
    ``min_len == max_len``), then a batch of that length, both from one CPU generator: ``seed`` is
    an int (a fresh ``torch.Generator().manual_seed(seed)``) or a generator to continue, which this
    call advances. The batch goes to the model's device. The loss is the mean cross-entropy over the
    positions that have a target. The default ``weight_decay=0`` leaves parameters that get no
    gradient (unused table rows) bit for bit as they were. ``progress`` shows a ``tqdm`` bar
    (labelled with it when it is a string); the default prints nothing. The model's train/eval mode
    is not changed.

    Shapes:
        model: tokens ``(b, s)`` -> logits ``(b, s, v)``; returns losses ``(steps,)`` float32 on the CPU.
    """
    device = _model_device(model)
    draw, shortest = _task_batches(task, vocab_size, lag)
    steps = check_int("steps", steps, minimum=1)
    batch = check_int("batch", batch, minimum=1)
    lr = check_real("lr", lr, greater_than=0.0)
    weight_decay = check_real("weight_decay", weight_decay)
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay:g}")
    min_len = check_int("min_len", min_len, minimum=1)
    if min_len < shortest:  # lag copy: shortest = lag + 1
        reason = f"> lag = {shortest - 1}" if task == "lag_copy" else f">= {shortest} for task {task!r}"
        raise ValueError(f"min_len must be {reason} (a sequence needs at least one target), got {min_len}")
    max_len = check_int("max_len", max_len, minimum=1)
    if max_len < min_len:
        raise ValueError(f"max_len must be >= min_len = {min_len}, got {max_len}")
    if isinstance(seed, torch.Generator):
        generator = seed
    elif isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        generator = torch.Generator().manual_seed(int(seed))
    else:
        raise TypeError(f"seed must be an integer or a torch.Generator, got {seed!r} ({type(seed).__name__})")
    if not isinstance(progress, (bool, str)):
        raise TypeError(f"progress must be a bool or a label, got {progress!r} ({type(progress).__name__})")

    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("model has no parameter that requires grad: nothing to train")
    half = sorted({str(p.dtype) for p in trainable if p.dtype == torch.float16})
    if half:
        # AdamW's eps (1e-8) rounds to 0 in float16: the first step divides 0 by 0 and fills the
        # parameters with NaN. Mixed-precision training keeps float32 master weights instead.
        raise ValueError(
            f"model has {half[0]} parameters, which AdamW cannot update (eps underflows to 0): "
            "train in float32 or bfloat16"
        )
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    step_range = range(steps)
    if progress is not False:
        from tqdm import tqdm  # only when a bar is asked for

        step_range = tqdm(step_range, desc=progress if isinstance(progress, str) else None, mininterval=1.0)
    losses = []
    for step in step_range:
        length = (
            min_len
            if min_len == max_len
            else int(torch.randint(min_len, max_len + 1, (1,), generator=generator, device=generator.device))
        )
        tokens, targets, mask = draw(generator, batch, length, device)
        logits = model(tokens)  # (b, s, v)
        if step == 0 and tuple(logits.shape) != (batch, length, vocab_size):
            raise ValueError(
                f"model must map tokens (b, s) = {(batch, length)} to logits (b, s, vocab_size) = "
                f"{(batch, length, vocab_size)}, got {tuple(logits.shape)}"
            )
        loss = F.cross_entropy(logits[mask], targets[mask])  # mean over positions with a target
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())  # no .item(): no GPU sync per step
    return torch.stack(losses).float().cpu()  # (steps,)


@torch.no_grad()
def lag_copy_accuracy(model: nn.Module, tokens: Tensor, *, lag: int) -> Tensor:
    """Fraction of sequences whose argmax prediction at position ``t`` is ``tokens[:, t - lag]``.

    Positions ``t < lag`` have no target and read NaN. Works for any ``tokens`` (e.g. a shifted
    copy of a test batch); they must be on the model's device. No gradients are kept.

    Shapes:
        tokens ``(b, s)`` int64; returns ``(s,)`` float32 on the CPU, index = position ``t``.
    """
    targets, mask = lag_copy_targets(tokens, lag=lag)
    return _accuracy(model, tokens, targets, mask)


@torch.no_grad()
def _accuracy(model: nn.Module, tokens: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Per position: the share of the sequences with a target there whose argmax is it (NaN if none)."""
    hits = (model(tokens).argmax(-1) == targets) & mask  # (b, s)
    return (hits.float().sum(0) / mask.float().sum(0)).cpu()  # (s,)


def accuracy_per_position(
    model: nn.Module,
    *,
    length: int,
    vocab_size: int,
    seed: int,
    lag: int | None = None,
    task: str = "lag_copy",
    batch: int = 512,
) -> Tensor:
    """Accuracy at each position of ``batch`` random sequences of ``length`` drawn from ``seed``.

    Lag copy (the default; needs ``lag``): the sequences are
    ``lag_copy_batch(torch.Generator().manual_seed(seed), batch, length, ...)``; past a training
    length ``N``, index ``N + j`` is the accuracy ``j + 1`` positions beyond it, and the mean over
    ``t >= lag`` (``result.nanmean()``) equals the accuracy over all predicted tokens. Marker recall:
    ``marker_recall_batch(..., marker_at=0)``, so index ``m`` is the accuracy of recalling a token
    ``m - 1`` positions back (NaN at ``m < 2``). Associative recall: ``associative_recall_batch(...)``
    with its default 4 pairs, so index ``m >= 8`` is the accuracy of a query up to ``m`` positions
    past the pairs. The passkey task raises (read it per depth with :func:`passkey_accuracy`), and so
    does ``"text"`` (scored by its loss: :func:`posenc.corpus.loss_per_position`).
    Evaluated on the model's device; a model that cannot take ``length`` (a learned table) raises.

    Shapes:
        returns ``(s,)`` float32 on the CPU, NaN where no sequence has a target.
    """
    device = _model_device(model)
    _task_batches(task, vocab_size, lag)  # validates
    seed = check_int("seed", seed)
    generator = torch.Generator().manual_seed(seed)
    if task == "lag_copy":
        tokens, _, _ = lag_copy_batch(generator, batch, length, vocab_size=vocab_size, lag=lag, device=device)
        return lag_copy_accuracy(model, tokens, lag=lag)
    if task == "associative_recall":
        tokens, targets, mask = associative_recall_batch(generator, batch, length, vocab_size=vocab_size, device=device)
        return _accuracy(model, tokens, targets, mask)
    if task == "passkey":
        raise ValueError("task 'passkey' is read per depth, not per position: use passkey_accuracy")
    if task == "text":
        raise ValueError("task 'text' is scored by its loss: use posenc.corpus.loss_per_position")
    tokens, targets, mask = marker_recall_batch(
        generator, batch, length, vocab_size=vocab_size, marker_at=0, device=device
    )
    return _accuracy(model, tokens, targets, mask)


class WithStartToken(nn.Module):
    """A model that always sees a start token (BOS) in front of the sequence it is given.

    The task's tokens are ``0 .. start_token - 1``; ``start_token`` is one more id, which the
    task never draws, so ``model`` needs a vocabulary of ``start_token + 1`` (e.g. a
    ``TinyTransformer(vocab_size + 1, ...)`` with ``start_token=vocab_size``). ``forward(tokens)``
    runs ``model`` on ``[start_token, x_0, x_1, ...]``, drops the output at the start token and
    the logit of the start token itself, so position ``m`` of the result belongs to token ``x_m``,
    its logits cover the task's vocabulary, and the task (targets, mask, :func:`train`,
    :func:`accuracy_per_position`) is unchanged. A decoder without position encoding (NoPE) can
    then read its position from the causal mask: a query at ``m`` that attends evenly gives the
    start token the weight ``1 / (m + 2)`` (``book/07_beyond.ipynb``, ``sec-nope``). The wrapper holds no
    parameters of its own.

    Shapes:
        tokens ``(b, s)`` int64 in ``[0, start_token)``; ``model`` maps ``(b, s + 1)`` to logits
        ``(b, s + 1, start_token + 1)``; returns logits ``(b, s, start_token)``.
    """

    def __init__(self, model: nn.Module, start_token: int):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.start_token = check_int("start_token", start_token, minimum=1)

    def forward(self, tokens: Tensor) -> Tensor:
        check_tensor("tokens", tokens, ndim=2)
        if tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be int64, got {tokens.dtype}")
        if has_values(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= self.start_token):
            raise ValueError(
                f"tokens must be task tokens in [0, start_token={self.start_token}), "
                f"got values {int(tokens.min())}..{int(tokens.max())}"
            )
        start = tokens.new_full((tokens.shape[0], 1), self.start_token)  # (b, 1)
        logits = self.model(torch.cat([start, tokens], dim=1))  # (b, s + 1, v + 1)
        if logits.shape[-1] != self.start_token + 1:
            raise ValueError(
                f"model must give logits over start_token + 1 = {self.start_token + 1} tokens, got {logits.shape[-1]}"
            )
        return logits[:, 1:, : self.start_token]  # (b, s, v): the task's positions and tokens

    def extra_repr(self) -> str:
        return f"start_token={self.start_token}"


# ---- Content retrieval at distance: associative recall and a passkey ---------------------------------
#
# Lag copy asks for one exact offset; marker recall and the two tasks below ask for a token that is
# identified by its content (a key, a marker), wherever it is. A scheme can fail the first and pass
# the others (ALiBi's penalty only grows with distance: it cannot prefer an exact offset, but it can
# let content win over a mild penalty), so the lab tests both kinds.

PASSKEY_QUERY = 1  #: the query token of the passkey task (its marker is :data:`MARKER`)


def _check_count(name: str, value: object, available: int, what: str) -> int:
    """An int in ``[1, available]``: how many distinct tokens a task draws from ``available`` of them."""
    value = check_int(name, value, minimum=1)
    if value > available:
        raise ValueError(f"{name} must be <= {available} ({what}), got {value}")
    return value


def associative_recall_vocabulary(vocab_size: int) -> tuple[range, range]:
    """The key tokens and the value tokens of associative recall: the lower and upper half of the ids.

    ``keys = range(0, v // 2)``, ``values = range(v // 2, v)``; for ``v = 16``, 8 keys and 8 values.
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=4)
    half = vocab_size // 2
    return range(half), range(half, vocab_size)


def associative_recall_batch(
    generator: torch.Generator,
    batch: int,
    length: int,
    *,
    vocab_size: int,
    num_pairs: int = 4,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """A batch of multi-query associative recall: key-value pairs first, then queries by key.

    Each row starts with ``num_pairs`` pairs ``k_1 v_1 k_2 v_2 ...`` (positions ``0 .. 2 P - 1``):
    distinct keys (one ``torch.randperm`` of the key tokens per row, first ``P`` kept) and values
    drawn uniformly with repetition (:func:`associative_recall_vocabulary`). Every later position
    ``m >= 2 P`` holds a key of the row drawn uniformly from its ``P`` keys, and its target is that
    key's value: the model must find the key by content, up to ``m`` positions back, and read the
    token after it (the multi-query form of Arora et al., arXiv:2312.04927). The pair positions have
    no target (``IGNORE_INDEX``, mask false), so accuracy per position is accuracy per distance from
    the pairs. Draws, in order: the key permutations (row by row), the values, the queries, all from
    ``generator`` on its device; then the tensors move to ``device``.

    Shapes:
        returns tokens ``(b, s)`` int64 in ``[0, v)``, targets ``(b, s)`` int64, mask ``(b, s)`` bool.
    """
    generator = _check_generator("generator", generator)
    keys, values = associative_recall_vocabulary(vocab_size)
    batch = check_int("batch", batch, minimum=1)
    num_pairs = _check_count("num_pairs", num_pairs, len(keys), f"the key tokens of vocab_size={vocab_size}")
    length = check_int("length", length, minimum=1)
    if length <= 2 * num_pairs:
        raise ValueError(
            f"length must be > 2 * num_pairs = {2 * num_pairs} (a query needs a place after the pairs), got {length}"
        )
    gen_device = generator.device
    row_keys = torch.stack(
        [torch.randperm(len(keys), generator=generator, device=gen_device)[:num_pairs] for _ in range(batch)]
    )  # (b, P) key ids, distinct per row
    row_values = values.start + torch.randint(
        len(values), (batch, num_pairs), generator=generator, device=gen_device
    )  # (b, P)
    which = torch.randint(
        num_pairs, (batch, length - 2 * num_pairs), generator=generator, device=gen_device
    )  # (b, s - 2P) index of the queried pair
    pairs = torch.stack([row_keys, row_values], dim=-1).reshape(batch, 2 * num_pairs)  # (b, 2P): k1 v1 k2 v2 ...
    queries = row_keys.gather(1, which)  # (b, s - 2P)
    tokens = torch.cat([pairs, queries], dim=1)  # (b, s)
    answers = row_values.gather(1, which)  # (b, s - 2P)
    targets = torch.cat([torch.full_like(pairs, IGNORE_INDEX), answers], dim=1)  # (b, s)
    mask = targets != IGNORE_INDEX
    if device is not None:
        tokens, targets, mask = tokens.to(device), targets.to(device), mask.to(device)
    return tokens, targets, mask


def passkey_vocabulary(vocab_size: int) -> tuple[range, range]:
    """The digit tokens and the filler tokens of the passkey task.

    Token :data:`MARKER` (0) announces the passkey, :data:`PASSKEY_QUERY` (1) asks for it; the rest
    is split in two halves: ``digits = range(2, 2 + D)`` and ``filler = range(2 + D, v)`` with
    ``D = (v - 2) // 2`` (for ``v = 16``: 7 digits, 7 filler tokens).
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=4)
    digits = (vocab_size - 2) // 2
    return range(2, 2 + digits), range(2 + digits, vocab_size)


def passkey_batch(
    generator: torch.Generator,
    batch: int,
    length: int,
    *,
    vocab_size: int,
    key_length: int = 3,
    depth: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """A batch of the passkey task: a key hidden in filler at ``depth``, asked for at the end.

    A row of ``length = s`` tokens with ``k = key_length`` is: filler (uniform over the filler tokens
    of :func:`passkey_vocabulary`); at position ``p`` (the depth) the marker and the key,
    ``MARKER d_1 .. d_k`` (``k`` distinct digits, one ``torch.randperm`` per row); and at the end
    ``PASSKEY_QUERY d_1 .. d_k`` from position ``q = s - k - 1`` on. The targets, as in a language
    model that is asked for the key: ``d_1`` at the query ``q``, then ``d_{j+1}`` at ``q + j`` (the
    model sees ``d_j`` and gives the next digit), for ``j = 1 .. k - 1``; every other position has
    none. The first target needs the key ``q - p - 1`` positions back, found by the marker (content);
    the others continue it. ``depth`` is ``p`` for every row, or (``None``) one draw per row, uniform
    in ``[0, q - k - 1]`` (the key ends before the query). Draws, in order: the filler, the depths
    (if drawn), the keys (row by row), from ``generator`` on its device; then the tensors move to
    ``device``.

    Shapes:
        returns tokens ``(b, s)`` int64 in ``[0, v)``, targets ``(b, s)`` int64, mask ``(b, s)`` bool
        (``k`` true entries per row).
    """
    generator = _check_generator("generator", generator)
    digits, filler = passkey_vocabulary(vocab_size)
    batch = check_int("batch", batch, minimum=1)
    key_length = _check_count(
        "key_length", key_length, len(digits), f"the distinct digit tokens of vocab_size={vocab_size}"
    )
    length = check_int("length", length, minimum=1)
    shortest = 2 * key_length + 2  # marker + key, query + key
    if length < shortest:
        raise ValueError(f"length must be >= 2 * key_length + 2 = {shortest}, got {length}")
    query = length - key_length - 1
    deepest = query - key_length - 1  # the last place where the marker fits before the query
    if depth is not None:
        depth = check_int("depth", depth, minimum=0)
        if depth > deepest:
            raise ValueError(
                f"depth must be <= length - 2 * key_length - 2 = {deepest} (the key ends before the query), got {depth}"
            )
    gen_device = generator.device
    tokens = filler.start + torch.randint(
        len(filler), (batch, length), generator=generator, device=gen_device
    )  # (b, s)
    if depth is None:
        where = torch.randint(0, deepest + 1, (batch,), generator=generator, device=gen_device)  # (b,)
    else:
        where = torch.full((batch,), depth, device=gen_device)
    key = digits.start + torch.stack(
        [torch.randperm(len(digits), generator=generator, device=gen_device)[:key_length] for _ in range(batch)]
    )  # (b, k) distinct digits per row
    rows = torch.arange(batch, device=gen_device)[:, None]  # (b, 1)
    offsets = torch.arange(key_length + 1, device=gen_device)  # (k + 1,)
    marked = torch.cat([torch.full((batch, 1), MARKER, device=gen_device), key], dim=1)  # (b, k + 1)
    tokens[rows, where[:, None] + offsets] = marked  # MARKER d_1 .. d_k at p .. p + k
    asked = torch.cat([torch.full((batch, 1), PASSKEY_QUERY, device=gen_device), key], dim=1)  # (b, k + 1)
    tokens[:, query:] = asked  # PASSKEY_QUERY d_1 .. d_k at q .. s - 1
    targets = torch.full_like(tokens, IGNORE_INDEX)  # (b, s)
    targets[:, query : query + key_length] = key  # d_1 at q, d_{j+1} at q + j
    mask = targets != IGNORE_INDEX
    if device is not None:
        tokens, targets, mask = tokens.to(device), targets.to(device), mask.to(device)
    return tokens, targets, mask


def passkey_depths(length: int, fractions: object, *, key_length: int = 3) -> list[int]:
    """The marker positions ``p = round(f * deepest)`` of a passkey read at the depth fractions ``f``.

    ``deepest = length - 2 * key_length - 2`` is the last place where the marker and the key fit
    before the query (:func:`passkey_batch`): ``f = 0`` hides the key at the first token, ``f = 1``
    just before the query. ``round`` is Python's (halves to even), as the lab's record was made.
    Raises ``TypeError`` for a non-integer length or key length or a fraction that is not a real
    number, ``ValueError`` for a length too short for the key, or a fraction outside ``[0, 1]``.
    """
    key_length = check_int("key_length", key_length, minimum=1)
    length = check_int("length", length, minimum=1)
    shortest = 2 * key_length + 2  # marker + key, query + key
    if length < shortest:
        raise ValueError(f"length must be >= 2 * key_length + 2 = {shortest}, got {length}")
    if isinstance(fractions, (str, bytes)) or not hasattr(fractions, "__iter__"):
        raise TypeError(f"fractions must be a sequence of numbers in [0, 1], got {fractions!r}")
    deepest = length - shortest
    depths = []
    for f in fractions:
        f = check_real("fractions[]", f)
        if not 0 <= f <= 1:
            raise ValueError(f"fractions[] must be in [0, 1] (0: the first token, 1: before the query), got {f:g}")
        depths.append(round(f * deepest))
    if not depths:
        raise ValueError("fractions must hold at least one fraction, got none")
    return depths


@torch.no_grad()
def passkey_accuracy(
    model: nn.Module,
    *,
    length: int,
    depths: object,
    vocab_size: int,
    seed: int,
    key_length: int = 3,
    batch: int = 256,
    per_digit: bool = False,
) -> Tensor:
    """Accuracy of the passkey's digits for the key hidden at each depth of ``depths``.

    For each depth ``p`` (in order), ``passkey_batch(torch.Generator().manual_seed(seed), batch,
    length, depth=p, ...)`` on the model's device; the result is the share of the ``batch * k``
    digits whose argmax is right. A fresh generator per depth, so every depth sees the same filler
    and keys, only moved. A model that cannot take ``length`` (a learned table) raises.

    ``per_digit=True`` gives each digit's share of the ``batch`` sequences instead: digit 0 is the one
    the model must fetch from the marker's place (it answers at the query token), digit ``j > 0`` the
    one it answers right after being shown digit ``j - 1``, which it may also find by that digit.
    Their mean over the digits is the default result.

    Shapes:
        depths: a sequence of ints; returns ``(len(depths),)`` float32 on the CPU, or with
        ``per_digit``, ``(len(depths), key_length)``.
    """
    device = _model_device(model)
    vocab_size = check_int("vocab_size", vocab_size, minimum=4)
    seed = check_int("seed", seed)
    if isinstance(depths, (str, bytes)) or not hasattr(depths, "__iter__"):
        raise TypeError(f"depths must be a sequence of integers, got {depths!r} ({type(depths).__name__})")
    depths = [check_int("depths[]", p, minimum=0) for p in depths]
    if not depths:
        raise ValueError("depths must hold at least one depth, got none")
    per_digit = check_bool("per_digit", per_digit)
    result = []
    for p in depths:
        generator = torch.Generator().manual_seed(seed)
        tokens, targets, mask = passkey_batch(
            generator, batch, length, vocab_size=vocab_size, key_length=key_length, depth=p, device=device
        )
        hits = (model(tokens).argmax(-1) == targets) & mask  # (b, s)
        if per_digit:  # the k answered places of each row, in order: (b, k) -> (k,)
            answered = hits[mask].view(hits.shape[0], -1)
            result.append(answered.float().mean(0))
        else:
            result.append(hits.float().sum() / mask.float().sum())
    return torch.stack(result).cpu()  # (len(depths),) or (len(depths), k)
