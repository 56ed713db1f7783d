"""A run that outlives its sidecar unless the sandbox kills it: it reports its pid through
`park` (answered at once) and then sleeps without touching the sidecar again."""

import time

await park(pid=_os.getpid(), hold=False)
time.sleep(60)
