"""Peer half of the exec benchmark: runs our workloads against progtc 0.2.0.

Owns one `progtc serve` subprocess (its own process group, loopback, random API key) and
drives it with progtc's own client, `progtc.AsyncProgtcClient`, so that the figures are
what a progtc user gets. Prints exactly one JSON object on stdout; progress goes to stderr
and the server's own output to a temporary log file. It must not leave a process behind:
the server's whole process group (uvicorn, the spawn children of each execution and
multiprocessing's resource tracker) is killed on success, error, Ctrl-C and SIGTERM.

Run it with the venv made by benches/peer/setup-progtc.sh:

    target/bench-venv/bin/python benches/peer/progtc_bench.py [--quick]

The JSON is printed in every case. Exit status: 0 when all workloads ran (a workload that
failed is in `errors`, and its section has an `error` field), 1 when the server could not
be run at all, 2 on bad flags, 130 when interrupted (Ctrl-C or SIGTERM).

Workloads (the same ones the sidecar benchmark runs):
  exec_print    `print(1)` end to end, N times in a row after warm-ups: p50/p99 latency.
  seq_calls     one execution awaiting a no-op host tool K times in a row:
                per-call overhead = median over runs of (total - exec_print p50) / K.
  gather_calls  one execution with G no-op calls under one asyncio.gather:
                calls_per_s = median over runs of G / (total - exec_print p50);
                falls back to a smaller G when progtc fails at the requested one.
  peak_rss_mb   VmHWM of the server at the end, and the largest VmHWM sampled among its
                descendants (the per-execution spawn children and the resource tracker).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import httpx
from progtc import AsyncProgtcClient
from progtc.types import ExecuteCodeSuccess

PROGTC_EXPECTED_VERSION = "0.2.0"

# Generous so that progtc's own 30 s default never cuts a run short; a hang is caught by
# the per-execution guards below instead.
CODE_EXECUTION_TIMEOUT_S = 600.0
# progtc's own default (10 s), kept so that gather failures are the ones a user would see.
DEFAULT_TOOL_CALL_TIMEOUT_S = 10.0
# The server imports fastapi/uvicorn/typer/rich: a few seconds on a cold page cache.
SERVER_START_TIMEOUT_S = 30.0
PING_INTERVAL_S = 0.05
# uvicorn waits for open streams on SIGTERM; past this the group gets SIGKILL.
SERVER_STOP_GRACE_S = 5.0
# A sample every 25 ms catches a `print(1)` child (a few hundred ms of life) several
# times while costing the client well under 1% of a core.
RSS_SAMPLE_INTERVAL_S = 0.025
# Bounds on one execution, so that a hung progtc cannot hang the whole benchmark.
EXEC_GUARD_S = 30.0
SEQ_GUARD_PER_CALL_S = 2.0
GATHER_GUARD_S = 60.0
# After a failed or abandoned execution its child may live on until its tool calls time
# out; the next workload waits for it so that it does not run beside a zombie execution.
CHILD_DRAIN_TIMEOUT_S = 30.0
RUNS_PER_CALL_WORKLOAD = 3
GATHER_FALLBACK_G = 100
LOG_TAIL_CHARS = 2000
# What the figures depend on besides progtc itself (server stack and client stack).
PEER_DEPS = ("fastapi", "starlette", "uvicorn", "anyio", "pydantic", "httpx", "httpx-sse")


@dataclass(frozen=True)
class Params:
    quick: bool
    exec_n: int
    exec_warmup: int
    seq_k: int
    gather_g: int
    runs: int
    tool_call_timeout_s: float


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)

    def error(self, where: str, exc: BaseException | str) -> str:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}".rstrip(": ")
        msg = f"{where}: {text}"
        self.errors.append(msg)
        log(f"error: {msg}")
        return msg


def dep_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def log(msg: str) -> None:
    print(f"progtc_bench: {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> Params:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small N/K/G, for a smoke test")
    p.add_argument("--exec-n", type=int, help="exec_print measured runs (default 30, quick 5)")
    p.add_argument("--seq-k", type=int, help="sequential calls per execution (default 20, quick 5)")
    p.add_argument("--gather-g", type=int, help="calls under one gather (default 1000, quick 100)")
    p.add_argument(
        "--tool-call-timeout",
        type=float,
        default=DEFAULT_TOOL_CALL_TIMEOUT_S,
        help="progtc serve --tool-call-timeout, seconds (default: progtc's own 10)",
    )
    a = p.parse_args(argv)
    quick = a.quick
    params = Params(
        quick=quick,
        exec_n=a.exec_n if a.exec_n is not None else (5 if quick else 30),
        exec_warmup=1 if quick else 3,
        seq_k=a.seq_k if a.seq_k is not None else (5 if quick else 20),
        gather_g=a.gather_g if a.gather_g is not None else (100 if quick else 1000),
        runs=1 if quick else RUNS_PER_CALL_WORKLOAD,
        tool_call_timeout_s=a.tool_call_timeout,
    )
    for name in ("exec_n", "seq_k", "gather_g"):
        if getattr(params, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return params


# ---------------------------------------------------------------- /proc helpers


def read_vm_hwm_kb(pid: int) -> int | None:
    """VmHWM (peak resident set) of a live process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def child_pids(pid: int) -> list[int]:
    """Direct children of every thread of `pid` (progtc forks from pool threads)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    seen: list[int] = []
    stack = child_pids(pid)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.append(c)
        stack.extend(child_pids(c))
    return seen


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendant_kind(pid: int) -> str | None:
    """Kind of a server descendant: execution, resource_tracker, or None before its exec.

    Between fork and exec a child still shows the server's cmdline and memory, so it is
    not counted until it runs its own program (exec also resets VmHWM).
    """
    # multiprocessing's spawn children run `-c "from multiprocessing.spawn import
    # spawn_main; ..." --multiprocessing-fork`; the resource tracker runs
    # `-c "from multiprocessing.resource_tracker import main; ..."`.
    cmd = cmdline(pid)
    if "spawn_main" in cmd:
        return "execution"
    if "resource_tracker" in cmd:
        return "resource_tracker"
    return None


class RssSampler:
    """Samples VmHWM of the server's descendants in a thread (children are short-lived)."""

    def __init__(self, server_pid: int) -> None:
        self._server_pid = server_pid
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._peak_kb: dict[int, int] = {}
        self._kind: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(RSS_SAMPLE_INTERVAL_S)

    def sample(self) -> None:
        for pid in descendants(self._server_pid):
            kind = self._kind.get(pid) or descendant_kind(pid)
            if kind is None:
                continue
            kb = read_vm_hwm_kb(pid)
            if kb is None:
                continue
            with self._lock:
                self._kind[pid] = kind
                self._peak_kb[pid] = max(kb, self._peak_kb.get(pid, 0))

    def summary(self) -> dict[str, object]:
        with self._lock:
            execs = [kb for pid, kb in self._peak_kb.items() if self._kind[pid] == "execution"]
            tracker = [kb for pid, kb in self._peak_kb.items() if self._kind[pid] != "execution"]
        return {
            "children_max": round(max(execs) / 1024, 1) if execs else None,
            "children_median": round(statistics.median(execs) / 1024, 1) if execs else None,
            "children_seen": len(execs),
            "resource_tracker": round(max(tracker) / 1024, 1) if tracker else None,
        }

    def live_execution_children(self) -> list[int]:
        return [
            p for p in descendants(self._server_pid) if descendant_kind(p) in ("execution", None)
        ]


