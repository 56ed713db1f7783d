// Output, in JavaScript: ARGS.mib MiB written to stdout as fast as node writes (a pipe's
// writes are synchronous on Linux), then a last line. The sidecar must keep at most
// PTC_MAX_OUTPUT_BYTES of it in the run's answer (its head and its tail, the cut said), save
// the whole stream as a file only as far as the run's files have room, and not grow with it.
const line = "x".repeat(1023) + "\n";
const mib = line.repeat(1024);
console.log("ATTEMPT", ARGS.mib, "MiB of stdout");
for (let i = 0; i < ARGS.mib; i++) process.stdout.write(mib);
console.log("THE END", ARGS.mib, "MiB");
