// A script that is done ends: after its locks are released and its client closed, the
// manager's own connections (waits, refreshes) do not keep the process alive, even
// without `locks.close()` (a cron script that forgets it must not hang).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { startServer, type Server } from "./harness/index.js";
import { LIBRARIES } from "./clients.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

const index = fileURLToPath(new URL("../src/index.js", import.meta.url));

const SCRIPTS = {
  ioredis: (port: number) => `
    import { Redis } from "ioredis";
    import { Locks } from ${JSON.stringify(index)};
    const client = new Redis(${port});
    const locks = new Locks(client);
    await locks.once("cron", { ttl: 5000, minHold: 2000 }, () => "ran");
    await locks.lock("job", { ttl: 5000, wait: 1000 }, async () => "done");
    await client.quit();
  `,
  "node-redis": (port: number) => `
    import { createClient } from "redis";
    import { Locks } from ${JSON.stringify(index)};
    const client = await createClient({ socket: { port: ${port} } }).connect();
    const locks = new Locks(client);
    await locks.once("cron", { ttl: 5000, minHold: 2000 }, () => "ran");
    await locks.lock("job", { ttl: 5000, wait: 1000 }, async () => "done");
    await client.quit();
  `,
};

for (const library of LIBRARIES) {
  test(`${library}: a script ends once its work is done, without locks.close()`, async () => {
    await server.call("FLUSHALL");
    const child = spawn(process.execPath, ["--input-type=module", "-e", SCRIPTS[library](server.port)], {
      cwd: fileURLToPath(new URL("../..", import.meta.url)),
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    // A hang is a failure: killed after a bound far above what the script needs.
    const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    const [code, signal] = await new Promise<[number | null, string | null]>((done) =>
      child.on("exit", (exitCode, exitSignal) => done([exitCode, exitSignal])),
    );
    clearTimeout(killer);
    assert.equal(signal, null, "the script did not end by itself");
    assert.equal(code, 0, stderr);
  });
}
