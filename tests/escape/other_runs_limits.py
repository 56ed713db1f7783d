"""Other runs: one run breaks the others by changing their limits or their scheduling, which
before namespaces took only the same uid: `prlimit(2)` (RLIMIT_NPROC 0: no later run could
start; RLIMIT_NOFILE 3; RLIMIT_CPU 1 s: the kernel kills the target), `setpriority`,
`sched_setaffinity`, `sched_setscheduler`, `sched_setparam`, `sched_setattr` and `ioprio_set`,
on the fork server, a concurrent run, a live session's interpreter and the sidecar itself, by
the pids the harness sees them by (ARGS["targets"]). Each must be refused: seccomp allows these
calls on the caller only, and the run's PID namespace has no pid for any target (EPERM, ESRCH).

The audit hook is emptied first, as an attacker would, so that the kernel's answer is what is
judged, and the same calls on the run itself must work (the wrappers are right). Then the forms
that name every process of a user or group (`PRIO_USER`, `PRIO_PGRP`, `IOPRIO_WHO_USER`, who 0):
they may succeed, but reach only the processes the run can see; the harness checks from outside
that no target's limits, nice value, policy, affinity or I/O priority changed."""

import ctypes

unguard()

RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_NOFILE = 0, 6, 7
PRIO_PROCESS, PRIO_PGRP, PRIO_USER = 0, 1, 2
SCHED_OTHER, SCHED_IDLE = 0, 5
IOPRIO_WHO_PROCESS, IOPRIO_WHO_USER = 1, 3
IOPRIO_IDLE = 3 << 13
SYS_IOPRIO_SET, SYS_SCHED_SETATTR = 251, 314  # x86_64
REFUSED = refused_by("EPERM", "ESRCH")


class Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]


class SchedParam(ctypes.Structure):
    _fields_ = [("priority", ctypes.c_int)]


class SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32),
                ("flags", ctypes.c_uint64), ("nice", ctypes.c_int32),
                ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]


def prlimit(pid, resource, value):
    def step():
        new = Rlimit(value, value)
        libc_call("prlimit", pid, resource, ctypes.byref(new), None)
        return "set"
    return step


def setpriority(which, who, nice):
    def step():
        return libc_call("setpriority", which, who, nice)
    return step


def one_cpu(pid):
    def step():
        mask = ctypes.c_ulong(1)
        return libc_call("sched_setaffinity", pid, ctypes.sizeof(mask), ctypes.byref(mask))
    return step


def scheduler(pid, policy):
    def step():
        return libc_call("sched_setscheduler", pid, policy, ctypes.byref(SchedParam(0)))
    return step


def param(pid):
    def step():
        return libc_call("sched_setparam", pid, ctypes.byref(SchedParam(0)))
    return step


def attr(pid):
    def step():
        a = SchedAttr(ctypes.sizeof(SchedAttr), SCHED_IDLE, 0, 19, 0, 0, 0, 0)
        return libc_call("syscall", SYS_SCHED_SETATTR, pid, ctypes.byref(a), 0,
                         restype=ctypes.c_long)
    return step


def ioprio(which, who, value):
    def step():
        return libc_call("syscall", SYS_IOPRIO_SET, which, who, value, restype=ctypes.c_long)
    return step


# The wrappers work on the run itself: reading its own limit, keeping its own nice value.
own = Rlimit()
libc_call("prlimit", 0, RLIMIT_NOFILE, None, ctypes.byref(own))
libc_call("setpriority", PRIO_PROCESS, 0, _os.getpriority(PRIO_PROCESS, 0))
print("CONTROL ok", own.cur)

for name, pid in ARGS["targets"]:
    what = "%s (%d)" % (name, pid)
    attempt("prlimit RLIMIT_NPROC 0 on " + what, prlimit(pid, RLIMIT_NPROC, 0), REFUSED)
    attempt("prlimit RLIMIT_NOFILE 3 on " + what, prlimit(pid, RLIMIT_NOFILE, 3), REFUSED)
    attempt("prlimit RLIMIT_CPU 1 on " + what, prlimit(pid, RLIMIT_CPU, 1), REFUSED)
    attempt("setpriority 19 on " + what, setpriority(PRIO_PROCESS, pid, 19), REFUSED)
    attempt("sched_setaffinity to one CPU on " + what, one_cpu(pid), REFUSED)
    attempt("sched_setscheduler SCHED_IDLE on " + what, scheduler(pid, SCHED_IDLE), REFUSED)
    attempt("sched_setparam on " + what, param(pid), REFUSED)
    attempt("sched_setattr SCHED_IDLE on " + what, attr(pid), REFUSED)
    attempt("ioprio_set idle on " + what, ioprio(IOPRIO_WHO_PROCESS, pid, IOPRIO_IDLE), REFUSED)

# Every process of the run's user or group (who 0): judged by the harness from outside.
for label, step in (("setpriority PRIO_USER 19", setpriority(PRIO_USER, 0, 19)),
                    ("setpriority PRIO_PGRP 19", setpriority(PRIO_PGRP, 0, 19)),
                    ("ioprio_set IOPRIO_WHO_USER idle", ioprio(IOPRIO_WHO_USER, 0, IOPRIO_IDLE))):
    try:
        print("PROBE", label, "->", step())
    except OSError as e:
        print("PROBE", label, "->", _errno_name(e))
