"""Confinement of a run's child: one function, `confine`, used by the cold bootstrap and by the
fork server's child, called before the child reads its job (so a waiting warm worker is already
confined).

Owns applying the layers the sidecar built (src/sandbox, docs/SECURITY.md), in this order:
1. prctl: no new privileges, not dumpable, and (forked children) SIGKILL when the parent dies;
2. Landlock: `landlock_restrict_self` on the ruleset fd the sidecar made for this run;
3. seccomp: the BPF program of the sidecar's filter file for this kind of run (raw `struct sock_filter`);
4. every fd but 0, 1 and 2 closed.

It fails closed: a layer that was asked for and cannot be applied raises `SandboxError`
(`confine_or_exit` turns that into a one-line stderr message and exit 2). It must not import
anything heavy or start threads, and it never decides policy: the sidecar does.
"""

import errno
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
_PR_CAPBSET_DROP = 24
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
    """Loads what `confine` and `enter` need (ctypes, the libc symbols, the modules): the
    fork server calls it once, so that its children pay nothing for it."""
    import fcntl  # noqa: F401
    import resource  # noqa: F401
    import select  # noqa: F401
    import socket  # noqa: F401
    import struct  # noqa: F401

    _syscalls()
    _libc_handle()
    _capability_structs()


_libc_all = None
_cap_structs = None


def _capability_structs():
    """capset's header and data structures, made once (a ctypes structure class costs a forked
    child ~0.35 ms of CPU to make, most of it copying the pages it writes)."""
    global _cap_structs
    if _cap_structs is None:
        ctypes = _syscalls()[0]

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        _cap_structs = (Header, Data * 2)
    return _cap_structs


def _libc_handle():
    """libc as a ctypes library (unshare, mount, capset), looked up once."""
    global _libc_all
    if _libc_all is None:
        ctypes = _syscalls()[0]
        _libc_all = ctypes.CDLL(None, use_errno=True)
    return _libc_all


# The filter file's programs (src/sandbox/seccomp.rs): every run has `base` (the fork server
# installs it on itself once, and its children inherit it; a cold child installs it) and the
# one of its kind: a Python run's, which refuses process creation unless
# PTC_ALLOW_SUBPROCESS=true, or the one of a run that becomes a program (a bash run: it may
# start processes, all of them inside its sandbox and killed with it).
BASE_PROGRAM = "base"
RUN_PROGRAM = "run"
EXEC_PROGRAM = "exec"
ALONE_PROGRAM = "alone"


def load_filters(path, names=(BASE_PROGRAM, RUN_PROGRAM)):
    """The seccomp programs `names` of the sidecar's filter file, in that order, ready to
    install (`compile_filters`)."""
    import json

    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        arch = doc["arch"]
        programs = []
        for name in names:
            found = [bytes.fromhex(p["bpf"]) for p in doc["filters"] if p["name"] == name]
            if len(found) != 1:
                raise ValueError("%d programs named %r" % (len(found), name))
            programs += found
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

    if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_DUMPABLE)")
    # What the run's processes leave behind when they exit stays in the run's tree while the
    # run lives, instead of climbing to the fork server (which kills whatever reaches it).
    if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_CHILD_SUBREAPER)")
    if parent_pid is not None:
        if prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
            _fail("prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != parent_pid:
            # The parent died before the death signal was armed: nobody would kill us.
            raise SandboxError("the parent process is gone")

    if ruleset_fd is not None:
        if not _single_threaded():
            # landlock_restrict_self confines only the calling thread.
            raise SandboxError("Landlock needs a single-threaded process")
        if syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset_fd),
                   ctypes.c_uint(0)) != 0:
            _fail("landlock_restrict_self")

    if filters:
        _install(filters, _fail)

    # Whatever the parent left open (the ruleset, the fork server's sockets) is not the run's.
    os.closerange(3, 1 << 20)


def confine_server(filters):
    """The fork server's own seccomp program (`base`, from `load_filters`), installed once on
    itself: every process it forks has it, and installs only the program of its run's kind.
    Raises SandboxError when it cannot be installed."""
    prctl = _syscalls()[1]
    # Without CAP_SYS_ADMIN seccomp needs it; its children set it anyway.
    if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("prctl(PR_SET_NO_NEW_PRIVS)")
    _install(filters, _fail)


def _fail(what):
    """Raises SandboxError for `what`, with the reason errno gives."""
    err = _syscalls()[0].get_errno()
    raise SandboxError("%s: %s" % (what, os.strerror(err) if err else "failed"))


