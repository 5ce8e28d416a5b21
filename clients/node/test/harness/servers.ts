// Real servers for the tests: a standalone server and a 3-primary Redis Cluster, each
// node with the fencelock module loaded, on free loopback ports in temporary folders.
// The binaries come from the environment: FENCELOCK_REDIS_SERVER (default
// /usr/bin/redis-server) and FENCELOCK_MODULE (default ../../target/release/
// libfencelock.so from clients/node). Every server is killed by `stop()`, and in any
// case when the test process ends (processes.ts).
import { type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { keySlot } from "../../src/slot.js";
import { startProcess, stopProcess } from "./processes.js";
import { call, command, type Reply } from "./resp.js";

const here = fileURLToPath(new URL(".", import.meta.url));
// build/test/harness/ or test/harness/: clients/node is the folder above test/ or build/.
const packageRoot = resolve(here, here.includes("/build/") ? "../../.." : "../..");

export function serverBinary(): string {
  return process.env.FENCELOCK_REDIS_SERVER ?? "/usr/bin/redis-server";
}

export function modulePath(): string {
  return resolve(
    process.env.FENCELOCK_MODULE ?? join(packageRoot, "../../target/release/libfencelock.so"),
  );
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const probe = createServer();
    probe.once("error", () => done(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => done(true)));
  });
}

/** A port below the kernel's ephemeral range (32768 and up here: an outgoing
 * connection could take a port in it between this check and the server's bind), with
 * the cluster bus port (port + 10000) free too. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * 12_000);
    if ((await portIsFree(port)) && (await portIsFree(port + 10_000))) return port;
  }
}

export interface Server {
  readonly host: string;
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  readonly dir: string;
  /** One command on a connection of its own (an error reply is thrown). */
  call(...args: Array<string | number>): Promise<Reply>;
  /** The server's log so far. */
  log(): string;
  /** Stops (SIGSTOP) or resumes (SIGCONT) the server process: a stalled server. */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

export interface ServerOptions {
  /** More server arguments, as `["--hz", "100"]`. */
  args?: string[];
  /** Start without the module (a server that does not know LOCK.*). */
  withoutModule?: boolean;
}

async function until<T>(what: string, attempt: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const value = await attempt();
      if (value !== undefined) return value;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

class RunningServer implements Server {
  readonly host = "127.0.0.1";
  constructor(
    readonly port: number,
    readonly dir: string,
    private readonly child: ChildProcess,
  ) {}

  get url(): string {
    return `redis://${this.host}:${this.port}`;
  }

  call(...args: Array<string | number>): Promise<Reply> {
    return call(this.port, args);
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, "redis.log"), "utf8");
    } catch {
      return "";
    }
  }

  pause(): void {
    this.child.kill("SIGSTOP");
  }

  resume(): void {
    this.child.kill("SIGCONT");
  }

  async stop(): Promise<void> {
    this.resume(); // a paused server would not end on the stop signal
    await stopProcess(this.child);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export async function startServer(options: ServerOptions = {}): Promise<Server> {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "fencelock-node-"));
    const args = [
      "--port", String(port),
      "--bind", "127.0.0.1",
      "--dir", dir,
      "--save", "",
      "--appendonly", "no",
      "--logfile", join(dir, "redis.log"),
      ...(options.withoutModule ? [] : ["--loadmodule", modulePath()]),
      ...(options.args ?? []),
    ];
    const child = startProcess(serverBinary(), args);
    const server = new RunningServer(port, dir, child);
    try {
      await until(`the server on port ${port}`, async () => {
        if (child.exitCode !== null) throw new Error("exited");
        return (await command(port, ["PING"], 1000)) === "PONG" ? true : undefined;
      });
      return server;
    } catch (error) {
      const log = server.log();
      await server.stop();
      // Its port taken between the check and the bind: another port.
      if (log.includes("Failed listening on port") && attempt < 5) continue;
      throw new Error(`${serverBinary()} did not start (${String(error)}); log:\n${log}`);
    }
  }
}

