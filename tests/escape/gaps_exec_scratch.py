"""Smaller gaps: code written to scratch runs (W^X), from Python: a shared library copied into
scratch, loaded with ctypes.CDLL, cannot be mapped executable (the scratch directory is mounted
noexec in the run's mount namespace); no memfd can be made (memfd_create, executable or not), and
no file descriptor can be executed (execveat, tried on a binary the run may read). The audit hook
is emptied first. Each must be refused."""

import ctypes
import shutil

unguard()
shutil.copyfile("/lib/x86_64-linux-gnu/libm.so.6", "copied.so")  # (its mode: not needed)


def load():
    try:
        lib = ctypes.CDLL("./copied.so")
    except OSError as e:
        if "failed to map segment" in str(e):
            raise Refused(_errno.EPERM, str(e))
        raise
    return "loaded %r, cos at %r" % (lib, lib.cos)


def memfd_exec():
    return "an executable memfd: %d" % libc_call("memfd_create", b"copied", 0x10)  # MFD_EXEC


def execveat():
    fd = _os.open("/bin/true", _os.O_RDONLY)
    argv = (ctypes.c_char_p * 3)(b"true", b"--version", None)
    envp = (ctypes.c_char_p * 1)(None)
    libc_call("syscall", 322, fd, b"", argv, envp, 0x1000, restype=ctypes.c_long)
    return "execveat returned"


attempt("ctypes.CDLL('./copied.so') (a library written to scratch)", load)
attempt("memfd_create(MFD_EXEC)", memfd_exec, refused_by("EPERM"))
attempt("execveat(fd of /bin/true, \"\", AT_EMPTY_PATH)", execveat, refused_by("EPERM"))
