// An agent loop on the Anthropic Messages API with ptc-sidecar's programmatic tool calling,
// in TypeScript (node 20; run with tsx, which strips the types):
//
//   PTC_ENABLED=true PTC_TOOLS_FILE=examples/agent-tools.json ptc-sidecar serve &
//   cd examples/ts && npm ci && npx tsx agent.ts "Is it warmer in Paris or Oslo?"
//
// Prints progress on stderr and the final answer (the argument of `complete`) on its last line.
// ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL (any compatible endpoint), ANTHROPIC_MODEL; PTC_URL
// (default http://127.0.0.1:7400) and PTC_API_KEY for the sidecar.

import Anthropic from "@anthropic-ai/sdk";

const PTC_URL = (process.env.PTC_URL ?? "http://127.0.0.1:7400").replace(/\/+$/, "");
const PTC_API_KEY = process.env.PTC_API_KEY;
const MODEL = process.env.ANTHROPIC_MODEL ?? "claude-sonnet-5-5";
// A model that never calls `complete` or `fail` is stopped after this many turns.
const MAX_TURNS = 12;
// Room for one turn's code and reasoning.
const MAX_TOKENS = 4096;
// A sidecar request (the event stream included) that does not finish in this long is dead: a
// run is bounded by the sidecar's PTC_TIMEOUT (120 s by default).
const HTTP_TIMEOUT_MS = 300_000;
const SYSTEM =
  "Use exec_code to call tools from Python: await them, loop, use asyncio.gather for calls " +
  "that do not depend on each other, and print only what you need. " +
  "When done, call complete with the answer; call fail if the task cannot be done.";

// ---- The host tools this runtime owns (in memory, no network), declared to the sidecar in
// examples/agent-tools.json without a callback URL: their calls come back on the event stream.
const WEATHER: Record<string, { city: string; temp_c: number; sky: string }> = {
  paris: { city: "Paris", temp_c: 21, sky: "sunny" },
  oslo: { city: "Oslo", temp_c: 4, sky: "rain" },
  tokyo: { city: "Tokyo", temp_c: 17, sky: "cloudy" },
};
type Order = { id: string; item: string; total: number; status: string };
const ORDERS: Record<string, Order[]> = {
  ada: [
    { id: "A-1001", item: "keyboard", total: 89.0, status: "shipped" },
    { id: "A-1002", item: "monitor", total: 249.5, status: "processing" },
  ],
  grace: [{ id: "G-2001", item: "compiler", total: 1200.0, status: "delivered" }],
};
const HOST_TOOLS: Record<string, (args: any) => unknown> = {
  get_weather({ city }: { city: string }) {
    const w = WEATHER[String(city).toLowerCase()];
    if (!w) throw new Error(`no weather for '${city}'; known cities: Paris, Oslo, Tokyo`);
    return w;
  },
  list_orders({ customer, status }: { customer: string; status?: string }) {
    const orders = ORDERS[String(customer).toLowerCase()];
    if (!orders) throw new Error(`no customer '${customer}'`);
    return orders.filter((o) => status === undefined || o.status === status);
  },
};

// ---- The sidecar: tools (ETag-cached), exec_code over the attached event stream.
class SidecarError extends Error {}

async function ptc(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (PTC_API_KEY) headers.set("X-API-Key", PTC_API_KEY);
  if (init.body) headers.set("Content-Type", "application/json");
  let response: Response;
  try {
    response = await fetch(PTC_URL + path, {
      ...init,
      headers,
      signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
    });
  } catch (e) {
    throw new SidecarError(`cannot reach ptc-sidecar at ${PTC_URL} (${e}): start it or set PTC_URL`);
  }
  if (!response.ok && response.status !== 304) {
    const hint = response.status === 401 ? " (set PTC_API_KEY to the sidecar's key)" : "";
    const detail = (await response.text()).slice(0, 500);
    throw new SidecarError(`ptc-sidecar refused ${init.method ?? "GET"} ${path}: HTTP ${response.status}${hint}: ${detail}`);
  }
  return response;
}

type Done = {
  status: string;
  stdout: string;
  stderr: string;
  exit_code: number | null;
  files?: { name: string; size: number; mime: string; url: string }[];
  content?: Anthropic.ImageBlockParam[];
};

class Sidecar {
  etag?: string;
  tools: Anthropic.Tool[] = [];

  /** The tool list to hand the model; refetched only when the catalog changed (ETag). */
  async refreshTools(): Promise<Anthropic.Tool[]> {
    const r = await ptc("/v1/tools?format=anthropic", {
      headers: this.etag ? { "If-None-Match": this.etag } : {},
    });
    if (r.status === 304) return this.tools;
    const body = await r.json();
    [this.etag, this.tools] = [body.etag, body.tools];
    const names = this.tools.map((t) => t.name).join(", ");
    console.error(`[tools] catalog version ${body.version}: ${names}`);
    return this.tools;
  }

