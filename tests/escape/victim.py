"""The victim of the concurrency attacks: a run in flight at the same time as the attacker's.
It parks as a victim (the harness finds its processes from outside meanwhile, and gives their
pids to the attacker) until the harness releases it; then it prints a line the attacker must not
be able to change."""

await park_as_victim()
print("victim done")
