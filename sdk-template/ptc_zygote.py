"""The fork server: `python3 -I -u -B SDK_DIR/ptc_zygote.py`, its stdin a SOCK_SEQPACKET socket.

Owns making children fast: it loads the SDK and builds the stubs once (ptc_bootstrap.prepare),
then forks one child per request. A child starts from exactly the state a cold bootstrap reaches
before it reads its job, so its run is the same as a cold one's (docs/runner-protocol.md).

Requests: one JSON message per fork, `{"id", "scratch", "env", "limits", "cwd"?, "exec"?,
"spawn"?, "user"?}` (`user`: `{"uid", "gid"}`, the run's own ids where it has them), with the
child's stdin, stdout and stderr, and its Landlock ruleset when there is one, attached as
SCM_RIGHTS; the child confines itself (ptc_sandbox) before it continues as a cold child would,
or, with `exec` (an argv), becomes that program under the same layers: with `spawn` (a bash
run) the seccomp rules against process creation are left out (the run's processes stay in its
sandbox, and are killed with it); without it (a JavaScript run) they hold, but for the one
execve of the program (seccomp program `alone`). The server has the seccomp program under every run (`base`) installed on
itself, so a child installs only the program of its run's kind. Replies: `forked ID PID` (with the run's end of the IPC bridge attached, a
socket listening inside its network namespace, when it has one: see `_NetSlots`), or `failed ID ERRNO MESSAGE`
when the run could not be made (EAGAIN: its process limit is reached), and `exited PID CODE`
(CODE negative for a signal) once the run's process is reaped.

The server runs as the sidecar's user, never as the run user: each child becomes the run user
itself. Where the sandbox gives runs namespaces of their own (the spec's `ns`), the run's
process is cloned into them (`ptc_sandbox.clone_isolated`), PID 1 of a new PID namespace, and
makes them its own (`ptc_sandbox.enter`) once the server has mapped its ids: when it exits, the kernel kills everything the run started, however it detached. Without them,
the server is a child subreaper: what a run leaves behind (a `setsid` child, a double-forked
grandchild) comes here when the run's process exits, and is killed before the run's `exited`
is sent. The server stays single-threaded and never runs user code. It exits when the sidecar
shuts the socket down or goes away, after killing its children and what they left behind (the
children would die with it anyway, by PR_SET_PDEATHSIG).
"""

import json
import os
import select
import signal
import socket
import sys
import time


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ptc_bootstrap
    import resource

    prepared = ptc_bootstrap.prepare()
    import ptc_sandbox

    # What each child applies after its fork (docs/SECURITY.md): the filters are read once,
    # and the program under every run is this server's own from here on (its children have it).
    spec = ptc_sandbox.settle(ptc_sandbox.spec_from_env() or dict(ptc_bootstrap._EVERY_LAYER))
    filters = exec_filters = alone_filters = None
    if spec.get("seccomp") and spec.get("filters"):
        names = [ptc_sandbox.BASE_PROGRAM, ptc_sandbox.RUN_PROGRAM, ptc_sandbox.EXEC_PROGRAM,
                 ptc_sandbox.ALONE_PROGRAM]
        try:
            base, run, run_exec, alone = ptc_sandbox.load_filters(spec["filters"], names)
            filters, exec_filters, alone_filters = [run], [run_exec], [alone]
            ptc_sandbox.confine_server([base])
        except ptc_sandbox.SandboxError as e:
            sys.stderr.write("ptc: the fork server cannot install its seccomp program: %s\n" % e)
            sys.exit(2)
    server_pid = os.getpid()
    ptc_sandbox.become_subreaper()
    # The server's life, for runs in namespaces of their own (which cannot see their parent):
    # each holds the reader; the writer is ours alone, so it closes when we go.
    life = os.pipe()
    # The runs this server forked that have not been reaped: every other child is a stray.
    runs = set()
    # The socket moves off fd 0, which children take over for their own stdin.
    ctl = socket.socket(fileno=os.dup(0))
    ctl.setblocking(True)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # The sidecar's death (PR_SET_PDEATHSIG) or its stop: leave as at the end of requests.
    signal.signal(signal.SIGTERM, lambda *_: _leave())

    try:
        _serve(ctl, (wake_r, wake_w), runs, prepared, spec,
               (filters, exec_filters, alone_filters), server_pid, resource, life)
    finally:
        _leave()  # the sidecar is done with us, or something here broke: nothing stays behind


