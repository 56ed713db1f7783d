"""Reach: Redis, with its password as if stolen, forging an `exec.finished` event into the
agent's stream. The connection must be refused; the harness also checks the stream holds no
forged event."""

import socket


def resp(*parts):
    out = b"*%d\r\n" % len(parts)
    for p in parts:
        p = p.encode() if isinstance(p, str) else p
        out += b"$%d\r\n%s\r\n" % (len(p), p)
    return out


def forge():
    forged = json.dumps({"v": 1, "type": "exec.finished", "status": "ok",
                         "agent_id": ARGS["agent_id"], "forged": ARGS["mark"]})
    with socket.create_connection(("127.0.0.1", ARGS["redis_port"]), timeout=5) as s:
        s.sendall(resp("AUTH", ARGS["redis_password"])
                  + resp("XADD", "ptc:stream:" + ARGS["agent_id"], "*", "event", forged)
                  + resp("PUBLISH", "ptc:events:" + ARGS["agent_id"], forged))
        s.settimeout(2)
        return s.recv(4096)


attempt("connect to Redis 127.0.0.1:%d and forge exec.finished" % ARGS["redis_port"], forge)
