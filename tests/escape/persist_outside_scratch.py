"""Persistence: files written outside the run's scratch dir: a world-writable directory of the
harness, /tmp, the sidecar's runtime dir. Each write must be refused (Landlock: read-write only
in scratch); the harness checks no file appeared. Inside scratch, writing still works."""


def write(path):
    def step():
        with open(path, "w") as f:
            f.write("written by %s\n" % ARGS["mark"])
        return "wrote %s" % path
    return step


sdk_dir = _os.path.dirname(_sys.modules["ptc_sdk"].__file__)
runtime = _os.path.dirname(sdk_dir)
for path in (
    _os.path.join(ARGS["open_dir"], "escape-" + ARGS["mark"]),
    ARGS["tmp_target"],
    _os.path.join(runtime, "escape-" + ARGS["mark"]),
):
    attempt("write %s" % path, write(path))
with open("inside-scratch.txt", "w") as f:
    f.write("fine")
print("SCRATCH_WRITE", open("inside-scratch.txt").read())
