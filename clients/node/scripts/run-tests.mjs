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
const run = spawnSync(
  process.execPath,
  ["--test", "--test-concurrency=1", ...files],
  { stdio: "inherit" },
);
process.exit(run.status ?? 1);
