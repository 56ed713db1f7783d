"""Other runs: a concurrent run's memory, read through /proc/<pid>/mem for its IPC token, and
a tool called as that run. Opening the memory must be refused (Landlock's ptrace scoping,
PR_SET_DUMPABLE=0)."""

import re

victim = ARGS["victim_pid"]


def steal():
    token = None
    for chunk in writable_memory(victim):
        m = re.search(rb"Bearer ([0-9a-f]{64})", chunk)
        if m:
            token = m.group(1).decode()
            break
    if token is None:
        raise LookupError("no token found in the victim's memory")
    host, port = ipc_address()
    status, body = http(host, port, "POST", "/call",
                        json.dumps({"tool": "noop", "args": {}}).encode(),
                        [("Authorization", "Bearer " + token),
                         ("Content-Type", "application/json")])
    return "token %s...; called noop as the victim: %s %s" % (token[:8], status, body[:100])


attempt("read /proc/%d/mem (a concurrent run) for its token" % victim, steal, refused=PROC_REFUSED)
