"""nbval, as make test runs it, really compares stored outputs: it fails on a wrong one.

Each case runs nbval in strict mode (--nbval, never --nbval-lax) on a fixture notebook in a
fresh pytest process, exactly as the Makefile's test-notebooks target does on book/.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SANITIZE = ["--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg")]


def run_nbval(notebook: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "--nbval", *extra, "-p", "no:cacheprovider", str(FIXTURES / notebook)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_makefile_runs_nbval_strict_with_the_sanitizer():
    makefile = (ROOT / "Makefile").read_text()
    assert "--nbval-lax" not in makefile
    assert "NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg" in makefile
    # on every core, but each notebook whole on one worker: its cells share one kernel, in order
    assert "$(NBVAL) -n $(JOBS) --dist loadfile --durations=10 book" in makefile


def test_a_correct_stored_output_passes():
    result = run_nbval("nbval_right_output.ipynb", *SANITIZE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_stored_output_fails():
    result = run_nbval("nbval_wrong_output.ipynb", *SANITIZE)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    assert "mismatch" in result.stdout.lower()


@pytest.mark.parametrize("sanitize", [True, False])
def test_the_sanitizer_masks_addresses_and_kernel_paths_only(sanitize):
    # Memory addresses and kernel temp paths differ run to run; with the sanitizer they match.
    result = run_nbval("nbval_machine_dependent.ipynb", *(SANITIZE if sanitize else []))
    if sanitize:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode == 1 and "2 failed" in result.stdout, result.stdout + result.stderr


def load_book_conftest():
    spec = importlib.util.spec_from_file_location("book_conftest", ROOT / "book" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_that_dies_while_starting_is_started_again_and_only_that():
    book = load_book_conftest()
    calls = []

    def flaky(fail_times, error=RuntimeError):
        def start(**kwargs):
            calls.append(kwargs)
            if len(calls) <= fail_times:
                raise error("Kernel died before replying to kernel_info")
            return "km", "kc"

        return start

    assert book.retrying(flaky(2))(kernel_name="python3") == ("km", "kc")
    assert len(calls) == 3 and all(c == {"kernel_name": "python3"} for c in calls)
    calls.clear()
    with pytest.raises(RuntimeError, match="Kernel died"):
        book.retrying(flaky(3))(kernel_name="python3")  # three failures: the notebook fails
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ValueError, match="Kernel died"):
        book.retrying(flaky(1, ValueError))(kernel_name="python3")  # not a start failure: not retried
    assert len(calls) == 1