export interface Cluster {
  /** The three primaries, in slot order: 0-5460, 5461-10922, 10923-16383. */
  readonly nodes: readonly Server[];
  /** `{host, port}` of every node, for a cluster client's start-up list. */
  readonly startup: ReadonlyArray<{ host: string; port: number }>;
  /** The node that owns `key`'s slot. */
  nodeOf(key: string): Server;
  stop(): Promise<void>;
}

const RANGES: ReadonlyArray<[number, number]> = [
  [0, 5460],
  [5461, 10922],
  [10923, 16383],
];

/** A Redis Cluster of three primaries (no replicas), all 16384 slots assigned, ready
 * (`cluster_state:ok` on every node, each knowing all three). */
export async function startCluster(options: ServerOptions = {}): Promise<Cluster> {
  const nodes: Server[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      nodes.push(
        await startServer({
          ...options,
          args: [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000",
            ...(options.args ?? []),
          ],
        }),
      );
    }
    for (const [i, node] of nodes.entries()) {
      const [from, to] = RANGES[i] ?? [0, 0];
      await node.call("CLUSTER", "ADDSLOTSRANGE", from, to);
    }
    for (const node of nodes.slice(1)) {
      await nodes[0]?.call("CLUSTER", "MEET", node.host, node.port);
    }
    for (const node of nodes) {
      await until("the cluster to form", async () => {
        const info = String(await node.call("CLUSTER", "INFO"));
        const slots = (await node.call("CLUSTER", "SLOTS")) as Reply[];
        return info.includes("cluster_state:ok") && slots.length === 3 ? true : undefined;
      });
    }
  } catch (error) {
    await Promise.all(nodes.map((node) => node.stop()));
    throw error;
  }
  return {
    nodes,
    startup: nodes.map((node) => ({ host: node.host, port: node.port })),
    nodeOf(key: string): Server {
      const slot = keySlot(key);
      const index = RANGES.findIndex(([from, to]) => slot >= from && slot <= to);
      const node = nodes[index];
      if (node === undefined) throw new Error(`no node for slot ${slot}`);
      return node;
    },
    async stop(): Promise<void> {
      await Promise.all(nodes.map((node) => node.stop()));
    },
  };
}

export interface Sentinel {
  readonly host: string;
  readonly port: number;
  /** The name the primary is monitored under. */
  readonly name: string;
  stop(): Promise<void>;
}

/** One Sentinel (quorum 1) monitoring `primary` as `name`, ready when it reports the
 * primary's address. */
export async function startSentinel(primary: Server, name = "fencelock"): Promise<Sentinel> {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "fencelock-node-sentinel-"));
    const conf = join(dir, "sentinel.conf");
    writeFileSync(
      conf,
      `port ${port}\nbind 127.0.0.1\ndir ${dir}\nlogfile ${dir}/sentinel.log\n` +
        `sentinel monitor ${name} 127.0.0.1 ${primary.port} 1\n` +
        `sentinel down-after-milliseconds ${name} 5000\n`,
    );
    const child = startProcess(serverBinary(), [conf, "--sentinel"]);
    const stop = async (): Promise<void> => {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    };
    try {
      await until(`the Sentinel on port ${port}`, async () => {
        if (child.exitCode !== null) throw new Error("exited");
        const address = await command(port, ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name], 1000);
        return Array.isArray(address) && Number(address[1]) === primary.port ? true : undefined;
      });
      return { host: "127.0.0.1", port, name, stop };
    } catch (error) {
      let log = "";
      try {
        log = readFileSync(join(dir, "sentinel.log"), "utf8");
      } catch {
        // no log
      }
      await stop();
      if (attempt < 5 && log.includes("Failed listening on port")) continue;
      throw new Error(`the Sentinel did not start (${String(error)}); log:\n${log}`);
    }
  }
}
