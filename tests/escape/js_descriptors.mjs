// Descriptors, in JavaScript: one file of scratch opened 4,096 times, every descriptor held.
// RLIMIT_NOFILE (256) must refuse the opens long before (EMFILE). The run then gives back a few
// (its call to park needs a socket) and parks as a victim, holding the rest: the harness counts
// its descriptors and reads its limit from outside.
import fs from "node:fs";

fs.writeFileSync("fd.txt", "x");
const held = [];
await attempt(`hold ${ARGS.wanted} descriptors`, () => {
  for (let i = 0; i < ARGS.wanted; i++) {
    try {
      held.push(fs.openSync("fd.txt", "r"));
    } catch (e) {
      e.message = `${e.message} (after ${held.length} opens)`;
      throw e;
    }
  }
  return `${held.length} descriptors held`;
}, ["EMFILE"]);
console.log("HELD", held.length);
for (const fd of held.splice(0, 8)) fs.closeSync(fd);
await checkpoint("victim");
for (const fd of held) fs.closeSync(fd);
console.log("released");
