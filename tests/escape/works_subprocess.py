"""With PTC_ALLOW_SUBPROCESS=true, code may start processes: `subprocess.run(["ls"])` works,
and a child left running is killed when the run ends (the harness sees it at a checkpoint and
checks it is gone)."""

import subprocess

open("listed.txt", "w").close()
done = subprocess.run(["ls"], capture_output=True, text=True)
print("ls", done.returncode, "listed.txt" in done.stdout.split())
left = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
spawned(left.pid)
print("left running", left.poll() is None)
await checkpoint()
