// The SDK of a JavaScript (or TypeScript) run: `node SDK_DIR/ptc_sdk.mjs [--may-spawn]`, which
// the run's confined child becomes (src/run/javascript.rs), after every layer of its sandbox.
// It makes the catalog's tools and warms what a run uses first, then reads the run's job on
// stdin, as a Python run's bootstrap does: `{"code", "script", "ipc", "token", "call_timeout",
// "source_map"}` (the code is what the sidecar made of the user's: TypeScript already stripped,
// with its source map; `script`: it imports nothing, so it need not be a module). A warm
// worker (src/run/pool.rs) has done everything before the job when a run takes it.
//
// Owns what the user's code sees of the catalog (one async function per PTC tool, by its
// JavaScript name, as a global and in `tools`; `callTool`, `describe`, `searchTools`,
// `saveFile`, the error classes) and how a call reaches the sidecar: `POST /call` on the IPC
// bridge with the run's token, the wire of ptc_sdk.py (docs/runner-protocol.md). Then it imports
// the user's code as an ES module (top-level `await`, its own lines) and prints an uncaught
// error with the user's frames only. It must not validate arguments against schemas (the
// sidecar does, and answers `input` errors) nor start a process.
//
// Errors say who has to act, as in Python: `ToolInputError` (fix the arguments; type
// `input`), `ToolDenied` (a person said no; `denied`), `ToolError` with the sidecar's `type`
// (`unknown_tool`, `tool`, `timeout`, `limit`, `rate_limited`, `unavailable`, ...) and two of
// the SDK's own: `timeout` (no answer within the call timeout) and `ipc` (the connection to
// the sidecar broke, or it answered something that is not the protocol).

