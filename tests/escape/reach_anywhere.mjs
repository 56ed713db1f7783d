// Reach, from JavaScript: any address but the IPC port. A TCP connect to a listener the harness
// opened, a TCP listen of our own, a UDP datagram, a pathname Unix socket: each must be refused
// (Landlock's TCP connect and bind rules, seccomp for other socket types), and node's fetch to
// the listener too. The harness checks nothing arrived.

import net from "node:net";
import dgram from "node:dgram";

// A socket's first outcome: connected (and sent the mark), or its error.
function connect(options) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(options, () => {
      socket.end(ARGS.mark, () => resolve("connected and sent"));
    });
    socket.on("error", reject);
  });
}

function listen() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const where = server.address();
      server.close();
      resolve(`listening on ${where.port}`);
    });
  });
}

function datagram() {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket("udp4");
    socket.on("error", reject);
    socket.send(ARGS.mark, ARGS.udp_port, "127.0.0.1", (error) => {
      socket.close();
      error ? reject(error) : resolve("datagram sent");
    });
  });
}

await attempt(`TCP connect to 127.0.0.1:${ARGS.tcp_port}`, () => connect({ host: "127.0.0.1", port: ARGS.tcp_port }));
await attempt("TCP bind and listen on 127.0.0.1:0", listen);
await attempt(`UDP send to 127.0.0.1:${ARGS.udp_port}`, datagram);
await attempt(`Unix connect to ${ARGS.unix_path}`, () => connect({ path: ARGS.unix_path }));
await attempt(`fetch http://127.0.0.1:${ARGS.tcp_port}/`, async () => {
  const r = await fetch(`http://127.0.0.1:${ARGS.tcp_port}/`, { method: "POST", body: ARGS.mark });
  return `HTTP ${r.status}`;
});
