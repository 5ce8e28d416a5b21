// The test harness of the Node package, for its own tests and the examples' tests:
// real servers with the module loaded (standalone and a 3-primary cluster), a
// one-command RESP client to look at them, and a TCP proxy that can cut or hold a
// connection.
export { call, command, encode, type Reply } from "./resp.js";
export {
  freePort,
  modulePath,
  serverBinary,
  startCluster,
  startSentinel,
  startServer,
  type Cluster,
  type Sentinel,
  type Server,
  type ServerOptions,
} from "./servers.js";
export { startProcess, stopProcess } from "./processes.js";
export { startProxy, type Proxy } from "./proxy.js";