import net from "node:net";
import { performance } from "node:perf_hooks";
import { clearTimeout, setTimeout } from "node:timers";
import { readFileSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { inspect } from "node:util";
import { Console } from "node:console";
import { Writable } from "node:stream";
import vm from "node:vm";
import childProcess from "node:child_process";
import workerThreads from "node:worker_threads";

// Most connections open to the IPC bridge at once; calls beyond wait for a free one (a
// `Promise.all` of thousands of calls must not open thousands of sockets on the sidecar).
const MAX_CONNECTIONS = 32;
// An idle connection unused for longer than this is replaced, not reused: the bridge closes
// one idle for 10 s (ipc::HEADER_TIMEOUT), the code may have blocked the event loop since
// (a busy loop, a sync read) so that the close is not seen yet, and a request sent on it then
// fails after being sent, which is not retried (ptc_sdk.py peeks at such a socket instead;
// node cannot).
const IDLE_REUSE_MS = 2_000;
// Longest answer head, and longest line of a chunked body, read: a peer that never ends one
// cannot grow memory.
const MAX_HEAD_BYTES = 64 * 1024;
const MAX_CHUNK_LINE = 1024;
// Requests up to this size go out as one buffer (head and body copied together); a larger
// one (`saveFile`'s) is not copied, its head and body written together (corked).
const SMALL_BODY = 64 * 1024;
// Longest answer read from `/search`, `/describe` or `/file`: a few entries, not a file.
const MAX_LOOKUP_ANSWER = 256 * 1024;
// Longest wait for a search: the sidecar may wait up to 30 s for the search model's vectors
// of a new catalog (embed::MODEL_WAIT).
const SEARCH_TIMEOUT_MS = 45_000;
// Longest wait for `/describe` when the run has no call timeout: the sidecar answers from
// memory, so a silent bridge is a broken one.
const LOOKUP_TIMEOUT_MS = 10_000;
// What a run may not do unless the sidecar allows it (PTC_ALLOW_SUBPROCESS); the seccomp
// program refuses it anyway, this says why in words.
const NO_PROCESSES =
  "exec_code may not start processes (%s); call a tool instead, " +
  "or run the sidecar with PTC_ALLOW_SUBPROCESS=true";

// The SDK's directory (the catalog), and the run's scratch directory (where the module goes),
// read before the code could change either variable.
const SDK_DIR = dirname(fileURLToPath(import.meta.url));
const SCRATCH = process.env.TMPDIR || process.cwd();

// Whether the run may start processes: the sidecar's argument, not the code's to see.
const MAY_SPAWN = process.argv.slice(2).includes("--may-spawn");
process.argv.splice(2);

// The run's bridge and call timeout, from its job (read last, once the tools are made).
let IPC_PORT = 0;
let TOKEN = "";
let CALL_TIMEOUT_MS = 0;

// ---------------------------------------------------------------------------------------------
// Errors

class ToolError extends Error {
  /** A tool call failed. `e.message` says what; `e.type` says why (`tool`, `timeout`, ...). */
  constructor(message = "", type = "tool") {
    super(message);
    this.type = type;
  }
  get name() {
    return this.constructor.name;
  }
}

class ToolInputError extends ToolError {
  /** The arguments do not match the tool's input schema; nothing was dispatched. */
  constructor(message = "", type = "input") {
    super(message, type);
  }
}

class ToolDenied extends ToolError {
  /** A person denied the call, or did not answer in time: the tool was not called. */
  constructor(message = "", type = "denied") {
    super(message, type);
  }
}

/** The error for the `error` object of an answer. */
function errorFrom(error) {
  if (error === null || typeof error !== "object" || Array.isArray(error)) {
    return new ToolError(`malformed error from the sidecar: ${inspect(error)}`, "ipc");
  }
  const kind = typeof error.type === "string" && error.type ? error.type : "tool";
  let message = error.message;
  if (typeof message !== "string") message = message == null ? kind : String(message);
  if (kind === "input") return new ToolInputError(message);
  if (kind === "denied") return new ToolDenied(message);
  return new ToolError(message, kind);
}

// ---------------------------------------------------------------------------------------------
// The IPC client: the HTTP/1.1 that ptc_sdk.py's `_Client` speaks, over kept-alive sockets of
// its own (node:http's client made a sequential call 0.56 ms where this makes it 0.31 ms).

/** The kept-alive connections to the bridge: idle ones (the last used first), how many are
 *  open or opening, and the requests waiting for one (first come, first served). */
const pool = { idle: [], open: 0, waiters: [] };

/** One socket to the bridge and the request in flight on it, if any. */
class Connection {
  constructor(kept) {
    // Counted in the pool and kept between requests (a lookup's is neither).
    this.kept = kept;
    // When it was last released to the pool (performance.now()).
    this.idleSince = 0;
    // The peer ended it or it broke: never used again.
    this.ended = false;
    // What the request in flight does with the socket's events; null while idle.
    this.exchange = null;
    this.socket = net.connect({ host: "127.0.0.1", port: IPC_PORT, noDelay: true });
    this.socket.on("data", (chunk) => {
      if (this.exchange) this.exchange.data(chunk);
      else this.end(); // an answer nobody asked for: the connection is out of step
    });
    this.socket.on("end", () => this.end());
    this.socket.on("close", () => this.end());
    this.socket.on("error", (e) => this.end(e));
  }

  /** The connection is over (the peer closed it, it broke, or it is not to be kept). */
  end(error = null) {
    if (this.ended) return;
    this.ended = true;
    this.socket.destroy();
    if (this.kept) {
      const at = pool.idle.indexOf(this);
      if (at >= 0) pool.idle.splice(at, 1);
      pool.open -= 1;
      wake(null);
    }
    if (this.exchange) this.exchange.end(error);
  }
}

/** A kept connection for one request: an idle one, a new one while under MAX_CONNECTIONS, or
 *  the next one a request is done with. */
async function take() {
  for (;;) {
    const conn = pool.idle.pop();
    if (conn !== undefined) {
      if (!reusable(conn)) continue;
      conn.socket.ref();
      return conn;
    }
    if (pool.open < MAX_CONNECTIONS) {
      const conn = new Connection(true);
      pool.open += 1;
      return conn;
    }
    // Handed a connection, or null: a place freed up to open one in.
    const handed = await new Promise((resolve) => pool.waiters.push(resolve));
    if (handed !== null && reusable(handed)) return handed;
  }
}

/** Whether an idle connection may carry a request; one that may not is closed. */
function reusable(conn) {
  if (conn.ended) return false;
  if (performance.now() - conn.idleSince <= IDLE_REUSE_MS) return true;
  conn.end();
  return false;
}

/** A request is done with a connection: the next waiting request's, else idle (unref'd: an
 *  idle connection does not hold the run open). */
function release(conn) {
  conn.idleSince = performance.now();
  if (wake(conn)) return;
  conn.socket.unref();
  pool.idle.push(conn);
}

/** Hands `value` (a connection, or null: a free place) to the first waiting request; false
 *  when none waits. */
function wake(value) {
  const waiter = pool.waiters.shift();
  if (waiter === undefined) return false;
  waiter(value);
  return true;
}

/**
 * POSTs `body` (a Buffer) to the bridge's `path` with the run's token: `{status, body}`, or a
 * ToolError of type `ipc` (the connection broke, the answer is not HTTP or longer than
 * `maxAnswer`) or `timeout` (no answer within `timeoutMs` of the request being sent). `what`
 * names the request in errors. `keepAlive: false`: on a connection of its own, closed after.
 */
async function post(path, body, { contentType, keepAlive, timeoutMs, maxAnswer, what }) {
  const head = Buffer.from(
    `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${IPC_PORT}\r\n` +
      `Authorization: Bearer ${TOKEN}\r\nContent-Type: ${contentType}\r\n` +
      `Content-Length: ${body.length}\r\n${keepAlive ? "" : "Connection: close\r\n"}\r\n`,
    "latin1",
  );
  // A second try only when the first one's request cannot have reached the sidecar (its write
  // failed at once, as ptc_sdk.py decides): a call is never dispatched twice.
  for (let tried = false; ; tried = true) {
    let conn;
    try {
      conn = keepAlive ? await take() : new Connection(false);
    } catch (e) {
      throw broken(what, e);
    }
    const answer = await exchange(conn, head, body, { timeoutMs, maxAnswer, what });
    if (answer === UNSENT && !tried) continue;
    if (answer === UNSENT) throw broken(what, conn.socket.errored ?? HUNG_UP);
    // Kept only after a normal answer to a request that went out whole: an error (413 above
    // all) may come before the sidecar read the whole body, whose rest would be taken for the
    // next request.
    const whole = conn.socket.writableLength === 0;
    if (keepAlive && answer.keep && answer.status === 200 && whole && !conn.ended) release(conn);
    else conn.end();
    return { status: answer.status, body: answer.body };
  }
}

// What `exchange` gives for a request whose write failed at once: nothing reached the sidecar.
const UNSENT = Symbol("unsent");
// Why a connection closed with no (whole) answer on it: node:http's word for it.
const HUNG_UP = Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });

