// Memory, in JavaScript: ArrayBuffers of 64 MiB, each held, up to 32 times PTC_MEMORY_MB, then
// one Buffer of PTC_MEMORY_MB at once. The address-space limit (RLIMIT_AS = PTC_MEMORY_MB)
// must refuse both long before: V8 answers a RangeError ("Array buffer allocation failed").
// Their pages are zeros never touched, so what they take is address space, not the machine's
// memory. The run then holds what it got and parks as a victim: the harness reads its address
// space and its limit from outside.
const CHUNK_MIB = 64;
const held = [];

// A RangeError of an allocation is the limit's refusal (ENOMEM); anything else is not.
function refusedMemory(step) {
  return () => {
    try {
      return step();
    } catch (e) {
      if (e instanceof RangeError && /allocation failed|Array buffer|memory/i.test(e.message)) {
        throw Object.assign(new Error(`${e.message} (${held.length * CHUNK_MIB} MiB held)`), {
          code: "ENOMEM",
        });
      }
      throw e;
    }
  };
}

await attempt(`hold ${32 * ARGS.memory_mb} MiB of ArrayBuffers (PTC_MEMORY_MB ${ARGS.memory_mb})`,
  refusedMemory(() => {
    while (held.length * CHUNK_MIB < 32 * ARGS.memory_mb) held.push(new ArrayBuffer(CHUNK_MIB << 20));
    return `${held.length * CHUNK_MIB} MiB held`;
  }), ["ENOMEM"]);
console.log("HELD", held.length * CHUNK_MIB);
await attempt(`one Buffer of ${ARGS.memory_mb} MiB`,
  refusedMemory(() => `${Buffer.alloc(ARGS.memory_mb * (1 << 20)).length} bytes`), ["ENOMEM"]);
await checkpoint("victim");
held.length = 0;
console.log("released");
