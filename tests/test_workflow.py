"""Static checks of the GitHub Actions workflow beyond what tools/lint-workflows.sh checks
(check-jsonschema against GitHub's workflow schema, and zizmor; run by make lint-workflows),
and proof that the script fails on broken workflows and works offline."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BOOK = ROOT / ".github" / "workflows" / "book.yml"
COLAB = ROOT / ".github" / "workflows" / "colab.yml"
EXPERIMENTS = ROOT / ".github" / "workflows" / "experiments.yml"
LINT = ROOT / "tools" / "lint-workflows.sh"
VENV_BIN = Path(sys.executable).parent  # where check-jsonschema and zizmor are installed
# Any attempt to download (a schema, an advisory) goes to a closed port and fails the check.
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
OFFLINE = {**os.environ, **dict.fromkeys(PROXIES, "http://127.0.0.1:9"), "NO_PROXY": "", "no_proxy": ""}


def load(path):
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_there_are_the_three_workflows():
    assert [p.name for p in WORKFLOWS] == ["book.yml", "colab.yml", "experiments.yml"]


def test_there_is_a_workflow_that_runs_make_test_and_publishes_pages():
    workflow = load(BOOK)
    assert set(workflow["on"]) == {"push", "pull_request"}
    steps = workflow["jobs"]["test"]["steps"]
    # make test, with the pages' full-page screenshots (SITE_SCREENSHOTS=1) kept as an artifact
    assert any(step.get("run") == "make test SITE_SCREENSHOTS=1" for step in steps)
    kept = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert [step["with"]["path"] for step in kept] == ["_build/screenshots"]
    assert any(step.get("uses", "").startswith("actions/upload-pages-artifact@") for step in steps)
    assert workflow["jobs"]["deploy"]["steps"][0]["uses"].startswith("actions/deploy-pages@")
    assert workflow["jobs"]["deploy"]["needs"] == "test"


def test_a_weekly_workflow_runs_the_colab_check_in_colabs_image_and_opens_an_issue_on_failure():
    workflow = load(COLAB)
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    assert len(workflow["on"]["schedule"]) == 1
    minute, hour, day, month, weekday = workflow["on"]["schedule"][0]["cron"].split()
    assert minute.isdigit() and hour.isdigit() and day == month == "*" and weekday.isdigit(), "once a week"
    runs = "\n".join(step.get("run", "") for step in workflow["jobs"]["check"]["steps"])
    assert "us-docker.pkg.dev/colab-images/public/runtime" in runs
    assert "tools/colab_check.py --env system" in runs
    report = workflow["jobs"]["open-issue"]
    assert report["needs"] == "check" and report["if"] == "failure()"
    assert "gh issue create" in report["steps"][0]["run"]
    assert "${{" not in report["steps"][0]["run"], "pass values through env:, not into the script"


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_weekly_workflow_reruns_every_recorded_experiment_and_compares_it_with_its_record():
    workflow = load(EXPERIMENTS)
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    assert len(workflow["on"]["schedule"]) == 1
    minute, hour, day, month, weekday = workflow["on"]["schedule"][0]["cron"].split()
    assert minute.isdigit() and hour.isdigit() and day == month == "*" and weekday.isdigit(), "once a week"
    job = workflow["jobs"]["rerun"]
    assert job["strategy"]["fail-fast"] is False  # one moved arm does not hide the others
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert "make setup" in runs
    assert any('"experiments/$SCRIPT" --compare $ARGS' in run for run in runs)
    assert all("${{" not in run for run in runs), "pass matrix values through env:, not into the script"
    # two jobs per arm of lab.py's CONFIG (against the record and against the replication), and one
    # for each other script with a --compare, and each of its kinds of run
    lab = load_script("lab")
    include = job["strategy"]["matrix"]["include"]
    arms = [tuple(item["args"].split()) for item in include if item["script"] == "lab.py"]
    expected = [("--arm", task, scheme) for task in lab.CONFIG["tasks"] for scheme in lab.CONFIG["schemes"]]
    assert sorted(arms) == sorted(expected + [("--against", "replication", *arm) for arm in expected])
    others = [item for item in include if item["script"] != "lab.py"]
    assert others == [
        {"script": "extension.py", "args": ""},
        {"script": "extension.py", "args": "--against replication"},
        {"script": "real_text.py", "args": "--jobs 2"},
        {"script": "passkey_digits.py", "args": "--extension"},
        {"script": "aliasing.py", "args": "--seeds"},
        {"script": "aliasing.py", "args": "--bases"},
        {"script": "sinusoidal_scale.py", "args": ""},
    ]
    comparing = {p.name for p in (ROOT / "experiments").glob("*.py") if '"--compare"' in p.read_text()}
    assert comparing == {"lab.py", *(item["script"] for item in others)}
    assert job["permissions"] == {"contents": "read"}
    # torch's kernels held to the instruction set the kept re-runs used (experiments/lab.py: environment)
    assert job["env"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }


#: every results file the repository keeps under experiments/, and the weekly job that trains its models
#: again and compares (script, args); rerun.csv holds the record's seeds trained again, so the
#: record's jobs compare the same models
KEPT_RESULTS = {
    "extension/passkey_digits.csv": ("passkey_digits.py", "--extension"),
    "extension/replication.csv": ("extension.py", "--against replication"),
    "extension/rerun.csv": ("extension.py", ""),
    "extension/results.csv": ("extension.py", ""),
    "lab/aliasing.csv": ("aliasing.py", "--seeds"),
    "lab/aliasing_bases.csv": ("aliasing.py", "--bases"),
    "lab/passkey_digits.csv": ("lab.py", "--arm passkey rope"),
    "lab/replication.csv": ("lab.py", "--against replication --arm lag_copy rope"),
    "lab/rerun.csv": ("lab.py", "--arm lag_copy rope"),
    "lab/results.csv": ("lab.py", "--arm lag_copy rope"),
    "lab/sinusoidal_scale.csv": ("sinusoidal_scale.py", ""),
    "real_text/bands.csv": ("real_text.py", "--jobs 2"),
    "real_text/results.csv": ("real_text.py", "--jobs 2"),
}


def test_every_kept_result_is_trained_again_and_compared_every_week():
    kept = sorted(str(p.relative_to(ROOT / "experiments")) for p in (ROOT / "experiments").glob("*/*.csv"))
    assert kept == sorted(KEPT_RESULTS), "a kept result without a weekly job (add it to KEPT_RESULTS and the matrix)"
    include = load(EXPERIMENTS)["jobs"]["rerun"]["strategy"]["matrix"]["include"]
    jobs = {(item["script"], item["args"]) for item in include}
    assert set(KEPT_RESULTS.values()) <= jobs
    # each file's script reads it when it compares
    for name, (script, _) in KEPT_RESULTS.items():
        source = (ROOT / "experiments" / script).read_text()
        base = Path(name).name
        assert base in source or (base == "rerun.csv" and "results.csv" in source), (name, script)


def test_jobs_run_on_a_pinned_runner_image():
    for path in WORKFLOWS:
        for job in load(path)["jobs"].values():
            assert re.fullmatch(r"ubuntu-\d\d\.\d\d", job["runs-on"]), "pin the image, not ubuntu-latest"


def test_every_action_is_pinned_to_a_commit_sha():
    for path in WORKFLOWS:
        uses = re.findall(r"uses:\s*(\S+)", path.read_text())
        assert uses
        for ref in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), (
                f"{path.name}: {ref} is not pinned to a SHA"
            )


def test_permissions_are_least_privilege():
    workflow = load(BOOK)
    assert workflow["jobs"]["test"]["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    colab = load(COLAB)  # the job that runs the notebooks cannot write; the one that can runs no code
    assert colab["jobs"]["check"]["permissions"] == {"contents": "read"}
    assert colab["jobs"]["open-issue"]["permissions"] == {"issues": "write"}
    for path in WORKFLOWS:
        workflow = load(path)
        assert workflow["permissions"] == {}  # nothing by default
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def lint(tmp_path, text):
    """Run tools/lint-workflows.sh, offline, on a folder holding one workflow with this text."""
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "book.yml").write_text(text)
    return subprocess.run(
        ["bash", str(LINT), str(VENV_BIN), str(folder)],
        cwd=tmp_path,
        env=OFFLINE,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_checks_pass_the_real_workflow_offline(path, tmp_path):
    result = lint(tmp_path, path.read_text())
    assert result.returncode == 0, result.stdout + result.stderr


# Each case breaks the real workflow in one place; the checks must then fail, naming the problem.
# One case per tool: they show that each tool runs and that its findings fail the script; the
# tools' own test suites cover the rest of what they catch.
BROKEN = {
    "unknown job key (check-jsonschema)": (
        "    permissions:\n      contents: read",
        "    permisions:\n      contents: read",
        "permisions",
    ),
    "persisted credentials (zizmor)": ("persist-credentials: false", "fetch-depth: 1", "artipacked"),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_the_checks_fail_on_a_broken_workflow(case, tmp_path):
    old, new, named = BROKEN[case]
    text = BOOK.read_text()
    assert old in text, f"the workflow changed: update the case {case!r}"
    result = lint(tmp_path, text.replace(old, new, 1))
    assert result.returncode != 0, f"{case}: the checks passed a broken workflow\n{result.stdout}{result.stderr}"
    assert named in result.stdout + result.stderr
