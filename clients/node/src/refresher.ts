// Keeps a manager's leases alive: one timer for all of them, and at each turn one batch
// per server on a connection of the refresher's own (so that no wait, and no command of
// the application, can hold a refresh up): `LOCK.REFRESH` for each lease of its own,
// `LOCK.KEEPALIVE` once per session and server for the leases of a session. A confirmed
// refresh moves the lease's deadline to ttl after the batch was *sent*; an answer that
// the token no longer holds marks the lease lost at once. A batch that fails is tried
// again soon; the lease's own deadline timer reports the loss if none gets through.
import { now, timerDelay } from "./clock.js";
import type { Lease } from "./lease.js";
import { type Arg, parseFlag, parseHeld, toNumber } from "./protocol.js";
import { type Link, ServerReply, type Transport } from "./transport/index.js";
import { redirection } from "./transport/types.js";

// A lease is refreshed every third of its ttl; items due within a sixth of a ttl join
// the same turn, so that leases of different ages share batches.
const REFRESH_SHARE = 1 / 3;
const EARLY_SHARE = 1 / 6;
// After a failed batch: soon again, but not in a tight loop.
const RETRY_MS = 200;

interface Own {
  lease: Lease;
  node: string;
  due: number;
}

interface Session {
  name: string;
  ttl: number;
  /** The session's leases per server. */
  nodes: Map<string, Set<Lease>>;
  due: number;
}

type Handler = (reply: unknown, sentAt: number, link: Link) => Promise<void> | void;

export class Refresher {
  readonly #transport: Transport;
  readonly #own = new Map<Lease, Own>();
  readonly #sessions = new Map<string, Session>();
  readonly #links = new Map<string, Promise<Link>>();
  #timer: NodeJS.Timeout | undefined;
  #running = false;

  constructor(transport: Transport) {
    this.#transport = transport;
  }

  /** Refreshes `lease` (on `node`) on its own until `remove`. */
  addOwn(lease: Lease, node: string): void {
    this.#own.set(lease, { lease, node, due: lease.acquiredAt + lease.ttl * REFRESH_SHARE });
    this.#schedule();
  }

  /** Keeps `lease` (of `lease.session`, on `node`) alive by its session's keepalive. */
  addToSession(lease: Lease, node: string): void {
    const name = lease.session;
    if (name === undefined) throw new Error("the lease has no session");
    let session = this.#sessions.get(name);
    if (session === undefined) {
      session = { name, ttl: lease.ttl, nodes: new Map(), due: lease.acquiredAt + lease.ttl * REFRESH_SHARE };
      this.#sessions.set(name, session);
    }
    let leases = session.nodes.get(node);
    if (leases === undefined) session.nodes.set(node, (leases = new Set()));
    leases.add(lease);
    this.#schedule();
  }

  /** Stops keeping `lease` alive; a batch already sent is not reported for it. */
  remove(lease: Lease): void {
    this.#own.delete(lease);
    if (lease.session !== undefined) {
      const session = this.#sessions.get(lease.session);
      for (const [node, leases] of session?.nodes ?? []) {
        leases.delete(lease);
        if (leases.size === 0) session?.nodes.delete(node);
      }
      if (session !== undefined && session.nodes.size === 0) this.#sessions.delete(session.name);
    }
    this.#stopIfIdle();
  }

  /** With nothing left to keep alive, its connections are closed: an open connection
   * keeps the process alive. The next lease opens them again. */
  #stopIfIdle(): void {
    if (this.#own.size === 0 && this.#sessions.size === 0) this.stop();
  }

  /** The leases of session `name`, forgotten (the manager closed it). */
  takeSession(name: string): Lease[] {
    const session = this.#sessions.get(name);
    this.#sessions.delete(name);
    this.#stopIfIdle();
    return [...(session?.nodes.values() ?? [])].flatMap((leases) => [...leases]);
  }

  /** Stops the timer and closes the refresher's connections. */
  stop(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const link of this.#links.values()) void link.then((open) => open.close(), () => undefined);
    this.#links.clear();
  }

  #tracked(lease: Lease): boolean {
    if (this.#own.has(lease)) return true;
    const session = lease.session === undefined ? undefined : this.#sessions.get(lease.session);
    return [...(session?.nodes.values() ?? [])].some((leases) => leases.has(lease));
  }

