#!/usr/bin/env bash
# Static checks of GitHub Actions workflows; both must report nothing:
#   check-jsonschema: the syntax, against the schema of GitHub workflows that the package ships
#     (--builtin-schema vendor.github-workflows: vendored, so nothing is downloaded);
#   zizmor --offline: the security audit (pinned actions, persisted credentials, injections...).
# Both come from PyPI, pinned in requirements.txt. tests/test_workflow.py checks the rest, and
# that this script fails on broken workflows.
# Usage: tools/lint-workflows.sh VENV_BIN [WORKFLOW_DIR]   (default: .github/workflows)
set -euo pipefail
bin=${1:-.venv/bin}
dir=${2:-.github/workflows}
shopt -s nullglob
workflows=("$dir"/*.yml "$dir"/*.yaml)
if [ ${#workflows[@]} -eq 0 ]; then
  echo "error: no workflow in $dir" >&2
  exit 1
fi
"$bin/check-jsonschema" --builtin-schema vendor.github-workflows "${workflows[@]}"
"$bin/zizmor" --offline --no-progress --quiet "${workflows[@]}"
