"""The preview's analyzer: which tools a piece of Python may call, read from Python's own syntax
tree. The code is never run.

The sidecar runs this file as a run of its own (`POST /v1/exec_code/preview`, src/api/preview.rs):
confined like every run, within its time and memory limits, and reported as no run. The sidecar
appends one line, `main("<base64>")`, whose argument is base64 of a JSON object:

    {"code": str, "known": [the Python names of the catalog's PTC tools], "budget": int}

The user's code is data here: it is handed to `ast.parse` and to nothing else. It is never
compiled to a code object, executed or imported. The answer is one line on stdout:

    PTC-PREVIEW {"syntax_error": null | {"line": int | null, "message": str},
                 "found": [{"name": str, "kind": "python" | "name", "lines": [int]}],
                 "dynamic": [{"line": int, "what": str}],
                 "truncated": bool}

`found` holds every name the code may reach a tool by: a known tool's Python name used anywhere
(called, awaited, gathered, or passed around uncalled), `tools.x`, `from tools import x`,
`getattr(tools, "x")`, `globals()["x"]` (all `kind: "python"`); a name called that the code
never binds and that is no builtin nor an SDK global (`kind: "python"`: the sidecar decides
whether it is a tool); `call_tool("x")` (`kind: "name"`: a catalog name or a Python name).
`dynamic` holds each place where the tool is chosen at run time (`getattr(tools, name)`,
`call_tool(name)`, `globals()[name]`, the tools module passed around, `eval`/`exec`). The
sidecar maps all of it to the catalog; this file knows only the names it was given.

Bounded: names cut to MAX_NAME characters, MAX_LINES lines per name, MAX_OTHER names that are
no known tool, MAX_DYNAMIC dynamic places, and the whole line within `budget` bytes (lists are
cut, and `truncated` says so). The tree is walked without recursion (`ast.walk`); a tree too
deep for Python to build is a syntax error here, as it is when the code runs.
"""

import ast
import base64
import builtins
import json
import sys

MARK = "PTC-PREVIEW "
# Characters of a name reported: no tool's name is longer, and a 1 MB identifier is not echoed.
MAX_NAME = 256
# Lines reported per name: enough to find each use in a script a model wrote.
MAX_LINES = 50
# Distinct names reported that are no known tool (each maybe an unknown tool).
MAX_OTHER = 200
# Places reported where a tool is chosen at run time.
MAX_DYNAMIC = 100

# What the SDK puts in the code's globals beside the tool stubs (ptc_sdk.code_globals): calling
# one of these is no unknown tool.
SDK_GLOBALS = frozenset((
    "tools", "call_tool", "describe", "search_tools", "save_file", "ToolError",
    "ToolInputError", "asyncio", "json", "re", "__name__", "__builtins__",
))
BUILTINS = frozenset(dir(builtins))
# Functions that run code from a string: what it calls cannot be seen.
EVALUATORS = frozenset(("eval", "exec", "compile"))
# Calls that only look at the tools module.
INSPECTORS = frozenset(("dir", "help", "print", "repr", "str", "type", "id"))


def _clean(text):
    """`text` cut to MAX_NAME characters, as valid UTF-8 (a string literal may hold a lone
    surrogate, which JSON readers refuse)."""
    return text[:MAX_NAME].encode("utf-8", "replace").decode("utf-8")


def _literal(node):
    """The str of a string constant node, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _bound(nodes):
    """Every name the code binds anywhere (assigned, defined, imported, a parameter, caught,
    matched, declared global): calling one is no call of an unknown tool."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
            names.add(node.name)
        elif type(node).__name__ == "MatchMapping" and getattr(node, "rest", None):
            names.add(node.rest)
    return names


