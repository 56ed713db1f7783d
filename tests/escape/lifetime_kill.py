"""Lifetime: code kills the sidecar's processes: an MCP server, then the sidecar itself, by the
pids the harness sees them by. Both must be refused (the run's own PID namespace, where they have
no pid: ESRCH; Landlock signal scoping and another uid: EPERM); the harness checks they live."""

import signal


def kill(pid):
    def step():
        _os.kill(pid, signal.SIGKILL)
        return "killed %d" % pid
    return step


refused = (PermissionError, ProcessLookupError)
attempt("kill -9 an MCP server %d" % ARGS["mcp_pid"], kill(ARGS["mcp_pid"]), refused)
attempt("kill -9 the sidecar %d" % ARGS["sidecar_pid"], kill(ARGS["sidecar_pid"]), refused)
