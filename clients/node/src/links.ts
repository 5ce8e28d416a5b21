// The connections of this package's own that waits (BLOCK) and its own commands run on,
// per server, made from the application's client without its timeouts. Idle ones are
// kept a while for the next wait, and closed after it: an open connection keeps the
// process alive, and a script that is done should end.
import type { Link, Transport } from "./transport/index.js";

// Idle connections kept per server, and for how long each.
const IDLE_PER_NODE = 4;
const IDLE_MS = 1_000;

interface Idle {
  link: Link;
  timer: NodeJS.Timeout;
}

/** The wait connections of one manager, per server; idle ones are kept a while for
 * reuse. */
export class WaitLinks {
  readonly #idle = new Map<string, Idle[]>();
  readonly #transport: Transport;

  constructor(transport: Transport) {
    this.#transport = transport;
  }

  async take(node: string): Promise<Link> {
    const idle = this.#idle.get(node)?.pop();
    if (idle === undefined) return this.#transport.open(node);
    clearTimeout(idle.timer);
    return idle.link;
  }

  give(node: string, link: Link): void {
    let idle = this.#idle.get(node);
    if (idle === undefined) this.#idle.set(node, (idle = []));
    if (idle.length >= IDLE_PER_NODE) {
      link.close();
      return;
    }
    const entry: Idle = {
      link,
      timer: setTimeout(() => {
        const left = this.#idle.get(node);
        const at = left?.indexOf(entry) ?? -1;
        if (at >= 0) left?.splice(at, 1);
        link.close();
      }, IDLE_MS),
    };
    entry.timer.unref();
    idle.push(entry);
  }

  close(): void {
    for (const idle of this.#idle.values()) {
      for (const { link, timer } of idle) {
        clearTimeout(timer);
        link.close();
      }
    }
    this.#idle.clear();
  }
}
