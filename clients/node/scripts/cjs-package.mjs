// Marks dist/cjs/ as CommonJS: the package is "type": "module", so without this file
// Node would read the CommonJS build's .js files as ES modules.
import { writeFileSync } from "node:fs";

writeFileSync("dist/cjs/package.json", JSON.stringify({ type: "commonjs" }) + "\n");
