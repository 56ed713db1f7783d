"""Other sessions: a session's live interpreter (stopped between its runs) holds globals and has
a workspace; a run of no session tries to read its files by path, list its folder, read its
memory for the globals, and reach its job pipe through /proc. Each must be refused (Landlock:
the workspace is the session's own; ptrace scoping and PR_SET_DUMPABLE=0 for /proc)."""

import os

victim = ARGS["victim_pid"]
folder = ARGS["victim_dir"]


def read_file():
    with open(folder + "/secret.txt") as f:
        return f.read()


def list_folder():
    return os.listdir(folder)


def read_memory():
    needle = ARGS["mark"].encode()
    if any(needle in chunk for chunk in writable_memory(victim)):
        return "found the session's secret in its memory"
    raise LookupError("the secret is not in the victim's memory")


def job_pipe():
    return os.listdir("/proc/%d/fd" % victim)


attempt("read %s/secret.txt (another session's file)" % folder, read_file)
attempt("list %s (another session's folder)" % folder, list_folder)
attempt("read /proc/%d/mem (a session's interpreter) for its globals" % victim, read_memory, refused=PROC_REFUSED)
attempt("list /proc/%d/fd (a session's job pipe)" % victim, job_pipe, refused=PROC_REFUSED)