class Analysis:
    def __init__(self, known):
        self.known = known
        self.bound = set()
        # Names the tools module is known by (`import tools as t`).
        self.modules = {"tools"}
        # Local names of tools imported from the module (`from tools import x as y`): y -> x.
        self.aliases = {}
        # (kind, name) -> sorted set of lines.
        self.found = {}
        self.other = 0
        self.dynamic = []
        self.truncated = False
        # Nodes already accounted for by the node above them (ast.walk visits parents first).
        self.handled = set()

    def add(self, kind, name, line):
        name = _clean(name)
        key = (kind, name)
        lines = self.found.get(key)
        if lines is None:
            if not (kind == "python" and name in self.known):
                if self.other >= MAX_OTHER:
                    self.truncated = True
                    return
                self.other += 1
            lines = self.found[key] = set()
        if len(lines) < MAX_LINES:
            lines.add(line)
        elif line not in lines:
            self.truncated = True

    def add_dynamic(self, node, what):
        if len(self.dynamic) >= MAX_DYNAMIC:
            self.truncated = True
            return
        self.dynamic.append({"line": node.lineno, "what": what})

    def namespace(self, node):
        """"tools" when `node` is the tools module (or its `__dict__`, `vars(tools)`,
        `sys.modules["tools"]`, `__import__("tools")`), "globals" for the code's own globals
        (`globals()`, `vars()`, `locals()`), else None. Looks one level down, no further."""
        if isinstance(node, ast.Name):
            return "tools" if node.id in self.modules else None
        if isinstance(node, ast.Attribute):
            if node.attr == "__dict__" and isinstance(node.value, ast.Name) \
                    and node.value.id in self.modules:
                self.handled.add(id(node.value))
                return "tools"
            return None
        if isinstance(node, ast.Subscript):
            value = node.value
            if _literal(node.slice) == "tools" and isinstance(value, ast.Attribute) \
                    and value.attr == "modules" and isinstance(value.value, ast.Name) \
                    and value.value.id == "sys":
                return "tools"
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            func, args = node.func.id, node.args
            if func in ("globals", "locals") and not args:
                return "globals"
            if func == "vars" and not args:
                return "globals"
            if func == "vars" and len(args) == 1 and isinstance(args[0], ast.Name) \
                    and args[0].id in self.modules:
                self.handled.add(id(args[0]))
                return "tools"
            if func == "__import__" and args and _literal(args[0]) == "tools":
                return "tools"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "import_module" and node.args \
                and _literal(node.args[0]) == "tools":
            return "tools"
        return None

    def lookup(self, holder, ns, key, what):
        """A name looked up in a namespace (`holder` the expression): the tool it names when
        `key` is a string constant, else a dynamic place."""
        self.handled.add(id(ns))
        name = _literal(key)
        if name is None:
            self.add_dynamic(holder, what)
        elif not name.startswith("__"):
            self.add("python", name, holder.lineno)

    def visit(self, node):
        if id(node) in self.handled:
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tools":
                    self.modules.add(alias.asname or "tools")
        elif isinstance(node, ast.ImportFrom):
            if node.module == "tools" and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.add("python", alias.name, node.lineno)
                        self.aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Call):
            self.visit_call(node)
        elif isinstance(node, ast.Subscript):
            ns = self.namespace(node.value)
            if self.namespace(node) == "tools":
                self.add_dynamic(node, "the tools module kept or passed around")
            elif ns is not None:
                what = "tools[...]" if ns == "tools" else "globals()[...]"
                self.lookup(node, node.value, node.slice, what)
        elif isinstance(node, ast.Attribute):
            self.visit_attribute(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self.visit_name(node)

    def visit_call(self, node):
        func, args = node.func, node.args
        ns = self.namespace(node)
        if ns is not None:
            # `globals()`, `vars(tools)`, `__import__("tools")` kept or passed on: what is
            # looked up in it later cannot be followed.
            self.handled.add(id(func))
            self.add_dynamic(node, "%s kept or passed around" % (
                "the tools module" if ns == "tools" else "the code's globals"))
            return
        if isinstance(func, ast.Name):
            name = func.id
            if name == "call_tool" and name not in self.bound:
                self.handled.add(id(func))
                literal = _literal(args[0]) if args else None
                if literal is None:
                    self.add_dynamic(node, "call_tool(<a name chosen at run time>)")
                else:
                    self.add("name", literal, node.lineno)
            elif name == "getattr" and len(args) >= 2 and self.namespace(args[0]) == "tools":
                self.lookup(node, args[0], args[1], "getattr(tools, <a name chosen at run time>)")
            elif name in EVALUATORS and name not in self.bound:
                self.add_dynamic(node, "%s(...): code run from a string" % name)
            elif name in INSPECTORS:
                for arg in args:
                    if self.namespace(arg) is not None:
                        self.handled.add(id(arg))
            elif name not in self.known and name not in self.aliases and name not in self.bound \
                    and name not in BUILTINS and name not in SDK_GLOBALS:
                self.add("python", name, node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr == "get" and args:
            ns = self.namespace(func.value)
            if ns is not None:
                self.handled.add(id(func))
                self.lookup(node, func.value, args[0], "%s.get(...)" % (
                    "tools" if ns == "tools" else "globals()"))

    def visit_attribute(self, node):
        if not isinstance(node.ctx, ast.Load):
            return
        if self.namespace(node.value) != "tools" or isinstance(node.value, ast.Attribute):
            return
        self.handled.add(id(node.value))
        attr = node.attr
        if attr in ("__dict__", "__getattr__", "__getattribute__"):
            self.add_dynamic(node, "tools.%s" % attr)
        elif not attr.startswith("__"):
            self.add("python", attr, node.lineno)

    def visit_name(self, node):
        name = node.id
        if name in self.known:
            self.add("python", name, node.lineno)
        elif name in self.aliases:
            self.add("python", self.aliases[name], node.lineno)
        elif name in self.modules:
            self.add_dynamic(node, "the tools module kept or passed around (%s)" % _clean(name))

    def run(self, tree):
        # Parents before their children (breadth first, without recursion), walked once.
        nodes = list(ast.walk(tree))
        self.bound = _bound(nodes)
        # Imports first: `tools` aliases and imported tool names are known wherever used.
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.visit(node)
                self.handled.add(id(node))
        for node in nodes:
            self.visit(node)

    def answer(self, max_lines):
        found = []
        for (kind, name), lines in self.found.items():
            lines = sorted(lines)
            if len(lines) > max_lines:
                lines = lines[:max_lines]
                self.truncated = True
            found.append({"name": name, "kind": kind, "lines": lines})
        found.sort(key=lambda f: (f["lines"][:1], f["name"]))
        return found


def _syntax_error(e):
    if isinstance(e, SyntaxError):
        return {"line": e.lineno, "message": _clean(e.msg or str(e))}
    if isinstance(e, (RecursionError, MemoryError)):
        return {"line": None, "message": (
            "the code is nested too deeply for Python to parse (%s); Python refuses it when "
            "it runs, too: nest less" % type(e).__name__)}
    return {"line": None, "message": _clean(str(e))}


def _fit(answer, analysis, budget):
    """The answer's line within `budget` bytes: fewer lines per name, then only the known
    tools and fewer dynamic places."""
    for max_lines in (MAX_LINES, 10, 1):
        answer["found"] = analysis.answer(max_lines)
        answer["truncated"] = analysis.truncated
        text = json.dumps(answer, ensure_ascii=True, separators=(",", ":"))
        if len(text) <= budget:
            return text
    answer["found"] = [f for f in answer["found"]
                       if f["kind"] == "python" and f["name"] in analysis.known]
    answer["dynamic"] = answer["dynamic"][:10]
    answer["truncated"] = True
    return json.dumps(answer, ensure_ascii=True, separators=(",", ":"))


def main(data):
    request = json.loads(base64.b64decode(data))
    budget = int(request.get("budget") or 60000) - len(MARK) - 1
    analysis = Analysis(frozenset(request.get("known") or ()))
    answer = {"syntax_error": None, "found": [], "dynamic": [], "truncated": False}
    try:
        tree = ast.parse(request["code"], filename="<code>", mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        answer["syntax_error"] = _syntax_error(e)
    else:
        analysis.run(tree)
        answer["dynamic"] = sorted(analysis.dynamic, key=lambda d: d["line"])
    sys.stdout.write(MARK + _fit(answer, analysis, budget) + "\n")
    sys.stdout.flush()
