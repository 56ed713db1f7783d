// Files outside the run's scratch directory, from JavaScript: the machine's (read /etc/passwd,
// write /tmp, a world-writable folder), the sidecar's (its runtime directory), the JavaScript SDK the run was started
// with (replace it for later runs) and another process's /proc. Landlock refuses each (EACCES),
// or the run's own mount namespace has nothing there (ENOENT).

import fs from "node:fs";

const sdk = process.argv[1];
fs.writeFileSync("mine.txt", ARGS.mark);
console.log("SCRATCH_WRITE", fs.readFileSync("mine.txt", "utf8") === ARGS.mark ? "fine" : "lost");
await attempt("read /etc/passwd", () => fs.readFileSync("/etc/passwd", "utf8").slice(0, 40));
await attempt(`write ${ARGS.tmp_target}`, () => { fs.writeFileSync(ARGS.tmp_target, ARGS.mark); return "written"; });
await attempt(`write into ${ARGS.open_dir}`, () => { fs.writeFileSync(`${ARGS.open_dir}/js-${ARGS.mark}`, ARGS.mark); return "written"; });
await attempt(`list the runtime directory ${ARGS.runtime_dir}`, () => fs.readdirSync(ARGS.runtime_dir).join(","));
await attempt(`replace the SDK ${sdk}`, () => { fs.writeFileSync(sdk, "console.log('owned')"); return "replaced"; });
await attempt("read the sidecar's environment", () => fs.readFileSync(`/proc/${ARGS.sidecar_pid}/environ`, "utf8").slice(0, 80));
