// The clock of leases: `performance.now()`, milliseconds since the process started,
// monotonic (never moved by NTP or by hand). A lease's deadline is on it.
import { performance } from "node:perf_hooks";

export function now(): number {
  return performance.now();
}

// setTimeout fires at once for a delay past 2^31 - 1 ms (24.8 days): longer ones are
// armed to this and armed again when it fires.
export const LONGEST_TIMER_MS = 2 ** 31 - 1;

/** A delay for setTimeout: at least 0, at most `LONGEST_TIMER_MS`. */
export function timerDelay(ms: number): number {
  return Math.min(LONGEST_TIMER_MS, Math.max(0, Math.ceil(ms)));
}
