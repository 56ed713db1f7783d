"""Smaller gaps: new namespaces by `clone`. Seccomp refused `unshare` and `setns` but not clone's
flags, so in a bash run (where processes may start) `clone(CLONE_NEWUSER|CLONE_NEWNET|...)` made a
child in namespaces of its own: a user namespace with every capability in it, the door to most
kernel bugs that need one. Run by python3 inside a bash run, each must be refused: clone with any
CLONE_NEW* flag (EPERM), clone3 (ENOSYS: its flags sit behind a pointer seccomp cannot read, and
glibc falls back to clone), unshare(2) and the `unshare` command (EPERM)."""

import ctypes
import subprocess

SYS_CLONE, SYS_UNSHARE, SYS_CLONE3 = 56, 272, 435  # x86_64
SIGCHLD = 17
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x08000000, 0x10000000, 0x20000000
CLONE_NEWNET = 0x40000000
EVERY = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
         | CLONE_NEWPID | CLONE_NEWNET)


def child_of(pid):
    """`pid` from a clone: the child leaves at once, the parent reaps it."""
    if pid == 0:
        _os._exit(0)
    _os.waitpid(pid, 0)
    return "a child (%d) in namespaces of its own" % pid


def clone(flags):
    def step():
        return child_of(libc_call("syscall", SYS_CLONE, flags | SIGCHLD, 0, 0, 0, 0,
                                  restype=ctypes.c_long))
    return step


def clone3(flags):
    def step():
        # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack,
        # stack_size, tls, set_tid, set_tid_size, cgroup.
        args = (ctypes.c_uint64 * 11)(flags, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)
        return child_of(libc_call("syscall", SYS_CLONE3, ctypes.byref(args),
                                  ctypes.sizeof(args), restype=ctypes.c_long))
    return step


def unshare():
    return libc_call("syscall", SYS_UNSHARE, CLONE_NEWUSER, restype=ctypes.c_long)


def unshare_command():
    done = subprocess.run(["unshare", "-Urn", "true"], capture_output=True, text=True)
    if done.returncode == 0:
        return "unshare -Urn true exited 0"
    if "Operation not permitted" in done.stderr:
        raise Refused(_errno.EPERM, done.stderr.strip())
    raise RuntimeError("unshare exited %d: %s" % (done.returncode, done.stderr.strip()))


attempt("clone(CLONE_NEWUSER|CLONE_NEWNET)", clone(CLONE_NEWUSER | CLONE_NEWNET),
        refused_by("EPERM"))
attempt("clone with every CLONE_NEW* flag", clone(EVERY), refused_by("EPERM"))
attempt("clone3(CLONE_NEWUSER)", clone3(CLONE_NEWUSER), refused_by("ENOSYS", "EPERM"))
# The command first: unshare(2), had it worked, would have moved this process itself.
attempt("unshare -Urn true", unshare_command)
attempt("unshare(CLONE_NEWUSER)", unshare, refused_by("EPERM"))
