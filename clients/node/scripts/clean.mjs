// Removes the build output folders named on the command line (dist/, build/), so that a
// file deleted from src/ or test/ leaves no stale compiled copy behind.
import { rmSync } from "node:fs";

for (const folder of process.argv.slice(2)) {
  rmSync(folder, { recursive: true, force: true });
}
