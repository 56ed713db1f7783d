// What drive.mjs and drive-bash.mjs share: the sidecar's address from the command line, a
// counting proxy in front of it (so a scenario can assert how many round trips it took), the
// host tools as LangChain tools with their LCTool definitions, and the scenario runner.

import crypto from 'node:crypto';
import http from 'node:http';
import { tool } from '@librechat/agents';

export const [sidecar, apiKey] = process.argv.slice(2);

// ---- auth: the API key, or a token minted per request the way LibreChat's server does -------
// (packages/api/src/auth/codeapi.ts: {alg, typ: JWT, kid} over iss, aud, sub, iat, nbf, exp,
// jti, tenant_id, role, ...), signed with the private key the test made.
const jwtKey = process.env.PTC_TEST_JWT_PRIVATE_KEY;
let minted = 0;
const b64url = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
function mint() {
  const alg = process.env.PTC_TEST_JWT_ALG;
  const now = Math.floor(Date.now() / 1000);
  const header = { alg, typ: 'JWT', kid: process.env.PTC_TEST_JWT_KID };
  const claims = {
    iss: 'librechat', aud: 'codeapi', sub: 'user-drive', iat: now, nbf: now, exp: now + 300,
    jti: crypto.randomUUID(), tenant_id: 'legacy', role: 'USER', principal_source: 'session',
    auth_context_hash: crypto.createHash('sha256').update('drive').digest('hex').slice(0, 16),
  };
  const input = `${b64url(header)}.${b64url(claims)}`;
  const sig = crypto.sign(alg === 'EdDSA' ? null : 'sha256', Buffer.from(input), jwtKey);
  minted++;
  return `${input}.${sig.toString('base64url')}`;
}
/** What the client's `authHeaders` gets: a function minting per request, or the key. */
export const authHeaders = jwtKey
  ? async () => ({ Authorization: `Bearer ${mint()}` })
  : apiKey ? { 'X-API-Key': apiKey } : {};
/** Every Authorization header the sidecar was sent. */
const seenTokens = [];
if (!sidecar) {
  console.error(`usage: node ${process.argv[1]} http://127.0.0.1:PORT [API_KEY]`);
  process.exit(2);
}

// ---- a counting proxy in front of the sidecar ------------------------------------------------
const counts = new Map();
const target = new URL(sidecar);
const proxy = http.createServer((req, res) => {
  counts.set(req.url, (counts.get(req.url) ?? 0) + 1);
  seenTokens.push({ url: req.url, token: req.headers.authorization });
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
    if (jwtKey) {
      await scenario('every request carried a fresh token', async () => {
        if (seenTokens.length === 0 || seenTokens.some((t) => !t.token?.startsWith('Bearer ey'))) {
          throw new Error(`a request without a token: ${seenTokens.length} requests`);
        }
        // The client's /cancel goes with the token of the request it cancels; every other
        // request resolved authHeaders afresh.
        const own = seenTokens.filter((t) => !t.url.endsWith('/cancel')).map((t) => t.token);
        if (new Set(own).size !== own.length) throw new Error('a token was sent twice');
        if (minted < own.length) throw new Error(`${minted} minted for ${own.length} requests`);
      });
    }
  } catch (e) {
    console.error(`not ok - ${e.stack ?? e}`);
    process.exitCode = 1;
  } finally {
    proxy.close();
  }
}
