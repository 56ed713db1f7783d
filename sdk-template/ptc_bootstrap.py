"""Entry point of a code run: `python3 -I -u -B SDK_DIR/ptc_bootstrap.py`.

Owns the life of the child (docs/runner-protocol.md): load the SDK and the catalog and build the
stubs, and only then block on stdin, so that a pre-started (warm) child is ready the moment its
job arrives; run the job's code in one event loop; print what went wrong the way the model can
act on it (only the user's frames, hints); leave with the exit code of the table.

It must not print anything of its own on success, and must not run interpreter teardown: the
exit is `os._exit` once stdout and stderr are flushed.
"""

import os
import sys

CODE_FILENAME = "<code>"
# The file names of the code run in this process (a session's runs each have one).
_USER_FILES = {CODE_FILENAME}
# No job on stdin, or one that is not the protocol's: a sidecar bug, not the user's code.
EXIT_BAD_JOB = 2
EXIT_INTERRUPTED = 130


def main():
    prepared = prepare()
    confine()
    serve(prepared)


def confine():
    """Applies the run's sandbox as the sidecar's `PTC_SANDBOX` says (docs/SECURITY.md), before
    the job is read: a warm child waits for its job already confined. A child told nothing, or
    that cannot apply a layer it was asked for, leaves with exit code 2 (fail closed)."""
    import ptc_sandbox

    ptc_sandbox.confine_or_exit(
        lambda: ptc_sandbox.confine_spec(ptc_sandbox.spec_from_env() or _EVERY_LAYER)
    )


# What a child does when the sidecar said nothing: ask for every layer, and so fail closed.
_EVERY_LAYER = {"landlock": True, "seccomp": True}


def prepare():
    """Loads the SDK and the catalog and builds the stubs: everything paid before a job exists.
    The fork server (ptc_zygote.py) calls this once and forks children after it."""
    sdk_dir = os.path.dirname(os.path.abspath(__file__))
    if sys.path[:1] != [sdk_dir]:
        sys.path.insert(0, sdk_dir)
    import ptc_sdk
    import ptc_guard  # noqa: F401  (installed per job in serve(); imported here, before the job)
    import ptc_files
    import ptc_sandbox

    ptc_sandbox.prepare()
    ptc_files.install()

    try:
        tools = ptc_sdk.load_catalog(os.path.join(sdk_dir, "catalog.json"))
        stubs, module = ptc_sdk.build(tools)
    except Exception as e:
        _leave(EXIT_BAD_JOB, "ptc: cannot load the tool catalog: %s\n" % (e,))

    # Everything loaded so far lives as long as the process: keep the collector from walking
    # it again during the run and at exit.
    import gc

    gc.freeze()
    return ptc_sdk, stubs, module


def serve(prepared):
    """Reads the job from stdin, runs it, and leaves with its exit code. Never returns.

    A job with `"session": true` makes this a session's live interpreter: after the run it
    writes the run's end marker instead of leaving, and reads the next job from the same stdin,
    one JSON object per line, with the globals of the runs before (docs/runner-protocol.md,
    "Live sessions")."""
    ptc_sdk, stubs, module = prepared
    jobs = _job_stream()
    job = _read_job(jobs, ptc_sdk)
    if job is None:
        _leave(0)  # closed without a job: a warm child that was not needed
    ptc_sdk.configure(job)
    if not job.get("allow_subprocess"):
        import ptc_guard

        ptc_guard.install()
    if not job.get("session"):
        jobs.close()
        _leave(run(job["code"], ptc_sdk, stubs, module))
    main_module = _main_module(ptc_sdk, stubs, module)
    runs = 0
    while job is not None:
        if "catalog" in job:
            stubs, module = _new_catalog(job["catalog"], ptc_sdk, stubs, main_module)
        runs += 1
        code = run(job["code"], ptc_sdk, stubs, module, main_module, "<code #%d>" % runs)
        _end_run(job, code)
        job = _read_job(jobs, ptc_sdk)
        if job is not None:
            ptc_sdk.configure(job)
    _leave(0)


def _new_catalog(data, sdk, old, main_module):
    """Swaps in the tool functions of a new catalog (a reload since the session's last run):
    each old tool function still bound under its own name goes, the new ones come; the rest of
    the globals stay. Returns the new stubs and `tools` module."""
    try:
        stubs, module = sdk.build(sdk.catalog_tools(data))
    except Exception as e:
        _leave(EXIT_BAD_JOB, "ptc: cannot load the new tool catalog: %s\n" % (e,))
    g = main_module.__dict__
    for name, stub in old.items():
        if g.get(name) is stub:
            del g[name]
    g.update(stubs)
    g["tools"] = module
    return stubs, module


def _job_stream():
    """The job's stdin, moved off fd 0 (which becomes /dev/null, so code reading stdin reads
    nothing), as a binary reader."""
    jobs = os.fdopen(os.dup(0), "rb")
    _stdin_to_devnull()
    return jobs


