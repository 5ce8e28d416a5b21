// Runs the examples (clients/node/examples/*.js) as processes of their own, as a user
// runs them: `node <script> …` with REDIS_URL (and REDIS_CLUSTER) in the environment.
// Their output is collected line by line; each process is killed when the test that
// started it ends (`stopAll`), and in any case when the test process exits, so that
// no example outlives its test file (a process stopped with SIGSTOP included: SIGKILL
// ends it too).
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
// build/test/examples/ or test/examples/: clients/node is the folder above test/ or build/.
const packageRoot = resolve(here, here.includes("/build/") ? "../../.." : "../..");
export const examplesDir = join(packageRoot, "examples");

// Every example process not yet ended, with the promise of its end.
const running = new Map<ChildProcess, Promise<unknown>>();

process.on("exit", () => {
  for (const child of running.keys()) child.kill("SIGKILL");
});

/** Fails with what to do when the examples' own dependencies (express, the package
 * linked from `..`) are not installed: `npm ci` in clients/node/examples. */
export function requireExampleDeps(): void {
  for (const dep of ["express", "fencelock", "ioredis", "redis"]) {
    if (!existsSync(join(examplesDir, "node_modules", dep))) {
      throw new Error(
        `the examples' dependencies are not installed (no ${dep}): run \`make node-deps\`, ` +
          "or `npm run build` in clients/node and `npm ci` in clients/node/examples",
      );
    }
  }
}

export interface Example {
  readonly child: ChildProcess;
  /** Everything the process wrote to stdout so far. */
  stdout(): string;
  /** Resolves with the first stdout line matching `pattern`; rejects if the process
   * exits without one. */
  line(pattern: RegExp): Promise<RegExpMatchArray>;
  /** Waits for the process to exit, fails unless it exited with 0, returns stdout. */
  finish(): Promise<string>;
  /** Kills the process (SIGKILL) and waits for it to exit. */
  kill(): Promise<void>;
}

export interface Target {
  /** A node's `redis://host:port`: the server, or a cluster node to start from. */
  url: string;
  cluster: boolean;
}

export function runExample(
  script: string,
  args: string[],
  target: Target,
  env: Record<string, string> = {},
): Example {
  const child = spawn(process.execPath, [join(examplesDir, script), ...args], {
    cwd: examplesDir,
    env: {
      ...process.env,
      REDIS_URL: target.url,
      ...(target.cluster ? { REDIS_CLUSTER: "1" } : {}),
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  // "close", not "exit": the pipes have delivered the last output by then.
  const exited = new Promise<number | null>((done) => {
    child.once("close", (code) => {
      running.delete(child);
      done(code);
    });
  });
  running.set(child, exited);
  // Every stdout line seen so far, and the waiters for a line still to come.
  const waiters = new Set<(line: string) => boolean>();
  let partial = "";
  child.stdout.setEncoding("utf8");
  child.stderr.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    out += chunk;
    partial += chunk;
    const lines = partial.split("\n");
    partial = lines.pop() ?? "";
    for (const line of lines) for (const waiter of [...waiters]) if (waiter(line)) waiters.delete(waiter);
  });
  child.stderr.on("data", (chunk: string) => {
    err += chunk;
  });
  const describe = (): string => `${script} ${args.join(" ")}\nstdout:\n${out}\nstderr:\n${err}`;
  return {
    child,
    stdout: () => out,
    line(pattern: RegExp): Promise<RegExpMatchArray> {
      for (const seen of out.split("\n").slice(0, -1)) {
        const match = seen.match(pattern);
        if (match) return Promise.resolve(match);
      }
      return new Promise((found, failed) => {
        waiters.add((line) => {
          const match = line.match(pattern);
          if (match) found(match);
          return match !== null;
        });
        void exited.then((code) =>
          failed(new Error(`exited (${code}) before a line matching ${pattern}: ${describe()}`)),
        );
      });
    },
    async finish(): Promise<string> {
      const code = await exited;
      if (code !== 0) throw new Error(`exited with ${code}: ${describe()}`);
      return out;
    },
    async kill(): Promise<void> {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/** Kills every example still running (a test's clean-up, even after a failure). */
export async function stopAll(): Promise<void> {
  const ends = [...running.entries()].map(([child, ended]) => {
    child.kill("SIGKILL");
    return ended;
  });
  await Promise.all(ends);
}
