"""Tests of the preview's analyzer (assets/preview.py) as the sidecar runs it: the file with
`main("<base64>")` appended, in a python3 of its own, answering one line on stdout.

The Rust integration tests (tests/all/preview.rs) run it confined through the sidecar and map
its answer to a catalog; these pin what it reports for each way code reaches a tool.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""

import base64
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYZER = os.path.join(REPO, "assets", "preview.py")
KNOWN = ["get_weather", "search", "demo__add"]


def analyze(code, known=KNOWN, budget=65536):
    """The analyzer's answer for `code`, as a dict."""
    data = json.dumps({"code": code, "known": known, "budget": budget}).encode()
    with open(ANALYZER) as f:
        program = f.read() + '\nmain("%s")\n' % base64.b64encode(data).decode()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        out = subprocess.run(
            [sys.executable, "-I", f.name], capture_output=True, text=True, timeout=60
        )
    finally:
        os.unlink(f.name)
    lines = [l for l in out.stdout.splitlines() if l.startswith("PTC-PREVIEW ")]
    assert out.returncode == 0 and len(lines) == 1, (out.returncode, out.stdout, out.stderr)
    return json.loads(lines[0][len("PTC-PREVIEW "):])


def found(answer):
    return {(f["kind"], f["name"]): f["lines"] for f in answer["found"]}


class Analyzer(unittest.TestCase):
    def test_each_way_to_a_tool_with_its_lines(self):
        answer = analyze(textwrap.dedent("""\
            import asyncio, tools as t
            a = await get_weather(city="x")
            from tools import search as s
            r = await asyncio.gather(s(q=1), t.demo__add(a=1, b=2))
            await call_tool("get-weather")
            f = search
            await getattr(tools, "demo__add")()
            await globals()["search"]()
            await helper()
            def helper(): pass
            print(len([]), describe, json)
            await nope(1)
            await tools.nothing()
            """))
        self.assertEqual(answer["syntax_error"], None)
        self.assertEqual(found(answer), {
            ("python", "get_weather"): [2],
            ("python", "search"): [3, 4, 6, 8],
            ("python", "demo__add"): [4, 7],
            ("name", "get-weather"): [5],
            ("python", "nope"): [12],
            ("python", "nothing"): [13],
        })
        self.assertEqual(answer["dynamic"], [])

    def test_dynamic_places(self):
        answer = analyze(textwrap.dedent("""\
            await getattr(tools, name)()
            await call_tool(name)
            await tools.__dict__[name]()
            await globals().get(name)()
            m = __import__("tools")
            eval("search()")
            print(dir(tools))
            """))
        self.assertEqual([d["line"] for d in answer["dynamic"]], [1, 2, 3, 4, 5, 6])
        self.assertEqual(found(answer), {})

    def test_syntax_errors_and_hostile_nesting(self):
        self.assertEqual(analyze("if x:\nprint(1)\n")["syntax_error"]["line"], 2)
        for code in ["(" * 100000 + ")" * 100000, "- " * 100000 + "x", "x" + ".a" * 100000,
                     "a = 1\x00"]:
            answer = analyze(code)
            self.assertIsNotNone(answer["syntax_error"], code[:10])
            self.assertEqual(answer["found"], [])

    def test_the_answer_stays_within_its_bounds(self):
        answer = analyze("".join("a%d()\n" % i for i in range(500)) + "search()\n" * 80)
        self.assertTrue(answer["truncated"])
        self.assertEqual(len(answer["found"][-1]["lines"]), 50)
        self.assertEqual(sum(1 for f in answer["found"] if f["name"] != "search"), 200)
        small = analyze("".join("search()\nb%d()\n" % i for i in range(300)), budget=2000)
        self.assertTrue(small["truncated"])
        self.assertEqual([f["name"] for f in small["found"]], ["search"])


if __name__ == "__main__":
    unittest.main()
