"""Lifetime: the chain of lifetime_chain.sh, made by a Python run with PTC_ALLOW_SUBPROCESS=true:
`os.fork` and `os.setsid` three deep, a bottom that re-forks itself forever, and one member that
tries `prlimit` RLIMIT_NOFILE 0 through ctypes on its parent, on the run's first process and on
the fork server (the pid the harness sees it by). Each must be refused; the harness sees the
chain at the checkpoint, and checks that none of it exists once the run is over."""

import ctypes
import time

unguard()
RLIMIT_NOFILE = 7
REFUSED = refused_by("EPERM", "ESRCH")


class Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]


# Looked up before any fork: a child of a threaded process should not load anything.
libc = ctypes.CDLL(None, use_errno=True)
prlimit = libc.prlimit
prlimit.restype = ctypes.c_int


def no_files(pid):
    def step():
        zero = Rlimit(0, 0)
        if prlimit(ctypes.c_int(pid), ctypes.c_int(RLIMIT_NOFILE), ctypes.byref(zero), None) != 0:
            code = ctypes.get_errno()
            raise OSError(code, _os.strerror(code))
        return "set"
    return step


def member(depth):
    """One member, in a session of its own: starts the next (or is the bottom) and stays."""
    _os.setsid()
    if depth == 0:
        while True:
            time.sleep(0.05)
            if _os.fork():
                _os._exit(0)
            _os.setsid()
    if _os.fork() == 0:
        try:
            member(depth - 1)
        finally:
            _os._exit(0)
    if depth == 2:
        parent = _os.getppid()
        attempt("prlimit RLIMIT_NOFILE 0 on its parent (pid %d in the run)" % parent,
                no_files(parent), REFUSED)
        attempt("prlimit RLIMIT_NOFILE 0 on the run's first process (pid 1 in the run)",
                no_files(1), REFUSED)
        attempt("prlimit RLIMIT_NOFILE 0 on the fork server (%d)" % ARGS["fork_server_pid"],
                no_files(ARGS["fork_server_pid"]), REFUSED)
        open("attempted", "w").close()
    while True:
        time.sleep(1)


if _os.fork() == 0:
    try:
        member(3)
    finally:
        _os._exit(0)
for _ in range(100):
    if _os.path.exists("attempted"):
        break
    time.sleep(0.05)
time.sleep(0.3)
await checkpoint()
