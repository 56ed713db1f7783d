"""Confinement of a run's child: one function, `confine`, used by the cold bootstrap and by the
fork server's child, called before the child reads its job (so a waiting warm worker is already
confined).

Owns applying the layers the sidecar built (src/sandbox, docs/SECURITY.md), in this order:
1. prctl: no new privileges, not dumpable, and (forked children) SIGKILL when the parent dies;
2. Landlock: `landlock_restrict_self` on the ruleset fd the sidecar made for this run;
3. seccomp: each BPF program of the sidecar's filter file (raw `struct sock_filter` arrays);
4. every fd but 0, 1 and 2 closed.

It fails closed: a layer that was asked for and cannot be applied raises `SandboxError`
(`confine_or_exit` turns that into a one-line stderr message and exit 2). It must not import
anything heavy or start threads, and it never decides policy: the sidecar does.
"""

import os

EXIT_SANDBOX = 2

# The variable a cold child finds its spec in (JSON; removed from the environment when read):
# {"landlock": bool, "seccomp": bool, "filters": path|null, "ruleset_fd": int|null}
SPEC_VARIABLE = "PTC_SANDBOX"

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39
_SYS_LANDLOCK_RESTRICT_SELF = 446  # the same number on every architecture
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_BPF_MAXINSNS = 4096
_SIGKILL = 9


class SandboxError(Exception):
    """A layer that was asked for could not be applied."""


_libc = None


def _syscalls():
    """libc's `prctl` and `syscall`, looked up once (before the process guard could refuse the
    lookup)."""
    global _libc
    if _libc is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        prctl = libc.prctl
        prctl.restype = ctypes.c_int
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                          ctypes.c_ulong]
        _libc = (ctypes, prctl, syscall)
    return _libc


def prepare():
    """Loads what `confine` needs (ctypes and the libc symbols): the fork server calls it once,
    so that its children pay nothing for it."""
    _syscalls()


# The program that refuses process creation: a run that may start processes (a bash run, or
# PTC_ALLOW_SUBPROCESS=true, whose filter file has no such program) goes without it.
PROCESS_PROGRAM = "process"


def load_filters(path, skip=()):
    """The seccomp programs of the sidecar's filter file but those named in `skip`, ready to
    install (`compile_filters`)."""
    import json

    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        arch = doc["arch"]
        programs = [bytes.fromhex(p["bpf"]) for p in doc["filters"] if p["name"] not in skip]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SandboxError("cannot read the seccomp filter file %s: %s" % (path, e))
    machine = os.uname().machine
    if arch != machine:
        raise SandboxError("the seccomp filters are for %s, this machine is %s" % (arch, machine))
    return compile_filters(programs)


_SockFprog = None


def compile_filters(programs):
    """Each program (bytes of `struct sock_filter`) as the `struct sock_fprog` the seccomp
    syscall takes, with the buffer it points into. Made once by the fork server: a ctypes
    structure class costs ~1 ms to make, which a forked child would otherwise pay per run."""
    global _SockFprog
    ctypes = _syscalls()[0]
    if _SockFprog is None:
        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        _SockFprog = SockFprog
    compiled = []
    for program in programs:
        count, rest = divmod(len(program), 8)
        if rest or not 0 < count <= _BPF_MAXINSNS:
            raise SandboxError("a seccomp program of %d bytes is malformed" % len(program))
        buf = ctypes.create_string_buffer(bytes(program), len(program))
        compiled.append((buf, _SockFprog(count, ctypes.addressof(buf))))
    return compiled


def spec_from_env():
    """The spec of a cold child, taken out of its environment (None when there is none)."""
    raw = os.environ.pop(SPEC_VARIABLE, None)
    if raw is None:
        return None
    import json

    try:
        spec = json.loads(raw)
    except ValueError as e:
        raise SandboxError("%s is not JSON: %s" % (SPEC_VARIABLE, e))
    if not isinstance(spec, dict):
        raise SandboxError("%s is not a JSON object" % (SPEC_VARIABLE,))
    return spec


def confine_spec(spec, ruleset_fd=None, filters=None, parent_pid=None):
    """`confine` as a spec says: `ruleset_fd` defaults to the spec's (a cold child's inherited
    fd), `filters` (already loaded, as the fork server does once) to the spec's file."""
    if ruleset_fd is None:
        ruleset_fd = spec.get("ruleset_fd")
    want_seccomp = bool(spec.get("seccomp"))
    if filters is None and want_seccomp and spec.get("filters"):
        filters = load_filters(spec["filters"])
    confine(ruleset_fd, filters or [], landlock=bool(spec.get("landlock")),
            seccomp=want_seccomp, parent_pid=parent_pid)


