"""posenc.corpus: the shipped real-text corpus, its batches, and the ALiBi-style evaluation."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import math
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from posenc import TinyTransformer
from posenc.corpus import (
    SPLITS,
    VOCAB_SIZE,
    corpus_info,
    evaluation_windows,
    load_split,
    loss_per_position,
    perplexity,
    split_tensor,
    text_batch,
)
from posenc.tasks import accuracy_per_position, train

ROOT = Path(__file__).resolve().parents[1]


def test_the_manifest_names_source_release_licence_and_every_file():
    info = corpus_info()
    assert info["release"] == "3.11.7" and "PSF" in info["licence"]
    names = {split: [f["name"] for f in info["splits"][split]["files"]] for split in SPLITS}
    assert len(names["train"]) == 112 and len(names["validation"]) == 16
    assert not set(names["train"]) & set(names["validation"])  # no file in both splits
    for split in SPLITS:
        assert names[split] == sorted(names[split])
        assert sum(f["bytes"] for f in info["splits"][split]["files"]) == info["splits"][split]["bytes"]
    licence = resources.files("posenc").joinpath("data", "CPYTHON_LICENSE.txt").read_text()
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence


@pytest.mark.parametrize("split", SPLITS)
def test_each_split_is_its_files_joined_ascii_and_matches_its_hash(split):
    data = load_split(split)
    info = corpus_info()["splits"][split]
    assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"]
    assert max(data) < 128  # ASCII only: one byte, one character
    # the split is its files in order: each file's hash matches its slice
    start = 0
    for f in info["files"]:
        assert hashlib.sha256(data[start : start + f["bytes"]]).hexdigest() == f["sha256"], f["name"]
        start += f["bytes"]
    tensor = split_tensor(split)
    assert tensor.dtype == torch.int64 and tensor.shape == (len(data),)
    assert bytes(tensor[:100].tolist()) == data[:100]


def test_the_shipped_corpus_is_what_the_builder_makes_from_its_rule(tmp_path):
    # tools/make_corpus.py's selection rule, applied to a fake Lib folder, picks and splits as documented
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "tools" / "make_corpus.py")
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    lib = tmp_path / "Lib"
    lib.mkdir()
    (lib / "a.py").write_bytes(b"x" * 3000)
    (lib / "b.py").write_bytes(b"x" * 100)  # too short
    (lib / "c.py").write_bytes(b"\xc3\xa9" * 2000)  # not ASCII
    (lib / "d.py").write_bytes(b"y" * 70_000)  # too long
    (lib / "_sysconfigdata_x.py").write_bytes(b"z" * 3000)  # generated
    (lib / "e.txt").write_bytes(b"w" * 3000)  # not a module
    assert [p.name for p in make_corpus.select(lib)] == ["a.py"]


def test_text_batch_is_windows_of_the_split_with_their_next_bytes():
    data = split_tensor("train")
    tokens, targets, mask = text_batch(torch.Generator().manual_seed(3), 5, 40)
    assert tokens.shape == targets.shape == mask.shape == (5, 40) and mask.all()
    assert torch.equal(tokens[:, 1:], targets[:, :-1])  # the target is the next byte
    # the documented draw: one torch.randint call over every start that leaves room for the next byte
    starts = torch.randint(0, len(data) - 40, (5,), generator=torch.Generator().manual_seed(3))
    for row, target, start in zip(tokens, targets, starts.tolist(), strict=True):
        assert torch.equal(row, data[start : start + 40]) and torch.equal(target, data[start + 1 : start + 41])
    again, _, _ = text_batch(torch.Generator().manual_seed(3), 5, 40)
    other, _, _ = text_batch(torch.Generator().manual_seed(4), 5, 40)
    assert torch.equal(tokens, again) and not torch.equal(tokens, other)


def test_evaluation_windows_score_the_same_bytes_at_every_length():
    data = split_tensor("validation")
    for length in (8, 32, 128):
        tokens, targets = evaluation_windows(length, num_bytes=1024)
        assert tokens.shape == targets.shape == (1024 // length, length)
        assert torch.equal(tokens.flatten(), data[:1024]) and torch.equal(targets.flatten(), data[1:1025])


class Bigram(torch.nn.Module):
    """A fixed next-byte model: logits depend on the current byte only (a known answer to compare with)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(VOCAB_SIZE, VOCAB_SIZE, generator=torch.Generator().manual_seed(0)))

    def forward(self, tokens):
        return self.table[tokens]  # (b, s, 256)


