// The fencelock package for Node.js: locks with fencing tokens, FIFO waits and sessions
// over the fencelock server module, for node-redis and ioredis clients.
export {
  CommandError,
  Deadlock,
  FencelockError,
  LockLost,
  LockNotAcquired,
  ModuleNotLoaded,
  NotHeld,
  ServerUnavailable,
  StaleFence,
  WrongMode,
  WrongSession,
  type LostReason,
} from "./errors.js";
export { keySlot } from "./slot.js";
export { DEFAULT_TTL, HeldLocks, Locks, type Holding, type LockAllOptions, type LockOptions, type LocksOptions, type OnceOptions } from "./locks.js";
export { Lease } from "./lease.js";
