"""Resources: 3,000 threads (small stacks, so the address-space limit is not what stops them).
Starting them must fail before the 3,000th (RLIMIT_NPROC for the code's user)."""

import threading

WANTED = 3000
threading.stack_size(64 * 1024)
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


try:
    attempt("start %d threads" % WANTED, many_threads)
finally:
    stop.set()
    for t in started:
        t.join()
