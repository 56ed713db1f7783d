"""A run that outlives its sidecar unless the sandbox kills it: it parks as a victim (answered at
once: the harness looks at its processes meanwhile) and then sleeps without touching the sidecar
again."""

import time

await park_as_victim(hold=False)
time.sleep(60)
