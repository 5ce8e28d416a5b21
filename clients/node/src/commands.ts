// The package's own commands (acquires without a wait, refreshes after a long wait,
// releases, clean-ups, session commands), sent on connections of its own: made like the
// application's client (its address, auth, TLS, database) but without its timeouts, so
// that what is done after a grant never depends on the application's client staying
// open. node-redis 6 closes a client for good when its `socketTimeout` passes on an
// idle connection; a release sent on it would fail and leave the grant held by nobody
// until its ttl. Every command here is idempotent by its token or session name, so a
// lost connection or a client-side TRYAGAIN is asked again (bounded), MOVED and ASK are
// followed.
import { now, timerDelay } from "./clock.js";
import type { WaitLinks } from "./links.js";
import type { Arg } from "./protocol.js";
import { type Link, ServerReply, type Transport } from "./transport/index.js";
import { MAX_REDIRECTS, MAX_TRYAGAIN, TRYAGAIN_PAUSE_MS, isTryAgain, pause, redirection } from "./transport/types.js";

// How often a command whose connection was lost is sent again on a new one.
const RECONNECTS = 3;
const RECONNECT_PAUSE_MS = 100;

export class OwnCommands {
  readonly #transport: Transport;
  readonly #links: WaitLinks;

  constructor(transport: Transport, links: WaitLinks) {
    this.#transport = transport;
    this.#links = links;
  }

  /** One command to the node that owns `key`. */
  async call(key: string, args: Arg[]): Promise<unknown> {
    return this.callNode(await this.#transport.nodeOf(key), args);
  }

  /** One command to `node`; `bound` (ms) limits it, tries again included: a
   * connection with no answer by then is closed, and the command fails. */
  async callNode(node: string, args: Arg[], bound?: number): Promise<unknown> {
    const until = bound === undefined ? Infinity : now() + bound;
    let target = node;
    let asking = false;
    let redirects = 0;
    let tries = 0;
    let reconnects = 0;
    for (;;) {
      const link = await this.#links.take(target);
      let reply: unknown;
      try {
        reply = await bounded(link, asking ? askingSend(link, args) : link.send(args), until);
      } catch (error) {
        if (!(error instanceof ServerReply)) {
          // The connection was lost (or gave no answer in time): a new one.
          link.close();
          if (reconnects++ >= RECONNECTS || now() + RECONNECT_PAUSE_MS >= until) throw error;
          await pause(RECONNECT_PAUSE_MS);
          continue;
        }
        this.#links.give(target, link);
        if (isTryAgain(error) && tries++ < MAX_TRYAGAIN) {
          await pause(TRYAGAIN_PAUSE_MS);
          continue;
        }
        const moved = redirection(error.message);
        if (moved === undefined || redirects++ >= MAX_REDIRECTS) throw error;
        if (!moved.ask) this.#transport.refreshRouting();
        target = moved.node;
        asking = moved.ask;
        continue;
      }
      this.#links.give(target, link);
      return reply;
    }
  }
}

async function askingSend(link: Link, args: Arg[]): Promise<unknown> {
  const [, reply] = await link.batch([["ASKING"], args]);
  if (reply instanceof ServerReply) throw reply;
  return reply;
}

async function bounded(link: Link, sending: Promise<unknown>, until: number): Promise<unknown> {
  if (until === Infinity) return sending;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      link.close();
      reject(new Error("no answer in time"));
    }, timerDelay(until - now()));
    timer.unref();
  });
  sending.catch(() => undefined);
  try {
    return await Promise.race([sending, late]);
  } finally {
    clearTimeout(timer);
  }
}