/** Writes the request on `conn` and reads its answer: an `Answer`, UNSENT, or a ToolError. */
function exchange(conn, head, body, { timeoutMs, maxAnswer, what }) {
  return new Promise((resolve, reject) => {
    const answer = new Answer(maxAnswer, what);
    let timer = null;
    const settle = (error, value) => {
      conn.exchange = null;
      if (timer !== null) clearTimeout(timer);
      if (error === null) resolve(value);
      else {
        conn.end();
        reject(error);
      }
    };
    conn.exchange = {
      data(chunk) {
        try {
          if (answer.feed(chunk)) settle(null, answer);
        } catch (e) {
          settle(e instanceof ToolError ? e : broken(what, e));
        }
      },
      end(error) {
        if (answer.closed()) settle(null, answer);
        else settle(broken(what, error ?? HUNG_UP));
      },
    };
    const socket = conn.socket;
    if (body.length <= SMALL_BODY) socket.write(Buffer.concat([head, body]));
    else {
      socket.cork();
      socket.write(head);
      socket.write(body);
      socket.uncork();
    }
    if (socket.errored) {
      // The write failed at once (the sidecar had closed the connection): nothing was sent.
      conn.exchange = null;
      conn.end();
      resolve(UNSENT);
      return;
    }
    if (timeoutMs > 0) {
      timer = setTimeout(() => {
        const message = `no answer from the sidecar within ${timeoutMs / 1000}s`;
        settle(new ToolError(message, "timeout"));
      }, timeoutMs);
    }
  });
}

/** One answer, read as its bytes come: the head, then the body by its Content-Length, in
 *  chunks, or up to the close. `status`, `keep` (the sidecar keeps the connection) and `body`
 *  once whole. */
