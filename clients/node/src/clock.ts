// The clock of leases: `performance.now()`, milliseconds since the process started,
// monotonic (never moved by NTP or by hand). A lease's deadline is on it.
import { performance } from "node:perf_hooks";

export function now(): number {
  return performance.now();
}