def _install(filters, fail):
    """Installs each of `filters` on this process and all its threads."""
    ctypes, _, syscall = _syscalls()
    number = _SYS_SECCOMP.get(os.uname().machine)
    if number is None:
        raise SandboxError("no seccomp syscall number for %s" % (os.uname().machine,))
    for _buf, prog in filters:
        if syscall(ctypes.c_long(number), ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                   ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog)) != 0:
            fail("seccomp(SECCOMP_SET_MODE_FILTER)")


# ---------------------------------------------------------------------------------------------
# Namespaces: each run in its own (docs/SECURITY.md, "Namespaces")

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# The namespaces a run gets, by the names the spec uses, in the order /healthz lists them.
NAMESPACES = (("user", CLONE_NEWUSER), ("pid", CLONE_NEWPID), ("net", CLONE_NEWNET),
              ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS), ("mount", CLONE_NEWNS))

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_NOATIME = 0x400
_MS_NODIRATIME = 0x800
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MS_RELATIME = 1 << 21
_MS_RDONLY = 0x1
# statvfs's f_flag bits for the flags a remount must keep (a mount inherited into a user
# namespace has them locked: a remount that drops one fails with EPERM).
_ST_KEPT = ((0x1, _MS_RDONLY), (0x2, _MS_NOSUID), (0x4, _MS_NODEV), (0x8, _MS_NOEXEC),
            (0x400, _MS_NOATIME), (0x800, _MS_NODIRATIME), (0x1000, _MS_RELATIME))
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# How long a cloned child waits for the fork server to map its ids.
_HANDOVER_TIMEOUT = 5.0


def _namespace_flags(names):
    flags = 0
    for name, flag in NAMESPACES:
        if names.get(name):
            flags |= flag
    return flags


# clone(2)'s number: the run's process is cloned straight into its namespaces.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_SIGCHLD = 17

_clone = None


def clone_isolated(spec):
    """In the fork server: clones a child straight into new namespaces (`spec["ns"]`), as
    `os.fork` would fork it (CPython's before- and after-fork work included): returns the
    child's pid here and 0 in the child, PID 1 of its new PID namespace. The child's parent is
    this server, so nothing has to hand it over. With a user namespace, write the child's ids
    with `map_ids` before it goes on (`enter` waits for that)."""
    global _clone
    ctypes = _syscalls()[0]
    if _clone is None:
        # PyDLL: the GIL stays held across the call, as os.fork holds it across fork(2).
        _clone = ctypes.PyDLL(None, use_errno=True).syscall
        _clone.restype = ctypes.c_long
        for name in ("PyOS_BeforeFork", "PyOS_AfterFork_Parent", "PyOS_AfterFork_Child"):
            getattr(ctypes.pythonapi, name).restype = None
    number = _SYS_CLONE.get(os.uname().machine)
    if number is None:
        raise SandboxError("no clone syscall number for %s" % (os.uname().machine,))
    flags = _namespace_flags(spec.get("ns") or {}) | _SIGCHLD
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _clone(ctypes.c_long(number), ctypes.c_ulong(flags), ctypes.c_ulong(0),
                 ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, os.strerror(err))
    return pid


def settle(spec):
    """Decides, in the fork server before any clone, whether its children switch users: one
    cloned into a user namespace sees its own uid there as unmapped, and cannot tell."""
    spec["switch_user"] = spec.get("user") is not None and os.geteuid() == 0
    return spec


def _switches(spec):
    """Whether the run's process becomes `spec["user"]` (a server that may switch users) or
    keeps the server's ids (`settle` decided, in the server)."""
    return bool(spec["switch_user"])


def map_ids(pid, spec):
    """In the fork server: the uid and gid maps of child `pid`'s new user namespace. A server
    that switches users maps the run user's ids (the child becomes that user inside, and so
    outside); one that cannot maps its own, after denying `setgroups` (the kernel's rule for a
    map written without CAP_SETUID)."""
    if _switches(spec):
        uid, gid = int(spec["user"]["uid"]), int(spec["user"]["gid"])
    else:
        uid, gid = os.geteuid(), os.getegid()
        _write("/proc/%d/setgroups" % pid, "deny")
    _write("/proc/%d/uid_map" % pid, "%d %d 1" % (uid, uid))
    _write("/proc/%d/gid_map" % pid, "%d %d 1" % (gid, gid))


