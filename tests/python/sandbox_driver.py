"""The escape driver of tests/all/sandbox.rs: optionally confines itself with ptc_sandbox, then
tries each forbidden (and each needed) thing and prints one JSON object, attempt -> outcome.

An outcome is "ok" (the call succeeded), the errno name the call failed with ("EACCES",
"EPERM", ...), or "error: TYPE: message" for anything else. The same attempts run unconfined
first (the baseline), which shows each one really reaches the kernel and would succeed: the
test compares both whole maps against what it expects.

argv[1]: JSON {"sdk", "confine": spec|null, "scratch", "outside_file", "outside_dir",
               "allowed_port", "other_port", "victim_pid", "parent_pid", "kill_signal",
               "only": [attempt names] (optional: just these)}
"""

import errno
import json
import os
import sys


def main():
    cfg = json.loads(sys.argv[1])
    sys.path.insert(0, cfg["sdk"])
    import ptc_sandbox

    if cfg.get("confine") is not None:
        import time

        t0 = time.perf_counter()
        ptc_sandbox.prepare()  # ctypes: what the fork server pays once
        t1 = time.perf_counter()
        ptc_sandbox.confine_or_exit(ptc_sandbox.confine_spec, cfg["confine"])
        t2 = time.perf_counter()
        sys.stderr.write("sandbox timing: prepare %.0f us, confine %.0f us\n"
                         % ((t1 - t0) * 1e6, (t2 - t1) * 1e6))
    only = cfg.get("only")
    results = {}
    for name, attempt in ATTEMPTS:
        if only is None or name in only:
            results[name] = outcome(attempt, cfg)
    sys.stdout.write(json.dumps(results, sort_keys=True) + "\n")
    sys.stdout.flush()
    os._exit(0)


def outcome(attempt, cfg):
    try:
        value = attempt(cfg)
    except OSError as e:
        if e.errno:
            return errno.errorcode.get(e.errno, str(e.errno))
        return "error: OSError: %s" % (e,)
    except Exception as e:
        return "error: %s: %s" % (type(e).__name__, e)
    return "ok" if value is None else value


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def _check(ctypes, r):
    if r == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return None


# --- files -------------------------------------------------------------------------------------

def read_outside(cfg):
    with open(cfg["outside_file"], "rb") as f:
        f.read()


def write_outside(cfg):
    with open(os.path.join(cfg["outside_dir"], "written-by-code"), "w") as f:
        f.write("x")


def write_scratch(cfg):
    path = os.path.join(cfg["scratch"], "note.txt")
    with open(path, "w") as f:
        f.write("hello")
    with open(path) as f:
        assert f.read() == "hello"
    os.rename(path, os.path.join(cfg["scratch"], "renamed.txt"))
    os.mkdir(os.path.join(cfg["scratch"], "sub"))


def read_sdk(cfg):
    with open(os.path.join(cfg["sdk"], "ptc_sandbox.py"), "rb") as f:
        f.read(10)


def write_sdk(cfg):
    with open(os.path.join(cfg["sdk"], "ptc_sandbox.py"), "ab") as f:
        f.write(b"")


def read_etc_passwd(cfg):
    with open("/etc/passwd", "rb") as f:
        f.read()


def read_proc_parent_environ(cfg):
    with open("/proc/%d/environ" % cfg["parent_pid"], "rb") as f:
        f.read()


def read_proc_victim_mem(cfg):
    with open("/proc/%d/mem" % cfg["victim_pid"], "rb") as f:
        f.read(1)


def write_dev_null(cfg):
    with open(os.devnull, "w") as f:
        f.write("discarded")


def list_tmp(cfg):
    os.listdir("/tmp")


# --- network -----------------------------------------------------------------------------------

def _tcp():
    import socket

    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def connect_allowed(cfg):
    s = _tcp()
    try:
        s.settimeout(5)
        s.connect(("127.0.0.1", cfg["allowed_port"]))
    finally:
        s.close()


def connect_other(cfg):
    s = _tcp()
    try:
        s.settimeout(5)
        s.connect(("127.0.0.1", cfg["other_port"]))
    finally:
        s.close()


def fastopen_other(cfg):
    import socket

    s = _tcp()
    try:
        s.settimeout(5)
        s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", cfg["other_port"]))
    finally:
        s.close()


def bind_tcp(cfg):
    s = _tcp()
    try:
        s.bind(("127.0.0.1", 0))
    finally:
        s.close()


def _socket(family_name, type_name, proto=0):
    import socket

    s = socket.socket(getattr(socket, family_name), getattr(socket, type_name), proto)
    s.close()


def udp_socket(cfg):
    _socket("AF_INET", "SOCK_DGRAM")


def unix_socket(cfg):
    _socket("AF_UNIX", "SOCK_STREAM")


def netlink_socket(cfg):
    _socket("AF_NETLINK", "SOCK_RAW")


def raw_socket(cfg):
    _socket("AF_INET", "SOCK_RAW", 1)


def sctp_stream(cfg):
    _socket("AF_INET", "SOCK_STREAM", 132)


def socketpair(cfg):
    import socket

    a, b = socket.socketpair()
    a.sendall(b"ping")
    assert b.recv(4) == b"ping"
    a.close()
    b.close()


# --- processes ---------------------------------------------------------------------------------

def fork(cfg):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def subprocess_ls(cfg):
    import subprocess

    out = subprocess.run(["ls", cfg["scratch"]], capture_output=True, timeout=20, check=True)
    return "ok: " + " ".join(sorted(out.stdout.decode().split()))


