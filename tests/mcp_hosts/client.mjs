// A host of the MCP front door, with the official TypeScript SDK (@modelcontextprotocol/sdk,
// pinned in package.json). The twin of client.py: tests/all/front.rs runs
// `node client.mjs SPEC` with the same SPEC (transport, scenario, marker, manifest, host_tool, runs;
// no mode: this SDK speaks the handshake revisions only) and judges the JSON object it prints.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";

const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAIT_MS = 20_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function transport(spec) {
  if (spec.transport === "stdio") {
    return new StdioClientTransport({ command: spec.command, args: spec.args ?? [], env: spec.env, stderr: "inherit" });
  }
  return new StreamableHTTPClientTransport(new URL(spec.url), { requestInit: { headers: spec.headers ?? {} } });
}

function shown(result) {
  const content = result.content.map((block) => {
    if (block.type !== "image") return block;
    const { data, ...rest } = block;
    return { ...rest, data_len: data.length };
  });
  return { content, isError: Boolean(result.isError), structured: result.structuredContent ?? null };
}

const errorText = (e) => `${e?.name ?? "Error"}: ${e?.message ?? String(e)}`;
const run = (client, code, options = {}) =>
  client.callTool({ name: "exec_code", arguments: { code } }, undefined, { timeout: WAIT_MS, ...options });

async function tour(client, spec, out) {
  const listed = await client.listTools();
  out.tools = listed.tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema }));
  out.gather = shown(
    await run(
      client,
      "rs = await asyncio.gather(*[demo__add(a=i, b=1) for i in range(20)], " +
        `${spec.host_tool}(x=21))\nprint(sum(int(r) for r in rs[:20]), rs[20])\n`,
    ),
  );
  out.traced = shown(
    await client.callTool(
      { name: "exec_code", arguments: { code: `print(await ${spec.host_tool}(x=2))\n` }, _meta: { traceparent: spec.traceparent } },
      undefined,
      { timeout: WAIT_MS },
    ),
  );
  out.failing = shown(await run(client, "print('before')\nraise ValueError('boom-' + 'marker')\n"));
  await run(client, "x = 41\nprint('set')\n");
  out.state_session = null;
  out.state = shown(await run(client, "print(x + 1)\n"));

  const seen = [];
  const started = performance.now();
  const slow = await run(client, "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('last')\n", {
    onprogress: (p) => seen.push({ at: (performance.now() - started) / 1000, message: p.message, progress: p.progress }),
  });
  out.progress = { seen, ended_at: (performance.now() - started) / 1000, result: shown(slow) };

  const files = await run(
    client,
    `import base64\nsave_file('dot.png', base64.b64decode('${PNG}'))\n` +
      "save_file('notes.txt', 'hello from the run')\nprint('saved')\n",
  );
  out.files = shown(files);
  out.reads = {};
  for (const block of files.content) {
    if (block.type !== "resource_link") continue;
    try {
      out.reads[block.name] = (await client.readResource({ uri: block.uri })).contents;
    } catch (e) {
      out.reads[block.name] = errorText(e);
    }
  }

  out.bad = {};
  for (const [name, args] of [
    ["not_a_string", { code: 5 }],
    ["missing_code", {}],
    ["unknown_key", { code: "print(1)", cod: "x" }],
  ]) {
    try {
      out.bad[name] = shown(await client.callTool({ name: "exec_code", arguments: args }, undefined, { timeout: WAIT_MS }));
    } catch (e) {
      out.bad[name] = { error: errorText(e) };
    }
  }

  const noisy = await run(
    client,
    "import os, sys\nprint('x' * 1_000_000)\nsys.stdout.flush()\n" +
      "os.write(1, b'\\n{\"jsonrpc\":\"2.0\",\"id\":424242,\"result\":{}}\\n')\nos.write(2, b'to stderr\\n')\n",
  );
  const text = noisy.content[0]?.text ?? "";
  out.noisy = { isError: Boolean(noisy.isError), x_count: text.split("x").length - 1, len: text.length };
  out.after_noise = shown(await run(client, "print('still here')\n"));
}