def _read_job(jobs, sdk):
    """The next job (one line, or everything until EOF), or None when stdin closed first."""
    raw = jobs.readline()
    if not raw.strip():
        return None
    job = None
    try:
        job = sdk.json.loads(raw)
    except ValueError:
        pass
    if not isinstance(job, dict) or not isinstance(job.get("code"), str):
        _leave(EXIT_BAD_JOB, "ptc: the job on stdin is not {\"code\": str, ...}\n")
    return job


def _end_run(job, code):
    """Marks the end of a session run on both pipes, after everything it printed: the sidecar
    reads each stream up to this marker and no further, and takes the exit code from it."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    nonce = str(job.get("nonce", "")).encode("ascii", "replace")
    for fd, marker in ((1, b"\0ptc-end %s %d\n" % (nonce, code)), (2, b"\0ptc-end %s 0\n" % nonce)):
        try:
            while marker:
                marker = marker[os.write(fd, marker):]
        except OSError:
            _leave(1)  # a pipe closed: the sidecar cannot read this session any more


def _stdin_to_devnull():
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            os.dup2(fd, 0)
            os.close(fd)
    except OSError:
        pass


def run(source, sdk, stubs, module, main_module=None, filename=CODE_FILENAME):
    """Runs the code; returns the exit code after printing whatever the failure needs. A
    session passes its `main_module`, whose globals the code finds and leaves for the next run,
    and a file name of its own for each run (a function from an earlier run keeps its lines)."""
    import ast  # these three are loaded by asyncio already
    import inspect
    import linecache

    linecache.cache[filename] = (
        len(source), None, source.splitlines(True), filename,
    )
    _USER_FILES.add(filename)
    if main_module is None:
        main_module = _main_module(sdk, stubs, module)
    g = main_module.__dict__
    sys.modules["__main__"] = main_module

    code = 0
    error = None
    try:
        compiled = compile(
            source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
    except (SyntaxError, ValueError) as e:
        error = e
    else:
        try:
            if compiled.co_flags & inspect.CO_COROUTINE:
                sdk.asyncio.run(_await(compiled, g))
            else:
                # No top-level await: run outside any loop, so that code doing its own
                # `asyncio.run(main())` gets the one event loop of the run.
                eval(compiled, g)
        except SystemExit as e:
            code = _exit_code(e)
        except KeyboardInterrupt as e:
            error = e
            code = EXIT_INTERRUPTED
        except BaseException as e:
            error = e
    if error is not None:
        if code == 0:
            code = 1
        _print_error(error, sdk)
    try:
        sdk.report_unawaited()
    except Exception:
        pass
    return code


def _main_module(sdk, stubs, module):
    """The code's globals: a real `__main__` module (pickle, dataclasses and typing look
    classes up there), with nothing in it but what the protocol lists."""
    main_module = type(sys)("__main__")
    main_module.__dict__.clear()
    main_module.__dict__.update(sdk.code_globals(stubs, module))
    return main_module


async def _await(compiled, g):
    await eval(compiled, g)


def _exit_code(e):
    """`sys.exit(n)` → n, `sys.exit()` → 0, `sys.exit("msg")` → msg on stderr and 1."""
    value = e.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    try:
        sys.stderr.write("%s\n" % (value,))
    except Exception:
        pass
    return 1


def _print_error(error, sdk):
    import traceback

    if isinstance(error, KeyboardInterrupt) and isinstance(
        error.__context__, sdk.asyncio.CancelledError
    ):
        # SIGINT under asyncio.run: the cancellation it used to stop the code is noise.
        error.__suppress_context__ = True
    _trim(error)
    try:
        traceback.print_exception(type(error), error, error.__traceback__)
        hint = sdk.name_error_hint(error)
        if hint is None and _is_nested_run(error):
            hint = ("hint: the code already runs in an event loop; "
                    "use await main() instead of asyncio.run(main())")
        if hint:
            sys.stderr.write(hint + "\n")
    except Exception:
        pass


def _is_nested_run(error):
    return isinstance(error, RuntimeError) and str(error).startswith(
        "asyncio.run() cannot be called from a running event loop"
    )


def _trim(error):
    """Keeps only the frames of the user's code in `error`'s traceback and in every exception
    chained to it (cause, context, members of a group)."""
    seen = set()
    todo = [error]
    while todo:
        exc = todo.pop()
        if not isinstance(exc, BaseException) or id(exc) in seen:
            continue
        seen.add(id(exc))
        kept = []
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename in _USER_FILES:
                kept.append(tb)
            tb = tb.tb_next
        for before, after in zip(kept, kept[1:]):
            before.tb_next = after
        if kept:
            kept[-1].tb_next = None
        exc.__traceback__ = kept[0] if kept else None
        todo.append(exc.__cause__)
        todo.append(exc.__context__)
        todo.extend(getattr(exc, "exceptions", None) or ())


def _leave(code, message=None):
    try:
        if message:
            sys.stderr.write(message)
    except Exception:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)

if __name__ == "__main__":
    main()