class Answer {
  constructor(maxAnswer, what) {
    this.maxAnswer = maxAnswer;
    this.what = what;
    this.status = 0;
    this.keep = true;
    this.body = null;
    // HEAD, LENGTH (`left` bytes to come), CHUNK_SIZE, CHUNK (`left` bytes to come),
    // CHUNK_END (its CRLF), TRAILERS, TO_CLOSE or DONE.
    this.state = HEAD;
    this.left = 0;
    // Bytes come but not yet read (a head, a chunk's line, cut between two reads).
    this.pending = EMPTY;
    this.parts = [];
    this.size = 0;
  }

  /** Takes the next bytes of the connection: true once the answer is whole. Throws a
   *  ToolError, or an Error when the bytes are not an HTTP/1.1 answer. */
  feed(chunk) {
    let bytes = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = EMPTY;
    while (bytes.length > 0 && this.state !== DONE) bytes = this.step(bytes);
    // Bytes after the answer: the connection is out of step.
    if (bytes.length > 0) this.keep = false;
    return this.state === DONE;
  }

  /** Reads what it can of `bytes` in the current state: the bytes left over. */
  step(bytes) {
    switch (this.state) {
      case HEAD: {
        const end = bytes.indexOf("\r\n\r\n");
        if (end < 0) return this.wait(bytes, MAX_HEAD_BYTES);
        this.head(bytes.toString("latin1", 0, end));
        return bytes.subarray(end + 4);
      }
      case LENGTH:
      case CHUNK: {
        const taken = bytes.subarray(0, this.left);
        this.left -= taken.length;
        this.add(taken);
        if (this.left === 0 && this.state === LENGTH) this.finish();
        else if (this.left === 0) this.state = CHUNK_END;
        return bytes.subarray(taken.length);
      }
      case CHUNK_SIZE:
      case CHUNK_END:
      case TRAILERS: {
        const end = bytes.indexOf("\r\n");
        if (end < 0) return this.wait(bytes, MAX_CHUNK_LINE);
        this.line(bytes.toString("latin1", 0, end));
        return bytes.subarray(end + 2);
      }
      case TO_CLOSE:
        this.add(bytes);
        return EMPTY;
    }
    return bytes;
  }

  /** Reads a line of a chunked body: a chunk's size, the end of its data, or a trailer. */
  line(text) {
    if (this.state === CHUNK_SIZE) {
      const size = text.split(";")[0].trim();
      if (!/^[0-9a-fA-F]{1,12}$/.test(size)) throw new Error("a malformed chunk");
      this.left = parseInt(size, 16);
      this.state = this.left === 0 ? TRAILERS : CHUNK;
    } else if (this.state === CHUNK_END) {
      if (text !== "") throw new Error("a malformed chunk");
      this.state = CHUNK_SIZE;
    } else if (text === "") this.finish();
  }

  /** Keeps `bytes` for the next read, as long as they stay under `most`. */
  wait(bytes, most) {
    if (bytes.length > most) throw new Error("an answer's head or chunk line is too long");
    this.pending = bytes;
    return EMPTY;
  }

  /** Reads the head (up to its blank line): the status and how the body comes. */
  head(text) {
    const lines = text.split("\r\n");
    const status = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(lines[0]);
    if (status === null) throw new Error("not an HTTP/1.1 answer");
    this.status = Number(status[1]);
    // An interim answer (1xx): the real one follows.
    if (this.status < 200) return;
    let length = null;
    let chunked = false;
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(":");
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim().toLowerCase();
      if (name === "content-length") {
        if (!/^\d{1,15}$/.test(value)) throw new Error("a malformed Content-Length");
        length = Number(value);
      } else if (name === "transfer-encoding") chunked = value.split(",").pop().trim() === "chunked";
      else if (name === "connection" && value === "close") this.keep = false;
    }
    if (chunked) this.state = CHUNK_SIZE;
    else if (length !== null) {
      if (length > this.maxAnswer) this.tooLong();
      this.left = length;
      this.state = LENGTH;
      if (length === 0) this.finish();
    } else {
      // Neither: the body is all the sidecar sends before it closes.
      this.keep = false;
      this.state = TO_CLOSE;
    }
  }

  add(bytes) {
    if (bytes.length === 0) return;
    this.size += bytes.length;
    if (this.size > this.maxAnswer) this.tooLong();
    this.parts.push(bytes);
  }

  tooLong() {
    throw new ToolError(`the sidecar's answer to ${this.what} is too long`, "ipc");
  }

  finish() {
    this.state = DONE;
    this.body = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
  }

  /** The connection closed: true when that ends the answer (a body that runs to the close). */
  closed() {
    if (this.state === TO_CLOSE) this.finish();
    return this.state === DONE;
  }
}

