// A minimal RESP2 client for the test harness: one command on a fresh TCP connection,
// its reply parsed. The harness uses it to start servers and wire a cluster without
// depending on either client library under test, and tests use it to look at the server
// (LOCK.INFO, CLIENT LIST) through a connection nothing else shares.
import { connect } from "node:net";

export type Reply = null | number | string | Buffer | Error | Reply[];

/** Parses one reply from `data` at `at`; undefined while incomplete. */
function parse(data: Buffer, at: number): [Reply, number] | undefined {
  const end = data.indexOf("\r\n", at);
  if (end < 0) return undefined;
  const type = String.fromCharCode(data[at] ?? 0);
  const line = data.toString("utf8", at + 1, end);
  const next = end + 2;
  switch (type) {
    case "+":
      return [line, next];
    case "-":
      return [new Error(line), next];
    case ":":
      return [Number(line), next];
    case "$": {
      const length = Number(line);
      if (length < 0) return [null, next];
      if (data.length < next + length + 2) return undefined;
      return [data.toString("utf8", next, next + length), next + length + 2];
    }
    case "*": {
      const count = Number(line);
      if (count < 0) return [null, next];
      const items: Reply[] = [];
      let position = next;
      for (let i = 0; i < count; i++) {
        const item = parse(data, position);
        if (item === undefined) return undefined;
        items.push(item[0]);
        position = item[1];
      }
      return [items, position];
    }
    default:
      throw new Error(`unexpected RESP type ${JSON.stringify(type)}`);
  }
}

export function encode(args: ReadonlyArray<string | number>): Buffer {
  const parts = [`*${args.length}\r\n`];
  for (const arg of args) {
    const text = String(arg);
    parts.push(`$${Buffer.byteLength(text)}\r\n${text}\r\n`);
  }
  return Buffer.from(parts.join(""));
}

/** Sends one command to 127.0.0.1:`port` and resolves with its reply (an error reply
 * resolves as an Error, it is not thrown); rejects if the connection fails. */
export function command(
  port: number,
  args: ReadonlyArray<string | number>,
  timeoutMs = 10_000,
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    let data = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply from port ${port} to ${String(args[0])}`));
    }, timeoutMs);
    socket.on("connect", () => socket.write(encode(args)));
    socket.on("data", (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const parsed = parse(data, 0);
      if (parsed !== undefined) {
        clearTimeout(timer);
        socket.end();
        resolve(parsed[0]);
      }
    });
    socket.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** As `command`, but an error reply is thrown. */
export async function call(port: number, args: ReadonlyArray<string | number>): Promise<Reply> {
  const reply = await command(port, args);
  if (reply instanceof Error) throw reply;
  return reply;
}
