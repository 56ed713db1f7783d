// Files, in JavaScript: what another run, a session, the SDK, the sidecar's runtime dir and its
// config files hold, and anything outside the scratch dir. Reading, writing, and changing mode,
// owner and times (node's fs, by path and through a descriptor) must each be refused; the
// harness checks from outside that nothing changed.
import fs from "node:fs";
import path from "node:path";

const { folders, readable, secret_files, outside_dirs } = ARGS;
// Another run's and a session's folders may not even be listed; the SDK and the runtime dir
// are read by every run (the interpreter's files), so only the changes are attacks there.
for (const [what, dir] of folders) {
  await attempt(`list ${what} (${dir})`, () => fs.readdirSync(dir).join(","));
}
for (const [what, dir] of [...folders, ...readable]) {
  await attempt(`write into ${what}`, () => {
    fs.writeFileSync(path.join(dir, "planted.js"), "pwned");
    return "written";
  });
  await attempt(`chmod 000 ${what}`, () => {
    fs.chmodSync(dir, 0o000);
    return "mode changed";
  });
  await attempt(`utimes 0 on ${what}`, () => {
    fs.utimesSync(dir, 0, 0);
    return "times changed";
  });
  await attempt(`chown ${what} to the run`, () => {
    fs.chownSync(dir, process.getuid(), process.getgid());
    return "owner changed";
  });
  await attempt(`chmod 000 ${what} through a descriptor`, () => {
    const fd = fs.openSync(dir, "r");
    try {
      fs.fchmodSync(fd, 0o000);
    } finally {
      fs.closeSync(fd);
    }
    return "mode changed";
  });
}
for (const file of secret_files) {
  await attempt(`read ${file}`, () => fs.readFileSync(file, "utf8"));
}
for (const dir of outside_dirs) {
  await attempt(`write a file in ${dir}`, () => {
    fs.writeFileSync(path.join(dir, `${ARGS.mark}.js`), "pwned");
    return "written";
  });
}
// What must keep working: the run's own scratch dir.
fs.writeFileSync("mine.txt", "x");
console.log("SCRATCH_WRITE", fs.readFileSync("mine.txt", "utf8") === "x" ? "fine" : "lost");