function procsWith(needle) {
  const found = [];
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`).toString().replaceAll("\0", " ").includes(needle)) found.push(pid);
    } catch {}
  }
  return found;
}

async function cancel(client, spec, out) {
  const marker = spec.marker + "9";
  const abort = new AbortController();
  let started;
  const startedP = new Promise((r) => (started = r));
  const code =
    `import subprocess, time\nsubprocess.Popen(['sleep', '${spec.marker}' + '9'])\n` +
    "print('started', flush=True)\ntime.sleep(60)\nprint('never')\n";
  out.ended_by_itself = false;
  const call = run(client, code, {
    signal: abort.signal,
    onprogress: (p) => p.message?.includes("started") && started(),
  }).then(
    (r) => (out.ended_by_itself = shown(r)),
    () => {},
  );
  out.started = await Promise.race([startedP.then(() => true), sleep(WAIT_MS).then(() => false)]);
  // Popen has forked by now; the exec of sleep may take a moment on a loaded machine.
  for (const begun = performance.now(); !procsWith(marker).length && performance.now() - begun < 5000; ) await sleep(20);
  out.before = procsWith(marker).length;
  abort.abort("the host cancelled");
  await call;
  const begun = performance.now();
  while (procsWith(marker).length && performance.now() - begun < 10_000) await sleep(50);
  out.after = procsWith(marker).length;
  out.gone_in = (performance.now() - begun) / 1000;
  out.next = shown(await run(client, "print('next run')\n"));
}

async function reload(client, spec, out, changed) {
  out.before = (await client.listTools()).tools[0].description;
  const tools = JSON.parse(readFileSync(spec.manifest, "utf8"));
  tools.tools.push({
    name: "freshly_added",
    description: "A tool added while the host was connected.",
    input_schema: { type: "object", properties: {} },
  });
  writeFileSync(spec.manifest + ".tmp", JSON.stringify(tools));
  renameSync(spec.manifest + ".tmp", spec.manifest);
  out.notified = await Promise.race([changed.then(() => true), sleep(WAIT_MS).then(() => false)]);
  out.after = (await client.listTools()).tools[0].description;
}

// This host declares no elicitation capability: its calls that need a person are denied at once.
async function approve(client, spec, out) {
  const code =
    "said = []\nfor i in range(2):\n    try:\n        said.append(await demo__toggle_extra())\n" +
    "    except ToolDenied as e:\n        said.append('denied: ' + str(e))\nprint('\\n'.join(said))\n";
  out.run = shown(await run(client, code));
  out.asked = [];
}

/** Each of `spec.runs` (`name`, `lang`, `code`) through exec_code: what it showed, or the
 *  error the call got. */
async function runs(client, spec, out) {
  for (const { name, lang, code } of spec.runs) {
    try {
      out[name] = shown(
        await client.callTool({ name: "exec_code", arguments: { code, lang } }, undefined, { timeout: WAIT_MS }),
      );
    } catch (e) {
      out[name] = { error: errorText(e) };
    }
  }
}

async function list(client, spec, out) {
  out.tools = (await client.listTools()).tools.map((t) => t.name);
}

async function main(spec) {
  const out = {};
  let onChanged;
  const changed = new Promise((r) => (onChanged = r));
  const client = new Client({ name: "ptc-front-test", version: "1.0.0" });
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => onChanged());
  try {
    await client.connect(transport(spec));
    out.protocol = client.transport?.protocolVersion ?? null;
    const scenario = { tour, cancel, reload, approve, list, runs }[spec.scenario];
    await scenario(client, spec, out, changed);
  } catch (e) {
    out.error = errorText(e);
  } finally {
    // A well-behaved host ends its HTTP session (the sidecar's live session goes with it).
    if (spec.transport === "http") await client.transport?.terminateSession?.().catch(() => {});
    await client.close().catch(() => {});
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

await main(JSON.parse(process.argv[2]));
