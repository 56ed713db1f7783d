// Outliving the run, in JavaScript, run in a session (its cwd is the session's folder, which
// outlives the run): every signal the sidecar could stop it with ignored, an interval and a
// listening server to keep the event loop alive, `beforeExit` arming a new timer and `exit`
// spinning for a minute, and a timer that writes into the session's folder after the run's
// timeout. The run must end at its clock, and the file must never be written.
import fs from "node:fs";
import net from "node:net";

for (const signal of ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGALRM"]) {
  process.on(signal, () => console.log("IGNORED", signal));
}
process.on("beforeExit", () => setTimeout(() => {}, 60_000));
process.on("exit", () => {
  const end = Date.now() + 60_000;
  while (Date.now() < end) {}
});
setInterval(() => {}, 1000);
net.createServer().listen(0, "127.0.0.1");
setTimeout(() => {
  fs.writeFileSync(ARGS.late_file, "written after the run's end");
  console.log("LATE WRITTEN");
}, ARGS.late_ms);
console.log("ARMED", ARGS.late_file, "in", ARGS.late_ms, "ms");
console.log("ATTEMPT outlive the run");
