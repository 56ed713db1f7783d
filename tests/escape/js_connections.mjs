// Connections, in JavaScript (shares_connections' attack from node): the run's own bridge
// address, taken from the SDK's own connection (`net.connect` wrapped, as any code may), then up
// to ARGS.connections connections to it, each held open for ARGS.hold_ms and sending nothing.
// The sidecar must take at most the run's share of them (64; the rest wait in the run's own
// backlog, or are never accepted): the harness counts the sidecar's descriptors meanwhile, and
// a victim run's calls must answer as on an idle sidecar.
import net from "node:net";

const bridge = {};
const connect = net.connect;
net.connect = function (options, ...rest) {
  bridge.port = options.port;
  return connect.call(this, options, ...rest);
};
// Two calls at once: the prelude's call left the SDK one idle connection, the second opens one.
await Promise.all([tools.noop({}), tools.noop({})]);
net.connect = connect;
console.log("BRIDGE", bridge.port ? "found" : "not found");
console.log("ATTEMPT hold", ARGS.connections, "connections to the bridge");
const held = [];
while (held.length < ARGS.connections) {
  const socket = await new Promise((resolve) => {
    const s = net.connect(bridge.port, "127.0.0.1");
    const slow = setTimeout(() => {
      s.destroy();
      resolve(null);
    }, 200);
    s.once("connect", () => {
      clearTimeout(slow);
      resolve(s);
    });
    s.once("error", () => {
      clearTimeout(slow);
      resolve(null);
    });
  });
  if (!socket) break;
  held.push(socket);
}
console.log("HELD", held.length);
await new Promise((resolve) => setTimeout(resolve, ARGS.hold_ms));
for (const s of held) s.destroy();
console.log("released");