# ---------------------------------------------------------------- the server


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # If this driver is SIGKILLed, the server still gets SIGTERM (Linux PR_SET_PDEATHSIG).
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


class Server:
    """One `progtc serve`, in its own session so that its whole group can be killed."""

    def __init__(self, params: Params) -> None:
        self.api_key = secrets.token_hex(16)
        self.port = free_loopback_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).parent / "progtc"
        if not exe.exists():
            raise RuntimeError(f"{exe} not found: run benches/peer/setup-progtc.sh first")
        # Lives as long as the server (closed and removed in stop()), hence no `with`.
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="progtc-serve-", suffix=".log", delete=False
        )
        self.argv = [
            str(exe),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--code-execution-timeout",
            str(CODE_EXECUTION_TIMEOUT_S),
            "--tool-call-timeout",
            str(params.tool_call_timeout_s),
        ]
        env = dict(os.environ)
        # The key goes through the environment, not argv, so `ps` does not show it.
        env["PROGTC_API_KEY"] = self.api_key
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except BaseException:
            self._remove_log()
            raise
        self.pid = self.proc.pid

    def log_tail(self) -> str:
        try:
            text = Path(self._log.name).read_text(errors="replace")
        except OSError:
            return ""
        return text[-LOG_TAIL_CHARS:]

    def wait_ready(self) -> float:
        t0 = time.monotonic()
        with httpx.Client(timeout=1.0) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"progtc serve exited with {self.proc.returncode} before answering "
                        f"/ping; its output:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if c.get(f"{self.base_url}/ping").status_code == 200:
                        return time.monotonic() - t0
                if time.monotonic() - t0 > SERVER_START_TIMEOUT_S:
                    raise RuntimeError(
                        f"progtc serve did not answer /ping within {SERVER_START_TIMEOUT_S}s; "
                        f"its output:\n{self.log_tail()}"
                    )
                time.sleep(PING_INTERVAL_S)

    def stop(self) -> None:
        """Kill the whole process group: SIGTERM, then SIGKILL after a grace period."""
        pgid = self.pid  # start_new_session: the server leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=SERVER_STOP_GRACE_S)
        # Children (resource tracker, executions) may outlive the leader: always SIGKILL the
        # group, then reap the leader.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=SERVER_STOP_GRACE_S)
        self._remove_log()

    def _remove_log(self) -> None:
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)


