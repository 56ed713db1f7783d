"""Resources: 3,000 threads (small stacks, so the address-space limit is not what stops them).
Starting them must fail before the 3,000th: RLIMIT_NPROC, a budget of this run's own (it is in a
user namespace of its own). The run then holds every thread it got, and a greedy thread takes
every slot that frees up, while the run parks as a victim: the harness counts its threads from
outside and starts other runs of the same user, which must all start (their budgets are their
own) and must not be taken over; the fork server must outlive the flood."""

import threading

WANTED = 3000
threading.stack_size(64 * 1024)
flooded = threading.Event()
stop = threading.Event()
started = []


def many_threads():
    try:
        for _ in range(WANTED):
            t = threading.Thread(target=stop.wait, daemon=True)
            t.start()
            started.append(t)
    except RuntimeError as e:
        if "can't start new thread" not in str(e):
            raise
        raise Refused(_errno.EAGAIN, "stopped after %d threads: %s" % (len(started), e))
    return "%d threads started" % len(started)


def greedy():
    """From the end of the flood on, takes every slot a finished process frees."""
    flooded.wait()
    while not stop.is_set():
        try:
            t = threading.Thread(target=stop.wait, daemon=True)
            t.start()
            started.append(t)
        except RuntimeError:
            stop.wait(0.001)


grabber = threading.Thread(target=greedy, daemon=True)
grabber.start()
try:
    attempt("start %d threads" % WANTED, many_threads)
    flooded.set()
    await park_as_victim()
finally:
    stop.set()
    flooded.set()
    grabber.join()
    for t in started:
        t.join()
print("threads released", flush=True)
