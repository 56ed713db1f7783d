// A tool's rate, in JavaScript (shares_rate's attack): 60 calls of `echo`, limited to one call a
// second (PTC_TOOL_LIMITS), booked at once; after a second the run gives up and ends with 59 of
// them still waiting (`process.exit`: a module's pending calls would hold node open). Its turns
// must go with it: the next run's call waits a turn at most.
const calls = Promise.all(Array.from({ length: 60 }, (_, i) => tools.echo({ text: String(i) })));
const second = new Promise((resolve) => setTimeout(() => resolve("TimeoutError"), 1000));
const why = await Promise.race([calls.then(() => null, (e) => e.name), second]);
if (why) {
  console.log("GAVE UP", why);
  process.exit(0);
}
console.log("ALL 60 ANSWERED");
