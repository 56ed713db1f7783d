"""A run whose detached process outlives a killed sidecar unless the sandbox kills it: it starts
a `setsid` child (not in the run's process group, no death signal), reports that child's pid
through `park` (answered at once) and sleeps."""

import subprocess
import time

child = subprocess.Popen(["sleep", "60"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
await park(pid=child.pid, hold=False)
time.sleep(60)
