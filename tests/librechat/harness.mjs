// What drive.mjs and drive-bash.mjs share: the sidecar's address from the command line, a
// counting proxy in front of it (so a scenario can assert how many round trips it took), the
// host tools as LangChain tools with their LCTool definitions, and the scenario runner.

import http from 'node:http';
import { tool } from '@librechat/agents';

export const [sidecar, apiKey] = process.argv.slice(2);
if (!sidecar) {
  console.error(`usage: node ${process.argv[1]} http://127.0.0.1:PORT [API_KEY]`);
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
export const baseUrl = `http://127.0.0.1:${proxy.address().port}`;
export const requests = (path) => counts.get(path) ?? 0;

// ---- host tools, as LangChain tools plus their LCTool definitions ----------------------------
/** Calls of `get-weather` in flight now, and the most at once (a scenario resets `max`). */
export const weather = { inFlight: 0, max: 0 };
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const defs = [
  {
    name: 'get-weather',
    description: 'Weather for a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    allowed_callers: ['code_execution'],
    fn: async ({ city }) => {
      weather.inFlight++;
      weather.max = Math.max(weather.max, weather.inFlight);
      await sleep(50);
      weather.inFlight--;
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
export const toolMap = new Map(
  defs.map((d) => [d.name, tool(d.fn, { name: d.name, description: d.description, schema: d.parameters })]),
);
export const toolDefs = defs.map(({ fn, ...def }) => def);

/** Runs one scenario; `body` gets a function counting the `/exec/programmatic` posts since. */
export async function scenario(name, body) {
  const before = requests('/exec/programmatic');
  await body(() => requests('/exec/programmatic') - before);
  console.log(`ok - ${name}`);
}

/** Runs the scenarios; the first failure is printed and makes the exit code non-zero. */
export async function runAll(scenarios) {
  try {
    await scenarios();
  } catch (e) {
    console.error(`not ok - ${e.stack ?? e}`);
    process.exitCode = 1;
  } finally {
    proxy.close();
  }
}
