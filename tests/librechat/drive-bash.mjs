// Drives ptc-sidecar's bash programmatic tool calling with the real LibreChat agents client.
//
//   node tests/librechat/drive-bash.mjs http://127.0.0.1:PORT [API_KEY]
//
// Uses the package's own bash runner (`createBashProgrammaticToolCallingTool`, the
// `run_tools_with_bash` tool), invoked the way its ToolNode invokes it, behind a counting proxy
// (as drive.mjs does for Python). Prints one line per scenario and exits non-zero on the first
// failure.

import assert from 'node:assert/strict';
import { createBashProgrammaticToolCallingTool } from '@librechat/agents';
import { authHeaders, baseUrl, requests, runAll, scenario, toolDefs, toolMap, weather } from './harness.mjs';

const ptc = createBashProgrammaticToolCallingTool({
  baseUrl,
  authHeaders,
  runTimeoutMs: 60000,
});

let n = 0;
/** Runs bash `code` through the client; returns the ToolMessage (content + artifact).
 *  `call` adds to the tool call what the host's ToolNode injects (`session_id`, `_injected_files`). */
async function run(code, extra = {}, call = {}) {
  return ptc.invoke({
    id: `tc_${++n}`,
    name: 'run_tools_with_bash',
    type: 'tool_call',
    args: { code, timeout: 30000, ...extra },
    toolMap,
    toolDefs,
    ...call,
  });
}


await runAll(async () => {
  await scenario('sequential calls', async (posts) => {
    const msg = await run(
      "w=$(get_weather '{\"city\": \"Paris\"}')\nt=$(add \"{\\\"a\\\": 2, \\\"b\\\": 3}\")\necho \"$w\"\necho \"sum=$t\"",
    );
    assert.equal(msg.content, 'stdout:\n{"city":"Paris","temp_c":15,"sky":"sunny"}\nsum=5');
    assert.equal(posts(), 3, 'two dependent calls, two round trips');
    assert.ok(msg.artifact.session_id, 'a session id comes back');
  });

  await scenario('parallel calls with & and wait in one round', async (posts) => {
    weather.max = 0;
    const msg = await run(
      [
        "{ a=$(get_weather '{\"city\": \"A\"}'); printf '%s\\n' \"$a\" > a.json; } &",
        "{ b=$(get_weather '{\"city\": \"BB\"}'); printf '%s\\n' \"$b\" > b.json; } &",
        "{ c=$(get_weather '{\"city\": \"CCC\"}'); printf '%s\\n' \"$c\" > c.json; } &",
        'wait',
        "jq -s -c 'map(.temp_c) | add' a.json b.json c.json",
      ].join('\n'),
    );
    // The three .json files are the session's now: the client lists them after stdout.
    assert.match(msg.content, /^stdout:\n18\n/);
    assert.deepEqual(msg.artifact.files.map((f) => f.name).sort(), ['a.json', 'b.json', 'c.json']);
    assert.equal(posts(), 2, 'one round: the first request and one continuation');
    assert.equal(weather.max, 3, 'the client ran the three calls together');
  });

  await scenario('a hyphenated tool name and jq', async () => {
    const msg = await run("get_weather '{\"city\": \"Oslo\"}' | jq -r '.city + \" \" + .sky'");
    assert.equal(msg.content, 'stdout:\nOslo sunny');
  });

  await scenario('a tool error: stderr and a non-zero status', async () => {
    const msg = await run(
      "if out=$(flaky_service '{}' 2>err.txt); then echo \"unexpected: $out\"; else echo \"status $?: $(cat err.txt)\"; fi",
    );
    assert.match(msg.content, /^stdout:\nstatus 1: flaky_service: flaky_service failed: boom\n/);
  });

  await scenario('a bash syntax error', async () => {
    await assert.rejects(run('echo start\nif then fi'), (e) => {
      assert.match(e.message, /^Bash programmatic execution failed: Code execution failed\./);
      assert.match(e.message, /Stderr:\n[\s\S]*syntax error/);
      return true;
    });
  });

  await scenario('a script that never ends stops at its timeout', async () => {
    const started = Date.now();
    await assert.rejects(run("get_weather '{\"city\": \"X\"}' >/dev/null\nwhile :; do sleep 1; done", { timeout: 3000 }), (e) => {
      assert.match(e.message, /Bash programmatic execution failed/);
      return true;
    });
    assert.ok(Date.now() - started < 20000, 'it stopped near its 3 s timeout');
  });

  await scenario('a file written to /mnt/data comes back, and the session\'s next run reads it', async () => {
    const first = await run("get_weather '{\"city\": \"Lima\"}' > /mnt/data/lima.json\necho saved");
    assert.match(first.content, /^stdout:\nsaved/);
    const files = first.artifact.files;
    assert.deepEqual(files.map((f) => f.name), ['lima.json']);
    assert.match(files[0].id, /^[A-Za-z0-9_-]{21}$/);
    const second = await run('jq -r .city /mnt/data/lima.json', {}, {
      session_id: first.artifact.session_id,
      _injected_files: files,
    });
    assert.equal(second.content, 'stdout:\nLima');
    assert.equal(second.artifact.session_id, first.artifact.session_id);
  });

  await scenario('code without tools goes to /exec', async () => {
    const before = requests('/exec');
    const msg = await run('echo plain; echo $((6 * 7))', { tool_manifest: [] });
    assert.equal(msg.content, 'stdout:\nplain\n42');
    assert.equal(requests('/exec') - before, 1);
  });
});
