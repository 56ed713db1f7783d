"""The victim of the concurrency attacks: a run in flight at the same time as the attacker's.
It tells the harness its pid through the host tool `park`, which holds the call until the
harness releases it; then it prints a line the attacker must not be able to change."""

await park(pid=_os.getpid())
print("victim done")
