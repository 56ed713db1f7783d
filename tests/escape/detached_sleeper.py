"""A run whose detached process outlives a killed sidecar unless the sandbox kills it: it starts
a `setsid` child (not in the run's process group, no death signal), parks as a victim (answered
at once: the harness sees both processes meanwhile) and sleeps."""

import subprocess
import time

child = subprocess.Popen(["sleep", "60"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
spawned(child.pid)
await park_as_victim(hold=False)
time.sleep(60)
