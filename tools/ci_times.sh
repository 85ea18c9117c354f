#!/usr/bin/env bash
# Time CI's .ci/run stage by stage, as CI runs it: in a fresh clone of a commit (cold: no .venv,
# no _build, no colab-check venvs), then, with --warm, a second `make test` in the same clone.
# The stages are read from the Makefile (`make setup`, each prerequisite of `test` in order,
# then `make colab-check`), so the table follows the Makefile. Prints a Markdown table and
# writes it to DIR/ci-times.md. Stops at the first failing stage, as .ci/run does.
#
# Usage: tools/ci_times.sh DIR [COMMIT] [--warm]    (COMMIT defaults to HEAD; DIR is replaced)
set -uo pipefail
dir=${1:?usage: tools/ci_times.sh DIR [COMMIT] [--warm]}
commit=${2:-HEAD}
warm=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
sha=$(git -C "$root" rev-parse "$commit") || exit 1
rm -rf "$dir"
git clone --quiet "$root" "$dir" && git -C "$dir" checkout --quiet "$sha" || exit 1
cd "$dir" || exit 1
stages=$(sed -n 's/^test: *//p' Makefile)
table=("| stage | seconds |" "|---|---|")
run() {  # run one make target, timed; a failure ends the run with the table so far
  local start=$SECONDS
  if ! make "$@"; then
    table+=("| make $* | FAILED after $((SECONDS - start)) |")
    printf '%s\n' "${table[@]}" | tee ci-times.md
    exit 1
  fi
  table+=("| make $* | $((SECONDS - start)) |")
}
total=$SECONDS
run setup
for stage in $stages; do run "$stage"; done
run colab-check
table+=("| cold .ci/run (all of the above) | $((SECONDS - total)) |")
if [ "$warm" = "--warm" ]; then
  warm_start=$SECONDS
  run test
  table+=("| warm make test (again, same clone) | $((SECONDS - warm_start)) |")
fi
echo "commit $sha on $(nproc) cores" | tee ci-times.md
printf '%s\n' "${table[@]}" | tee -a ci-times.md
