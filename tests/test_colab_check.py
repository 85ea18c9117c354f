"""tools/colab_check.py decides from the notebooks themselves where each must run: every notebook in
the first environment, and in another one only if it touched a module or distribution that differs
there. These tests check the two halves of that decision: the probe records what a notebook looks
up (and nothing it does not), and the comparison of two environments finds what differs.
"""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import colab_check  # a script in tools/, not a package


def probed(*sources: str) -> tuple[frozenset | None, nbformat.NotebookNode]:
    """Run a notebook of these code cells with the probe around it, in this Python's kernel."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    colab_check.add_probe(nb)
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    return colab_check.remove_probe(nb), nb


def test_the_probe_records_imports_spec_lookups_and_metadata_queries():
    touched, nb = probed(
        "import importlib.util\nassert importlib.util.find_spec('colab_check_absent_module') is None",
        "import importlib.metadata as m\n"
        "try:\n    m.version('Colab_Check.Absent-Dist')\nexcept m.PackageNotFoundError:\n    pass",
        "import colorsys",
    )
    assert touched is not None
    # names are normalized as distributions are (PEP 503), so modules and distributions compare
    assert {"colab-check-absent-module", "colab-check-absent-dist", "colorsys"} <= touched
    # the probe's cells are gone again: the notebook's own cells, untouched, and their outputs
    assert [c.source.splitlines()[-1] for c in nb.cells] == [
        "assert importlib.util.find_spec('colab_check_absent_module') is None",
        "    pass",
        "import colorsys",
    ]


def test_the_probe_records_nothing_the_notebook_does_not_touch():
    touched, _ = probed("x = 1 + 1")
    assert touched is not None
    assert "colab-check-absent-module" not in touched and "colorsys" not in touched


def test_a_notebook_whose_probe_did_not_finish_is_unknown():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise RuntimeError('planted')")])
    colab_check.add_probe(nb)
    with pytest.raises(Exception, match="planted"):
        NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    assert colab_check.remove_probe(nb) is None
    assert colab_check.can_differ(None, frozenset())  # so it runs in every environment


def test_what_differs_between_two_environments():
    tf5 = (
        {"torch": "2.13.0", "transformers": "5.23.0", "huggingface-hub": "1.2.0", "numpy": "2.4.6", "posenc": "1.1.0"},
        {
            "torch": ["torch"],
            "transformers": ["transformers"],
            "huggingface_hub": ["huggingface-hub"],
            "numpy": ["numpy"],
        },
    )
    tf4 = (
        {"torch": "2.13.0", "transformers": "4.57.1", "huggingface-hub": "0.36.0", "numpy": "2.4.6"},
        {
            "torch": ["torch"],
            "transformers": ["transformers"],
            "huggingface_hub": ["huggingface-hub"],
            "numpy": ["numpy"],
        },
    )
    none = ({"torch": "2.13.0", "numpy": "2.4.6"}, {"torch": ["torch"], "numpy": ["numpy"]})
    assert colab_check.differing(tf5, tf4) == {"transformers", "huggingface-hub"}
    assert colab_check.differing(tf5, none) == {"transformers", "huggingface-hub"}
    assert colab_check.differing(tf5, tf5) == set()  # posenc never counts: each set-up cell installs it


def test_a_notebook_runs_again_only_where_what_it_touched_differs():
    differ = frozenset({"transformers", "huggingface-hub"})
    assert colab_check.can_differ(frozenset({"torch", "transformers"}), differ)
    assert not colab_check.can_differ(frozenset({"torch", "numpy", "matplotlib"}), differ)


def orphans(*roots: str) -> set[str]:
    """What ORPHANS finds in this test's own venv, starting from these requirements."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", colab_check.ORPHANS, json.dumps(list(roots))],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(out.stdout))


def test_a_derived_venv_keeps_what_its_requirements_need_and_nothing_else():
    """derive_venv uninstalls what ORPHANS lists: every distribution that no requirement of the new
    environment needs, directly or through others (for `none`: transformers and what only it needed)."""
    from importlib.metadata import version

    assert version("pytest") and version("transformers") and version("huggingface-hub")
    without = orphans("pytest")
    # pytest and what it needs stay (pluggy, iniconfig), and pip
    assert not {"pytest", "pluggy", "iniconfig", "pip"} & without
    # what only other packages needed goes
    assert {"transformers", "huggingface-hub", "torch", "jupyter-book"} <= without
    with_transformers = orphans("pytest", "transformers>=5")
    assert not {"transformers", "huggingface-hub", "tokenizers", "safetensors"} & with_transformers
    assert without - with_transformers >= {"transformers", "huggingface-hub", "tokenizers"}
    # an extra's requirements are followed only when the extra is asked for
    # an extra's requirements are followed only when the extra is asked for (tqdm[notebook]: ipywidgets)
    assert version("ipywidgets")
    assert "ipywidgets" in orphans("tqdm") and "ipywidgets" not in orphans("tqdm[notebook]")


