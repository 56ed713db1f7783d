// The scratch quota in JavaScript (PTC_SCRATCH_MAX_MB, PTC_SCRATCH_MAX_FILES), as
// resources_scratch.py, one step a run (ARGS.step): `big`, one file of 4x the size quota, must
// stop with EFBIG (RLIMIT_FSIZE; node ignores SIGXFSZ), or ENOSPC, EDQUOT, unless the sidecar's
// watch stops the run first; `many`, creating 4x the file quota, must not finish: the sidecar
// stops the run once its scratch directory holds more than the quota.
import fs from "node:fs";

const QUOTA = ["EFBIG", "ENOSPC", "EDQUOT"];
const QUOTA_MB = ARGS.scratch_max_mb;
// Four times the file quota, so that the sidecar's watch (every 100 ms or more) sees the flood.
const MANY_FILES = 4 * ARGS.scratch_max_files;

if (ARGS.step === "big") {
  await attempt(`write ${4 * QUOTA_MB} MiB into scratch (quota ${QUOTA_MB} MiB)`, () => {
    const chunk = Buffer.alloc(1 << 20, "x");
    const fd = fs.openSync("big.bin", "w");
    let written = 0;
    try {
      for (let i = 0; i < 4 * QUOTA_MB; i++) {
        fs.writeSync(fd, chunk);
        written += 1;
      }
    } finally {
      fs.closeSync(fd);
    }
    return `${written} MiB written`;
  }, QUOTA);
  fs.rmSync("big.bin", { force: true });
}
if (ARGS.step === "many") {
  await attempt(`create ${MANY_FILES} files in scratch`, () => {
    fs.mkdirSync("many");
    let made = 0;
    for (let i = 0; i < MANY_FILES; i++) {
      fs.closeSync(fs.openSync(`many/${i}`, "w"));
      made += 1;
    }
    return `${made} files created`;
  }, QUOTA);
  fs.rmSync("many", { recursive: true, force: true });
}
