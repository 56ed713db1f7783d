// Threads, in JavaScript: 3,000 Worker threads, each held (resources_threads.py's flood). A
// Worker is a thread with a V8 heap of its own: the address-space limit (PTC_MEMORY_MB) stops
// the flood after a few dozen, long before the run's process budget (RLIMIT_NPROC 1,024) would.
// Each asks for a small code range (WORKER): with V8's default, under the default limit (2,048
// MiB) the third Worker already aborts the run (`Fatal process OOM in Failed to reserve virtual
// memory for CodeRange`): no flood to speak of.
// Stopped is: `new Worker` throws, the worker fails (ERR_WORKER_OUT_OF_MEMORY,
// ERR_WORKER_INIT_FAILED), or it never comes up (its heap could not be had: STALLED); or V8
// aborts the whole run on the limit, which the harness judges from the run's end. The run then
// holds every worker it got and parks as a victim: the harness counts its threads from outside
// and starts other runs meanwhile.
import { Worker } from "node:worker_threads";

const WANTED = 3000;
const BODY = "require('node:worker_threads').parentPort.postMessage('up'); setInterval(() => {}, 1 << 30);";
const STOPPED = ["ERR_WORKER_OUT_OF_MEMORY", "ERR_WORKER_INIT_FAILED", "STALLED", "EAGAIN", "ENOMEM"];
const workers = [];
const WORKER = { eval: true, resourceLimits: { codeRangeSizeMb: 2 } };

/** One more worker, up and waiting: null, or why it is not. */
function one() {
  return new Promise((resolve) => {
    let worker;
    try {
      worker = new Worker(BODY, WORKER);
    } catch (e) {
      resolve(e);
      return;
    }
    const stall = setTimeout(() => resolve({ code: "STALLED", message: "not up within 5 s" }), 5000);
    worker.once("message", () => {
      clearTimeout(stall);
      workers.push(worker);
      if (workers.length % 10 === 0) console.log("UP", workers.length);
      resolve(null);
    });
    worker.once("error", (e) => {
      clearTimeout(stall);
      resolve(e);
    });
    worker.once("exit", (code) => {
      clearTimeout(stall);
      resolve({ code: "EXITED", message: `exited ${code}` });
    });
  });
}

await attempt(`start ${WANTED} Worker threads`, async () => {
  while (workers.length < WANTED) {
    const why = await one();
    if (why) {
      const code = why.code || "";
      const text = `${why.message} (after ${workers.length} workers)`;
      throw Object.assign(new Error(text), { code: STOPPED.find((c) => code === c || text.includes(c)) || code });
    }
  }
  return `${workers.length} workers up`;
}, STOPPED);
console.log("WORKERS", workers.length);
await checkpoint("victim");
console.log("workers released");
// A stalled worker may never answer `terminate`: the run ends here, and its workers with it.
process.exit(0);
