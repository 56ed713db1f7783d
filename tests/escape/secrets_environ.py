"""Secrets: the environments of the sidecar and of an MCP server, read through /proc.

The sidecar was started with PTC_API_KEY and a REDIS_URL with a password, the demo MCP server
with a secret in its config's `env`. Each read must be refused (PR_SET_DUMPABLE=0, another uid,
Landlock's ptrace scoping); what a read obtains is printed, so a leak shows in the failure.
"""


def environ_secrets(pid):
    def step():
        data = read_file("/proc/%d/environ" % pid)
        # What an attacker would keep: every variable that looks like a credential.
        found = [v.decode("utf-8", "replace") for v in data.split(b"\0")
                 if any(k in v for k in (b"KEY", b"TOKEN", b"SECRET", b"REDIS", b"PASS"))]
        return "%d bytes, credentials: %s" % (len(data), found)
    return step


attempt("read /proc/%d/environ (the sidecar)" % ARGS["sidecar_pid"],
        environ_secrets(ARGS["sidecar_pid"]), refused=PROC_REFUSED)
attempt("read /proc/%d/environ (an MCP server)" % ARGS["mcp_pid"],
        environ_secrets(ARGS["mcp_pid"]), refused=PROC_REFUSED)
# The run's own environment never held a secret (SpawnSpec::run_env); say what it holds.
print("OWN_ENV", sorted(_os.environ))
