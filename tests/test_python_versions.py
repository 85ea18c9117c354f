"""The book's Python runs on every version posenc declares: 3.10 to 3.13.

Two checks over every .py file under code/, tests/, tools/, benchmarks/ and book/_ext/ and every
notebook code cell (IPython magics turned into the Python they stand for first):

* syntax: each source compiles under the grammar of each version, with the real interpreter
  where this machine has it (pyenv's, or python3.X on PATH) and otherwise with
  `ast.parse(..., feature_version=...)`, which knows the grammar of older versions only;
* standard-library APIs: vermin (pinned in requirements.txt; it works offline) must find nothing
  that needs more than 3.10, such as `tomllib`, `typing.Self`, `datetime.UTC`, `enum.StrEnum`
  (3.11), `itertools.batched` or `typing.override` (3.12).

Planted examples prove that each check fails on code that needs a newer Python.
"""

import ast
import functools
import glob
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[1]
MINORS = [10, 11, 12, 13]  # keep in step with code/pyproject.toml's classifiers
FOLDERS = ["code", "tests", "tools", "benchmarks", "book/_ext"]
SKIP = {"fixtures", "__pycache__", ".ipynb_checkpoints"}
VERMIN = Path(sys.executable).parent / "vermin"
# vermin reads `tensor.long()` as Python 2's builtin `long`; no file uses that builtin.
VERMIN_ARGS = ["-t=3.10-", "--no-tips", "--violations", "--eval-annotations", "--exclude", "long"]


def python_files():
    return sorted(
        p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if not SKIP & set(p.relative_to(ROOT).parts)
    )


def notebook_cells():
    """{name: source} of every notebook code cell, magics as the Python IPython runs for them."""
    transform = TransformerManager().transform_cell
    cells = {}
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                cells[f"{path.relative_to(ROOT)}:cell{index}"] = transform(cell.source)
    return cells


@functools.cache
def sources():
    found = {str(p.relative_to(ROOT)): p.read_text() for p in python_files()}
    return found | notebook_cells()


@functools.cache
def interpreter(minor):
    """A working python3.<minor> on this machine, or None."""
    home = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python3.{minor}")]
    candidates += sorted(glob.glob(str(home / "versions" / f"3.{minor}.*" / "bin" / f"python3.{minor}")))
    candidates += [f"/usr/bin/python3.{minor}", f"/usr/local/bin/python3.{minor}"]
    for candidate in filter(None, candidates):
        try:
            result = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError:
            continue
        if result.returncode == 0 and result.stdout.strip() == f"(3, {minor})":
            return candidate
    return None


COMPILE_ALL = """
import json, sys
failures = {}
for name, text in json.load(sys.stdin).items():
    try:
        compile(text, name, "exec", dont_inherit=True)
    except SyntaxError as error:
        failures[name] = f"line {error.lineno}: {error.msg}"
print(json.dumps(failures))
"""


def syntax_errors(found, minor):
    """{name: error} of the sources that the grammar of Python 3.<minor> rejects."""
    python = interpreter(minor)
    if python is not None:  # the real grammar of that version
        result = subprocess.run(
            [python, "-I", "-c", COMPILE_ALL], input=json.dumps(found), capture_output=True, text=True, check=True
        )
        return json.loads(result.stdout)
    if minor > sys.version_info.minor:
        pytest.skip(f"no python3.{minor} here, and ast.parse cannot check a grammar newer than its own")
    failures = {}
    for name, text in found.items():
        try:
            ast.parse(text, name, feature_version=(3, minor))
        except SyntaxError as error:
            failures[name] = f"line {error.lineno}: {error.msg}"
    return failures


def newer_apis(folder):
    """vermin's report of what, under folder, needs a Python newer than 3.10 ('' if nothing)."""
    result = subprocess.run(
        [str(VERMIN), *VERMIN_ARGS, str(folder)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.stdout if result.returncode else ""


def write_sources(found, folder):
    """The sources as .py files (notebook cells one file each), for vermin."""
    folder.mkdir()
    for index, (name, text) in enumerate(found.items()):
        stem = re.sub(r"\W+", "_", name)
        (folder / f"{index:04d}_{stem}.py").write_text(text)
    return folder


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"3.{m}")
def test_every_source_parses_on_each_supported_python(minor):
    found = sources()
    assert len(found) > 50 and any(":cell" in name for name in found)
    failures = syntax_errors(found, minor)
    assert not failures, f"Python 3.{minor} cannot parse:\n" + "\n".join(f"{k}: {v}" for k, v in failures.items())


def test_nothing_needs_a_standard_library_newer_than_3_10(tmp_path):
    report = newer_apis(write_sources(sources(), tmp_path / "sources"))
    assert not report, f"these need a Python newer than 3.10 (posenc supports 3.10+):\n{report}"


def test_posenc_declares_python_3_10_to_3_13():
    metadata = importlib.metadata.metadata("posenc")  # run `pip install -e code` after editing pyproject
    assert metadata["Requires-Python"] == ">=3.10"
    classifiers = metadata.get_all("Classifier") or []
    declared = sorted(
        int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert declared == MINORS


# Each plant needs a newer Python than 3.10 in one way: one for the grammar check, one for vermin's
# standard-library check (they show that each check runs and fails; vermin's own tests cover the
# rest of what it knows).
PLANTED_SYNTAX = {
    "except* (3.11)": "try:\n    pass\nexcept* ValueError:\n    pass\n",
}
PLANTED_APIS = {
    "itertools.batched (3.12)": ("import itertools\npairs = list(itertools.batched('abcd', 2))\n", "itertools.batched"),
}


@pytest.mark.parametrize("case", PLANTED_SYNTAX, ids=list(PLANTED_SYNTAX))
def test_the_syntax_check_fails_on_newer_syntax(case):
    assert syntax_errors({"planted.py": PLANTED_SYNTAX[case]}, 10), f"{case} passed as Python 3.10"


def test_a_notebook_magic_is_not_a_syntax_error():
    transformed = TransformerManager().transform_cell("%xmode Minimal\nx = 1\n!ls\n")
    assert not syntax_errors({"cell": transformed}, 10)


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory):
    """vermin's report on the planted examples, each in a file of its own, and on one that is fine."""
    planted = {case: code for case, (code, _) in PLANTED_APIS.items()}
    return newer_apis(
        write_sources({**planted, "fine": "x: int | None = None\n"}, tmp_path_factory.mktemp("p") / "src")
    )


@pytest.mark.parametrize("case", PLANTED_APIS, ids=list(PLANTED_APIS))
def test_the_api_check_fails_on_newer_standard_library(case, planted_report):
    index = list(PLANTED_APIS).index(case)
    named = PLANTED_APIS[case][1]
    flagged = re.search(rf"^\S.*{index:04d}_\w*\.py\n((?:  .*\n)+)", planted_report, re.MULTILINE)
    assert flagged and named in flagged.group(1), f"{case} passed as Python 3.10:\n{planted_report}"


def test_the_api_check_passes_code_that_3_10_runs(planted_report):
    assert planted_report and "_fine.py" not in planted_report
