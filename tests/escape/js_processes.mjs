// Processes and secrets, in JavaScript: starting a program (child_process), signalling the
// sidecar, the fork server and the MCP server by the pids the harness sees, reading the
// sidecar's environment through /proc, and loading native code written to the scratch dir
// (process.dlopen of a shared library copied there, which is mounted noexec). Each must be
// refused. The run's own environment is printed: the harness checks no secret is in it.
import fs from "node:fs";
import child_process from "node:child_process";

console.log("ENV", JSON.stringify(process.env));
await attempt("spawn /bin/true", () => {
  const r = child_process.spawnSync("/bin/true");
  if (r.error) throw r.error;
  return `exit ${r.status}`;
});
await attempt("execFile /bin/sh -c id", () => new Promise((resolve, reject) => {
  try {
    child_process.execFile("/bin/sh", ["-c", "id"], (e, out) => (e ? reject(e) : resolve(out)));
  } catch (e) {
    reject(e);
  }
}));
const hidden = ["EACCES", "EPERM", "ESRCH"];  // a pid of another namespace: ESRCH
for (const [what, pid] of [
  ["the sidecar", ARGS.sidecar_pid],
  ["the fork server", ARGS.fork_server_pid],
  ["the MCP server", ARGS.mcp_pid],
]) {
  await attempt(`SIGKILL ${what} (pid ${pid})`, () => {
    process.kill(pid, "SIGKILL");
    return "signal sent";
  }, hidden);
}
await attempt(`read the sidecar's /proc/${ARGS.sidecar_pid}/environ`,
  () => fs.readFileSync(`/proc/${ARGS.sidecar_pid}/environ`, "utf8"),
  ["EACCES", "EPERM", "ENOENT"]);
await attempt("load native code written to scratch (process.dlopen)", () => {
  fs.copyFileSync(ARGS.library, "native.node");
  const module = { exports: {} };
  try {
    process.dlopen(module, `${process.cwd()}/native.node`);
  } catch (e) {
    // node reports the loader's failure as ERR_DLOPEN_FAILED with dlerror's text: mapping a
    // file of a noexec mount executable is the kernel's EPERM, "failed to map segment".
    if (e.code === "ERR_DLOPEN_FAILED" && /failed to map segment/.test(e.message)) {
      throw Object.assign(new Error(e.message), { code: "EPERM" });
    }
    throw e;
  }
  return "loaded";
});
