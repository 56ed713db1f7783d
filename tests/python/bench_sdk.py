"""Measures the SDK's start-up and per-call costs (not a test; unittest does not collect it).

    python3 tests/python/bench_sdk.py [--tools 100] [--rounds 15]

- start-up: `python -I -u -B SDK_DIR/ptc_bootstrap.py` with a catalog of N tools (real MCP
  schemas from tests/corpus, repeated), from spawn to the child blocking in read(0) (seen in
  /proc/PID/syscall), next to a bare `python -I -c pass` and `python -I -c "import asyncio, json,
  re"`, the floor that the SDK cannot go under;
- calls: 1,000 sequential no-op calls and 1,000 under one asyncio.gather, against a minimal
  HTTP/1.1 server in its own process that answers from a canned response (a fast server, so the
  figures are mostly the SDK's), with the child's CPU time per call as "Python side".
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sdk_runner import REPO, SdkDirs, child_env, command  # noqa: E402

FAST_SERVER = r"""
import asyncio, sys
BODY = b'{"ok":true,"result":null}'
RESP = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s'
        % (len(BODY), BODY))
class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t; self.buf = b''
    def data_received(self, data):
        self.buf += data
        while True:
            i = self.buf.find(b'\r\n\r\n')
            if i < 0: return
            j = self.buf.find(b'Content-Length: ', 0, i)
            n = int(self.buf[j + 16:self.buf.find(b'\r\n', j)])
            if len(self.buf) < i + 4 + n: return
            self.buf = self.buf[i + 4 + n:]
            self.t.write(RESP)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, '127.0.0.1', 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""

CALLS_CODE = r"""
import time
for _ in range(200):
    await noop()
w, c = time.perf_counter(), time.process_time()
for _ in range(1000):
    await noop()
seq_wall, seq_cpu = time.perf_counter() - w, time.process_time() - c
w, c = time.perf_counter(), time.process_time()
await asyncio.gather(*[noop() for _ in range(1000)])
par_wall, par_cpu = time.perf_counter() - w, time.process_time() - c
print(json.dumps([seq_wall, seq_cpu, par_wall, par_cpu]))
"""


def corpus_catalog(n):
    tools = []
    for path in sorted(glob.glob(os.path.join(REPO, "tests", "corpus", "*.json"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        server = data.get("_corpus", {}).get("server", "s")
        for t in data.get("tools", []):
            tools.append((server, t))
    catalog = []
    i = 0
    while len(catalog) < n:
        server, t = tools[i % len(tools)]
        suffix = "" if i < len(tools) else "_%d" % (i // len(tools))
        name = "%s__%s%s" % (server, t["name"], suffix)
        python_name = name.replace("-", "_")
        catalog.append({
            "name": name,
            "python_name": python_name,
            "signature": "%s(...) — %s" % (python_name, (t.get("description") or "")[:40]),
            "description": t.get("description") or "",
            "input_schema": t.get("inputSchema") or {"type": "object"},
            "output_schema": t.get("outputSchema"),
        })
        i += 1
    catalog.append({"name": "noop", "python_name": "noop", "signature": "noop()",
                    "description": "", "input_schema": {"type": "object"},
                    "output_schema": None})
    return catalog


def blocked_in_stdin_read(pid):
    try:
        with open("/proc/%d/syscall" % pid) as f:
            fields = f.read().split()
    except OSError:
        return False
    # x86_64 read is syscall 0; aarch64 is 63. The first argument is the fd.
    return len(fields) > 1 and fields[0] in ("0", "63") and int(fields[1], 16) == 0


def time_to_ready(cmd, env, cwd):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    try:
        while not blocked_in_stdin_read(proc.pid):
            if proc.poll() is not None:
                raise RuntimeError("child exited before reading stdin")
            time.sleep(0.0002)
        return time.perf_counter() - start
    finally:
        proc.stdin.close()
        proc.wait()


def time_to_exit(cmd, env, cwd, job=b""):
    """`(wall, cpu)` seconds of a whole run, cpu being the child's user + system time (less
    sensitive than wall time to other load on the machine)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    proc.stdin.write(job)
    proc.stdin.close()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def summary(samples):
    if isinstance(samples[0], tuple):
        wall = summary([s[0] for s in samples])
        cpu = sorted(s[1] * 1000 for s in samples)
        return "%s  cpu min %.1f ms median %.1f ms" % (wall, cpu[0], statistics.median(cpu))
    ms = sorted(s * 1000 for s in samples)
    return "wall min %.1f ms median %.1f ms" % (ms[0], statistics.median(ms))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=15)
    opts = parser.parse_args()

    dirs = SdkDirs()
    try:
        catalog = corpus_catalog(opts.tools)
        sdk_dir = dirs.sdk_dir(json.dumps({"version": 1, "tools": catalog}))
        scratch = tempfile.mkdtemp(dir=dirs.root)
        env = child_env(scratch)
        py = [sys.executable, "-I", "-u", "-B"]
        print("python:", sys.executable, sys.version.split()[0])
        print("catalog: %d tools, %d bytes" % (
            len(catalog), os.path.getsize(os.path.join(sdk_dir, "catalog.json"))))
        rows = [
            ("python -I -c pass (exit)", lambda: time_to_exit(py + ["-c", "pass"], env, scratch)),
            ("python -I -c 'import asyncio, json, re' (exit)",
             lambda: time_to_exit(py + ["-c", "import asyncio, json, re"], env, scratch)),
            ("python -I -c 'import asyncio, json, re; read(0)' (ready)",
             lambda: time_to_ready(
                 py + ["-c", "import asyncio, json, re, sys; sys.stdin.buffer.read()"],
                 env, scratch)),
            ("ptc_bootstrap.py (ready: blocked reading the job)",
             lambda: time_to_ready(command(sdk_dir), env, scratch)),
            ("ptc_bootstrap.py, job 'pass' (exit)",
             lambda: time_to_exit(command(sdk_dir), env, scratch,
                                  json.dumps({"code": "pass", "ipc": "127.0.0.1:1",
                                              "token": "t", "call_timeout": 5}).encode())),
        ]
        samples = {label: [] for label, _ in rows}
        for _, fn in rows:
            fn()  # warm the page cache
        # Interleaved, so that a burst of other load on the machine hits every row alike.
        for _ in range(opts.rounds):
            for label, fn in rows:
                samples[label].append(fn())
        for label, _ in rows:
            print("%-58s %s" % (label, summary(samples[label])))

        server = subprocess.Popen([sys.executable, "-c", FAST_SERVER], stdout=subprocess.PIPE)
        try:
            port = int(server.stdout.readline())
            job = json.dumps({"code": CALLS_CODE, "ipc": "127.0.0.1:%d" % port, "token": "t",
                              "call_timeout": 30}).encode()
            results = []
            for _ in range(5):
                out = subprocess.run(command(sdk_dir), input=job, stdout=subprocess.PIPE,
                                     env=env, cwd=scratch, check=True, timeout=60).stdout
                results.append(json.loads(out))
            best = [min(r[i] for r in results) for i in range(4)]
            print("1000 sequential calls: wall %.1f us/call, child CPU %.1f us/call" % (
                best[0] * 1000, best[1] * 1000))
            print("1000 calls under gather: %.0f calls/s wall, child CPU %.1f us/call" % (
                1000 / best[2], best[3] * 1000))
        finally:
            server.kill()
            server.wait()
    finally:
        dirs.cleanup()


if __name__ == "__main__":
    main()
