"""Static checks of the GitHub Actions workflow beyond actionlint and zizmor (run by make test-workflows)."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def load(path):
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_there_is_a_workflow_that_runs_make_test_and_publishes_pages():
    assert [p.name for p in WORKFLOWS] == ["book.yml"]
    workflow = load(WORKFLOWS[0])
    assert set(workflow["on"]) == {"push", "pull_request"}
    steps = workflow["jobs"]["test"]["steps"]
    assert any(step.get("run") == "make test" for step in steps)
    assert any(step.get("uses", "").startswith("actions/upload-pages-artifact@") for step in steps)
    assert workflow["jobs"]["deploy"]["steps"][0]["uses"].startswith("actions/deploy-pages@")
    assert workflow["jobs"]["deploy"]["needs"] == "test"


def test_every_action_is_pinned_to_a_commit_sha():
    for path in WORKFLOWS:
        uses = re.findall(r"uses:\s*(\S+)", path.read_text())
        assert uses
        for ref in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned to a SHA"


def test_permissions_are_least_privilege():
    workflow = load(WORKFLOWS[0])
    assert workflow["permissions"] == {}  # nothing by default
    assert workflow["jobs"]["test"]["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    for step in workflow["jobs"]["test"]["steps"]:
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False
