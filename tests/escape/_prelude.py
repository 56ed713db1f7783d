"""Prepended to every script of tests/escape/ by tests/all/escape/script.rs, after `ARGS = {...}`
(what the harness knows: pids as it sees them, ports, paths, the secrets it planted). In a Python
run the harness then adds `await checkpoint()`, so it sees the run's process before the script
starts; a script it runs with `python3` inside a bash run gets no checkpoint (no SDK there).

Every forbidden step goes through `attempt()`, which prints `ATTEMPT <label>` before the step
and then exactly one outcome line:

    REFUSED <ExceptionType> errno=<NAME>   the sandbox said no
    GOT <what the step obtained>           the step worked: the attack got through
    BROKEN <ExceptionType> <message>       anything else: the script failed for another reason

so the harness can tell a refusal from an attack that worked and from a script that crashed.
A step refuses by raising one of `refused` (PermissionError unless the attempt says otherwise)
or `Refused` (a libc call that answered -1 instead of raising).
"""

import errno as _errno
import os as _os
import sys as _sys

# Every script starts by naming its process and its scratch dir. The pid is the run's own PID
# namespace's (1): the harness finds the run's processes from outside by the directory.
print("PID", _os.getpid(), flush=True)
print("SCRATCH", _os.getcwd(), flush=True)


class Refused(Exception):
    """A step that was refused without an exception of its own (libc answered -1)."""

    def __init__(self, code, detail=""):
        super().__init__(code, detail)
        self.errno = code
        self.detail = detail


def _errno_name(e):
    code = getattr(e, "errno", None)
    return _errno.errorcode.get(code, str(code))


def _outcome(label, step_result=None, error=None, refused=(PermissionError,)):
    if error is None:
        print("GOT", label, "->", str(step_result)[:400], flush=True)
    elif isinstance(error, Refused) or isinstance(error, refused):
        print("REFUSED", type(error).__name__, "errno=%s" % _errno_name(error), str(error)[:200],
              flush=True)
    else:
        print("BROKEN", type(error).__name__, str(error)[:400], flush=True)


# A run's /proc is an empty tmpfs in its own mount namespace: another process's files are not
# there at all (ENOENT), where Landlock alone refused them (EACCES). Either is a refusal.
PROC_REFUSED = (PermissionError, FileNotFoundError)


def attempt(label, step, refused=(PermissionError,)):
    """Runs `step()` (the forbidden thing) and prints what happened; returns its result."""
    print("ATTEMPT", label, flush=True)
    try:
        result = step()
    except BaseException as e:  # noqa: BLE001  (an attack's outcome, whatever it is)
        _outcome(label, error=e, refused=refused)
        return None
    _outcome(label, step_result=result)
    return result


async def attempt_async(label, step, refused=(PermissionError,)):
    """`attempt` for a coroutine function."""
    print("ATTEMPT", label, flush=True)
    try:
        result = await step()
    except BaseException as e:  # noqa: BLE001
        _outcome(label, error=e, refused=refused)
        return None
    _outcome(label, step_result=result)
    return result


def spawned(pid):
    """Names a process the script started (its pid in the run), which must not outlive the run;
    the harness sees it at the next checkpoint."""
    print("SPAWNED", pid, flush=True)


async def checkpoint():
    """Waits while the harness looks at this run's processes from outside (the host tool `park`,
    held meanwhile): every process the run has now is seen, and must be gone once it is over."""
    await park(pid=_os.getpid(), dir=_os.getcwd(), role="checkpoint")


async def park_as_victim(hold=True):
    """Waits, seen from outside, until the harness releases it (`hold`; else it goes on at
    once): a run another run attacks meanwhile, or one in flight when the sidecar is killed."""
    await park(pid=_os.getpid(), dir=_os.getcwd(), role="victim", hold=hold)


def unguard():
    """Empties the audit hook's lists, as one line of attacker code does (the hook is not a
    layer): what is judged after this is the kernel's answer, not the hook's."""
    guard = _sys.modules.get("ptc_guard")
    if guard is not None:
        guard._EVENTS = frozenset()
        guard._SYMBOLS = frozenset()


def refused_by(*names):
    """`attempt`'s `refused` for libc calls: an OSError whose errno is one of `names` (EPERM,
    ESRCH, ...) counts as a refusal; any other error is a broken script."""

    class _ByErrno(type):
        def __instancecheck__(cls, error):
            code = getattr(error, "errno", None)
            return isinstance(error, OSError) and _errno.errorcode.get(code) in names

    return (_ByErrno("RefusedBy", (), {}),)


def libc_call(name, *args, restype=None):
    """Calls libc's `name` through ctypes with `args` (ints are passed as C longs) and returns its
    result (an int unless `restype` says otherwise: `ctypes.c_long` for `syscall`); -1 raises
    OSError with errno, so `attempt` can judge it (`refused_by`)."""
    import ctypes

    fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    fn.restype = restype or ctypes.c_int
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    result = fn(*converted)
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, "%s: %s" % (name, _os.strerror(code)))
    return result


def read_file(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)


def http(host, port, method, path, body=b"", headers=()):
    """A minimal HTTP/1.1 request over a plain socket; returns the status line and body."""
    import socket

    with socket.create_connection((host, port), timeout=5) as s:
        head = "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Length: %d\r\n" % (
            method, path, host, port, len(body))
        for k, v in headers:
            head += "%s: %s\r\n" % (k, v)
        s.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status, _, rest = data.partition(b"\r\n")
    return status.decode("latin-1"), rest.partition(b"\r\n\r\n")[2][:2000]


def writable_memory(pid, largest=64 << 20):
    """Each writable mapping of process `pid` (at most `largest` bytes), read through
    /proc/<pid>/mem: what another run's or session's secrets would be read from. Opening the
    files is the forbidden step; a mapping that cannot be read is skipped."""
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if len(fields) < 2 or not fields[1].startswith("rw"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start > largest:
                continue
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            yield chunk


def ipc_address():
    """The run's own IPC bridge (host, port), as the SDK was told in the job."""
    client = _sys.modules["ptc_sdk"]._client
    return client.host, client.port
