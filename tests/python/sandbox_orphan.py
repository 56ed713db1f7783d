"""tests/all/sandbox.rs: a forked child confined with `parent_pid` dies with its parent.

argv[1]: the SDK dir. Prints the child's pid, then waits to be killed (the test kills this
parent with SIGKILL and watches the child go).
"""

import os
import sys
import time

sys.path.insert(0, sys.argv[1])
import ptc_sandbox  # noqa: E402

ptc_sandbox.prepare()
parent = os.getpid()
pid = os.fork()
if pid == 0:
    ptc_sandbox.confine_or_exit(ptc_sandbox.confine, None, [], landlock=False, seccomp=False,
                                parent_pid=parent)
    os.write(1, b"confined\n")
    time.sleep(60)
    os._exit(0)
sys.stdout.write("%d\n" % pid)
sys.stdout.flush()
time.sleep(60)