def test_loss_per_position_is_the_cross_entropy_of_each_position_over_the_windows():
    model = Bigram()
    tokens, targets = evaluation_windows(16, num_bytes=512)
    with torch.no_grad():
        expected = F.cross_entropy(model(tokens).transpose(1, 2), targets, reduction="none").double().mean(0)
    for batch in (1, 5, 32):  # the batching does not change the answer
        got = loss_per_position(model, 16, num_bytes=512, batch=batch)
        assert got.shape == (16,) and got.dtype == torch.float64
        torch.testing.assert_close(got, expected)
    assert perplexity(model, 16, num_bytes=512) == pytest.approx(math.exp(float(expected.mean())))
    # a context-free model scores the same bytes alike at every window length
    assert perplexity(model, 64, num_bytes=512) == pytest.approx(perplexity(model, 16, num_bytes=512))


def test_a_uniform_model_has_perplexity_256():
    class Uniform(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            return torch.zeros(*tokens.shape, VOCAB_SIZE) + self.dummy

    assert perplexity(Uniform(), 32, num_bytes=256) == pytest.approx(256.0)


def test_training_on_text_lowers_the_validation_loss():
    model = TinyTransformer(VOCAB_SIZE, position="alibi", dim=32, num_heads=2, num_layers=1, seed=0, device="cpu")
    before = perplexity(model.eval(), 32, num_bytes=2048)
    losses = train(
        model.train(), steps=60, batch=16, lr=3e-3, min_len=32, max_len=32, vocab_size=256, seed=0, task="text"
    )
    after = perplexity(model.eval(), 32, num_bytes=2048)
    assert losses.shape == (60,)
    assert before == pytest.approx(256, rel=0.05)  # at initialisation: nearly uniform
    assert after < 0.2 * before


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: load_split("test"), "split must be one of"),
        (lambda: text_batch(torch.Generator(), 2, 8, split="dev"), "split must be one of"),
        (lambda: text_batch(0, 2, 8), "generator must be a torch.Generator"),
        (lambda: text_batch(torch.Generator(), 0, 8), "batch"),
        (lambda: text_batch(torch.Generator(), 2, 0), "length"),
        (lambda: text_batch(torch.Generator(), 2, 10**8), "length"),
        (lambda: evaluation_windows(16, num_bytes=100), "num_bytes must be a multiple of length = 16, got 100"),
        (lambda: evaluation_windows(16, num_bytes=8), "num_bytes"),
        (lambda: evaluation_windows(16, num_bytes=10**8), "num_bytes"),
        (lambda: loss_per_position("model", 16, num_bytes=64), "model must be a torch.nn.Module"),
        (lambda: loss_per_position(Bigram(), 16, num_bytes=64, batch=0), "batch"),
        (
            lambda: train(
                Bigram(), steps=1, batch=1, lr=1e-3, min_len=4, max_len=4, vocab_size=16, seed=0, task="text"
            ),
            "vocab_size must be 256, got 16",
        ),
        (
            lambda: accuracy_per_position(Bigram(), length=8, vocab_size=256, seed=0, task="text"),
            "task 'text' is scored by its loss",
        ),
    ],
)
def test_bad_arguments_raise_naming_the_argument(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_a_model_with_the_wrong_vocabulary_raises():
    small = TinyTransformer(16, position="none", dim=16, num_heads=2, num_layers=1, seed=0, device="cpu")
    with pytest.raises(ValueError, match="tokens must be in"):
        loss_per_position(small, 8, num_bytes=64)

    class FewLogits(torch.nn.Module):  # no parameters at all: runs on the CPU, then its logits are refused
        def forward(self, tokens):
            return torch.zeros(*tokens.shape, 10)

    with pytest.raises(ValueError, match="model must return logits over 256 bytes, got"):
        loss_per_position(FewLogits(), 8, num_bytes=64)


def test_the_corpus_ships_inside_an_installed_wheel(tmp_path):
    # package data: a wheel built from code/ holds the corpus, its manifest and its licence
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT / "code"),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("posenc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("cpython_train.txt.gz", "cpython_validation.txt.gz", "manifest.json", "CPYTHON_LICENSE.txt"):
        assert f"posenc/data/{name}" in names
    packed = zipfile.ZipFile(wheel).read("posenc/data/cpython_validation.txt.gz")
    assert gzip.decompress(packed) == load_split("validation")