def kill_victim(cfg):
    os.kill(cfg["victim_pid"], cfg["kill_signal"])


def ptrace_victim(cfg):
    ctypes, libc = _libc()
    libc.ptrace.restype = ctypes.c_long
    PTRACE_SEIZE = 0x4206
    return _check(ctypes, libc.ptrace(ctypes.c_long(PTRACE_SEIZE), ctypes.c_long(cfg["victim_pid"]),
                                      None, None))


def process_vm_readv_parent(cfg):
    """Reads one byte at address 8 of the parent: EFAULT means the permission check passed."""
    ctypes, libc = _libc()
    buf = ctypes.create_string_buffer(8)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    local = IoVec(ctypes.addressof(buf), 1)
    remote = IoVec(8, 1)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    return _check(ctypes, libc.process_vm_readv(
        ctypes.c_int(cfg["parent_pid"]), ctypes.byref(local), ctypes.c_ulong(1),
        ctypes.byref(remote), ctypes.c_ulong(1), ctypes.c_ulong(0)))


def unshare_nothing(cfg):
    ctypes, libc = _libc()
    return _check(ctypes, libc.unshare(0))


def io_uring_setup(cfg):
    ctypes, libc = _libc()
    return _check(ctypes, libc.syscall(ctypes.c_long(425), ctypes.c_uint(1), None))


def keyctl_session(cfg):
    ctypes, libc = _libc()
    KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING = 0, -3
    r = libc.syscall(ctypes.c_long(250), ctypes.c_int(KEYCTL_GET_KEYRING_ID),
                     ctypes.c_int(KEY_SPEC_SESSION_KEYRING), ctypes.c_int(0))
    return _check(ctypes, -1 if r < 0 else 0)


def clone3_raw(cfg):
    ctypes, libc = _libc()
    # A NULL clone_args: EFAULT when the kernel looks at it, ENOSYS from the filter.
    return _check(ctypes, libc.syscall(ctypes.c_long(435), None, ctypes.c_size_t(88)))


def dumpable(cfg):
    ctypes, libc = _libc()
    return "dumpable=%d no_new_privs=%d" % (libc.prctl(3, 0, 0, 0, 0), libc.prctl(39, 0, 0, 0, 0))


def undo_dumpable(cfg):
    ctypes, libc = _libc()
    return _check(ctypes, libc.prctl(4, 1, 0, 0, 0))


# --- what must keep working --------------------------------------------------------------------

def threads(cfg):
    import threading

    out = []
    ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(out) == [0, 1, 2, 3]


def asyncio_works(cfg):
    import asyncio

    async def main():
        r, w = await asyncio.open_connection("127.0.0.1", cfg["allowed_port"])
        w.close()
        return await asyncio.gather(asyncio.to_thread(sum, [1, 2]), asyncio.sleep(0, 5))

    assert asyncio.run(main()) == [3, 5]


def stdlib_imports(cfg):
    import datetime
    import json as j
    import re
    import sqlite3
    import tempfile
    import zoneinfo

    assert re.match(r"a+", "aaa") and j.loads("[1]") == [1]
    paris = datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    assert paris.utcoffset() == datetime.timedelta(hours=2)
    datetime.datetime.now().astimezone()
    db = sqlite3.connect(os.path.join(cfg["scratch"], "db.sqlite"))
    db.execute("create table t (x)")
    db.execute("insert into t values (42)")
    db.commit()
    assert db.execute("select x from t").fetchone() == (42,)
    db.close()
    with tempfile.NamedTemporaryFile(dir=None) as f:
        f.write(b"x")
        assert os.path.dirname(f.name) == cfg["scratch"]
    assert os.cpu_count() >= 1


def inherited_fds(cfg):
    """The fds open besides 0, 1, 2 (confine closes everything it was handed)."""
    extra = []
    for fd in range(3, 64):
        try:
            os.fstat(fd)
            extra.append(fd)
        except OSError:
            pass
    return "fds %s" % (extra,)


ATTEMPTS = [
    ("read_outside", read_outside),
    ("write_outside", write_outside),
    ("write_scratch", write_scratch),
    ("read_sdk", read_sdk),
    ("write_sdk", write_sdk),
    ("read_etc_passwd", read_etc_passwd),
    ("read_proc_parent_environ", read_proc_parent_environ),
    ("read_proc_victim_mem", read_proc_victim_mem),
    ("write_dev_null", write_dev_null),
    ("list_tmp", list_tmp),
    ("connect_allowed", connect_allowed),
    ("connect_other", connect_other),
    ("fastopen_other", fastopen_other),
    ("bind_tcp", bind_tcp),
    ("udp_socket", udp_socket),
    ("unix_socket", unix_socket),
    ("netlink_socket", netlink_socket),
    ("raw_socket", raw_socket),
    ("sctp_stream", sctp_stream),
    ("socketpair", socketpair),
    ("fork", fork),
    ("subprocess_ls", subprocess_ls),
    ("kill_victim", kill_victim),
    ("ptrace_victim", ptrace_victim),
    ("process_vm_readv_parent", process_vm_readv_parent),
    ("unshare", unshare_nothing),
    ("io_uring_setup", io_uring_setup),
    ("keyctl", keyctl_session),
    ("clone3", clone3_raw),
    ("dumpable", dumpable),
    ("undo_dumpable", undo_dumpable),
    ("threads", threads),
    ("asyncio", asyncio_works),
    ("stdlib", stdlib_imports),
    ("inherited_fds", inherited_fds),
]

if __name__ == "__main__":
    main()