const [HEAD, LENGTH, CHUNK_SIZE, CHUNK, CHUNK_END, TRAILERS, TO_CLOSE, DONE] = [0, 1, 2, 3, 4, 5, 6, 7];
const EMPTY = Buffer.alloc(0);

function broken(what, e) {
  const why = e.code || e.message;
  return new ToolError(`the connection to the sidecar broke during ${what}: ${why}`, "ipc");
}

/** The `result` of a `/call` answer, or the error it carries thrown. */
function answerOf(status, body) {
  let answer = null;
  try {
    answer = JSON.parse(body.toString("utf8"));
  } catch {
    answer = null;
  }
  const isObject = answer !== null && typeof answer === "object" && !Array.isArray(answer);
  if (status === 200 && isObject) {
    if (answer.ok === true) return answer;
    if (answer.ok === false) throw errorFrom(answer.error);
  }
  if (status !== 200) {
    const error = isObject ? answer.error : null;
    const message =
      error && typeof error.message === "string"
        ? error.message
        : `HTTP ${status} from the sidecar`;
    const kind = error && typeof error.type === "string" && error.type ? error.type : "ipc";
    throw new ToolError(message, kind);
  }
  throw new ToolError(`malformed answer from the sidecar: ${body.toString("utf8", 0, 200)}`, "ipc");
}

/** One call of `tool` (its original name) with `args`; `label` names it in errors. */
async function call(tool, args, label) {
  if (args === undefined || args === null) args = {};
  if (typeof args !== "object" || Array.isArray(args)) {
    throw new ToolInputError(
      `${label}(args): the arguments are one object of named arguments, ` +
        `like ${label}({name: value}); got ${Array.isArray(args) ? "an array" : typeof args}`,
    );
  }
  let body;
  try {
    body = JSON.stringify({ tool, args });
  } catch (e) {
    throw new ToolInputError(`arguments of ${label} are not JSON: ${e.message}`);
  }
  const { status, body: answer } = await post("/call", Buffer.from(body, "utf8"), {
    contentType: "application/json",
    keepAlive: true,
    timeoutMs: CALL_TIMEOUT_MS,
    maxAnswer: Infinity,
    what: `a call to ${label}`,
  });
  return answerOf(status, answer).result;
}

/** A `/search`, `/describe` or `/file` request on a connection of its own: the answer. */
async function lookup(path, body, contentType, timeoutMs, what) {
  const { status, body: answer } = await post(path, body, {
    contentType,
    keepAlive: false,
    timeoutMs,
    maxAnswer: MAX_LOOKUP_ANSWER,
    what,
  });
  return answerOf(status, answer);
}

// ---------------------------------------------------------------------------------------------
// The catalog: `tools`, the globals, `callTool`, `describe`, `searchTools`, `saveFile`

const CATALOG = JSON.parse(readFileSync(join(SDK_DIR, "catalog.json"), "utf8"));
const TOOLS = (Array.isArray(CATALOG.tools) ? CATALOG.tools : []).filter(
  (t) => t && typeof t.name === "string" && typeof t.js_name === "string" && t.js_name,
);
const BY_JS_NAME = new Map(TOOLS.map((t) => [t.js_name, t]));
const BY_NAME = new Map(TOOLS.map((t) => [t.name, t]));

function stubOf(tool) {
  const label = tool.js_name;
  // Named after the tool, so a stack shows `at async get_weather`.
  const stub = { async [label](args) { return call(tool.name, args, label); } }[label];
  Object.defineProperty(stub, "tool", { value: tool });
  return stub;
}

const stubs = Object.create(null);
for (const tool of TOOLS) {
  if (!(tool.js_name in stubs)) stubs[tool.js_name] = stubOf(tool);
}