  #schedule(): void {
    if (this.#running) return;
    let next = Infinity;
    for (const own of this.#own.values()) next = Math.min(next, own.due);
    for (const session of this.#sessions.values()) next = Math.min(next, session.due);
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (next === Infinity) return;
    this.#timer = setTimeout(() => void this.#turn(), timerDelay(next - now()));
    this.#timer.unref();
  }

  #link(node: string): Promise<Link> {
    let link = this.#links.get(node);
    if (link === undefined) {
      link = this.#transport.open(node);
      this.#links.set(node, link);
      link.catch(() => this.#links.delete(node));
    }
    return link;
  }

  #drop(node: string): void {
    const link = this.#links.get(node);
    this.#links.delete(node);
    void link?.then((open) => open.close(), () => undefined);
  }

  async #turn(): Promise<void> {
    this.#timer = undefined;
    this.#running = true;
    try {
      const batches = this.#due();
      await Promise.all([...batches].map(([node, batch]) => this.#send(node, batch)));
    } finally {
      this.#running = false;
      this.#schedule();
    }
  }

  /** The commands due now, per server, each with what to do with its reply. */
  #due(): Map<string, Array<[Arg[], Handler, () => void]>> {
    const batches = new Map<string, Array<[Arg[], Handler, () => void]>>();
    const add = (node: string, args: Arg[], handler: Handler, retry: () => void): void => {
      let batch = batches.get(node);
      if (batch === undefined) batches.set(node, (batch = []));
      batch.push([args, handler, retry]);
    };
    const at = now();
    for (const own of this.#own.values()) {
      if (own.due > at + own.lease.ttl * EARLY_SHARE) continue;
      const { lease } = own;
      add(
        own.node,
        ["LOCK.REFRESH", lease.key, lease.token, lease.ttl],
        (reply, sentAt) => this.#refreshed(own, reply, sentAt),
        () => (own.due = now() + RETRY_MS),
      );
    }
    for (const session of this.#sessions.values()) {
      if (session.due > at + session.ttl * EARLY_SHARE) continue;
      for (const [node, leases] of session.nodes) {
        const expected = [...leases];
        add(
          node,
          ["LOCK.KEEPALIVE", session.name, session.ttl],
          (reply, sentAt, link) => this.#keptAlive(session, expected, reply, sentAt, link),
          () => (session.due = now() + RETRY_MS),
        );
      }
    }
    return batches;
  }

  async #send(node: string, batch: Array<[Arg[], Handler, () => void]>): Promise<void> {
    let link: Link;
    let replies: unknown[];
    let sentAt: number;
    let timer: NodeJS.Timeout | undefined;
    try {
      link = await this.#link(node);
      sentAt = now();
      // Bounded: an answer later than the shortest lease in it is worth nothing, and a
      // connection that does not answer is replaced.
      const bound = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("no answer in time")), timerDelay(this.#bound(batch)));
      });
      const sending = link.batch(batch.map(([args]) => args));
      sending.catch(() => undefined);
      replies = await Promise.race([sending, bound]);
    } catch {
      this.#drop(node);
      for (const [, , retry] of batch) retry();
      return;
    } finally {
      clearTimeout(timer);
    }
    for (const [index, [, handler, retry]] of batch.entries()) {
      const reply = replies[index];
      try {
        await handler(reply, sentAt, link);
      } catch {
        retry();
      }
    }
  }

  /** The shortest lease among a batch's commands (their ttl argument), in ms. */
  #bound(batch: Array<[Arg[], Handler, () => void]>): number {
    return Math.min(...batch.map(([args]) => Number(args[args.length - 1])));
  }

  #refreshed(own: Own, reply: unknown, sentAt: number): void {
    if (!this.#own.has(own.lease)) return; // released meanwhile
    if (reply instanceof ServerReply) {
      const moved = redirection(reply.message);
      if (moved === undefined) throw reply;
      own.node = moved.node; // the slot moved: refresh there
      this.#transport.refreshRouting();
      throw reply;
    }
    if (parseFlag(reply)) {
      own.lease.confirm(sentAt);
      own.due = sentAt + own.lease.ttl * REFRESH_SHARE;
    } else {
      this.remove(own.lease);
      own.lease.foundGone();
    }
  }

  async #keptAlive(
    session: Session,
    expected: Lease[],
    reply: unknown,
    sentAt: number,
    link: Link,
  ): Promise<void> {
    if (reply instanceof ServerReply) throw reply;
    session.due = sentAt + session.ttl * REFRESH_SHARE;
    if (toNumber(reply) >= expected.length) {
      for (const lease of expected) lease.confirm(sentAt);
      return;
    }
    // Fewer than this server should hold: which remain?
    const held = parseHeld(await link.send(["LOCK.HELD", session.name]));
    for (const lease of expected) {
      if (held.has(`${lease.key} ${lease.fence.toString()}`)) {
        lease.confirm(sentAt);
      } else if (this.#tracked(lease)) {
        this.remove(lease);
        lease.foundGone();
      }
    }
  }
}
