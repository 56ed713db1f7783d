"""The process guard: the three ways around the audit hook the issue found. With
PTC_ALLOW_SUBPROCESS off every one must fail with EPERM from seccomp, whatever Python does.
A process that does start exits at once, so nothing outlives the run even today."""

import ctypes
import _ctypes
import _posixsubprocess


def fork_exec():
    import subprocess

    # The arguments subprocess.Popen passes on Linux (allow_vfork where the version has it).
    errpipe_read, errpipe_write = _os.pipe()
    args = [[b"/bin/true"], [b"/bin/true"], True, (errpipe_write,), None, None,
            -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write,
            False, False, -1, None, None, None, -1, None]
    if hasattr(subprocess, "_USE_VFORK"):
        args.append(False)
    pid = _posixsubprocess.fork_exec(*args)
    spawned(pid)
    _os.waitpid(pid, 0)
    return "started /bin/true as %d" % pid


def ctypes_system():
    # "ctypes.dlsym/handle" is a different audit event from the guard's "ctypes.dlsym".
    address = _ctypes.dlsym(ctypes.CDLL(None)._handle, "system")
    system = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, use_errno=True)(address)
    status = system(b"exit 7")
    if status == 7 << 8:
        return "system() ran a shell (exit 7)"
    # glibc answers as if the shell exited 127 when it could not start one.
    raise Refused(ctypes.get_errno(), "system() could not start a shell: status %d" % status)


def fork_without_guard():
    _sys.modules["ptc_guard"]._EVENTS = frozenset()
    pid = _os.fork()
    if pid == 0:
        _os._exit(0)
    spawned(pid)
    _os.waitpid(pid, 0)
    return "forked %d after emptying ptc_guard._EVENTS" % pid


attempt("_posixsubprocess.fork_exec /bin/true", fork_exec)
attempt("ctypes dlsym(handle, 'system')", ctypes_system)
attempt("os.fork after ptc_guard._EVENTS = frozenset()", fork_without_guard)
