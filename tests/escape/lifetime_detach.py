"""Lifetime: processes that try to outlive the run: a `setsid` child (start_new_session) and a
double-forked grandchild in a session of its own. Without PTC_ALLOW_SUBPROCESS each start must
be refused; with it they start, the harness sees them at the last checkpoint, and checks every
one is dead once the run ends (and the run's PID namespace with them)."""

import subprocess
import time

# Long enough to outlive any run of the suite, short enough to end by itself if all else fails.
SLEEP = "60"


def setsid_child():
    p = subprocess.Popen(["sleep", SLEEP], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    spawned(p.pid)
    return "setsid child %d" % p.pid


def double_fork():
    r, w = _os.pipe()
    pid = _os.fork()
    if pid == 0:
        try:
            _os.setsid()
            grandchild = _os.fork()
            if grandchild == 0:
                _os.close(r)
                _os.close(w)
                time.sleep(int(SLEEP))
                _os._exit(0)
            _os.write(w, b"%d" % grandchild)
        finally:
            _os._exit(0)
    spawned(pid)
    _os.close(w)
    grandchild = int(_os.read(r, 32) or b"0")
    _os.waitpid(pid, 0)
    spawned(grandchild)
    return "double-forked grandchild %d" % grandchild


attempt("start a setsid child", setsid_child)
attempt("double fork a grandchild into its own session", double_fork)
await checkpoint()
