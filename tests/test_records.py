"""posenc.records: finding a recorded experiment above a notebook, or in a clone of the repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import posenc
from posenc import records
from posenc.records import find_record, repository_url

ROOT = Path(__file__).resolve().parents[1]


def make_record(root: Path, name: str) -> Path:
    folder = root / "experiments" / name
    folder.mkdir(parents=True)
    (folder / "record.json").write_text("{}\n")
    return folder


def test_the_repositorys_own_records_are_found_from_the_book_folder():
    for name in ("lab", "extension", "real_text"):
        assert find_record(name, start=ROOT / "book") == ROOT / "experiments" / name


def test_a_record_is_found_in_the_start_folder_or_any_folder_above_it(tmp_path):
    record = make_record(tmp_path, "demo")
    deep = tmp_path / "book" / "part" / "chapter"
    deep.mkdir(parents=True)
    assert find_record("demo", start=deep) == record
    assert find_record("demo", start=str(tmp_path)) == record


def test_the_working_directory_is_the_default_start(tmp_path, monkeypatch):
    record = make_record(tmp_path, "demo")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")
    assert find_record("demo") == record


def test_a_folder_without_record_json_is_not_a_record(tmp_path):
    (tmp_path / "experiments" / "demo").mkdir(parents=True)  # no record.json
    with pytest.raises(FileNotFoundError, match=r"experiments/demo/record\.json"):
        find_record("demo", start=tmp_path)


def test_a_missing_record_without_a_repository_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="set-up cell"):
        find_record("nowhere", start=tmp_path)


def test_a_missing_record_is_fetched_from_a_sparse_clone_of_the_repository(tmp_path, monkeypatch):
    # a local git repository stands in for the book's: the clone goes to <tempdir>/posenc-book and
    # checks out experiments/ only
    origin = tmp_path / "origin"
    make_record(origin, "demo")
    (origin / "book").mkdir()
    (origin / "book" / "chapter.md").write_text("not cloned\n")
    git = ["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "record"], check=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    elsewhere = tmp_path / "colab"
    elsewhere.mkdir()
    url = f"git+file://{origin}#subdirectory=code"
    found = find_record("demo", start=elsewhere, repository=url)
    assert found == scratch / "posenc-book" / "experiments" / "demo"
    assert (found / "record.json").read_text() == "{}\n"
    assert not (scratch / "posenc-book" / "book" / "chapter.md").exists()  # sparse: experiments/ only
    # a second call reuses the clone; a name the repository lacks raises
    assert find_record("demo", start=elsewhere, repository=url) == found
    with pytest.raises(FileNotFoundError, match="clone"):
        find_record("other", start=elsewhere, repository=url)
    # an older clone without a record (made before it was added): a fresh clone beside it has it
    make_record(origin, "newer")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "newer"], check=True)
    newer = find_record("newer", start=elsewhere, repository=url)
    assert newer.parent.parent.name.startswith("posenc-book-") and (newer / "record.json").is_file()
    assert not (scratch / "posenc-book" / "experiments" / "newer").exists()  # the old clone is left as it was


@pytest.mark.parametrize(
    ("url", "plain"),
    [
        ("git+https://github.com/o/r#subdirectory=code", "https://github.com/o/r"),
        ("git+https://github.com/o/r@v1.2#subdirectory=code", "https://github.com/o/r"),
        ("https://github.com/o/r", "https://github.com/o/r"),
        ("git+ssh://git@github.com/o/r", "ssh://git@github.com/o/r"),
    ],
)
def test_repository_url_strips_pips_prefix_ref_and_fragment(url, plain):
    assert repository_url(url) == plain


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": 3}, TypeError, "name must be a string, got int"),
        ({"name": ""}, ValueError, "name must be the name of one folder"),
        ({"name": "../lab"}, ValueError, r"got '\.\./lab'"),
        ({"name": ".."}, ValueError, r"got '\.\.'"),
        ({"name": "lab", "start": 3}, TypeError, "start must be a path, got int"),
        ({"name": "lab", "repository": 3}, TypeError, "url must be a string, got int"),
        ({"name": "lab", "repository": "github.com/o/r"}, ValueError, "url must be a git repository URL"),
        ({"name": "lab", "repository": "git+https://"}, ValueError, "url must be a git repository URL"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        find_record(**kwargs)


def test_records_is_a_public_module_of_posenc():
    assert posenc.records.find_record is find_record


# --- Checkpoints -----------------------------------------------------------------------------------


class _WithCounter(torch.nn.Module):
    """A float layer and an integer buffer: the buffer must survive a checkpoint unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(5, 3)
        self.register_buffer("steps", torch.tensor([70000, 3], dtype=torch.int64))


def test_a_checkpoint_holds_float16_and_loads_as_round_to_checkpoint_predicts(tmp_path):
    torch.manual_seed(0)
    model = _WithCounter()
    with torch.no_grad():
        model.linear.weight.mul_(1 + 1e-3 * torch.pi)  # values float16 cannot hold exactly
    path = tmp_path / "sub" / "model.pt"
    records.save_checkpoint(model, path)
    state = torch.load(path, weights_only=True)
    assert state["linear.weight"].dtype == torch.float16
    assert state["steps"].dtype == torch.int64 and state["steps"].tolist() == [70000, 3]
    loaded = records.load_checkpoint(_WithCounter(), path)
    assert not loaded.training and loaded.linear.weight.dtype == torch.float32
    rounded = records.round_to_checkpoint(model)
    assert rounded is model
    for name, tensor in rounded.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    # rounding really changed the weights (else the test above would prove nothing)
    torch.manual_seed(0)
    original = _WithCounter()
    with torch.no_grad():
        original.linear.weight.mul_(1 + 1e-3 * torch.pi)
    assert not torch.equal(original.linear.weight, rounded.linear.weight)
    torch.testing.assert_close(original.linear.weight, rounded.linear.weight, rtol=1e-3, atol=0)


def test_checkpoint_helpers_name_a_bad_argument(tmp_path):
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        records.save_checkpoint({"w": torch.zeros(1)}, tmp_path / "x.pt")
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike"):
        records.save_checkpoint(torch.nn.Linear(2, 2), 3)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        records.round_to_checkpoint("model")
    records.save_checkpoint(torch.nn.Linear(2, 2), tmp_path / "x.pt")
    with pytest.raises(RuntimeError, match="size mismatch"):
        records.load_checkpoint(torch.nn.Linear(3, 2), tmp_path / "x.pt")
