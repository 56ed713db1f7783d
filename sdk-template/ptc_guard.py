"""The process guard: code run by exec_code may not start processes (unless the sidecar's
PTC_ALLOW_SUBPROCESS=true).

A PEP 578 audit hook, installed just before the user's code runs. Audit hooks cannot be
removed, and every way Python starts a process passes one of the events below: os.fork,
os.forkpty, os.posix_spawn, os.exec*, os.spawn*, os.system, subprocess.Popen, and ctypes
looking up the libc functions that would do it directly. A fork loop therefore ends with a
PermissionError instead of filling the machine's process table; the sidecar's process-group
kill, its resource limits and the container remain the outer walls.
"""

import sys

_MESSAGE = (
    "exec_code may not start processes (%s); call a tool instead, "
    "or run the sidecar with PTC_ALLOW_SUBPROCESS=true"
)

_EVENTS = frozenset((
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.exec",
    "os.spawn",
    "os.system",
    "os.startfile",
    "subprocess.Popen",
))

# libc entry points that start or replace a process, reachable through ctypes.
_SYMBOLS = frozenset((
    "fork", "vfork", "_Fork", "clone", "clone3", "syscall", "system", "popen",
    "posix_spawn", "posix_spawnp", "execve", "execv", "execvp", "execvpe", "execl",
    "execle", "execlp", "fexecve", "execveat",
))


def _hook(event, args):
    if event in _EVENTS:
        raise PermissionError(_MESSAGE % (event,))
    if event == "ctypes.dlsym":
        name = args[1] if len(args) > 1 else None
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        if name in _SYMBOLS:
            raise PermissionError(_MESSAGE % ("ctypes " + str(name),))


def install():
    """Installs the guard for the rest of this process's life."""
    sys.addaudithook(_hook)
