// Drives ptc-sidecar's continuation protocol with the real LibreChat agents client.
//
//   node tests/librechat/drive.mjs http://127.0.0.1:PORT [API_KEY]
//   (or with PTC_TEST_JWT_PRIVATE_KEY, _KID and _ALG: a fresh LibreChat token per request)
//
// Uses the package's own programmatic tool runner (`createProgrammaticToolCallingTool`, the
// `run_tools_with_code` tool, invoked the way its ToolNode invokes it: a tool call carrying
// `toolMap` and `toolDefs`). A small counting proxy sits between the client and the sidecar,
// so a scenario can assert how many round trips it took. Prints one line per scenario and
// exits non-zero on the first failure.

import assert from 'node:assert/strict';
import { createProgrammaticToolCallingTool } from '@librechat/agents';
import { authHeaders, baseUrl, requests, runAll, scenario, sleep, toolDefs, toolMap, weather } from './harness.mjs';

const ptc = createProgrammaticToolCallingTool({
  baseUrl,
  authHeaders,
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


await runAll(async () => {
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
    weather.max = 0;
    const msg = await run(
      "rs = await asyncio.gather(get_weather(city='A'), get_weather(city='BB'), get_weather(city='CCC'))\nprint(len(rs))",
    );
    assert.equal(msg.content, 'stdout:\n3');
    assert.equal(posts(), 2, 'one round: the first request and one continuation');
    assert.equal(weather.max, 3, 'the client ran the three calls together');
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
});
