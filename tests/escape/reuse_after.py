"""Other runs: a run after `reuse_leave.py`, perhaps in the same network namespace (the harness
checks which, from outside). The run before's token is dead: a call with it through this run's
bridge must be refused (401), whatever that run left behind. This run's own calls go through:
the connections the run before held take none of this run's."""

import asyncio
import json


def call_as_the_run_before():
    host, port = ipc_address()
    status, body = http(host, port, "POST", "/call",
                        json.dumps({"tool": "echo", "args": {"text": "as the run before"}}).encode(),
                        [("Authorization", "Bearer " + ARGS["token"]),
                         ("Content-Type", "application/json")])
    if status.split()[1:2] in (["401"], ["403"]):
        raise Refused(_errno.EACCES, status)
    return "%s %s" % (status, body[:200])


attempt("a call with the token of the run before", call_as_the_run_before, refused=())
calls = await asyncio.gather(*[echo(text="mine %d" % i) for i in range(70)])
print("BRIDGE", sum(1 for i, c in enumerate(calls) if c["text"] == "mine %d" % i), "calls of mine")
