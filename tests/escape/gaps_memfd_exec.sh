# Smaller gaps: code written to memory runs. A memfd made without MFD_EXEC is executable all the
# same where vm.memfd_noexec is 0 (the kernel's default), and it lives on an internal mount that
# Landlock leaves alone, so its /proc/self/fd link could be executed: execve of /proc/self/fd/N
# ran the binary written into it, and so did the dynamic loader given that path. W^X for what a
# run writes holds only if both are refused: seccomp refuses memfd_create itself (EPERM), and a
# run's /proc is an empty tmpfs.

execve='
import errno, os, sys
try:
    fd = os.memfd_create("copied", 0)
    os.write(fd, open("/bin/true", "rb").read())
    os.execve("/proc/self/fd/%d" % fd, ["true", "--version"], {})
except OSError as e:
    print("errno=%s %s" % (errno.errorcode.get(e.errno), e)); sys.exit(1)
'
loader='
import errno, os, sys
try:
    fd = os.memfd_create("copied", 0)
    os.write(fd, open("/bin/true", "rb").read())
    os.execve("/lib64/ld-linux-x86-64.so.2",
              ["ld.so", "/proc/self/fd/%d" % fd, "--version"], {})
except OSError as e:
    print("errno=%s %s" % (errno.errorcode.get(e.errno), e)); sys.exit(1)
'
refusal="errno=E|failed to map segment|cannot open shared object"
attempt "memfd_create, write /bin/true, execve /proc/self/fd/N" "$refusal" python3 -c "$execve"
attempt "memfd_create, write /bin/true, ld.so /proc/self/fd/N" "$refusal" python3 -c "$loader"
