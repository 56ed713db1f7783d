"""What held in issue 21's review and must keep holding: the kernel interfaces no run needs
(io_uring, bpf, perf, userfaultfd, keyctl, mount, unshare), ptrace and process_vm_readv of another
process (the fork server, by the pid the harness sees it by), and sockets that are not TCP
(netlink, packet, an abstract Unix socket). The audit hook is emptied first; each must be refused
by the kernel (EPERM from seccomp; ESRCH where the target has no pid in the run's namespace), in
a Python run and in python3 inside a bash run."""

import ctypes
import socket

unguard()
target = ARGS["fork_server_pid"]
EPERM = refused_by("EPERM")


def sys(number, *args):
    def step():
        return libc_call("syscall", number, *args, restype=ctypes.c_long)
    return step


def abstract_unix():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("\0ptc-escape-" + str(target))
        return "connected to an abstract socket"


def sock(family, kind):
    def step():
        socket.socket(family, kind).close()
        return "a socket"
    return step


buf = ctypes.create_string_buffer(64)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
attempt("io_uring_setup", sys(425, 8, ctypes.byref(ctypes.create_string_buffer(120))), EPERM)
attempt("bpf(BPF_PROG_LOAD)", sys(321, 5, ctypes.byref(buf), 64), EPERM)
attempt("perf_event_open", sys(298, ctypes.byref(ctypes.create_string_buffer(128)), 0, -1, -1, 0),
        EPERM)
attempt("userfaultfd", sys(323, 0), EPERM)
attempt("keyctl(KEYCTL_GET_KEYRING_ID, session)", sys(250, 0, -3, 1), EPERM)
attempt("mount tmpfs on the scratch dir", sys(165, b"none", _os.getcwd().encode(), b"tmpfs", 0, 0),
        EPERM)
attempt("unshare(CLONE_NEWUSER)", sys(272, 0x10000000), EPERM)
attempt("ptrace(PTRACE_ATTACH) the fork server %d" % target, sys(101, 16, target, 0, 0),
        refused_by("EPERM", "ESRCH"))
attempt("process_vm_readv the fork server %d" % target,
        sys(310, target, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0),
        refused_by("EPERM", "ESRCH"))
attempt("socket(AF_NETLINK, SOCK_RAW)", sock(socket.AF_NETLINK, socket.SOCK_RAW))
attempt("socket(AF_PACKET, SOCK_RAW)", sock(socket.AF_PACKET, socket.SOCK_RAW))
attempt("connect to an abstract Unix socket", abstract_unix)