def test_a_venv_copy_runs_its_own_python_and_leaves_the_original_as_it_was(tmp_path):
    """hard_link_copy: files are hard links, but a console script that starts the original venv's
    Python is replaced, in the copy only, by one that starts the copy's."""
    root, copy = tmp_path / "venv", tmp_path / "copy"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    tool = root / "bin" / "tool"
    tool.write_bytes(f"#!{root}/bin/python\nimport sys\n".encode())
    tool.chmod(0o755)
    other = root / "bin" / "other"
    other.write_bytes(b"#!/usr/bin/env python\n")
    (root / "lib").mkdir()
    (root / "lib" / "module.py").write_text("x = 1\n")
    colab_check.hard_link_copy(root, copy)
    assert (copy / "bin" / "tool").read_bytes() == f"#!{copy}/bin/python\nimport sys\n".encode()
    assert (copy / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert tool.read_bytes() == f"#!{root}/bin/python\nimport sys\n".encode()  # the original is untouched
    assert (copy / "bin" / "other").samefile(other) and (copy / "lib" / "module.py").samefile(
        root / "lib" / "module.py"
    )
    assert (copy / "bin" / "python").is_symlink()


def test_the_first_venv_is_made_from_the_books_venv_only_when_there_is_one(tmp_path, monkeypatch):
    monkeypatch.setattr(colab_check, "BOOK_VENV", tmp_path / "missing")
    assert colab_check.book_venv_build() is None
    assert colab_check.venv_from_book("tf5", sys.executable, fresh=False) is None
    # make setup's venv (this one, when the tests run from it) is recognised by its stamp
    monkeypatch.setattr(colab_check, "BOOK_VENV", colab_check.ROOT / ".venv")
    if (colab_check.ROOT / ".venv" / ".installed").is_file():
        assert colab_check.book_venv_build() is not None


def test_the_venvs_are_where_the_book_build_does_not_look_for_sources():
    """sphinx-external-toc globs every folder of the repository (the book's source folder) for sources
    at each build, and glob skips hidden folders only: the venvs' 350,000 files must be in one."""
    assert colab_check.VENVS.is_relative_to(colab_check.ROOT)
    assert any(part.startswith(".") for part in colab_check.VENVS.relative_to(colab_check.ROOT).parts)
    planted = colab_check.ROOT / "_build" / "test-glob-probe"
    hidden = planted / colab_check.VENVS.name / "lib"
    hidden.mkdir(parents=True, exist_ok=True)
    try:
        (hidden / "page.md").write_text("x")
        found = glob.glob(str(colab_check.ROOT / "_build" / "test-glob-probe" / "**" / "*.md"), recursive=True)
        assert found == [], found
    finally:
        shutil.rmtree(planted)


def test_torch_compile_caches_are_shared_only_by_environments_with_the_same_torch_closure(tmp_path):
    """compile_cache: one folder per torch closure (torch, what it needs recursively, the Python)."""
    closure = colab_check.torch_closure(Path(sys.executable))
    dists = closure["distributions"]
    assert closure["python"] == ".".join(map(str, sys.version_info[:3]))
    # torch and what it requires (sympy, and what sympy requires: mpmath), with this Python's versions
    assert dists["torch"] == metadata.version("torch") and dists["sympy"] == metadata.version("sympy")
    assert dists["mpmath"] == metadata.version("mpmath")
    assert "transformers" not in dists and "numpy" not in dists  # not needed by torch
    same = colab_check.compile_cache(tmp_path, json.loads(json.dumps(closure)))
    assert same == colab_check.compile_cache(tmp_path, closure) and same.parent == tmp_path / "torch-compile"
    for name in ("torch", "sympy", "mpmath"):
        other = {**closure, "distributions": {**dists, name: "0.0.1"}}
        assert colab_check.compile_cache(tmp_path, other) != same, name
    assert colab_check.compile_cache(tmp_path, {**closure, "python": "3.10.0"}) != same
