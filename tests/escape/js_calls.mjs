// Calls past the run's share (`calls`: 10,000 tool calls and searches a run, the checkpoint's
// `park` among them), in JavaScript: ARGS.calls calls of `noop`, all at once (the SDK sends
// them 32 connections at a time). Each past the share must be refused with a ToolError of type
// `limit`, and none may reach the tool.
const settled = await Promise.allSettled(Array.from({ length: ARGS.calls }, () => tools.noop({})));
const answered = settled.filter((r) => r.status === "fulfilled").length;
const limited = settled.filter((r) => r.status === "rejected" && r.reason?.type === "limit");
const other = settled.filter((r) => r.status === "rejected" && r.reason?.type !== "limit");
console.log("CALLS", answered, limited.length, other.length);
if (limited.length) console.log("LIMIT", limited[0].reason.message);
if (other.length) console.log("OTHER", String(other[0].reason?.message).slice(0, 300));
