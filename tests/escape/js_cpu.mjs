// CPU, in JavaScript: three Worker threads and the main thread spin for good, past the run's
// timeout (PTC_TIMEOUT). The run must end at its clock (status `timeout`), within the CPU its
// limits give it, and nothing of it may be left spinning afterwards (the harness checks from
// outside: every process it saw, and the run's PID namespace, gone).
// Each Worker asks for a small code range: with V8's default, the third Worker already passes
// the run's address-space limit and aborts it (js_workers.mjs).
import { Worker } from "node:worker_threads";

const SPIN = "require('node:worker_threads').parentPort.postMessage('spinning'); for (;;) {}";
const workers = [];
await Promise.all([0, 1, 2].map(() => new Promise((resolve, reject) => {
  const w = new Worker(SPIN, { eval: true, resourceLimits: { codeRangeSizeMb: 2 } });
  workers.push(w);
  w.once("message", resolve);
  w.once("error", reject);
})));
console.log("SPINNING", workers.length + 1, "threads");
console.log("ATTEMPT spin past PTC_TIMEOUT");
for (;;) {}
