"""Metadata (issue 34): Landlock does not cover a file's mode, owner, times or extended
attributes, and every run had one uid, so a run could `chmod 000` the next warm worker's folder,
another session's folder or the SDK, and set a session folder's times to 0 (read at a restart as
its last use). Each change is tried on each target by path, and through a descriptor where the
run can open the target at all (the SDK); from outside, nothing may have changed. Then what must
keep working: a run's metadata calls on its own file (through a descriptor where the run's uid is
its own), and a run may not listen."""

import os
import shutil
import socket
import sys

# The path forms as the kernel sees them: in a Python run the SDK routes os.chmod, os.chown and
# os.utime through a descriptor (ptc_files); its originals are the raw syscalls.
raw = sys.modules.get("ptc_files") or os
chmod, chown, utime = raw._chmod if raw is not os else os.chmod, \
    raw._chown if raw is not os else os.chown, raw._utime if raw is not os else os.utime

# Not the run's own folder (a warm worker's may be this run's), nor one gone with its run.
targets = [(n, p) for n, p in ARGS["targets"]
           if os.path.realpath(p) != os.getcwd() and os.path.lexists(p)]
print("TARGETS", len(targets), flush=True)


def by_descriptor(path, change):
    fd = os.open(path, os.O_RDONLY)
    try:
        return change(fd)
    finally:
        os.close(fd)


for name, path in targets:
    attempt("chmod 000 %s (%s)" % (path, name), lambda: chmod(path, 0))
    attempt("utime 0 %s (%s)" % (path, name), lambda: utime(path, (0, 0)))
    attempt("chown %s (%s) to the run's uid" % (path, name),
            lambda: chown(path, os.getuid(), os.getgid()))
    attempt("lchown %s (%s)" % (path, name),
            lambda: chown(path, os.getuid(), os.getgid(), follow_symlinks=False))
    attempt("setxattr user.ptc on %s (%s)" % (path, name),
            lambda: os.setxattr(path, "user.ptc", b"x"))
    attempt("fchmod 000 of an open %s (%s)" % (path, name),
            lambda: by_descriptor(path, lambda fd: os.fchmod(fd, 0)))
    attempt("futimens 0 of an open %s (%s)" % (path, name),
            lambda: by_descriptor(path, lambda fd: os.utime(fd, (0, 0))))


def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.listen(1)
        return "listening on %s" % (s.getsockname(),)
    finally:
        s.close()


attempt("listen() without bind()", listen)

# A run's own file: the path forms are refused whatever the uid; through a descriptor they work
# where the run's uid owns nothing but its own files, and so does os.chmod in a Python run (the
# SDK goes through a descriptor), and shutil.copy, which sets the copy's mode by path.
with open("own.txt", "w") as f:
    f.write("mine")
    try:
        os.fchmod(f.fileno(), 0o600)
        os.utime(f.fileno(), (1, 1))
        print("OWN_BY_DESCRIPTOR ok", flush=True)
    except PermissionError:
        print("OWN_BY_DESCRIPTOR refused", flush=True)
try:
    os.chmod("own.txt", 0o640)
    shutil.copy("own.txt", "copy.txt")
    print("OWN_BY_PATH ok", oct(os.stat("copy.txt").st_mode & 0o777), flush=True)
except PermissionError:
    print("OWN_BY_PATH refused", flush=True)
