"""Resources: a session's quota (PTC_SESSION_MAX_MB) at the end of a run. Run in a session whose
folder (its cwd) holds `before.bin` and `olddir/old.txt`, it writes past the quota as fast and as
awkwardly as it can: a new folder it cannot be listed, an old folder it fills and shuts, an old
file it grows, a second name for an old file, links out, a tree nested past PATH_MAX, and then
big files each in one write. Nothing here is refused: the kernel has no quota on the folder. The
harness judges from outside that the session holds what it held before the run."""

import os

QUOTA_MB = ARGS["session_max_mb"]
MIB = 1 << 20
written = 0


def shut(path):
    """Mode 0 on a folder, where the sandbox lets a run change its files' modes (the rules on
    metadata may refuse it: then the folder stays as it is, and the script goes on)."""
    try:
        os.chmod(path, 0)
        print("SHUT", path, flush=True)
    except OSError as e:
        print("SHUT refused", path, e.errno, flush=True)


def write(path, size, dir_fd=None):
    global written
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=dir_fd)
    try:
        written += os.write(fd, b"q" * size)
    finally:
        os.close(fd)


# The awkward ones first, together within the quota so that the watch (every 100 ms) has no
# reason to stop the run before they are all there.
# Made unreadable as it is made (mkdir's own mode, which no rule on chmod stops): written
# into, never listable by a sidecar of the run's uid that is not root.
os.mkdir("shut", 0o300)
write("shut/inside.bin", MIB)
shut("shut")
write("olddir/new.bin", MIB)
shut("olddir")
with open("before.bin", "ab") as f:
    written += f.write(b"g" * (2 * MIB))
os.link("before.bin", "twin.bin")
os.symlink(ARGS["canary"], "canary-link")
os.symlink("/", "root-link")
# Nested past PATH_MAX: 24 levels of 250-byte names, 256 KiB in each.
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(24):
    os.mkdir("d" * 250, dir_fd=fd)
    deeper = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = deeper
    write("f", MIB // 4, dir_fd=fd)
os.close(fd)
print("AWKWARD", written // MIB, "MiB", flush=True)
# Then past the quota at once.
for i in range(4):
    write("flood%d.bin" % i, (QUOTA_MB - 1) * MIB)
print("WROTE", written // MIB, "MiB", flush=True)