/** Tool JavaScript names the model may have meant by `name`: `server__name` first, then close. */
function suggest(name) {
  const names = [...BY_JS_NAME.keys()];
  const found = names.filter((n) => n.includes("__") && n.split("__").slice(1).join("__") === name);
  const scored = names
    .map((n) => [distance(name, n), n])
    .filter(([d, n]) => d <= Math.max(1, Math.floor(Math.max(name.length, n.length) / 4)))
    .sort((a, b) => a[0] - b[0]);
  for (const [, n] of scored) if (!found.includes(n)) found.push(n);
  return found.slice(0, 5);
}

function distance(a, b) {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost));
    }
    previous = row;
  }
  return previous[b.length];
}

function didYouMean(name) {
  const names = typeof name === "string" ? suggest(name) : [];
  return names.length ? `; did you mean ${names.join(" or ")}?` : "";
}

// Keys that the runtime itself asks any object for (`await`, `console.log`, JSON): answered as
// for a plain object, never as an unknown tool.
const PLAIN_KEYS = new Set([
  "then", "toJSON", "constructor", "inspect", "valueOf", "toString", "prototype", "length",
  "name", "__proto__",
]);

/** Every tool by its JavaScript name; an unknown name is a ToolError with suggestions. */
const tools = new Proxy(Object.freeze(stubs), {
  get(target, key) {
    if (typeof key === "string" && !(key in target) && !PLAIN_KEYS.has(key)) {
      throw new ToolError(`tools has no tool named ${key}${didYouMean(key)}`, "unknown_tool");
    }
    return target[key];
  },
});

/** Calls a tool by its original name (or its JavaScript name) with one arguments object. */
async function callTool(name, args) {
  if (typeof name !== "string" || !name) {
    throw new ToolInputError("callTool(name, args): name must be a non-empty string");
  }
  const tool = BY_NAME.get(name) || BY_JS_NAME.get(name);
  return call(tool ? tool.name : name, args, tool ? tool.js_name : name);
}

/** Prints everything about a tool (by either name, or the function itself); no name: all. */
async function describe(name) {
  if (name === undefined) {
    for (const tool of TOOLS) console.log(headline(tool));
    return;
  }
  const tool =
    (typeof name === "function" && name.tool) || BY_JS_NAME.get(name) || BY_NAME.get(name);
  if (!tool) {
    throw new ToolError(`no tool named ${inspect(name)}${didYouMean(name)}`, "unknown_tool");
  }
  const known = await described(tool.name);
  const out = [known?.signature || headline(tool)];
  if (tool.name !== tool.js_name) out.push(`Dispatched as: ${tool.name}`);
  const description = (tool.description || "").trim();
  if (description) out.push("", description);
  out.push("", "Input schema:", JSON.stringify(tool.input_schema ?? null, null, 2));
  if (tool.output_schema != null) {
    out.push("", "Output schema:", JSON.stringify(tool.output_schema, null, 2));
  } else if (known?.returns) {
    const calls = known.calls;
    const learned = `learned from ${calls} call${calls === 1 ? "" : "s"}`;
    out.push("", `Returns (${learned}, no output schema): ${known.returns}`);
  }
  console.log(out.join("\n"));
}

/** A tool's one line: its JavaScript name and the first line of its description. */
function headline(tool) {
  const first = (tool.description || "").trim().split("\n")[0];
  return `${tool.js_name}(args)${first ? `  // ${first}` : ""}`;
}

/** What the sidecar says of a tool: `{signature, returns, calls}` (its line in the
 *  description in TypeScript, and what calls taught it of its results), or null. */
async function described(name) {
  try {
    const body = Buffer.from(JSON.stringify({ tool: name, lang: "javascript" }), "utf8");
    const timeoutMs = CALL_TIMEOUT_MS || LOOKUP_TIMEOUT_MS;
    const reply = await lookup("/describe", body, "application/json", timeoutMs, "describe");
    return {
      signature: typeof reply.signature === "string" ? reply.signature : null,
      returns: typeof reply.returns === "string" ? reply.returns : null,
      calls: reply.calls,
    };
  } catch {
    return null;
  }
}

