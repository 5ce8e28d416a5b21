// Turns what a transport threw for a LOCK.* command into this package's errors: the
// server's refusals (WRONGSESSION, WRONGMODE, DEADLOCK, unknown command) as their types,
// other error replies as CommandError, a lost or failed connection as ServerUnavailable.
import {
  CommandError,
  Deadlock,
  FencelockError,
  ModuleNotLoaded,
  ServerUnavailable,
  WrongMode,
  WrongSession,
} from "./errors.js";
import { deadlockKeys, errorCode, isUnknownCommand } from "./protocol.js";
import { ServerReply } from "./transport/index.js";

export function fromReply(error: unknown, key: string, command: string, server: string): Error {
  if (error instanceof FencelockError) return error;
  if (!(error instanceof ServerReply)) {
    return new ServerUnavailable(key, server, { cause: error });
  }
  const text = error.message;
  if (isUnknownCommand(text)) return new ModuleNotLoaded(key, command, server);
  switch (errorCode(text)) {
    case "WRONGSESSION":
      return new WrongSession(key, text);
    case "WRONGMODE":
      return new WrongMode(key, text);
    case "DEADLOCK":
      return new Deadlock(key, deadlockKeys(text)?.held ?? "", text);
    default:
      return new CommandError(key, text);
  }
}
