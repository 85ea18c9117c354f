"""Where a notebook finds a recorded experiment of the book's repository (``experiments/<name>/``).

Book: the lab (``book/09_lab.ipynb``, ``experiments/lab/``), the context-extension chapter
(``book/10_extension.ipynb``, ``experiments/extension/``) and the real-text chapter
(``book/13_real_text.ipynb``, ``experiments/real_text/``). The training of those chapters runs once,
in a script under ``experiments/`` that writes a record (``record.json``, a CSV, small checkpoints);
the notebook reads the record and re-evaluates its checkpoints. :func:`find_record` finds it:

1. in the repository the notebook runs in: ``start`` (default: the working directory) or a folder
   above it holding ``experiments/<name>/record.json``;
2. else (Colab, where only ``posenc`` was installed) in a shallow, sparse clone of ``repository`` (the
   git URL the set-up cell installed ``posenc`` from, ``git+`` prefix and ``#subdirectory`` allowed)
   into ``<tempdir>/posenc-book``, of ``experiments/`` only; a clone already there is reused if it
   holds the record, else a fresh one is made beside it (``<tempdir>/posenc-book-XXXX``).

The scripts and notebooks save and load the records' checkpoints with :func:`save_checkpoint`,
:func:`load_checkpoint` and :func:`round_to_checkpoint` (float16 state dicts).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import torch

RECORD_FILE = "record.json"
CLONE_FOLDER = "posenc-book"


def repository_url(url: str) -> str:
    """The plain git URL of a pip requirement URL: ``git+URL[@ref][#subdirectory=code]`` -> ``URL``.

    The ``@ref`` of pip is cut only from the last path component (``ssh://git@host/...`` keeps its user).
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, got {type(url).__name__}")
    plain = url.removeprefix("git+").split("#")[0]
    head, _, last = plain.rpartition("/")
    plain = f"{head}/{last.split('@')[0]}" if head else plain
    if "://" not in plain or not plain.split("://", 1)[1].strip("/"):
        raise ValueError(f"url must be a git repository URL such as git+https://host/owner/name, got {url!r}")
    return plain


def _record_in(folder: Path, name: str) -> Path | None:
    record = folder / "experiments" / name
    return record if (record / RECORD_FILE).is_file() else None


def find_record(name: str, *, start: str | os.PathLike | None = None, repository: str | None = None) -> Path:
    """The folder ``experiments/<name>`` (with its ``record.json``) of the book's repository.

    Looked for in ``start`` (default: the working directory) and every folder above it; if none
    holds it and ``repository`` is given, in a shallow sparse clone of ``repository``'s
    ``experiments/`` under ``tempfile.gettempdir() / "posenc-book"`` (made once, then reused; if a
    clone there lacks the record, a fresh clone beside it).
    Raises ``FileNotFoundError`` when it is in neither, ``subprocess.CalledProcessError`` when git
    fails, ``TypeError``/``ValueError`` for a bad argument.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"name must be the name of one folder under experiments/, got {name!r}")
    if start is None:
        start = Path.cwd()
    elif not isinstance(start, (str, os.PathLike)):
        raise TypeError(f"start must be a path, got {type(start).__name__}")
    if repository is not None:
        repository = repository_url(repository)
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if found := _record_in(folder, name):
            return found
    if repository is None:
        raise FileNotFoundError(
            f"experiments/{name}/{RECORD_FILE} not found in {start} or above it: run the notebook in the"
            " book's repository, or give the repository's URL (in Colab: run the set-up cell)"
        )
    clone = Path(tempfile.gettempdir()) / CLONE_FOLDER
    if found := _record_in(clone, name):
        return found
    if clone.exists():  # an older clone without this record: a fresh one beside it
        clone = Path(tempfile.mkdtemp(prefix=f"{CLONE_FOLDER}-"))
    shallow = ["--depth", "1", "--filter=blob:none", "--sparse"]
    subprocess.run(["git", "clone", *shallow, repository, str(clone)], check=True, capture_output=True)
    sparse = ["git", "-C", str(clone), "sparse-checkout", "set", "experiments"]
    subprocess.run(sparse, check=True, capture_output=True)
    if found := _record_in(clone, name):
        return found
    raise FileNotFoundError(f"experiments/{name}/{RECORD_FILE} not found in the clone of {repository} at {clone}")


# --- Checkpoints ----------------------------------------------------------------------------------
#
# A record's checkpoints are float16 state dicts (half the bytes of float32, small enough for git).
# The scripts round every model to float16 before they evaluate it, so that a checkpoint reproduces
# the record's numbers exactly: round_to_checkpoint(model) gives the same weights as
# load_checkpoint(model, path) after save_checkpoint(model, path).

CHECKPOINT_DTYPE = torch.float16


def _check_module(model: object) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _check_path(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return Path(path)


def checkpoint_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s state dict as a checkpoint holds it: floating-point tensors in float16, others as they are."""
    state = _check_module(model).state_dict()
    return {name: t.to(CHECKPOINT_DTYPE) if t.is_floating_point() else t for name, t in state.items()}


def save_checkpoint(model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Write ``model``'s :func:`checkpoint_state` to ``path`` (its folder is made if missing)."""
    path = _check_path(path)
    state = checkpoint_state(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def _load_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    own = model.state_dict()
    model.load_state_dict({name: t.to(own[name].dtype) if name in own else t for name, t in state.items()})
    return model


def load_checkpoint(model: torch.nn.Module, path: str | os.PathLike) -> torch.nn.Module:
    """``model`` (built with the checkpoint's architecture) with the weights saved at ``path``, each in
    the model's own dtype, in eval mode; returns ``model``. Missing or unexpected keys raise, as
    ``load_state_dict`` does."""
    model, path = _check_module(model), _check_path(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    return _load_state(model, state).eval()


@torch.no_grad()
def round_to_checkpoint(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with its floating-point weights rounded to float16 and back, in place: the weights
    :func:`load_checkpoint` would give after :func:`save_checkpoint`. Returns ``model``."""
    return _load_state(model, checkpoint_state(model))