/** The tools that best match `query`, best first: `{name, signature, summary, returns?}`. */
async function searchTools(query, limit = 5) {
  if (typeof query !== "string" || !query.trim()) {
    throw new ToolInputError("searchTools(query, limit = 5): query must be a non-empty string");
  }
  if (!Number.isInteger(limit) || limit < 1) {
    throw new ToolInputError("searchTools(query, limit = 5): limit must be a positive integer");
  }
  // lang: the results name tools and show signatures as the JavaScript description does.
  const body = Buffer.from(JSON.stringify({ query, limit, lang: "javascript" }), "utf8");
  const timeoutMs = Math.max(CALL_TIMEOUT_MS, SEARCH_TIMEOUT_MS);
  const answer = await lookup("/search", body, "application/json", timeoutMs, "searchTools");
  if (answer.note) console.error(`searchTools: ${answer.note}`);
  return answer.results || [];
}

/** Saves `data` (a string as UTF-8, a Buffer or a typed array) as the run's file `name`:
 *  `{name, size, mime, url}`. An image also comes back as an image the model can see. */
async function saveFile(name, data) {
  if (typeof name !== "string" || !name) {
    throw new TypeError("saveFile(name, data): name must be a non-empty string");
  }
  let bytes;
  if (typeof data === "string") bytes = Buffer.from(data, "utf8");
  else if (ArrayBuffer.isView(data)) {
    bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  }
  else if (data instanceof ArrayBuffer) bytes = Buffer.from(data);
  else {
    throw new TypeError(
      `saveFile(name, data): data must be a string, a Buffer or a typed array, not ${typeof data}`,
    );
  }
  const path = `/file?name=${encodeURIComponent(name)}`;
  const reply = await lookup(path, bytes, "application/octet-stream", CALL_TIMEOUT_MS, "saveFile");
  return reply.file;
}

// ---------------------------------------------------------------------------------------------
// No processes, unless the sidecar allows them