def arrive(life_fd, go_fd):
    """First thing in the child `clone_isolated` made: dies with the fork server, its parent
    (PR_SET_PDEATHSIG, and `life_fd` says the server is still there: a pipe whose writer only
    the server holds), and waits for the server's word that its ids are mapped (a byte on
    `go_fd`): until then it is nobody in its user namespace, and may not even enter its own
    scratch directory."""
    ctypes, prctl, _ = _syscalls()
    if prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SandboxError("prctl(PR_SET_PDEATHSIG): %s" % os.strerror(err))
    if _closed(life_fd):
        raise SandboxError("the fork server is gone")
    _await_go(go_fd)


def enter(spec, dirs, report, nproc=None):
    """In the child `clone_isolated` made, PID 1 of its namespaces, once it has `arrive`d and
    is in its working directory, before `confine`: makes the namespaces a run's.

    Makes its mount namespace a run's (`make_run_mounts` with `dirs`, the scratch and data
    directories; where the namespace is a copy of the fork server's for runs,
    `spec["premounted"]`, only a directory not noexec yet is remounted), brings up its
    loopback and listens on `127.0.0.1:spec["ipc_port"]` there: the IPC bridge's end inside,
    sent to the server on `report` (`ok`, with the socket), which hands it to the sidecar.
    Then becomes the run user, sets its `RLIMIT_NPROC` to `nproc` (in a user namespace of its
    own, a budget of the run's alone), leads its own process group and drops every
    capability the user namespace gave it. Raises SandboxError when a step fails."""
    # Everything imported before the switch of uid: the run user may not read the
    # interpreter's own files (the fork server has them already).
    import fcntl  # noqa: F401
    import resource
    import select  # noqa: F401
    import socket
    import struct  # noqa: F401

    ctypes = _syscalls()[0]
    libc = _libc_handle()

    names = spec.get("ns") or {}
    if names.get("mount"):
        if spec.get("premounted"):
            # Copied from the fork server's mount namespace for runs, which has all of it:
            # only a directory that is not noexec yet (a session's) is remounted.
            dirs = [d for d in dirs if not _noexec(d)]
            for d in dirs:
                _remount_noexec(libc, ctypes, os.fsencode(d), _fail)
        else:
            make_run_mounts(dirs)
        if dirs:
            # The working directory was entered before its new mount: enter it again, through it.
            os.chdir(os.getcwd())
    listener = None
    if names.get("net"):
        _loopback_up()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", int(spec["ipc_port"])))
        listener.listen(128)
    _drop_bounding_set(ctypes)
    if _switches(spec):
        _become(spec["user"])
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    fds = [listener.fileno()] if listener is not None else []
    socket.send_fds(report, [b"ok"], fds)
    report.close()
    if listener is not None:
        listener.close()
    if names.get("user"):
        _drop_capabilities(ctypes, libc, _fail)


def make_run_mounts(dirs):
    """In a new mount namespace: makes it a run's. Every mount private (nothing propagates in
    or out), each of `dirs` noexec, nosuid and nodev, and the machine's /proc and /sys under
    an empty read-only tmpfs: Landlock keeps a run out of their files, but not from listing
    every pid on the machine with stat(). Raises SandboxError when a mount fails."""
    ctypes = _syscalls()[0]
    libc = _libc_handle()
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        _fail("mount(/, MS_PRIVATE)")
    for d in dirs:
        _remount_noexec(libc, ctypes, os.fsencode(d), _fail)
    for hidden in (b"/proc", b"/sys"):
        if libc.mount(b"tmpfs", hidden, b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                      | _MS_NOEXEC, b"size=4k,nr_inodes=1,mode=555") != 0:
            _fail("hiding %s" % os.fsdecode(hidden))


# statvfs's f_flag bits of a directory whose files cannot run: noexec, nosuid, nodev.
_ST_NOEXEC_ALL = 0x8 | 0x2 | 0x4


def _noexec(path):
    """Whether `path` is on a mount with noexec, nosuid and nodev."""
    try:
        return os.statvfs(path).f_flag & _ST_NOEXEC_ALL == _ST_NOEXEC_ALL
    except OSError:
        return False


def become_run_user(spec):
    """Becomes the spec's run user, when it names one (a child of the fork server without
    namespaces of its own)."""
    user = spec.get("user")
    if user is not None:
        confine_or_exit(_become, user)


def _become(user):
    """Becomes the run user: no supplementary groups, its gid, its uid, for good."""
    uid, gid = int(user["uid"]), int(user["gid"])
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        raise SandboxError("the switch to uid %d did not hold" % uid)


def _write(path, text):
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise SandboxError("writing %s: %s" % (path, e))


