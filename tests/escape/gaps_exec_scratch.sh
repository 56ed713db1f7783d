# Smaller gaps: code written to scratch runs (W^X). The run's scratch directory is mounted
# noexec in its own mount namespace, so a binary copied there can be neither executed nor loaded
# by the dynamic loader (which maps it executable); no memfd can be made (memfd_create), and no
# file descriptor can be executed (execveat, tried on a binary the run may read). Each must be
# refused.

# (cp keeps /bin/true's mode: chmod by path is refused in a run.)
cp /bin/true ./copied
memfd_exec='
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.memfd_create(b"copied", 0x10)  # MFD_EXEC
if fd < 0:
    print("errno=%s" % errno.errorcode.get(ctypes.get_errno())); sys.exit(1)
print("an executable memfd: %d" % fd)
'
execveat='
import ctypes, errno, os, sys
fd = os.open("/bin/true", os.O_RDONLY)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
argv = (ctypes.c_char_p * 3)(b"true", b"--version", None)
envp = (ctypes.c_char_p * 1)(None)
libc.syscall(ctypes.c_long(322), ctypes.c_long(fd), ctypes.c_char_p(b""), argv, envp,
             ctypes.c_long(0x1000))  # execveat(fd, "", argv, envp, AT_EMPTY_PATH)
print("errno=%s" % errno.errorcode.get(ctypes.get_errno())); sys.exit(1)
'
attempt "execute ./copied (a binary written to scratch)" "Permission denied" ./copied --version
attempt "/lib64/ld-linux-x86-64.so.2 ./copied" "failed to map segment" \
    /lib64/ld-linux-x86-64.so.2 ./copied --version
attempt "memfd_create(MFD_EXEC)" "errno=EPERM" python3 -c "$memfd_exec"
attempt "execveat(fd of /bin/true, \"\", AT_EMPTY_PATH)" "errno=EPERM" \
    python3 -c "$execveat"