if (!MAY_SPAWN) {
  const starters = ["spawn", "spawnSync", "exec", "execSync", "execFile", "execFileSync", "fork"];
  for (const name of starters) {
    const refuse = () => {
      const message = NO_PROCESSES.replace("%s", `child_process.${name}`);
      throw Object.assign(new Error(message), { code: "EPERM" });
    };
    Object.defineProperty(childProcess, name, {
      value: refuse,
      writable: false,
      configurable: false,
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Worker threads within the run's address space (PTC_MEMORY_MB)

// V8 reserves a code range of 512 MB for each isolate it is not told otherwise of, and glibc
// 64 MB of malloc arena for each new thread (the sidecar starts node with MALLOC_ARENA_MAX=2,
// read by glibc at start and of no use to the code after): at the default PTC_MEMORY_MB a
// third Worker aborted the whole run ("Failed to reserve virtual memory for CodeRange"). A
// Worker made without a code range of its own gets WORKER_CODE_RANGE_MB; code that asks for
// more still gets it.
const WORKER_CODE_RANGE_MB = 64;
delete process.env.MALLOC_ARENA_MAX;
{
  const Base = workerThreads.Worker;
  class Worker extends Base {
    constructor(filename, options) {
      const limits = options?.resourceLimits;
      super(filename, {
        ...options,
        resourceLimits: { codeRangeSizeMb: WORKER_CODE_RANGE_MB, ...limits },
      });
    }
  }
  workerThreads.Worker = Worker;
}
// `import {spawn} from "node:child_process"` sees the refusals too, and `import {Worker} from
// "node:worker_threads"` makes the same Workers.
syncBuiltinESMExports();

// ---------------------------------------------------------------------------------------------
// Running the code

const CODE_FILE = join(SCRATCH, ".ptc-code.mjs");
// What a script's code is wrapped in (`scriptOf`).
const SCRIPT_HEAD = '(async function () {"use strict";';
const CODE_URL = pathToFileURL(CODE_FILE).href;
// The code's file (a module's, or the name a script is compiled under), and the TypeScript source its source map names (`code.ts`, which a
// mapped frame shows as a path), as a frame shows them: `<code>` instead of a path in the
// sidecar's runtime directory.
const CODE_FILES = [
  CODE_URL, CODE_FILE, new URL("code.ts", CODE_URL).href, join(SCRATCH, "code.ts"),
];

// A script's call, on the line after its code (`scriptOf`): a frame of the SDK's, not the user's.
let scriptTail = "\0";

/** An error as the model should read it: the user's frames, `<code>:LINE:COL`. */
function shown(error) {
  if (!(error instanceof Error) || typeof error.stack !== "string") {
    return `Uncaught ${inspect(error)}`;
  }
  let stack = error.stack;
  for (const file of CODE_FILES) stack = stack.split(file).join("<code>");
  const lines = stack.split("\n");
  const kept = lines.filter(
    (line) => !/^\s+at /.test(line) || (line.includes("<code>") && !line.includes(scriptTail)),
  );
  return kept.join("\n");
}

function die(error) {
  process.stderr.write(`${shown(error)}\n`);
  process.exitCode = 1;
  // Whatever else the code left running (timers, calls) dies with it, as a Python run's does.
  process.exit(1);
}

process.on("uncaughtException", die);
process.on("unhandledRejection", die);

Object.assign(globalThis, {
  tools, callTool, describe, searchTools, saveFile, ToolError, ToolInputError, ToolDenied,
});
// A tool's name never is a global's (catalog::names::js_name); should one be, the global stays.
for (const [name, stub] of Object.entries(stubs)) {
  if (!(name in globalThis)) globalThis[name] = stub;
}

// ---------------------------------------------------------------------------------------------
// Warming: what a run does first, done before its job. On a warm worker this is paid while it
// waits; the first `console.log` alone (its stream, the formatter) was 2 ms of a run's CPU.

// The module loader's first import costs 5-10 ms: paid here for code that is a module.
await import("data:text/javascript,");
process.stdout;
process.stderr;
const sink = new Writable({ write: (chunk, encoding, done) => done() });
const warm = new Console({ stdout: sink, stderr: sink });
warm.log(1, "a", { b: [1.5, "c", null] });
warm.error(new Error("warm"));
new vm.Script(scriptOf(""), { filename: CODE_FILE }).runInThisContext();
// Requests node's start left in flight (the module loader's close of this file, on libuv's
// threads) done now: after the job they would hold the run's end up by a turn of the loop
// (~1.3 ms).
const inFlight = () => process.getActiveResourcesInfo().filter((r) => r.includes("Req"));
for (let turn = 0; turn < 100 && inFlight().length > 0; turn++) {
  await new Promise((resolve) => setTimeout(resolve, 1));
}
// What is there all along (stdout's and stderr's pipes): nothing a run left to do.
const ALL_ALONG = process.getActiveResourcesInfo();

/** A script's code as the body of a strict async function, called with no `this`: its own
 *  declarations, top-level `await`, and on one line with the code's first, so that every line
 *  keeps its number (`columnOffset` keeps the first line's columns). */
function scriptOf(code) {
  return `${SCRIPT_HEAD}${code}\n}).call(undefined)`;
}

// ---------------------------------------------------------------------------------------------
// The run

// The job: the whole of stdin, which the sidecar closes after it (a warm worker waits here).
const JOB = JSON.parse(readFileSync(0, "utf8"));
IPC_PORT = Number(String(JOB.ipc || "").split(":").pop()) || 0;
TOKEN = String(JOB.token || "");
CALL_TIMEOUT_MS = Math.max(0, Number(JOB.call_timeout) || 0) * 1000;

try {
  const code = String(JOB.code ?? "");
  if (JOB.script === true) {
    const options = { filename: CODE_FILE, columnOffset: -SCRIPT_HEAD.length };
    scriptTail = `<code>:${code.split("\n").length + 1}:`;
    await new vm.Script(scriptOf(code), options).runInThisContext();
  } else {
    writeFileSync(CODE_FILE, code, { mode: 0o400 });
    if (JOB.source_map) process.setSourceMapsEnabled(true);
    await import(CODE_URL);
  }
} catch (error) {
  die(error);
}

// Done when nothing is left to run (timers, calls the code did not await): then at once,
// without node's teardown of its heap, which the kernel does anyway (~1 ms). Added last, after
// any the code added, which may leave more to run.
process.on("beforeExit", () => {
  const left = process.getActiveResourcesInfo();
  for (const resource of ALL_ALONG) {
    const at = left.indexOf(resource);
    if (at >= 0) left.splice(at, 1);
  }
  if (left.length === 0) process.exit();
});