  /** Runs the model's exec_code call, answering its host tool calls as they arrive. */
  async execCode(args: { code: string; timeout?: number }): Promise<Done> {
    const r = await ptc("/v1/exec_code", {
      method: "POST",
      headers: { Accept: "text/event-stream" },
      body: JSON.stringify({ code: args.code, timeout: args.timeout }),
    });
    let execId = "";
    for await (const [event, data] of events(r)) {
      if (event === "started") execId = data.exec_id;
      else if (event === "tool_call") {
        let answer: object;
        try {
          const run = Object.hasOwn(HOST_TOOLS, data.tool) ? HOST_TOOLS[data.tool] : undefined;
          if (!run) throw new Error(`this runtime has no tool '${data.tool}'`);
          answer = { id: data.id, result: await run(data.input) };
        } catch (e) {
          answer = { id: data.id, error: String(e) }; // the code gets it as a ToolError
        }
        const body = JSON.stringify({ results: [answer] });
        await (await ptc(`/v1/exec/${execId}/results`, { method: "POST", body })).body?.cancel();
      } else if (event === "done") return data as Done;
    }
    throw new SidecarError("ptc-sidecar's event stream ended without a result");
  }
}

/** Server-sent events as [event, data]; keep-alive comments are skipped. */
async function* events(r: Response): AsyncGenerator<[string, any]> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (event) yield [event, JSON.parse(data.join("\n"))];
    }
  }
}

/** A run's result as the model reads it best: what the code printed, then stderr and the
 * status only when there is something to say, then the files the run made. */
function resultText(done: Done): string {
  const parts = done.stdout ? [done.stdout.replace(/\n$/, "")] : [];
  if (done.stderr) parts.push("stderr:\n" + done.stderr.replace(/\n$/, ""));
  if (done.status !== "ok") parts.push(`status: ${done.status} (exit code ${done.exit_code})`);
  for (const f of done.files ?? [])
    parts.push(`file: ${f.name} (${f.mime}, ${f.size} bytes) at ${PTC_URL}${f.url}`);
  return parts.join("\n") || "(the code printed nothing)";
}

// ---- The loop.
async function runTool(
  sidecar: Sidecar,
  name: string,
  args: any,
): Promise<Omit<Anthropic.ToolResultBlockParam, "type" | "tool_use_id">> {
  if (name === "exec_code") {
    const done = await sidecar.execCode(args);
    const text = { type: "text" as const, text: resultText(done) };
    // Images the run saved come as Anthropic image blocks, ready to show the model.
    return { content: [text, ...(done.content ?? [])], is_error: done.status !== "ok" };
  }
  if (Object.hasOwn(HOST_TOOLS, name)) {
    // A host tool the sidecar offers directly (PTC_DIRECT_TOOLS).
    try {
      return { content: JSON.stringify(await HOST_TOOLS[name](args)) };
    } catch (e) {
      return { content: String(e), is_error: true };
    }
  }
  const offered = sidecar.tools.map((t) => t.name).join(", ");
  return { content: `unknown tool '${name}'; the tools are: ${offered}`, is_error: true };
}

async function main(task: string): Promise<number> {
  const client = new Anthropic(); // reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL
  const sidecar = new Sidecar();
  const messages: Anthropic.MessageParam[] = [{ role: "user", content: task }];
  for (let turn = 1; turn <= MAX_TURNS; turn++) {
    const reply = await client.messages.create({
      model: MODEL,
      max_tokens: MAX_TOKENS,
      system: SYSTEM,
      tools: await sidecar.refreshTools(), // a 304 until the catalog changes
      messages,
    });
    messages.push({ role: "assistant", content: reply.content });
    const calls = reply.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    if (calls.length === 0) {
      messages.push({ role: "user", content: "Call complete with your answer, or fail." });
      continue;
    }
    const results: Anthropic.ToolResultBlockParam[] = [];
    for (const call of calls) {
      console.error(`[turn ${turn}] ${call.name}`);
      const input = call.input as Record<string, any>;
      if (call.name === "complete") {
        console.log(input.answer ?? "");
        return 0;
      }
      if (call.name === "fail") {
        console.log(`FAILED: ${input.reason ?? ""}`);
        return 1;
      }
      const result = await runTool(sidecar, call.name, input);
      results.push({ type: "tool_result", tool_use_id: call.id, ...result });
    }
    messages.push({ role: "user", content: results });
  }
  console.log(`FAILED: no answer after ${MAX_TURNS} turns`);
  return 1;
}

if (process.argv.length !== 3) {
  console.error('usage: npx tsx agent.ts "TASK"');
  process.exit(2);
}
main(process.argv[2]).then(
  (code) => process.exit(code),
  (e) => {
    console.error(e instanceof SidecarError ? e.message : e);
    process.exit(1);
  },
);
