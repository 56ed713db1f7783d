"""Other runs: a crafted job written into a waiting pre-forked worker's stdin, so that the
*next* run executes our code with `allow_subprocess` forced on. Must be refused for every
waiting worker (their pids as the harness sees them: this run's PID namespace has none of
them); the harness then checks the next runs are untouched."""

# This run is one of them (the pool gave it a waiting worker); it cannot tell which, its /proc
# being empty, so it attacks every one, its own stdin included.
job = json.dumps({"code": "print('HIJACKED by %s')" % ARGS["mark"], "allow_subprocess": True})


def hijack(pid):
    def step():
        with open("/proc/%d/fd/0" % pid, "w") as stdin:
            stdin.write(job)
        return "wrote a job into worker %d's stdin" % pid
    return step


targets = list(ARGS["warm_pids"])
print("TARGETS", len(targets))
for pid in targets:
    attempt("write a job into /proc/%d/fd/0 (a waiting warm worker)" % pid, hijack(pid), refused=PROC_REFUSED)