def confine(ruleset_fd, filters, landlock=True, seccomp=True, parent_pid=None):
    """Applies the layers to this process (and, for seccomp, all its threads). `ruleset_fd`: the
    Landlock ruleset (closed here), or None. `filters`: the seccomp programs, in order, from
    `load_filters` or `compile_filters`.
    `landlock`/`seccomp`: whether that layer is required (missing → SandboxError).
    `parent_pid`: die with that parent (forked children: the fork server)."""
    if landlock and ruleset_fd is None:
        raise SandboxError("Landlock was asked for but no ruleset was passed")
    if seccomp and not filters:
        raise SandboxError("seccomp was asked for but no filter was passed")
    ctypes, prctl, syscall = _syscalls()

    def fail(what):
        err = ctypes.get_errno()
        raise SandboxError("%s: %s" % (what, os.strerror(err) if err else "failed"))

    if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        fail("prctl(PR_SET_DUMPABLE)")
    # What the run's processes leave behind when they exit stays in the run's tree while the
    # run lives, instead of climbing to the fork server (which kills whatever reaches it).
    if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        fail("prctl(PR_SET_CHILD_SUBREAPER)")
    if parent_pid is not None:
        if prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
            fail("prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != parent_pid:
            # The parent died before the death signal was armed: nobody would kill us.
            raise SandboxError("the parent process is gone")

    if ruleset_fd is not None:
        if not _single_threaded():
            # landlock_restrict_self confines only the calling thread.
            raise SandboxError("Landlock needs a single-threaded process")
        if syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset_fd),
                   ctypes.c_uint(0)) != 0:
            fail("landlock_restrict_self")

    if filters:
        number = _SYS_SECCOMP.get(os.uname().machine)
        if number is None:
            raise SandboxError("no seccomp syscall number for %s" % (os.uname().machine,))

        for _buf, prog in filters:
            if syscall(ctypes.c_long(number), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                       ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog)) != 0:
                fail("seccomp(SECCOMP_SET_MODE_FILTER)")

    # Whatever the parent left open (the ruleset, the fork server's sockets) is not the run's.
    os.closerange(3, 1 << 20)


def become_subreaper():
    """Makes this process (the fork server) the parent of every orphan below it: a run's
    detached processes come here when the run ends, and `kill_strays` ends them."""
    ctypes, prctl, _ = _syscalls()
    if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SandboxError("prctl(PR_SET_CHILD_SUBREAPER): %s" % os.strerror(ctypes.get_errno()))


def children():
    """The pids of this process's children (it must be single-threaded), zombies included."""
    try:
        with open("/proc/self/task/%d/children" % os.getpid()) as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        pass
    # Without CONFIG_PROC_CHILDREN: every process's parent, from its stat line.
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The fields after the command (which may hold spaces and parentheses): state, ppid.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(name))
    return found


# Rounds of `kill_strays`: each kills what the last one's victims had started.
_STRAY_ROUNDS = 1000
# How long one killed stray gets to become reapable.
_STRAY_WAIT = 1.0


def kill_strays(keep):
    """Kills and reaps every child of this subreaper whose pid is not in `keep`: processes
    of runs that have ended, reparented here. Their own children come here in turn as they die,
    so this repeats until no stray is left (`RLIMIT_NPROC` bounds how many there can be).
    Returns how many it killed."""
    import time

    killed = 0
    # Killed but not reapable in time (stuck in the kernel): reaped later, not waited on again.
    stuck = set()
    for _ in range(_STRAY_ROUNDS):
        strays = [pid for pid in children() if pid not in keep and pid not in stuck]
        if not strays:
            return killed
        for pid in strays:
            try:
                os.kill(pid, _SIGKILL)
                killed += 1
            except OSError:
                pass
        deadline = time.monotonic() + _STRAY_WAIT
        for pid in strays:
            while True:
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    break
                if time.monotonic() > deadline:
                    stuck.add(pid)
                    break
                time.sleep(0.001)
    return killed


def confine_or_exit(apply, *args, **kwargs):
    """Calls `apply(*args, **kwargs)` (`confine` or `confine_spec`); on failure writes one line
    to stderr and leaves with exit code 2 before any of the run's code exists."""
    try:
        apply(*args, **kwargs)
    except Exception as e:  # SandboxError, or a bug here: either way the run must not start
        try:
            os.write(2, ("ptc: sandbox: %s\n" % (e,)).encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(EXIT_SANDBOX)


def _single_threaded():
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        import sys

        threading = sys.modules.get("threading")
        return threading is None or threading.active_count() == 1
