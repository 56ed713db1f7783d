// Connections, in JavaScript (shares_connections' attack from node): the run's own bridge
// address, taken from the SDK's own request (`http.request` wrapped, as any code may), then up
// to ARGS.connections connections to it, each held open for ARGS.hold_ms and sending nothing.
// The sidecar must take at most the run's share of them (64; the rest wait in the run's own
// backlog, or are never accepted): the harness counts the sidecar's descriptors meanwhile, and
// a victim run's calls must answer as on an idle sidecar.
import http from "node:http";
import net from "node:net";

const bridge = {};
const request = http.request;
http.request = function (options, ...rest) {
  bridge.port = options.port;
  return request.call(this, options, ...rest);
};
await tools.noop({});
http.request = request;
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