def _remount_noexec(libc, ctypes, path, fail):
    """Makes `path` a mount of its own with noexec, nosuid and nodev added (W^X for what a run
    writes: a file written there can be neither executed nor mapped executable, by the dynamic
    loader or anyone)."""
    try:
        kept = os.statvfs(path).f_flag
    except OSError as e:
        raise SandboxError("statvfs %s: %s" % (path, e))
    flags = _MS_REMOUNT | _MS_BIND | _MS_NOEXEC | _MS_NOSUID | _MS_NODEV
    for bit, ms in _ST_KEPT:
        if kept & bit:
            flags |= ms
    if libc.mount(path, path, None, _MS_BIND | _MS_REC, None) != 0:
        fail("bind mount of %s" % os.fsdecode(path))
    if libc.mount(None, path, None, flags, None) != 0:
        fail("remount of %s noexec" % os.fsdecode(path))


def _loopback_up():
    """Brings up `lo` in this (new) network namespace: the only interface a run has."""
    import fcntl
    import socket
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))
    except OSError as e:
        raise SandboxError("bringing up the loopback interface: %s" % e)
    finally:
        s.close()


def _await_go(fd):
    """Waits for the fork server's word that the run's ids are mapped (one byte on `fd`)."""
    import select

    ready, _, _ = select.select([fd], [], [], _HANDOVER_TIMEOUT)
    if not ready or os.read(fd, 1) != b"g":
        raise SandboxError("the fork server did not map the run's ids")
    os.close(fd)


def _closed(fd):
    """Whether every writer of the pipe `fd` is gone."""
    import select

    if fd is None:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return any(ev & (select.POLLHUP | select.POLLERR) for _, ev in poller.poll(0))


def _drop_bounding_set(ctypes):
    """Empties the capability bounding set, while this process still holds CAP_SETPCAP (in its
    user namespace, or as root): nothing it or a program it runs does can gain a capability
    again, whatever a user namespace or a file would grant."""
    prctl = _syscalls()[1]
    for cap in range(64):
        if prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == errno.EINVAL:
                return  # past the kernel's last capability
            _fail("prctl(PR_CAPBSET_DROP, %d)" % cap)


def _drop_capabilities(ctypes, libc, fail):
    """Drops every capability the user namespace gave this process (they hold only inside it,
    but a run needs none)."""
    header_type, data_type = _capability_structs()
    header = header_type(_LINUX_CAPABILITY_VERSION_3, 0)
    data = data_type()
    if libc.capset(ctypes.byref(header), data) != 0:
        fail("capset")


def probe_namespaces(spec):
    """Whether a run's namespaces can be made here, as the fork server makes them
    (`clone_isolated`, `map_ids`, `enter`, in a directory of the probe's): `{"ok": true}` or
    `{"ok": false, "error": why}`. The child exits 0 once it is PID 1 of its namespace."""
    import socket
    import tempfile

    prepare()
    settle(spec)
    d = tempfile.mkdtemp(prefix="ptc-probe-")
    life_r, life_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        if _switches(spec):
            os.chown(d, int(spec["user"]["uid"]), int(spec["user"]["gid"]))
        report, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.chdir(d)
        try:
            pid = clone_isolated(spec)
        except OSError as e:
            return {"ok": False, "error": "clone: %s" % e}
        if pid == 0:
            try:
                report.close()
                os.close(life_w)
                os.close(go_w)
                arrive(life_r, go_r)
                enter(spec, [d], theirs, 64)
                os._exit(0 if os.getpid() == 1 or not (spec.get("ns") or {}).get("pid") else 3)
            except BaseException as e:
                try:
                    theirs.send(b"error " + str(e).encode("utf-8", "replace"))
                except OSError:
                    pass
                os._exit(2)
        os.chdir("/")
        theirs.close()
        os.close(go_r)
        try:
            if (spec.get("ns") or {}).get("user"):
                map_ids(pid, spec)
            os.write(go_w, b"g")
        except (OSError, SandboxError) as e:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return {"ok": False, "error": str(e)}
        data, fds = receive(report, _HANDOVER_TIMEOUT * 2)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        if data != b"ok":
            why = data[6:].decode("utf-8", "replace") or "the probe's child said nothing"
            return {"ok": False, "error": why}
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            return {"ok": False, "error": "the probe's run process exited with %d" % code}
        return {"ok": True}
    finally:
        for fd in (life_r, life_w, go_w):
            os.close(fd)
        try:
            os.rmdir(d)
        except OSError:
            pass


def receive(sock, timeout):
    """One message and its fds from `sock` within `timeout` seconds; `(b"", [])` without one."""
    import select
    import socket

    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return b"", []
    try:
        data, fds, _, _ = socket.recv_fds(sock, 4096, 2)
    except OSError:
        return b"", []
    return data, fds


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
