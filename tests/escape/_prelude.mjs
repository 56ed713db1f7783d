// Prepended to every JavaScript script of tests/escape/ by tests/all/escape/javascript.rs,
// after `const ARGS = {...}` (what the harness knows). The twin of _prelude.py: every forbidden
// step goes through `attempt`, which prints `ATTEMPT <label>` and then exactly one outcome line:
//
//     REFUSED <code> <message>        the sandbox said no (an error whose code is a refusal's)
//     GOT <label> -> <what it got>    the step worked: the attack got through
//     BROKEN <code> <message>         anything else: the script failed for another reason

// What the kernel answers a refused step: Landlock and the uid (EACCES), seccomp (EPERM), a
// run's empty /proc and its own mount namespace (ENOENT).
const REFUSALS = ["EACCES", "EPERM", "ENOENT"];

// The run's own pid (1: its PID namespace's) and its directory, by which the harness finds it.
console.log("PID", process.pid);
console.log("SCRATCH", process.cwd());

async function attempt(label, step, refusals = REFUSALS) {
  console.log("ATTEMPT", label);
  try {
    const got = await step();
    console.log("GOT", label, "->", String(got).slice(0, 400));
  } catch (e) {
    const code = e && (e.code || e.cause?.code);
    const line = `${code} ${String(e && e.message).slice(0, 200)}`;
    console.log(refusals.includes(code) ? `REFUSED ${line}` : `BROKEN ${line}`);
  }
}

// Waits while the harness looks at this run's processes from outside (the host tool `park`).
async function checkpoint(role = "checkpoint") {
  await park({ pid: process.pid, dir: process.cwd(), role });
}
