// Drives ptc-sidecar's continuation protocol with the real LibreChat agents client.
//
//   node tests/librechat/drive.mjs http://127.0.0.1:PORT [API_KEY]
//
// Uses the package's own programmatic tool runner (`createProgrammaticToolCallingTool`, the
// `run_tools_with_code` tool, invoked the way its ToolNode invokes it: a tool call carrying
// `toolMap` and `toolDefs`). A small counting proxy sits between the client and the sidecar,
// so a scenario can assert how many round trips it took. Prints one line per scenario and
// exits non-zero on the first failure.

import http from 'node:http';
import assert from 'node:assert/strict';
import { createProgrammaticToolCallingTool, tool } from '@librechat/agents';

const [sidecar, apiKey] = process.argv.slice(2);
if (!sidecar) {
  console.error('usage: node drive.mjs http://127.0.0.1:PORT [API_KEY]');
  process.exit(2);
}

// ---- a counting proxy in front of the sidecar ------------------------------------------------
const counts = new Map();
const target = new URL(sidecar);
const proxy = http.createServer((req, res) => {
  counts.set(req.url, (counts.get(req.url) ?? 0) + 1);
  const upstream = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
    (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    },
  );
  upstream.on('error', (e) => {
    res.writeHead(502);
    res.end(String(e));
  });
  req.pipe(upstream);
});
await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
const baseUrl = `http://127.0.0.1:${proxy.address().port}`;
const requests = (path) => counts.get(path) ?? 0;

// ---- host tools, as LangChain tools plus their LCTool definitions ----------------------------
let inFlight = 0;
let maxInFlight = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const defs = [
  {
    name: 'get-weather',
    description: 'Weather for a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    allowed_callers: ['code_execution'],
    fn: async ({ city }) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await sleep(50);
      inFlight--;
      return JSON.stringify({ city, temp_c: city.length * 3, sky: 'sunny' });
    },
  },
  {
    name: 'add',
    description: 'Adds two numbers.',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
    allowed_callers: ['code_execution'],
    fn: async ({ a, b }) => String(a + b),
  },
  {
    name: 'flaky_service',
    description: 'Always fails.',
    parameters: { type: 'object', properties: {} },
    allowed_callers: ['code_execution'],
    fn: async () => {
      throw new Error('flaky_service failed: boom');
    },
  },
];
const toolMap = new Map(
  defs.map((d) => [d.name, tool(d.fn, { name: d.name, description: d.description, schema: d.parameters })]),
);
const toolDefs = defs.map(({ fn, ...def }) => def);

const ptc = createProgrammaticToolCallingTool({
  baseUrl,
  authHeaders: apiKey ? { 'X-API-Key': apiKey } : {},
  runTimeoutMs: 60000,
});

let n = 0;
/** Runs `code` through the client; returns the ToolMessage (content + artifact). `call`
 *  adds to the tool call what the host's ToolNode injects (`session_id`, `_injected_files`). */
async function run(code, extra = {}, controller = new AbortController(), call = {}) {
  return ptc.invoke(
    {
      id: `tc_${++n}`,
      name: 'run_tools_with_code',
      type: 'tool_call',
      args: { code, timeout: 30000, ...extra },
      toolMap,
      toolDefs,
      ...call,
    },
    { signal: controller.signal },
  );
}

async function scenario(name, body) {
  const before = requests('/exec/programmatic');
  await body(() => requests('/exec/programmatic') - before);
  console.log(`ok - ${name}`);
}

try {
  await scenario('one call', async (posts) => {
    // The tool returns a JSON string, as LangChain tools do; code gets a dict.
    const msg = await run("w = await get_weather(city='Paris')\nprint(w['city'], w['temp_c'], w['sky'])");
    assert.equal(msg.content, 'stdout:\nParis 15 sunny');
    assert.equal(posts(), 2);
    assert.ok(msg.artifact.session_id, 'a session id comes back');
  });

  await scenario('a loop of calls', async (posts) => {
    const msg = await run('t = 0\nfor i in range(5):\n    t = float(await add(a=t, b=i))\nprint(t)');
    assert.equal(msg.content, 'stdout:\n10.0');
    assert.equal(posts(), 6, 'five dependent calls, five round trips');
  });

  await scenario('a gather of three in one round', async (posts) => {
    maxInFlight = 0;
    const msg = await run(
      "rs = await asyncio.gather(get_weather(city='A'), get_weather(city='BB'), get_weather(city='CCC'))\nprint(len(rs))",
    );
    assert.equal(msg.content, 'stdout:\n3');
    assert.equal(posts(), 2, 'one round: the first request and one continuation');
    assert.equal(maxInFlight, 3, 'the client ran the three calls together');
  });

  await scenario('a tool error caught in Python', async () => {
    const msg = await run(
      "try:\n    await flaky_service()\nexcept Exception as e:\n    print('caught:', type(e).__name__, e)",
    );
    assert.equal(msg.content, 'stdout:\ncaught: ToolError flaky_service failed: boom');
  });

  await scenario('a syntax error', async () => {
    await assert.rejects(run('print(1'), (e) => {
      assert.match(e.message, /^Programmatic execution failed: Code execution failed\./);
      assert.match(e.message, /Stderr:\n[\s\S]*SyntaxError/);
      return true;
    });
  });

  await scenario('a hyphenated tool name', async (posts) => {
    const msg = await run("import tools\nw = await tools.get_weather(city='Oslo')\nprint(w['city'])");
    assert.equal(msg.content, 'stdout:\nOslo');
    assert.equal(posts(), 2);
  });

  await scenario('a file written to /mnt/data comes back, and the session\'s next run reads it', async () => {
    const first = await run(
      "w = await get_weather(city='Quito')\nopen('/mnt/data/quito.json', 'w').write(json.dumps(w))\nprint('saved')",
    );
    assert.match(first.content, /^stdout:\nsaved/);
    const files = first.artifact.files;
    assert.deepEqual(files.map((f) => f.name), ['quito.json']);
    const second = await run(
      "print(json.load(open('/mnt/data/quito.json'))['city'])",
      {},
      new AbortController(),
      { session_id: first.artifact.session_id, _injected_files: files },
    );
    assert.equal(second.content, 'stdout:\nQuito');
  });

  await scenario('code without tools goes to /exec', async () => {
    const before = requests('/exec');
    const msg = await run("await asyncio.sleep(0)\nprint('plain')", { tool_manifest: [] });
    assert.equal(msg.content, 'stdout:\nplain');
    assert.equal(requests('/exec') - before, 1);
  });

  await scenario('an abort cancels the run on the sidecar', async () => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 1500);
    // The run would sleep 30 s: the Rust side checks that nothing is left once this is done.
    await assert.rejects(run('await asyncio.sleep(30)\nprint("late")', {}, controller));
    clearTimeout(timer);
    // LangChain rejects on abort at once; the client's /cancel follows on its own.
    for (let i = 0; i < 60 && requests('/exec/programmatic/cancel') === 0; i++) await sleep(50);
    assert.equal(requests('/exec/programmatic/cancel'), 1, 'the client sent /cancel');
  });
} catch (e) {
  console.error(`not ok - ${e.stack ?? e}`);
  process.exitCode = 1;
} finally {
  proxy.close();
}
