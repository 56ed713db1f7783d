"""Resources: the scratch dir's quota (PTC_SCRATCH_MAX_MB, PTC_SCRATCH_MAX_FILES). Writing one
file of 4x the size quota must stop with EFBIG (or ENOSPC, EDQUOT); creating 4x the file quota
must not finish: the sidecar stops the run once its scratch directory holds more than the quota."""

import shutil

QUOTA_MB = ARGS["scratch_max_mb"]
# Four times the file quota, so that the sidecar's watch (every 100 ms or more) sees the flood.
MANY_FILES = 4 * ARGS["scratch_max_files"]


def big():
    chunk = b"x" * (1 << 20)
    written = 0
    with open("big.bin", "wb") as f:
        for _ in range(4 * QUOTA_MB):
            f.write(chunk)
            f.flush()
            written += 1
    return "%d MiB written" % written


def many():
    _os.mkdir("many")
    made = 0
    for i in range(MANY_FILES):
        with open("many/%d" % i, "w"):
            made += 1
    return "%d files created" % made


def quota(step):
    """Only a full quota counts as a refusal; another OSError is a broken script."""

    def run():
        try:
            return step()
        except OSError as e:
            if e.errno in (_errno.ENOSPC, _errno.EDQUOT, _errno.EFBIG):
                raise Refused(e.errno, str(e))
            raise
    return run


attempt("write %d MiB into scratch (quota %d MiB)" % (4 * QUOTA_MB, QUOTA_MB), quota(big),
        refused=())
if _os.path.exists("big.bin"):
    _os.remove("big.bin")
attempt("create %d files in scratch" % MANY_FILES, quota(many), refused=())
shutil.rmtree("many", ignore_errors=True)
