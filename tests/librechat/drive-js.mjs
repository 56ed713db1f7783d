// Drives ptc-sidecar's JavaScript and TypeScript runs with the real LibreChat agents client.
//
//   node tests/librechat/drive-js.mjs http://127.0.0.1:PORT [API_KEY]
//
// `/exec`: the package's own code tool (`createCodeExecutionTool`, `execute_code`), which sends
// the model's `lang` as it is (`js`, `ts`). `/exec/programmatic`: the package (3.9.x) has no
// JavaScript runner of its own, so its programmatic loop is written here from the package's
// own wire functions (`makeRequest` for every request, `executeTools` for every round's
// calls, `formatCompletedResponse` for the answer), as `createProgrammaticToolCallingTool`
// writes it, with `lang` in the first request as its bash runner puts it. Behind the counting
// proxy, as drive.mjs. Prints one line per scenario and exits non-zero on the first failure.

import assert from 'node:assert/strict';
import {
  createCodeExecutionTool,
  executeTools,
  formatCompletedResponse,
  makeRequest,
} from '@librechat/agents';
import { authHeaders, baseUrl, runAll, scenario, toolDefs, toolMap, weather } from './harness.mjs';

const codeTool = createCodeExecutionTool({ baseUrl, authHeaders });

let n = 0;
/** `execute_code` with `lang` and `code`, invoked as the ToolNode invokes it: the ToolMessage. */
async function exec(lang, code) {
  return codeTool.invoke({
    id: `tc_${++n}`,
    name: 'execute_code',
    type: 'tool_call',
    args: { lang, code },
  });
}

/** `code` of `lang` through `/exec/programmatic`, every round's calls run by the client's
 *  `executeTools`: the formatted answer (content, artifact), or the thrown error. */
async function programmatic(lang, code, extra = {}) {
  const endpoint = `${baseUrl}/exec/programmatic`;
  let response = await makeRequest(
    endpoint,
    { lang, code, tools: toolDefs, timeout: 30000, ...extra },
    undefined,
    authHeaders,
  );
  while (response.status === 'tool_call_required') {
    const results = await executeTools(response.tool_calls ?? [], toolMap);
    response = await makeRequest(
      endpoint,
      { continuation_token: response.continuation_token, tool_results: results },
      undefined,
      authHeaders,
    );
  }
  if (response.status !== 'completed') throw new Error(`${response.error}\n${response.stderr}`);
  // The content as a ToolMessage holds it (its trailing newlines trimmed).
  const [content, artifact] = formatCompletedResponse(response, code);
  return [content.trimEnd(), artifact];
}

await runAll(async () => {
  await scenario('execute_code with lang js', async () => {
    const msg = await exec('js', 'const xs = [1, 2, 3];\nconsole.log(xs.map((x) => x * 2).join(","));');
    assert.equal(msg.content, 'stdout:\n2,4,6');
    assert.ok(msg.artifact.session_id, 'a session id comes back');
  });

  await scenario('execute_code with lang ts', async () => {
    const msg = await exec('ts', 'interface P { n: number }\nconst p: P = { n: 21 };\nconsole.log(p.n * 2);');
    assert.equal(msg.content, 'stdout:\n42');
  });

  await scenario('execute_code: an uncaught error at the line of the code', async () => {
    const msg = await exec('js', 'console.log("before");\nthrow new Error("boom-marker");');
    assert.match(msg.content, /^stdout:\nbefore\n/);
    assert.match(msg.content, /stderr:\n[\s\S]*Error: boom-marker\n\s+at <code>:2:7/);
  });

  await scenario('javascript calling tools through continuations', async (posts) => {
    weather.max = 0;
    const [content] = await programmatic(
      'js',
      [
        'const w = await get_weather({ city: "Paris" });',
        'const rs = await Promise.all(["A", "BB", "CCC"].map((city) => get_weather({ city })));',
        'let t = 0;',
        'for (const i of [1, 2]) t = Number(await add({ a: t, b: i }));',
        'try { await flaky_service({}); } catch (e) { console.log("caught:", e.name, e.message); }',
        'console.log(w.city, w.temp_c, rs.map((r) => r.temp_c).join("+"), t);',
      ].join('\n'),
    );
    assert.equal(content, 'stdout:\ncaught: ToolError flaky_service failed: boom\nParis 15 3+6+9 3');
    // One call, a Promise.all of three (one round), two dependent calls, one failing call.
    assert.equal(posts(), 6, 'five rounds: the first request and five continuations');
    assert.equal(weather.max, 3, 'the client ran the three calls of Promise.all together');
  });

  await scenario('typescript calling a tool through a continuation', async (posts) => {
    const [content] = await programmatic(
      'ts',
      'type Weather = { city: string; temp_c: number };\nconst w: Weather = await get_weather({ city: "Rome" });\nconsole.log(w.temp_c as number);',
    );
    assert.equal(content, 'stdout:\n12');
    assert.equal(posts(), 2);
  });

  await scenario('a file written to /mnt/data comes back, and the session\'s next run reads it', async () => {
    const code =
      'import fs from "node:fs";\nconst w = await get_weather({ city: "Quito" });\n' +
      'fs.writeFileSync("/mnt/data/quito.json", JSON.stringify(w));\nconsole.log("saved");';
    const [content, artifact] = await programmatic('js', code);
    assert.match(content, /^stdout:\nsaved\n/);
    assert.deepEqual(artifact.files.map((f) => f.name), ['quito.json']);
    // The same session, its file given back as the host's ToolNode gives it.
    const [again] = await programmatic(
      'ts',
      'import fs from "node:fs";\nconst w: { city: string } = JSON.parse(fs.readFileSync("/mnt/data/quito.json", "utf8"));\nconsole.log(w.city);',
      { session_id: artifact.session_id, files: artifact.files },
    );
    assert.equal(again, 'stdout:\nQuito');
  });
});
