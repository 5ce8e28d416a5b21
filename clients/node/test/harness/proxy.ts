// A TCP proxy in front of a server, for the tests of lost connections: `drop()` stops
// passing the server's replies to the clients (they are thrown away, as if lost on the
// way), `cut()` closes every connection through it (clients see a lost connection and
// reconnect through it), after which replies pass again.
import { createServer, connect, type Server as NetServer, type Socket } from "node:net";
import { freePort } from "./servers.js";

export interface Proxy {
  readonly port: number;
  /** From now on, the server's replies are thrown away. */
  drop(): void;
  /** From now on, the server's replies reach the clients `ms` later. */
  delay(ms: number): void;
  /** Closes every connection through the proxy; replies pass again on new ones. */
  cut(): void;
  /** How many connections were made through it so far. */
  readonly connections: number;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<Proxy> {
  const port = await freePort();
  const open = new Set<Socket>();
  let dropping = false;
  let delayMs = 0;
  let connections = 0;
  const server: NetServer = createServer((client) => {
    connections++;
    const upstream = connect({ host: "127.0.0.1", port: targetPort });
    open.add(client);
    open.add(upstream);
    client.on("data", (chunk) => upstream.write(chunk));
    upstream.on("data", (chunk) => {
      if (dropping) return;
      if (delayMs === 0) client.write(chunk);
      else setTimeout(() => client.write(chunk), delayMs);
    });
    const close = (): void => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on("close", close);
    upstream.on("close", close);
    client.on("error", close);
    upstream.on("error", close);
  });
  await new Promise<void>((done) => server.listen(port, "127.0.0.1", done));
  return {
    port,
    drop: () => {
      dropping = true;
    },
    delay: (ms) => {
      delayMs = ms;
    },
    cut: () => {
      for (const socket of open) socket.destroy();
      open.clear();
      dropping = false;
      delayMs = 0;
    },
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((done) => {
        for (const socket of open) socket.destroy();
        server.close(() => done());
      }),
  };
}