def _serve(ctl, wake, runs, prepared, spec, filter_sets, server_pid, resource, life):
    """Answers fork requests until the sidecar shuts the socket down or goes away.
    `filter_sets`: the seccomp programs of a Python run, of a run that execs a program that may
    start processes (a bash run: all of them inside its sandbox and killed with it), and of one
    that execs a program that may not (a JavaScript run: `spawn` false in its request).

    Where runs get namespaces of their own, a run's process works for milliseconds making them
    its own before it reports: the server does not wait for it, but goes on reaping and
    forking, and says `forked` when its report comes (`pending`); otherwise a refill would hold
    up the exit report of a run that just ended."""
    isolating = bool(spec.get("ns"))
    at_home = _own_home(spec)
    nets = _NetSlots(spec)
    nets.enabled = nets.enabled and at_home
    mounts = _MountsForRuns(spec if at_home else {})
    if mounts.fd is not None:
        spec = dict(spec, premounted=True)
    pending = {}  # report socket -> _Handover
    exited = {}  # runs that exited before their handover was done: pid -> code
    wake_r = wake[0]
    while True:
        timeout = None
        if pending:
            timeout = max(0.0, min(h.deadline for h in pending.values()) - time.monotonic())
        try:
            ready, _, _ = select.select([ctl, wake_r] + list(pending), [], [], timeout)
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(ctl, runs, isolating, exited, nets)
        now = time.monotonic()
        for report in [r for r in pending if r in ready or pending[r].deadline <= now]:
            _finish_handover(ctl, pending.pop(report), runs, exited)
        if ctl not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 65536, 4)
        except OSError:
            break
        if not data:
            break  # the sidecar is done with us (or gone): time to go
        try:
            request = json.loads(data)
        except ValueError:
            for fd in fds:
                os.close(fd)
            continue
        handover = _fork_run(ctl, request, fds, (wake, life, pending, runs, nets, mounts), prepared,
                             spec, filter_sets, server_pid, resource)
        if handover is not None:
            pending[handover.report] = handover


class _Handover:
    """A run's process making its namespaces its own: what reporting it `forked` needs."""

    __slots__ = ("rid", "pid", "report", "deadline", "slot")

    def __init__(self, rid, pid, report, slot):
        self.rid = rid
        self.pid = pid
        self.report = report
        self.deadline = time.monotonic() + _HANDOVER_TIMEOUT
        self.slot = slot  # its network namespace when one of `_NetSlots`, else None