# ---------------------------------------------------------------- workloads


async def noop(*_args: object, **_kwargs: object) -> None:
    return None


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile (the ceil(p/100*n)-th smallest sample)."""
    rank = max(1, math.ceil(p / 100 * len(sorted_ms)))
    return sorted_ms[rank - 1]


def r3(x: float) -> float:
    return round(x, 3)


async def execute(
    client: AsyncProgtcClient, code: str, tools: dict, expect_stdout: str, guard_s: float
) -> float:
    """One execution; returns its client-observed wall time in ms, or raises."""
    t0 = time.perf_counter()
    res = await asyncio.wait_for(
        client.execute_code(code, tools, timeout=CODE_EXECUTION_TIMEOUT_S), guard_s
    )
    ms = (time.perf_counter() - t0) * 1000
    if not isinstance(res, ExecuteCodeSuccess):
        raise RuntimeError(f"progtc answered {res.type.value}: stderr={res.stderr[-500:]!r}")
    if res.stdout != expect_stdout:
        raise RuntimeError(f"unexpected stdout {res.stdout[:200]!r}, wanted {expect_stdout!r}")
    return ms


async def drain_children(sampler: RssSampler) -> None:
    """Waits until no execution child is left (after a failure), up to a bound."""
    t0 = time.monotonic()
    while sampler.live_execution_children():
        if time.monotonic() - t0 > CHILD_DRAIN_TIMEOUT_S:
            log("execution children still alive after a failure; going on anyway")
            return
        await asyncio.sleep(0.1)


async def workload_exec_print(client: AsyncProgtcClient, params: Params) -> dict[str, object]:
    out: dict[str, object] = {"n": params.exec_n, "warmup": params.exec_warmup}
    for _ in range(params.exec_warmup):
        await execute(client, "print(1)", {}, "1\n", EXEC_GUARD_S)
    samples = [
        await execute(client, "print(1)", {}, "1\n", EXEC_GUARD_S) for _ in range(params.exec_n)
    ]
    s = sorted(samples)
    out.update(
        p50_ms=r3(percentile(s, 50)),
        p99_ms=r3(percentile(s, 99)),
        mean_ms=r3(statistics.fmean(s)),
        min_ms=r3(s[0]),
        max_ms=r3(s[-1]),
        samples_ms=[r3(x) for x in samples],
    )
    return out


def seq_code(k: int) -> str:
    return f"from tools import noop\nfor _ in range({k}):\n    await noop()\nprint({k})\n"


def gather_code(g: int) -> str:
    return (
        "import asyncio\nfrom tools import noop\n"
        f"r = await asyncio.gather(*(noop() for _ in range({g})))\nprint(len(r))\n"
    )


async def workload_seq_calls(
    client: AsyncProgtcClient, params: Params, empty_ms: float | None
) -> dict[str, object]:
    k = params.seq_k
    guard = EXEC_GUARD_S + k * SEQ_GUARD_PER_CALL_S
    totals = [
        await execute(client, seq_code(k), {"noop": noop}, f"{k}\n", guard)
        for _ in range(params.runs)
    ]
    out: dict[str, object] = {
        "k": k,
        "runs": params.runs,
        "empty_exec_ms": empty_ms,
        "totals_ms": [r3(t) for t in totals],
        "total_per_call_ms": r3(statistics.median(totals) / k),
    }
    if empty_ms is not None:
        per_call = [(t - empty_ms) / k for t in totals]
        out["per_call_ms"] = [r3(x) for x in per_call]
        out["per_call_overhead_ms"] = r3(statistics.median(per_call))
    return out


async def gather_once_set(
    client: AsyncProgtcClient, g: int, runs: int, empty_ms: float | None
) -> dict[str, object]:
    totals = [
        await execute(client, gather_code(g), {"noop": noop}, f"{g}\n", GATHER_GUARD_S)
        for _ in range(runs)
    ]
    out: dict[str, object] = {"g": g, "runs": runs, "totals_ms": [r3(t) for t in totals]}
    if empty_ms is not None:
        rates = [g / ((t - empty_ms) / 1000) if t > empty_ms else None for t in totals]
        out["calls_per_s_runs"] = [None if x is None else round(x, 1) for x in rates]
        ok = [x for x in rates if x is not None]
        out["calls_per_s"] = round(statistics.median(ok), 1) if ok else None
    out["calls_per_s_incl_exec"] = round(g / (statistics.median(totals) / 1000), 1)
    return out


async def workload_gather_calls(
    client: AsyncProgtcClient,
    params: Params,
    empty_ms: float | None,
    report: Report,
    sampler: RssSampler,
) -> dict[str, object]:
    sizes = [params.gather_g]
    if params.gather_g > GATHER_FALLBACK_G:
        sizes.append(GATHER_FALLBACK_G)
    attempts: list[dict[str, object]] = []
    for g in sizes:
        try:
            res = await gather_once_set(client, g, params.runs, empty_ms)
        except Exception as exc:  # noqa: BLE001 (recorded, then the smaller G is tried)
            msg = report.error(f"gather_calls g={g}", exc)
            attempts.append({"g": g, "ok": False, "error": msg})
            await drain_children(sampler)
            continue
        return {**res, "requested_g": params.gather_g, "attempts": attempts}
    return {"requested_g": params.gather_g, "g": None, "calls_per_s": None, "attempts": attempts}


# ---------------------------------------------------------------- main


async def run_workloads(
    server: Server, params: Params, report: Report, sampler: RssSampler
) -> dict[str, object]:
    # progtc's client leaves its SSE reader task orphaned when execute_code is cancelled
    # (guard timeout, Ctrl-C); log one line for it instead of asyncio's full traceback.
    def on_loop_error(_loop: asyncio.AbstractEventLoop, ctx: dict[str, object]) -> None:
        log(f"asyncio: {ctx.get('message')}: {ctx.get('exception')!r}")

    asyncio.get_running_loop().set_exception_handler(on_loop_error)
    client = AsyncProgtcClient(server.base_url, server.api_key)
    out: dict[str, object] = {}
    empty_ms: float | None = None

    log(f"exec_print: {params.exec_warmup} warm-up + {params.exec_n} runs")
    try:
        ep = await workload_exec_print(client, params)
        empty_ms = ep["p50_ms"]  # type: ignore[assignment]
        out["exec_print"] = ep
        log(f"exec_print: p50 {ep['p50_ms']} ms, p99 {ep['p99_ms']} ms")
    except Exception as exc:  # noqa: BLE001
        out["exec_print"] = {"error": report.error("exec_print", exc)}
        await drain_children(sampler)

    log(f"seq_calls: {params.runs} x {params.seq_k} sequential calls")
    try:
        sc = await workload_seq_calls(client, params, empty_ms)
        out["seq_calls"] = sc
        log(f"seq_calls: per-call {sc.get('per_call_overhead_ms')} ms, totals {sc['totals_ms']}")
    except Exception as exc:  # noqa: BLE001
        out["seq_calls"] = {"k": params.seq_k, "error": report.error("seq_calls", exc)}
        await drain_children(sampler)

    log(f"gather_calls: {params.runs} x gather of {params.gather_g}")
    gc = await workload_gather_calls(client, params, empty_ms, report, sampler)
    out["gather_calls"] = gc
    log(f"gather_calls: g={gc.get('g')} {gc.get('calls_per_s')} calls/s")
    return out


def main(argv: list[str] | None = None) -> int:
    params = parse_args(argv)
    report = Report()
    t_start = time.monotonic()
    result: dict[str, object] = {
        "peer": "progtc",
        "progtc_version": metadata.version("progtc"),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        # progtc 0.2.0 pins none of these exactly, so a later install may resolve others.
        "deps": {d: dep_version(d) for d in PEER_DEPS},
        "cpu_count": os.cpu_count(),
        # The machine may be shared: a high load average explains noisy figures.
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "params": {
            "quick": params.quick,
            "exec_n": params.exec_n,
            "exec_warmup": params.exec_warmup,
            "seq_k": params.seq_k,
            "gather_g": params.gather_g,
            "gather_fallback_g": GATHER_FALLBACK_G,
            "runs": params.runs,
            "tool_call_timeout_s": params.tool_call_timeout_s,
            "code_execution_timeout_s": CODE_EXECUTION_TIMEOUT_S,
            "rss_sample_interval_ms": RSS_SAMPLE_INTERVAL_S * 1000,
            "percentile_method": "nearest-rank",
        },
    }
    if result["progtc_version"] != PROGTC_EXPECTED_VERSION:
        report.error(
            "setup",
            f"progtc {result['progtc_version']} installed, {PROGTC_EXPECTED_VERSION} wanted",
        )

    # SIGTERM (e.g. from the Rust benchmark) unwinds like Ctrl-C, so `finally` kills the server.
    def on_sigterm(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)

    server: Server | None = None
    sampler: RssSampler | None = None
    interrupted = False
    fatal = False
    try:
        server = Server(params)
        log(f"started progtc serve pid {server.pid} on {server.base_url}")
        result["server_ready_s"] = r3(server.wait_ready())
        sampler = RssSampler(server.pid)
        sampler.start()
        result.update(asyncio.run(run_workloads(server, params, report, sampler)))
    except KeyboardInterrupt:
        interrupted = True
        report.error("driver", "interrupted")
    except Exception as exc:  # noqa: BLE001 (reported in the JSON)
        fatal = True
        report.error("driver", exc)
        log(traceback.format_exc())
    finally:
        # Ctrl-C during the cleanup itself must not skip the kill.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        rss: dict[str, object] = {}
        if server is not None:
            kb = read_vm_hwm_kb(server.pid)
            rss["server"] = round(kb / 1024, 1) if kb is not None else None
        if sampler is not None:
            sampler.stop()
            sampler.sample()
            rss.update(sampler.summary())
        result["peak_rss_mb"] = rss
        if server is not None:
            if server.proc.poll() is not None and not interrupted:
                fatal = True
                report.error(
                    "server",
                    f"progtc serve exited early with {server.proc.returncode}: "
                    f"{server.log_tail()[-500:]}",
                )
            server.stop()
            log("stopped progtc serve")
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = r3(time.monotonic() - t_start)
    result["errors"] = report.errors
    print(json.dumps(result, indent=2))
    sys.stdout.flush()
    if interrupted:
        return 130
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
