#!/usr/bin/env python3
"""Capture a real MCP server's tools/list over stdio with raw line-delimited JSON-RPC."""
import json, os, subprocess, sys, threading, queue, time, argparse, collections

ap = argparse.ArgumentParser()
ap.add_argument('--name', required=True)
ap.add_argument('--registry', required=True)
ap.add_argument('--package', required=True)
ap.add_argument('--version', required=True)
ap.add_argument('--command-shown', required=True)
ap.add_argument('--env', action='append', default=[])
ap.add_argument('--out', required=True)
ap.add_argument('--timeout', type=float, default=60)
ap.add_argument('cmd', nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == '--' else a.cmd
env = dict(os.environ)
given = []
for kv in a.env:
    k, v = kv.split('=', 1); env[k] = v; given.append(k)
p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(a.out + '.stderr', 'wb'), env=env, start_new_session=True)
q = queue.Queue()
def reader():
    for line in p.stdout:
        q.put(line)
    q.put(None)
threading.Thread(target=reader, daemon=True).start()
def send(msg):
    p.stdin.write((json.dumps(msg) + '\n').encode()); p.stdin.flush()
def wait_for(id_):
    deadline = time.time() + a.timeout
    while True:
        left = deadline - time.time()
        if left <= 0: raise SystemExit(f'timeout waiting for id {id_}')
        try: line = q.get(timeout=left)
        except queue.Empty: raise SystemExit(f'timeout waiting for id {id_}')
        if line is None: raise SystemExit(f'server exited (rc={p.poll()}) before id {id_}')
        line = line.strip()
        if not line: continue
        try: msg = json.loads(line, object_pairs_hook=collections.OrderedDict)
        except Exception:
            print('non-JSON stdout line:', line[:200], file=sys.stderr); continue
        if msg.get('id') == id_ and ('result' in msg or 'error' in msg):
            return msg
        # server->client requests (e.g. roots/list): answer with empty result / error
        if 'method' in msg and 'id' in msg:
            if msg['method'] == 'roots/list':
                send({'jsonrpc': '2.0', 'id': msg['id'], 'result': {'roots': []}})
            elif msg['method'] == 'ping':
                send({'jsonrpc': '2.0', 'id': msg['id'], 'result': {}})
            else:
                send({'jsonrpc': '2.0', 'id': msg['id'], 'error': {'code': -32601, 'message': 'not supported'}})
try:
    send({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {
        'protocolVersion': '2025-11-25', 'capabilities': {},
        'clientInfo': {'name': 'ptc-corpus-capture', 'version': '0.1.0'}}})
    init = wait_for(1)
    if 'error' in init: raise SystemExit(f'initialize error: {init["error"]}')
    send({'jsonrpc': '2.0', 'method': 'notifications/initialized'})
    tools, pages, cursor, nid = [], 0, None, 2
    while True:
        params = {} if cursor is None else {'cursor': cursor}
        send({'jsonrpc': '2.0', 'id': nid, 'method': 'tools/list', 'params': params})
        r = wait_for(nid); nid += 1; pages += 1
        if 'error' in r: raise SystemExit(f'tools/list error: {r["error"]}')
        tools.extend(r['result']['tools'])
        cursor = r['result'].get('nextCursor')
        if not cursor: break
finally:
    try: os.killpg(p.pid, 15)
    except Exception: pass
    try: p.wait(5)
    except Exception:
        os.killpg(p.pid, 9)
res = init['result']
doc = collections.OrderedDict()
doc['_corpus'] = collections.OrderedDict([
    ('server', a.name), ('registry', a.registry), ('package', a.package), ('version', a.version),
    ('command', a.command_shown), ('serverInfo', res.get('serverInfo')),
    ('protocolVersion', res.get('protocolVersion')), ('tools_list_pages', pages),
    ('tool_count', len(tools)), ('env_given', given), ('captured', '2026-11-26'),
    ('client', 'raw line-delimited JSON-RPC over stdio (tests/corpus-search capture script, Python 3.11): initialize, notifications/initialized, tools/list following nextCursor; tools copied verbatim from the raw tools/list response lines'),
])
doc['tools'] = tools
with open(a.out, 'w') as f:
    json.dump(doc, f, indent=2, ensure_ascii=False); f.write('\n')
print(a.name, 'tools:', len(tools), 'pages:', pages, 'proto:', res.get('protocolVersion'), 'serverInfo:', res.get('serverInfo'))
