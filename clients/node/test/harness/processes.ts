// Child processes of the tests (servers), killed when the test process ends however it
// ends: on a normal exit by the exit hook, and when it is killed (SIGKILL, a runner's
// timeout) by a watchdog shell per child that polls the test process and kills the child
// once it is gone. No server outlives its test file.
import { spawn, type ChildProcess } from "node:child_process";

const running = new Set<ChildProcess>();

process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export function startProcess(path: string, args: string[]): ChildProcess {
  const child = spawn(path, args, { stdio: "ignore" });
  running.add(child);
  child.on("exit", () => running.delete(child));
  if (child.pid !== undefined) {
    const watchdog = spawn(
      "/bin/sh",
      [
        "-c",
        `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${child.pid} 2>/dev/null;` +
          ` do sleep 1; done; kill -9 ${child.pid} 2>/dev/null`,
      ],
      { stdio: "ignore", detached: true },
    );
    watchdog.unref();
  }
  return child;
}

/** Kills `child` and resolves once it has exited. */
export function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once("exit", () => resolve());
    child.kill("SIGKILL");
  });
}
