"""A file's mode, owner and times, changed through a descriptor.

In a run, seccomp refuses the path forms of chmod, chown and utime (docs/SECURITY.md, "seccomp"):
Landlock decides what a run may open, not whose metadata it may change by naming a path, and a
run could once `chmod 000` other runs' folders it could not open. The descriptor forms (fchmod,
fchown, futimens) stay allowed where each run has a uid of its own, so that the kernel's ownership
rules keep them to the run's own files.

`install()` makes `os.chmod`, `os.chown` and `os.utime` open what they are given (an open that
Landlock allows or refuses) and change it through the descriptor, so `shutil.copy`,
`shutil.copy2`, `pathlib.Path.chmod` and the like keep working on a run's own files. A refused
change raises PermissionError as before.
"""

import os

_chmod, _chown, _utime = os.chmod, os.chown, os.utime


_REFUSED = ("a run may change the mode, owner or times of its own files only, and only where "
            "the sidecar gives each run a uid of its own (a root sidecar)")


def _through_descriptor(path, dir_fd, follow_symlinks, change):
    flags = os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, os.O_RDONLY | flags, dir_fd=dir_fd)
    except PermissionError:
        # A file only its owner may write (mode 0200) is still its owner's to change.
        fd = os.open(path, os.O_WRONLY | flags, dir_fd=dir_fd)
    try:
        return change(fd)
    except PermissionError as e:
        raise PermissionError(e.errno, "%s (%s)" % (e.strerror, _REFUSED), path) from None
    finally:
        os.close(fd)


def chmod(path, mode, *, dir_fd=None, follow_symlinks=True):
    if isinstance(path, int) or not follow_symlinks:
        return _chmod(path, mode, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    return _through_descriptor(path, dir_fd, True, lambda fd: os.fchmod(fd, mode))


def chown(path, uid, gid, *, dir_fd=None, follow_symlinks=True):
    if isinstance(path, int):
        return _chown(path, uid, gid)
    return _through_descriptor(path, dir_fd, follow_symlinks,
                               lambda fd: os.fchown(fd, uid, gid))


def utime(path, times=None, *, ns=None, dir_fd=None, follow_symlinks=True):
    if isinstance(path, int):
        return _utime(path, times, ns=ns) if ns is not None else _utime(path, times)

    def change(fd):
        return _utime(fd, times, ns=ns) if ns is not None else _utime(fd, times)

    return _through_descriptor(path, dir_fd, follow_symlinks, change)


def install():
    """Routes the path forms through a descriptor for the rest of this process's life."""
    os.chmod, os.chown, os.utime = chmod, chown, utime
