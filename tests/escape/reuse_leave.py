"""Other runs: what a run leaves in its network namespace for the runs after it. Where the
fork server gives runs network namespaces of its own, one run at a time (`ptc_zygote._NetSlots`,
a root sidecar), a later run is cloned into this run's namespace once every process of this one
is gone. This run leaves what it can there: connections to the bridge held open (more than a
run's 64), requests half sent, a whole request with its own token sent and never read, and its
token printed for the harness to hand to the later runs (`reuse_after.py`), which must find
none of it usable. Nothing here is forbidden by itself: the attack is in the later runs."""

import json
import socket

host, port = ipc_address()
token = _sys.modules["ptc_sdk"]._client.token
print("TOKEN", token, flush=True)
held = []
for i in range(ARGS["connections"]):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect((host, port))
    except BlockingIOError:
        pass
    held.append(s)
body = json.dumps({"tool": "echo", "args": {"text": "from the run before"}}).encode()
whole = ("POST /call HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
         "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (token, len(body))).encode()
for i, s in enumerate(held[:8]):
    try:
        s.send(whole + body if i % 2 else b"POST /call HTTP/1.1\r\nAuthorization: Bearer ")
    except OSError:
        pass
print("HELD", len(held), flush=True)
