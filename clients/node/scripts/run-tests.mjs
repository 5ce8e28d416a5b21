// Runs the compiled tests (build/test/**/*.test.js) with Node's own test runner, one file
// at a time (each starts its own servers; the machine may be small). Node 18 and 20 take
// no glob patterns and treat every .js file under a test/ folder as a test file, so the
// list is made here. Arguments filter the files by a substring of their path.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

function testFiles(folder) {
  const found = [];
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) found.push(...testFiles(path));
    else if (entry.name.endsWith(".test.js")) found.push(path);
  }
  return found.sort();
}

const filters = process.argv.slice(2);
const files = testFiles("build/test").filter(
  (file) => filters.length === 0 || filters.some((filter) => file.includes(filter)),
);
if (files.length === 0) {
  console.error("no test file matches");
  process.exit(1);
}
// One file at a time: `--test-concurrency` where this Node has it (20.10 and later);
// Node 18 does not know the flag (a "bad option" error), so there each file gets a run
// of its own, and the first failure is the exit status.
const [major, minor] = process.versions.node.split(".").map(Number);
if (major > 20 || (major === 20 && minor >= 10)) {
  const run = spawnSync(process.execPath, ["--test", "--test-concurrency=1", ...files], {
    stdio: "inherit",
  });
  process.exit(run.status ?? 1);
}
let status = 0;
for (const file of files) {
  const run = spawnSync(process.execPath, ["--test", file], { stdio: "inherit" });
  if (status === 0) status = run.status ?? 1;
}
process.exit(status);
