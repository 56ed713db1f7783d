"""Other runs: writing into a concurrent run's stdout through /proc/<pid>/fd/1, so its caller
reads what we want. Must be refused; the harness also checks the victim's output."""

victim = ARGS["victim_pid"]


def inject():
    with open("/proc/%d/fd/1" % victim, "w") as out:
        out.write("INJECTED by %s\n" % ARGS["mark"])
    return "wrote into the victim's stdout"


attempt("write into /proc/%d/fd/1 (a concurrent run's stdout)" % victim, inject, refused=PROC_REFUSED)
