"""The fork server: `python3 -I -u -B SDK_DIR/ptc_zygote.py`, its stdin a SOCK_SEQPACKET socket.

Owns making children fast: it loads the SDK and builds the stubs once (ptc_bootstrap.prepare),
then forks one child per request. A child starts from exactly the state a cold bootstrap reaches
before it reads its job, so its run is the same as a cold one's (docs/runner-protocol.md).

Requests: one JSON message per fork, `{"id", "scratch", "env", "limits", "cwd"?, "exec"?}`, with the child's
stdin, stdout and stderr, and its Landlock ruleset when there is one, attached as SCM_RIGHTS;
the child confines itself (ptc_sandbox) before it continues as a cold child would, or, with
`exec` (an argv), becomes that program (a bash run) under the same layers, where the seccomp
program against process creation is left out: the run's processes stay in its sandbox, and are
killed with it (this server is their subreaper). Replies:
`forked ID PID`, or `failed ID ERRNO` when the fork failed (EAGAIN: the run user's process limit
is reached), and `exited PID CODE` (CODE negative for a signal) once the child is reaped.
The server stays single-threaded and never runs user code. It is a child subreaper: what a run
leaves behind (a `setsid` child, a double-forked grandchild) comes here when the run's process
exits, and is killed before the run's `exited` is sent, so nothing outlives the run. It exits
when the sidecar shuts the socket down or goes away, after killing its children and what they
left behind (the children would die with it anyway, by PR_SET_PDEATHSIG; their detached
processes would not).
"""

import json
import os
import select
import signal
import socket
import sys


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ptc_bootstrap
    import resource

    prepared = ptc_bootstrap.prepare()
    import ptc_sandbox

    # What each child applies after its fork (docs/SECURITY.md): the filters are read once.
    spec = ptc_sandbox.spec_from_env() or dict(ptc_bootstrap._EVERY_LAYER)
    filters = exec_filters = None
    if spec.get("seccomp") and spec.get("filters"):
        filters = ptc_sandbox.load_filters(spec["filters"])
        exec_filters = ptc_sandbox.load_filters(spec["filters"], skip={ptc_sandbox.PROCESS_PROGRAM})
    server_pid = os.getpid()
    ptc_sandbox.become_subreaper()
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
        _serve(ctl, (wake_r, wake_w), runs, prepared, spec, (filters, exec_filters), server_pid,
               resource)
    finally:
        _leave()  # the sidecar is done with us, or something here broke: nothing stays behind


def _serve(ctl, wake, runs, prepared, spec, filter_sets, server_pid, resource):
    """Answers fork requests until the sidecar shuts the socket down or goes away.
    `filter_sets`: the seccomp programs of a Python run, and of a run that execs a program (a
    bash run: it may start processes, all of them inside its sandbox and killed with it)."""
    import ptc_bootstrap
    import ptc_sandbox

    wake_r = wake[0]
    while True:
        try:
            ready, _, _ = select.select([ctl, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(ctl, runs)
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
        try:
            pid = os.fork()
        except OSError as e:
            # EAGAIN: the run user's process limit (RLIMIT_NPROC, all runs together) is
            # reached. That run cannot start; the server goes on serving the others.
            for fd in fds:
                os.close(fd)
            _send(ctl, "failed %s %d\n" % (request.get("id", "?"), e.errno or 0))
            continue
        if pid == 0:
            try:
                _child(request, fds, ctl, wake, resource)
                argv = request.get("exec")
                # The run's own Landlock ruleset came as a fourth fd; confine closes it.
                ptc_sandbox.confine_or_exit(
                    ptc_sandbox.confine_spec, spec,
                    ruleset_fd=fds[3] if len(fds) > 3 else None,
                    filters=filter_sets[1 if argv else 0], parent_pid=server_pid,
                )
                if argv:
                    _exec(argv)
                ptc_bootstrap.serve(prepared)  # never returns
            finally:
                os._exit(2)
        try:
            os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
        except OSError:
            pass
        runs.add(pid)
        for fd in fds:
            os.close(fd)
        _send(ctl, "forked %s %d\n" % (request.get("id", "?"), pid))


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


def _reap(ctl, runs):
    """Reaps exited children. A run's exit is reported once the strays it left are dead; a
    stray's exit (one that died by itself) is nobody's business."""
    import ptc_sandbox

    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in runs:
            runs.discard(pid)
            ptc_sandbox.kill_strays(runs)
            _send(ctl, "exited %d %d\n" % (pid, os.waitstatus_to_exitcode(status)))


def _send(ctl, text):
    try:
        ctl.send(text.encode())
    except OSError:
        _leave()  # the sidecar is gone


def _child(request, fds, ctl, wake, resource):
    """Turns the forked process into a run's child: its own group, limits, pipes, cwd, env."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        limits = request.get("limits") or {}
        for name, key in (("RLIMIT_AS", "as"), ("RLIMIT_CPU", "cpu"),
                          ("RLIMIT_FSIZE", "fsize"), ("RLIMIT_NOFILE", "nofile"),
                          ("RLIMIT_NPROC", "nproc")):
            if key in limits:
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
