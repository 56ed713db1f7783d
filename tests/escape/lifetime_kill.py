"""Lifetime: code kills the sidecar's processes: an MCP server, then the sidecar itself.
Both must be refused (another uid; Landlock signal scoping); the harness checks they live."""

import signal


def kill(pid):
    def step():
        _os.kill(pid, signal.SIGKILL)
        return "killed %d" % pid
    return step


attempt("kill -9 an MCP server %d" % ARGS["mcp_pid"], kill(ARGS["mcp_pid"]))
attempt("kill -9 the sidecar %d" % ARGS["sidecar_pid"], kill(ARGS["sidecar_pid"]))
