"""Tests of the Python SDK (sdk-template/) through the real bootstrap, as the sidecar runs it.

Each test runs `python -I -u -B SDK_DIR/ptc_bootstrap.py` as a subprocess with a catalog.json
written here and a job on stdin, against ipc_harness.IpcServer standing in for the sidecar's IPC
server, and checks stdout, stderr, the exit code and what the harness received.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ipc_harness import IpcServer  # noqa: E402
from sdk_runner import SdkDirs, child_env, command, run_child, tool  # noqa: E402

WEATHER = tool(
    "get-weather", "get_weather",
    {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "units": {"enum": ["c", "f"], "default": "c", "description": "Temperature\n   units"},
        "days": {"type": "integer", "description": "Forecast days"},
    },
    required=["city"],
    additionalProperties=False,
    description="Get the weather.\n\nReturns the current weather and a forecast.",
    signature="get_weather(city, units?: Literal['c', 'f'] = 'c', days?: int) — Get the weather.",
    output_schema={"type": "object", "properties": {"temp": {"type": "number"}}},
)
ISSUES = tool(
    "github__list_issues", "github__list_issues",
    {"owner": {"type": "string"}, "repo": {"type": "string"},
     "state": {"enum": ["open", "closed"], "default": "open"}},
    required=["owner", "repo"],
    additionalProperties=False,
    signature="github__list_issues(owner, repo, state?: Literal['open', 'closed'] = 'open')",
)
# Required first (stable), so: query, x-api-key, limit, from.
WEIRD = tool(
    "weird-params", "weird_params",
    {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10},
     "x-api-key": {"type": "string"}, "from": {"type": "string"}},
    required=["x-api-key", "query"],
    additionalProperties=False,
)
CATALOG = [
    WEATHER,
    ISSUES,
    WEIRD,
    tool("my tool.v2", "my_toolv2", {"a": {"type": "integer"}}, required=["a"]),
    tool("open-extra", "open_extra", {"a": {"type": "string"}}, additionalProperties=True),
    tool("echo", "echo"),
    tool("noop", "noop"),
    tool("sleep", "sleep"),
    tool("fail", "fail"),
    tool("status", "status"),
    tool("chunked", "chunked"),
    tool("close-after", "close_after"),
    tool("close-later", "close_later"),
    tool("reset-later", "reset_later"),
    tool("drop", "drop"),
    tool("hang", "hang"),
]
STUB_NAMES = sorted(t["python_name"] for t in CATALOG)

# Bounds each test: a run that should be quick and is not has failed.
TEST_TIMEOUT_SECONDS = 30


def strip_carets(text):
    """Tracebacks without the `^^^^` lines, which differ between Python versions."""
    return "".join(
        line for line in text.splitlines(True)
        if not (line.strip() and set(line.strip()) <= set("^~"))
    )


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dirs = SdkDirs()

    @classmethod
    def tearDownClass(cls):
        cls.dirs.cleanup()

    def setUp(self):
        self.server = IpcServer(token="tok-123")
        self.server.__enter__()
        self.started = time.monotonic()

    def tearDown(self):
        self.server.__exit__(None, None, None)
        self.assertLess(time.monotonic() - self.started, TEST_TIMEOUT_SECONDS)

    maxDiff = None

    def run_code(self, code, catalog=CATALOG, timeout=TEST_TIMEOUT_SECONDS, **job):
        full_job = {"code": textwrap.dedent(code), "ipc": self.server.address,
                    "token": self.server.token, "call_timeout": 10.0}
        full_job.update(job)
        return run_child(self.dirs, catalog, full_job, timeout=timeout)

    def assert_run(self, code, stdout="", stderr="", exit_code=0, **job):
        rc, out, err = self.run_code(code, **job)
        self.assertEqual((rc, out, err), (exit_code, stdout, stderr))

    # -----------------------------------------------------------------------------------------
    # The exit table of runner-protocol.md

    def test_exit_finished(self):
        self.assert_run("print('hello')\nprint(1 + 1)", stdout="hello\n2\n")

    def test_exit_syntax_error(self):
        source = "x = 1\nif x >:\n    pass\n"
        try:
            compile(source, "<code>", "exec")
        except SyntaxError as e:
            expected = "".join(traceback.format_exception_only(SyntaxError, e))
        rc, out, err = self.run_code(source)
        self.assertEqual((rc, out, err), (1, "", expected))
        self.assertTrue(err.startswith('  File "<code>", line 2\n'), err)
        self.assertIn("SyntaxError: ", err)

    def test_exit_uncaught_exception(self):
        rc, out, err = self.run_code("""
            print("before")
            def f():
                raise ValueError("boom")
            f()
        """)
        self.assertEqual((rc, out), (1, "before\n"))
        self.assertEqual(strip_carets(err), (
            "Traceback (most recent call last):\n"
            '  File "<code>", line 5, in <module>\n'
            "    f()\n"
            '  File "<code>", line 4, in f\n'
            '    raise ValueError("boom")\n'
            "ValueError: boom\n"
        ))

    def test_exit_sys_exit_n(self):
        self.assert_run("print('x')\nimport sys\nsys.exit(3)", stdout="x\n", exit_code=3)

    def test_exit_sys_exit_none_is_zero(self):
        self.assert_run("import sys\nsys.exit()", exit_code=0)

    def test_exit_sys_exit_message(self):
        self.assert_run("import sys\nsys.exit('bye now')", stderr="bye now\n", exit_code=1)

    def test_exit_sys_exit_in_top_level_await_code(self):
        self.assert_run("""
            import sys
            r = await noop()
            sys.exit(4)
        """, exit_code=4)

    def test_exit_os_exit(self):
        self.assert_run("import os\nprint('kept')\nos._exit(7)", stdout="kept\n", exit_code=7)

    def test_exit_keyboard_interrupt(self):
        rc, out, err = self.run_code("raise KeyboardInterrupt")
        self.assertEqual((rc, out), (130, ""))
        self.assertEqual(strip_carets(err), (
            "Traceback (most recent call last):\n"
            '  File "<code>", line 1, in <module>\n'
            "    raise KeyboardInterrupt\n"
            "KeyboardInterrupt\n"
        ))

    def test_exit_sigint_during_top_level_await(self):
        if sys.version_info >= (3, 11):
            # asyncio.run's SIGINT handler cancels the code, then raises KeyboardInterrupt.
            expected = "KeyboardInterrupt\n"
        else:
            # The default handler raises where the code is.
            expected = ("Traceback (most recent call last):\n"
                        '  File "<code>", line 4, in <module>\n'
                        "    os.kill(os.getpid(), signal.SIGINT)\n"
                        "KeyboardInterrupt\n")
        self.assert_run("""
            import os, signal
            await asyncio.sleep(0)
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(5)
            print('not reached')
        """, stderr=expected, exit_code=130)

    def test_exit_never_awaited_keeps_exit_code(self):
        self.assert_run(
            "get_weather('Paris')\nprint('done')",
            stdout="done\n",
            stderr="hint: get_weather(...) was never awaited; use await get_weather(...)\n",
        )
        self.assertEqual(self.server.requests, [])

    # -----------------------------------------------------------------------------------------
    # Running code

    def test_globals_are_exactly_the_protocols(self):
        self.assert_run(
            "print(sorted(globals()))\nprint(__name__)",
            stdout="%s\n__main__\n" % sorted(
                ["__name__", "__builtins__", "tools", "call_tool", "describe", "search_tools", "save_file",
                 "ToolError",
                 "ToolInputError", "ToolDenied", "asyncio", "json", "re"] + STUB_NAMES),
        )

    def test_top_level_await(self):
        self.assert_run(
            "r = await get_weather('Paris')\nprint(json.dumps(r, sort_keys=True))",
            stdout='{"args": {"city": "Paris", "units": "c"}, "tool": "get-weather"}\n',
        )
        self.assertEqual(self.server.calls(),
                         [{"tool": "get-weather", "args": {"city": "Paris", "units": "c"}}])
        headers = self.server.requests[0]["headers"]
        self.assertEqual(
            (headers["authorization"], headers["content-type"], headers["host"]),
            ("Bearer tok-123", "application/json", self.server.address),
        )

    def test_asyncio_run_without_top_level_await(self):
        self.assert_run("""
            async def main():
                return await echo(x=1)
            print(asyncio.run(main()))
        """, stdout="{'tool': 'echo', 'args': {'x': 1}}\n")

    def test_asyncio_run_inside_top_level_await_gets_a_hint(self):
        rc, out, err = self.run_code("""
            await noop()
            async def main():
                pass
            asyncio.run(main())
        """)
        self.assertEqual(rc, 1)
        self.assertEqual(
            err.splitlines()[-1],
            "hint: the code already runs in an event loop; "
            "use await main() instead of asyncio.run(main())",
        )

    def test_stdin_is_dev_null(self):
        self.assert_run("import os, sys\nprint(repr(sys.stdin.read()), os.read(0, 10))",
                        stdout="'' b''\n")

    def test_user_classes_live_in_main(self):
        self.assert_run("""
            import dataclasses, pickle, sys
            @dataclasses.dataclass
            class P:
                x: int
            print(pickle.loads(pickle.dumps(P(3))), sys.modules['__main__'].P is P)
        """, stdout="P(x=3) True\n")

    def test_import_tools_and_from_tools_import(self):
        self.assert_run("""
            import tools
            from tools import get_weather as g, noop
            print(tools.get_weather is get_weather, g is get_weather, noop is tools.noop)
            print(tools.__all__ == sorted(tools.__all__), len(tools.__all__))
            r = await tools.get_weather('Oslo', units='f')
            print(r['args'])
        """, stdout="True True True\nTrue %d\n{'city': 'Oslo', 'units': 'f'}\n" % len(CATALOG))

    def test_tools_module_unknown_attribute_suggests(self):
        rc, out, err = self.run_code("import tools\ntools.list_issues")
        self.assertEqual(rc, 1)
        self.assertEqual(
            err.splitlines()[-1],
            "AttributeError: module 'tools' has no attribute 'list_issues'; "
            "did you mean github__list_issues?",
        )

    def test_catalog_loaded_before_stdin_is_read(self):
        # A broken catalog makes the child exit while stdin is still open: the catalog and the
        # stubs are done before the job is read.
        sdk_dir = self.dirs.sdk_dir("{not json")
        proc = subprocess.Popen(command(sdk_dir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=child_env(self.dirs.root),
                                cwd=self.dirs.root)
        try:
            rc = proc.wait(timeout=TEST_TIMEOUT_SECONDS)
            err = proc.stderr.read().decode()
        finally:
            proc.kill()
            proc.stdin.close()
            proc.stdout.close()
            proc.stderr.close()
        self.assertEqual(rc, 2)
        self.assertTrue(err.startswith("ptc: cannot load the tool catalog: "), err)

    def test_empty_stdin_exits_quietly(self):
        rc, out, err = run_child(self.dirs, CATALOG, b"")
        self.assertEqual((rc, out, err), (0, "", ""))

    def test_malformed_job(self):
        rc, out, err = run_child(self.dirs, CATALOG, b'{"nocode": 1}')
        self.assertEqual((rc, out, err),
                         (2, "", 'ptc: the job on stdin is not {"code": str, ...}\n'))

    # -----------------------------------------------------------------------------------------
    # Calls: concurrency and the connection pool

    def test_gather_overlaps(self):
        rc, out, err = self.run_code("""
            import time
            t = time.perf_counter()
            r = await asyncio.gather(*[sleep(seconds=0.1, value=i) for i in range(100)])
            print(round(time.perf_counter() - t, 3))
            print(r == list(range(100)))
        """)
        self.assertEqual((rc, err), (0, ""))
        elapsed, same = out.split()
        self.assertEqual(same, "True")
        self.assertLess(float(elapsed), 1.0)
        self.assertEqual(len(self.server.requests), 100)
        self.assertLessEqual(self.server.connections, 64)

    def test_sequential_calls_reuse_one_connection(self):
        self.assert_run("""
            for i in range(200):
                assert await noop() is None
            print('ok')
        """, stdout="ok\n")
        self.assertEqual((self.server.connections, len(self.server.requests)), (1, 200))

    def test_gather_of_many_calls_uses_at_most_64_connections(self):
        self.assert_run("""
            r = await asyncio.gather(*[echo(i=i) for i in range(500)])
            print([x['args']['i'] for x in r] == list(range(500)))
        """, stdout="True\n")
        self.assertEqual(len(self.server.requests), 500)
        self.assertLessEqual(self.server.connections, 64)
        self.assertGreater(self.server.connections, 1)

    def test_create_task_and_wait_for(self):
        self.assert_run("""
            t = asyncio.create_task(echo(a=1))
            r = await asyncio.wait_for(echo(b=2), 5)
            print((await t)['args'], r['args'])
        """, stdout="{'a': 1} {'b': 2}\n")

    def test_performance_sequential_and_gather(self):
        # Generous bounds for a loaded machine; tests/python/bench_sdk.py measures precisely.
        rc, out, err = self.run_code("""
            import time
            for _ in range(50):
                await noop()
            t = time.perf_counter()
            for _ in range(1000):
                await noop()
            seq = time.perf_counter() - t
            t = time.perf_counter()
            await asyncio.gather(*[noop() for _ in range(1000)])
            par = time.perf_counter() - t
            print(seq, par)
        """)
        self.assertEqual((rc, err), (0, ""))
        seq, par = map(float, out.split())
        self.assertLess(seq, 2.0, "1000 sequential calls")
        self.assertLess(par, 1.0, "1000 calls under gather")

    # -----------------------------------------------------------------------------------------
    # Errors

    def test_tool_error_type_and_message(self):
        self.assert_run("""
            try:
                await fail(type='tool', message='disk full')
            except ToolError as e:
                print(type(e).__name__, e.type, str(e), isinstance(e, ToolInputError))
            try:
                await fail(type='input', message="'city' is a required property")
            except ToolError as e:
                print(type(e).__name__, e.type, str(e), isinstance(e, ToolInputError))
            try:
                await fail(type='limit', message='too many calls')
            except ToolError as e:
                print(type(e).__name__, e.type, str(e))
            try:
                await fail(type='denied', message='a person denied this call: no')
            except ToolDenied as e:
                print(type(e).__name__, e.type, str(e), isinstance(e, ToolError))
        """, stdout=(
            "ToolError tool disk full False\n"
            "ToolInputError input 'city' is a required property True\n"
            "ToolError limit too many calls\n"
            "ToolDenied denied a person denied this call: no True\n"
        ))

    def test_uncaught_tool_error_traceback_is_trimmed(self):
        rc, out, err = self.run_code("""
            async def go():
                return await asyncio.gather(noop(), fail(message='no such repo'))
            await go()
        """)
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(strip_carets(err), (
            "Traceback (most recent call last):\n"
            '  File "<code>", line 4, in <module>\n'
            "    await go()\n"
            '  File "<code>", line 3, in go\n'
            "    return await asyncio.gather(noop(), fail(message='no such repo'))\n"
            "ToolError: no such repo\n"
        ))

    def test_chained_exception_traceback_is_trimmed(self):
        rc, out, err = self.run_code("""
            try:
                await fail(message='down')
            except ToolError as e:
                raise RuntimeError('wrapped') from e
        """)
        self.assertEqual(rc, 1)
        self.assertEqual(strip_carets(err), (
            "Traceback (most recent call last):\n"
            '  File "<code>", line 3, in <module>\n'
            "    await fail(message='down')\n"
            "ToolError: down\n"
            "\n"
            "The above exception was the direct cause of the following exception:\n"
            "\n"
            "Traceback (most recent call last):\n"
            '  File "<code>", line 5, in <module>\n'
            "    raise RuntimeError('wrapped') from e\n"
            "RuntimeError: wrapped\n"
        ))

    def test_non_200_status_raises_tool_error_with_body_message(self):
        self.assert_run("""
            try:
                await status(status=413, type='too_large', message='body over 1 MiB')
            except ToolError as e:
                print(type(e).__name__, e.type, str(e))
        """, stdout="ToolError too_large body over 1 MiB\n")

    def test_wrong_token_gets_401_tool_error(self):
        self.assert_run("""
            try:
                await noop()
            except ToolError as e:
                print(type(e).__name__, e.type, str(e))
        """, stdout="ToolError unauthorized missing or wrong run token\n", token="wrong")
        self.assertEqual(self.server.requests[0]["headers"]["authorization"], "Bearer wrong")

    def test_connection_broken_after_send_is_not_retried(self):
        self.assert_run("""
            try:
                await drop()
            except ToolError as e:
                print(e.type, str(e))
            print(await echo(after=1))
        """, stdout=(
            "ipc the connection to the sidecar broke during a call to drop: IncompleteReadError\n"
            "{'tool': 'echo', 'args': {'after': 1}}\n"
        ))
        self.assertEqual([c["tool"] for c in self.server.calls()], ["drop", "echo"])
        self.assertEqual(self.server.connections, 2)

    def test_client_timeout(self):
        self.assert_run("""
            import time
            t = time.perf_counter()
            try:
                await hang()
            except ToolError as e:
                print(e.type, str(e))
            print(0.4 < time.perf_counter() - t < 3)
            print(await echo(n=1))
        """, stdout=(
            "timeout no answer from the sidecar within 0.5s\n"
            "True\n"
            "{'tool': 'echo', 'args': {'n': 1}}\n"
        ), call_timeout=0.5)

    def test_unreachable_sidecar(self):
        self.assert_run("""
            try:
                await noop()
            except ToolError as e:
                print(e.type, str(e))
        """, stdout="ipc cannot connect to the sidecar at 127.0.0.1:1: ConnectionRefusedError: "
                   "[Errno 111] Connect call failed ('127.0.0.1', 1)\n",
            ipc="127.0.0.1:1")

    def test_chunked_answer(self):
        self.assert_run("""
            print(await chunked(value={'a': [1, 2, 3], 'b': 'x' * 40}))
            print(await chunked(value=2))
        """, stdout="{'a': [1, 2, 3], 'b': '%s'}\n2\n" % ("x" * 40))
        self.assertEqual(self.server.connections, 1)

    def test_large_arguments_and_result(self):
        # Far over the reader's 64 KiB limit, which only bounds the response head.
        self.assert_run("""
            x = 'é' * 1_000_000
            r = await echo(x=x)
            print(r['args']['x'] == x, len(r['args']['x']))
        """, stdout="True 1000000\n")
        self.assertEqual(len(self.server.requests[0]["json"]["args"]["x"]), 1000000)

    def test_body_over_the_limit_gets_413_before_it_is_all_sent(self):
        self.assert_run("""
            for i in range(3):
                try:
                    await echo(x='x' * 9_000_000)
                except ToolError as e:
                    print(e.type, e)
                print(await echo(i=i))
        """, stdout="".join(
            "too_large a body is limited to 4194304 bytes\n"
            "{'tool': 'echo', 'args': {'i': %d}}\n" % i for i in range(3)))
        self.assertEqual([r["json"] and r["json"]["tool"] for r in self.server.requests],
                         [None, "echo"] * 3)

    def test_connection_close_answer_then_new_connection(self):
        self.assert_run("""
            print(await close_after(value=1))
            await asyncio.sleep(0.05)
            print(await close_after(value=2))
            print(await close_after(value=3))
        """, stdout="1\n2\n3\n")
        self.assertEqual(self.server.connections, 3)

    def test_idle_connection_closed_while_the_loop_was_blocked(self):
        # The FIN/RST arrives while time.sleep blocks the loop: the next call must notice
        # before sending and use a fresh connection instead of failing.
        self.assert_run("""
            import time
            print(await close_later(value=1))
            time.sleep(0.4)
            print(await reset_later(value=2))
            time.sleep(0.4)
            print(await echo(n=3))
        """, stdout="1\n2\n{'tool': 'echo', 'args': {'n': 3}}\n")
        self.assertEqual([c["tool"] for c in self.server.calls()],
                         ["close-later", "reset-later", "echo"])
        self.assertEqual(self.server.connections, 3)

    def test_pool_per_event_loop(self):
        self.assert_run("""
            async def one(i):
                return (await echo(i=i))['args']['i']
            print(asyncio.run(one(1)), asyncio.run(one(2)))
        """, stdout="1 2\n")
        self.assertEqual(self.server.connections, 2)

    def test_arguments_that_are_not_json(self):
        try:
            json.dumps(float("nan"), allow_nan=False)
        except ValueError as e:
            nan_message = str(e)  # differs between Python versions
        self.assert_run("""
            for bad in [{1, 2}, float('nan'), '\\ud800']:
                try:
                    await echo(x=bad)
                except ToolInputError as e:
                    print(e.type, str(e))
        """, stdout=(
            "input arguments of echo are not JSON: Object of type set is not JSON serializable\n"
            "input arguments of echo are not JSON: %s\n"
            "input arguments of echo are not JSON: a string holds the lone surrogate "
            "'\\ud800'\n" % nan_message
        ))
        self.assertEqual(self.server.requests, [])

    # -----------------------------------------------------------------------------------------
    # Stubs: names, parameters, defaults

    def test_defaults_and_sentinel(self):
        self.assert_run("""
            await get_weather('Paris')
            await get_weather('Rome', 'f', 3)
            await get_weather(city='Oslo', days=2)
            await github__list_issues('o', 'r')
            await github__list_issues('o', 'r', state='closed')
        """)
        self.assertEqual([c["args"] for c in self.server.calls()], [
            {"city": "Paris", "units": "c"},
            {"city": "Rome", "units": "f", "days": 3},
            {"city": "Oslo", "days": 2, "units": "c"},
            {"owner": "o", "repo": "r", "state": "open"},
            {"owner": "o", "repo": "r", "state": "closed"},
        ])

    def test_signature_name_and_doc(self):
        self.assert_run("""
            import inspect
            print(inspect.signature(get_weather))
            print(get_weather.__name__, get_weather.__module__)
            print(get_weather.__doc__)
            print(inspect.signature(weird_params))
            print(inspect.signature(echo))
            print(inspect.signature(open_extra))
            print(asyncio.iscoroutinefunction(get_weather))
        """, stdout=(
            "(city, units='c', days=<tool default>)\n"
            "get_weather tools\n"
            "get_weather(city, units?: Literal['c', 'f'] = 'c', days?: int) — Get the weather.\n"
            "\n"
            "Get the weather.\n"
            "\n"
            "Returns the current weather and a forecast.\n"
            "\n"
            "Parameters:\n"
            "  city: City name, e.g. Paris\n"
            "  units: Temperature units\n"
            "  days: Forecast days\n"
            "(query, *, limit=10, **kwargs)\n"
            "(**kwargs)\n"
            "(a=<tool default>, **kwargs)\n"
            "True\n"
        ))

    def test_binding_errors_are_type_errors(self):
        self.assert_run("""
            for call in [lambda: get_weather(),
                         lambda: get_weather('a', 'c', 1, 2),
                         lambda: get_weather('a', city='b'),
                         lambda: get_weather('a', cty='b'),
                         lambda: github__list_issues(),
                         lambda: weird_params('q', 'k')]:
                try:
                    call()
                except TypeError as e:
                    print(e)
        """, stdout=(
            "get_weather() missing 1 required argument: 'city'\n"
            "get_weather() takes 3 positional arguments but 4 were given\n"
            "get_weather() got multiple values for argument 'city'\n"
            "get_weather() got an unexpected keyword argument 'cty'\n"
            "github__list_issues() missing 2 required arguments: 'owner' and 'repo'\n"
            "weird_params() takes 1 positional argument but 2 were given\n"
        ))
        self.assertEqual(self.server.requests, [])

    def test_non_identifier_names(self):
        self.assert_run("""
            await weird_params('q', **{'x-api-key': 'k', 'from': 'me'})
            await my_toolv2(5)
            await open_extra(a='x', anything=1)
            try:
                weird_params('q')
            except TypeError as e:
                print(e)
        """, stdout="weird_params() missing 1 required argument: 'x-api-key'\n")
        self.assertEqual(self.server.calls(), [
            {"tool": "weird-params", "args": {"query": "q", "x-api-key": "k", "from": "me",
                                              "limit": 10}},
            {"tool": "my tool.v2", "args": {"a": 5}},
            {"tool": "open-extra", "args": {"a": "x", "anything": 1}},
        ])

    def test_call_tool_by_original_name(self):
        self.assert_run("""
            await call_tool('get-weather', city='Paris')
            await call_tool('my tool.v2', {'a': 1}, b=2)
            await call_tool('echo', name='n')
            await call_tool('get_weather', city='Lyon')
        """)
        self.assertEqual(self.server.calls(), [
            {"tool": "get-weather", "args": {"city": "Paris"}},
            {"tool": "my tool.v2", "args": {"a": 1, "b": 2}},
            {"tool": "echo", "args": {"name": "n"}},
            {"tool": "get-weather", "args": {"city": "Lyon"}},
        ])

    # -----------------------------------------------------------------------------------------
    # describe()

    def test_describe(self):
        expected = (
            "get_weather(city, units?: Literal['c', 'f'] = 'c', days?: int) — Get the weather.\n"
            "Dispatched as: get-weather\n"
            "\n"
            "Get the weather.\n"
            "\n"
            "Returns the current weather and a forecast.\n"
            "\n"
            "Input schema:\n"
            + json.dumps(WEATHER["input_schema"], indent=2) + "\n"
            "\n"
            "Output schema:\n"
            + json.dumps(WEATHER["output_schema"], indent=2) + "\n"
        )
        self.assert_run("describe('get_weather')\ndescribe('get-weather')\ndescribe(get_weather)",
                        stdout=expected * 3)

    def test_describe_without_output_schema_and_unknown(self):
        self.assert_run("""
            describe('echo')
            try:
                describe('list_issues')
            except ToolError as e:
                print(e.type, e)
        """, stdout=(
            "echo(...)\n\nInput schema:\n{\n  \"type\": \"object\"\n}\n"
            "unknown_tool no tool named 'list_issues'; did you mean github__list_issues?\n"
        ))

    # -----------------------------------------------------------------------------------------
    # Hints

    def test_never_awaited_hint_once_per_call_site(self):
        rc, out, err = self.run_code("""
            import gc
            gc.disable()  # the cycle below is found by the exit check, not by chance
            for i in range(3):
                get_weather('a')
            class Cycle:
                pass
            c = Cycle()
            c.me, c.call = c, my_toolv2(1)
            del c
            print('mid')
            kept = [noop(), noop()]
            await echo(x=1)
            t = asyncio.create_task(echo(y=2))
            await t
            call_tool('echo')
        """)
        self.assertEqual((rc, out), (0, "mid\n"))
        self.assertEqual(err, (
            "hint: get_weather(...) was never awaited; use await get_weather(...)\n"
            "hint: call_tool(...) was never awaited; use await call_tool(...)\n"
            "hint: my_toolv2(...) was never awaited; use await my_toolv2(...)\n"
            "hint: noop(...) was never awaited; use await noop(...)\n"
        ))
        self.assertEqual([c["tool"] for c in self.server.calls()], ["echo", "echo"])

    def test_no_hint_when_awaited(self):
        self.assert_run("""
            a = get_weather('a')
            r = await a
            await asyncio.gather(noop(), noop())
            print(r['args'])
        """, stdout="{'city': 'a', 'units': 'c'}\n")

    def test_awaiting_twice_is_an_error(self):
        self.assert_run("""
            c = noop()
            await c
            try:
                await c
            except RuntimeError as e:
                print(e)
        """, stdout="cannot reuse already awaited coroutine\n")
        self.assertEqual(len(self.server.requests), 1)

    def test_name_error_hint_for_server_prefix(self):
        rc, out, err = self.run_code("x = 1\nawait list_issues(owner='o', repo='r')")
        self.assertEqual((rc, out), (1, ""))
        lines = strip_carets(err).splitlines()
        self.assertEqual(lines[:3], [
            "Traceback (most recent call last):",
            '  File "<code>", line 2, in <module>',
            "    await list_issues(owner='o', repo='r')",
        ])
        self.assertTrue(lines[3].startswith("NameError: name 'list_issues' is not defined"),
                        lines[3])
        self.assertEqual(lines[4:], ["hint: did you mean github__list_issues?"])

    def test_name_error_hint_close_match(self):
        rc, out, err = self.run_code("get_wether('x')")
        self.assertEqual(rc, 1)
        self.assertEqual(err.splitlines()[-1], "hint: did you mean get_weather?")

    def test_name_error_without_match_has_no_hint(self):
        rc, out, err = self.run_code("zzzz")
        self.assertEqual(rc, 1)
        self.assertEqual(strip_carets(err), (
            "Traceback (most recent call last):\n"
            '  File "<code>", line 1, in <module>\n'
            "    zzzz\n"
            "NameError: name 'zzzz' is not defined\n"
        ))


if __name__ == "__main__":
    unittest.main()