class _NetSlots:
    """Network namespaces for runs, each with its loopback up and a socket listening on
    `127.0.0.1:<IPC port>` in it (the run's end of the IPC bridge), made by this server and
    reused, one run at a time: a run's process is cloned into a free one (the server enters it
    for the clone) instead of making its own, which costs a new namespace, bringing up its
    loopback and tearing both down at its exit (about 1 ms of CPU of a run's 3 to 5 on this
    machine). A namespace is free again once its run's process is reaped: that process is PID 1
    of its PID namespace, so every process of the run is gone with it, and every socket it had.
    What a run could leave in one is nothing another run can use: the run has no capability
    in it (it is owned by this server's user namespace, the run's by its own), cannot bind
    (Landlock), and the listener answers only the token of the run bound to it
    (`src/run/ipc.rs`). Needs CAP_SYS_ADMIN here (a sidecar running as root): without it
    each run makes its own namespace as before (`enabled` false after the first refusal)."""

    # Free namespaces kept beyond this many are closed (a burst of sessions made them).
    KEEP_FREE = 8

    def __init__(self, spec):
        self.enabled = bool((spec.get("ns") or {}).get("net") and spec.get("ipc_port"))
        self.port = int(spec.get("ipc_port") or 0)
        self.free = []  # [(namespace fd, listening socket)]
        self.busy = {}  # pid -> (namespace fd, listening socket)
        self.home = None

    def take(self):
        """A free namespace, or a new one; None where this server cannot make them."""
        if not self.enabled:
            return None
        if self.free:
            return self.free.pop()
        import ptc_sandbox

        try:
            return self._make()
        except (OSError, ptc_sandbox.SandboxError):
            self.enabled = False  # no CAP_SYS_ADMIN here: runs make their own
            return None

    def _make(self):
        import ptc_sandbox

        if self.home is None:
            self.home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        _libc_ok(ptc_sandbox._libc_handle().unshare(ptc_sandbox.CLONE_NEWNET))
        try:
            ptc_sandbox._loopback_up()
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            self.leave()
        return fd, listener

    def enter(self, slot):
        """This server into `slot`'s namespace, for one clone."""
        import ptc_sandbox

        _setns(slot[0], ptc_sandbox.CLONE_NEWNET)

    def leave(self):
        import ptc_sandbox

        _go_home(self.home, ptc_sandbox.CLONE_NEWNET)

    def hold(self, pid, slot):
        self.busy[pid] = slot

    def give_back(self, slot):
        """`slot` free again (its run never started, or is reaped)."""
        if len(self.free) < self.KEEP_FREE:
            self.free.append(slot)
        else:
            os.close(slot[0])
            slot[1].close()

    def reaped(self, pid):
        slot = self.busy.pop(pid, None)
        if slot is not None:
            self.give_back(slot)

    def close_in_child(self, mine):
        """In a run's process: none of the namespaces or listeners is the run's to hold, not
        even its own namespace's (`mine`, it is in it already)."""
        for fd, listener in self.free + list(self.busy.values()) + ([mine] if mine else []):
            os.close(fd)
            listener.close()
        if self.home is not None:
            os.close(self.home)


