"""Persistence: append to the SDK every later run imports, then kill the fork server so the
next one starts from the poisoned files (every later run's code and token logged). Both steps
must be refused (SDK read-only to code; the fork server has no pid in the run's PID namespace,
Landlock signal scoping, another uid)."""

import signal

sdk_file = _sys.modules["ptc_sdk"].__file__


def poison():
    with open(sdk_file, "a") as f:
        f.write("\n# poisoned by %s\n" % ARGS["mark"])
    return "appended to %s" % sdk_file


def kill_fork_server():
    _os.kill(ARGS["fork_server_pid"], signal.SIGKILL)
    return "killed the fork server %d" % ARGS["fork_server_pid"]


attempt("append to %s" % sdk_file, poison)
attempt("kill -9 the fork server %d" % ARGS["fork_server_pid"], kill_fork_server,
        (PermissionError, ProcessLookupError))