class _MountsForRuns:
    """The mount namespace runs' are copied from, made once by this server with what
    `ptc_sandbox.make_run_mounts` makes in each (every mount private, the scratch root noexec,
    nosuid and nodev, the machine's /proc and /sys hidden): a run's process is cloned into a
    new mount namespace while the server is in this one, as it is into a network namespace of
    `_NetSlots`, and mounts nothing itself but a directory outside the scratch root (a
    session's data directory). Four mounts and their teardown were ~0.1 ms of a run's CPU. In
    the run's user namespace the copied mounts are locked: it can neither unmount the tmpfs
    nor drop a flag. Mounts the machine makes after this server starts do not reach runs.
    Needs CAP_SYS_ADMIN (a sidecar running as root): without it, `fd` is None and each run
    makes its mounts as before."""

    def __init__(self, spec):
        self.fd = self.home = None
        root = spec.get("scratch_root")
        if not ((spec.get("ns") or {}).get("mount") and root):
            return
        import ptc_sandbox

        home = proc = None
        try:
            home = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            _libc_ok(ptc_sandbox._libc_handle().unshare(ptc_sandbox.CLONE_NEWNS))
        except OSError:
            for fd in (home, proc):
                if fd is not None:
                    os.close(fd)
            return  # no CAP_SYS_ADMIN here (or no /proc): each run mounts its own
        try:
            ptc_sandbox.make_run_mounts([root])
            self.fd = os.open("self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
        except (OSError, ptc_sandbox.SandboxError):
            pass  # each run mounts its own
        finally:
            os.close(proc)
            _go_home(home, ptc_sandbox.CLONE_NEWNS)
        if self.fd is None:
            os.close(home)
        else:
            self.home = home

    def enter(self):
        """This server into the runs' mount namespace, for one clone (where there is one)."""
        if self.fd is not None:
            import ptc_sandbox

            _setns(self.fd, ptc_sandbox.CLONE_NEWNS)

    def leave(self):
        """This server back in its own mount namespace after `enter`."""
        if self.fd is not None:
            import ptc_sandbox

            _go_home(self.home, ptc_sandbox.CLONE_NEWNS)

    def close_in_child(self):
        for fd in (self.fd, self.home):
            if fd is not None:
                os.close(fd)


def _own_home(spec):
    """Makes this server's network and mount namespaces its own where it is root in a user
    namespace that is not the machine's (an unprivileged sidecar in the user namespace of its
    subordinate ids): `_NetSlots` and `_MountsForRuns` step into namespaces they make and back
    home with `setns`, which needs CAP_SYS_ADMIN over the home namespace's owner, and the
    machine's are owned by the machine's user namespace. The server talks to the sidecar over
    its control socket only, so it needs no network. False where it could not (runs then make
    their own namespaces, as a sidecar without privileges does)."""
    import ptc_sandbox

    names = spec.get("ns") or {}
    flags = (ptc_sandbox.CLONE_NEWNET if names.get("net") else 0) | (
        ptc_sandbox.CLONE_NEWNS if names.get("mount") else 0)
    if not flags or os.geteuid() != 0:
        return True
    try:
        with open("/proc/self/uid_map") as f:
            if f.read().split() == ["0", "0", "4294967295"]:
                return True  # the machine's own: its namespaces are ours to go back to
        _libc_ok(ptc_sandbox._libc_handle().unshare(flags))
    except OSError:
        return False
    return True


def _setns(fd, kind):
    import ptc_sandbox

    _libc_ok(ptc_sandbox._libc_handle().setns(fd, kind))


def _go_home(home, kind):
    """This server back in its own namespace of `kind`; a server that cannot go back leaves."""
    try:
        _setns(home, kind)
    except OSError:
        _leave()


def _libc_ok(result):
    """A libc call's `result`, raised as OSError (with its errno) when it failed."""
    if result != 0:
        import ptc_sandbox

        err = ptc_sandbox._syscalls()[0].get_errno()
        raise OSError(err, os.strerror(err))


def _fork_run(ctl, request, fds, kept, prepared, spec, filter_sets, server_pid, resource):
    """Forks one run's child. Without namespaces it is the run: reported `forked` here. With
    them it is cloned into them and makes them its own: returns the `_Handover` to finish when
    its report comes."""
    import ptc_bootstrap
    import ptc_sandbox

    wake, life, pending, runs, nets, mounts = kept
    isolating = bool(spec.get("ns"))
    rid = request.get("id", "?")
    if spec.get("switch_user") and request.get("user"):
        # The run's own uid (PTC_SANDBOX_UIDS): mapped below, and what the child becomes.
        spec = dict(spec, user=request["user"])
    report = theirs = go = slot = None
    if isolating:
        report, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        go = os.pipe()
        slot = nets.take()
        if slot is not None:
            # Cloned into a namespace of the server's (`_NetSlots`): the run makes the others.
            spec = dict(spec, ns=dict(spec["ns"], net=False))
    try:
        if slot is not None:
            nets.enter(slot)
        mounts.enter()  # where it has a mount namespace for runs (then it is isolating)
        pid = ptc_sandbox.clone_isolated(spec) if isolating else os.fork()
    except OSError as e:
        mounts.leave()
        if slot is not None:
            nets.leave()
            nets.give_back(slot)
        # EAGAIN: the server's process limit is reached. That run cannot start; the server
        # goes on serving the others.
        for sock in (report, theirs):
            if sock is not None:
                sock.close()
        for fd in list(go or ()) + list(fds):
            os.close(fd)
        _send(ctl, "failed %s %d %s\n" % (rid, e.errno or 0, e.strerror or "fork failed"))
        return None
    if pid == 0:
        try:
            nets.close_in_child(slot)
            mounts.close_in_child()
            os.close(life[1])
            for other in pending.values():  # other runs' handovers are not ours
                other.report.close()
            if report is not None:
                report.close()
                os.close(go[1])
                _arrive_or_exit(theirs, life[0], go[0])
            _child(request, fds, ctl, wake, resource, isolating)
            argv = request.get("exec")
            parent = server_pid
            if isolating:
                _enter_or_exit(spec, request, theirs)
                parent = None  # enter armed the death signal and checked the server
            else:
                ptc_sandbox.become_run_user(spec)
            # The run's own Landlock ruleset came as a fourth fd; confine closes it.
            ptc_sandbox.confine_or_exit(
                ptc_sandbox.confine_spec, spec,
                ruleset_fd=fds[3] if len(fds) > 3 else None,
                filters=filter_sets[(1 if request.get("spawn") else 2) if argv else 0],
                parent_pid=parent,
            )
            if argv:
                _exec(argv)
            ptc_bootstrap.serve(prepared)  # never returns
        finally:
            os._exit(2)
    mounts.leave()
    if slot is not None:
        nets.leave()
        nets.hold(pid, slot)
    for fd in fds:
        os.close(fd)
    if isolating:
        theirs.close()
        os.close(go[0])
        try:
            if spec["ns"].get("user"):
                ptc_sandbox.map_ids(pid, spec)
            os.write(go[1], b"g")
        except (OSError, ptc_sandbox.SandboxError) as e:
            # The child waits for its maps: without them it gives up (and is reaped).
            os.kill(pid, signal.SIGKILL)
            report.close()
            os.close(go[1])
            _send(ctl, "failed %s 0 the run's ids could not be mapped: %s\n" % (rid, e))
            return None
        os.close(go[1])
        return _Handover(rid, pid, report, slot)
    _started(ctl, rid, pid, (), runs)
    return None


def _finish_handover(ctl, h, runs, exited):
    """The run's process reported its namespaces made (or ran out of time, and is killed):
    `forked`, with its listening socket, or `failed`."""
    handed, failure = _handover(h.report, h.pid, h.pid in exited)
    h.report.close()
    if failure is not None:
        _send(ctl, "failed %s %s\n" % (h.rid, failure))
        return
    pid = h.pid
    if h.slot is None:
        _started(ctl, h.rid, pid, handed, runs)
    else:
        # The namespace's listener, sent and kept (the run listens on nothing of its own);
        # not for a process already reaped, whose namespace may be another run's by now.
        _started(ctl, h.rid, pid, [] if pid in exited else [h.slot[1].fileno()], runs)
    for fd in handed:
        os.close(fd)
    if pid in exited:  # it died before it was handed over: its exit was held for now
        runs.discard(pid)
        _send(ctl, "exited %d %d\n" % (pid, exited.pop(pid)))


def _started(ctl, rid, pid, handed, runs):
    """Reports a run's process (it leads its own group) as one of `runs`."""
    try:
        os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
    except OSError:
        pass
    runs.add(pid)
    _send(ctl, "forked %s %d\n" % (rid, pid), handed)


def _arrive_or_exit(report, life_fd, go_fd):
    """The cloned child's first steps (`ptc_sandbox.arrive`), or why not on `report`."""
    import ptc_sandbox

    _or_report(report, ptc_sandbox.arrive, life_fd, go_fd)


def _enter_or_exit(spec, request, report):
    """Makes the cloned child's namespaces a run's (`ptc_sandbox.enter`), or why not on
    `report`."""
    import ptc_sandbox

    dirs = [request["scratch"]]
    if request.get("cwd"):
        dirs.append(request["cwd"])
    nproc = (request.get("limits") or {}).get("nproc")
    _or_report(report, ptc_sandbox.enter, spec, dirs, report, nproc)


def _or_report(report, step, *args):
    """`step(*args)`; on failure says why on `report` (`error ERRNO MESSAGE`) and leaves."""
    try:
        step(*args)
    except BaseException as e:
        errno = getattr(e, "errno", None) or 0
        line = "error %d %s" % (errno, str(e).replace("\n", " ")[:500])
        try:
            report.send(line.encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(2)


# How long a run's process may take to make its namespaces its own: less than the sidecar
# waits for a fork's answer (FORK_TIMEOUT, 5 s), which would take the whole server for stuck.
_HANDOVER_TIMEOUT = 4.0


def _handover(report, pid, reaped):
    """The report of run process `pid` on its namespaces (one that has sent nothing by now is
    killed, unless it is already `reaped`: its pid may be another process's by now):
    `([listening socket], None)`, or `([], "ERRNO MESSAGE")`."""
    import ptc_sandbox

    data, fds = ptc_sandbox.receive(report, 0)
    if data == b"ok":
        return fds, None
    for fd in fds:
        os.close(fd)
    if not data and not reaped:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        return [], "0 the run's namespaces were not made (no word from its process)"
    return [], data[6:].decode("utf-8", "replace")


def _exec(argv):
    """Becomes the run's program (`["/bin/bash", ...]`), confined: every layer survives exec."""
    try:
        os.execve(argv[0], argv, os.environ)
    except OSError as e:
        os.write(2, ("ptc: cannot start %s: %s\n" % (argv[0], e)).encode("utf-8", "replace"))
        os._exit(127)


def _leave():
    """Exits, and nothing of ours outlives us: the runs still going, and what they left behind."""
    import ptc_sandbox

    ptc_sandbox.kill_strays(set())
    os._exit(0)


# Exits of children that were not (yet) runs kept for a handover still to come: at most this
# many (strays fill it too; the oldest go first).
_HELD_EXITS = 64


def _reap(ctl, runs, isolating, exited, nets):
    """Reaps exited children. A run's exit is reported, without namespaces once the strays it
    left are dead (in its own PID namespace, nothing of it is left to kill). Any other child's
    exit is kept a while in `exited`, for a run process that died before its handover."""
    import ptc_sandbox

    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        nets.reaped(pid)  # its network namespace is free: nothing of the run is left in it
        if pid in runs:
            runs.discard(pid)
            if not isolating:
                ptc_sandbox.kill_strays(runs)
            _send(ctl, "exited %d %d\n" % (pid, code))
        elif isolating:
            exited[pid] = code
            while len(exited) > _HELD_EXITS:
                del exited[next(iter(exited))]


def _send(ctl, text, fds=()):
    try:
        if fds:
            socket.send_fds(ctl, [text.encode()], list(fds))
        else:
            ctl.send(text.encode())
    except OSError:
        _leave()  # the sidecar is gone


def _child(request, fds, ctl, wake, resource, isolating):
    """Turns the forked process into a run's child: its own group, limits, pipes, cwd, env.
    `isolating`: the process limit is left to `enter`, which sets it in the run's own user
    namespace (set here, it would bound every run's processes together)."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        limits = request.get("limits") or {}
        for name, key in (("RLIMIT_AS", "as"), ("RLIMIT_CPU", "cpu"),
                          ("RLIMIT_FSIZE", "fsize"), ("RLIMIT_NOFILE", "nofile"),
                          ("RLIMIT_NPROC", "nproc")):
            if key in limits and not (isolating and key == "nproc"):
                value = int(limits[key])
                resource.setrlimit(getattr(resource, name), (value, value))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        # fds[3], the run's Landlock ruleset, stays open for confine.
        for fd in list(fds[:3]) + list(wake):
            os.close(fd)
        ctl.close()
        os.chdir(request.get("cwd") or request["scratch"])
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    except BaseException:
        os._exit(2)


if __name__ == "__main__":
    main()
