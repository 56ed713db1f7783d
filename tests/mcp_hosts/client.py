"""A host of the MCP front door, with the official Python `mcp` SDK (pinned in requirements.txt).

tests/all/front.rs runs it: `python3 client.py SPEC`, SPEC a JSON object:

    transport  "stdio" (start `command` with `args` and `env`) or "http" (`url`, `headers`)
    mode       the SDK's ConnectMode: "auto" (discover, else the handshake) or "legacy"
    scenario   "tour", "cancel", "reload", "approve", "list", "run" or "runs" (below)
    marker     a string unique to the test (the cancel scenario's process is found by it)
    manifest   the tool manifest the reload scenario rewrites
    host_tool  the name of a callback host tool the tour calls
    runs       the runs scenario's runs: each {name, lang, code}

It prints one JSON object, what it saw; the Rust test judges it. It asserts nothing itself,
except that what it waits for comes in time (a wait that ends says so in the object).
"""

import asyncio
import json
import os
import sys
import time

import anyio
import httpx2
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

# A 1x1 PNG: the image the tour's run saves.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAIT = 20.0


def target(spec):
    if spec["transport"] == "stdio":
        return StdioServerParameters(
            command=spec["command"], args=spec.get("args", []), env=spec.get("env")
        )
    headers = spec.get("headers") or {}
    return streamable_http_client(
        spec["url"], http_client=httpx2.AsyncClient(headers=headers, timeout=WAIT)
    )


def modern(client):
    return not client.protocol_version.startswith("2025")


def shown(result):
    """A tool result as plain data: its content blocks, isError and structured content."""
    blocks = []
    for block in result.content:
        data = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        if data.get("type") == "image":
            data["data_len"] = len(data.pop("data", ""))
        blocks.append(data)
    return {
        "content": blocks,
        "isError": bool(result.is_error),
        "structured": result.structured_content,
    }


def error_text(e):
    parts = [f"{type(e).__name__}: {e}"]
    for inner in getattr(e, "exceptions", []) or []:
        parts.append(error_text(inner))
    if e.__cause__ is not None:
        parts.append(error_text(e.__cause__))
    return " | ".join(parts)


async def run(client, code, session=None, lang=None, **kw):
    args = {"code": code}
    if session:
        args["session_id"] = session
    if lang:
        args["lang"] = lang
    return await client.call_tool("exec_code", args, read_timeout_seconds=WAIT, **kw)


async def tour(client, spec, out):
    listed = await client.list_tools()
    out["tools"] = [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed.tools
    ]
    host_tool = spec["host_tool"]
    gathered = await run(
        client,
        "rs = await asyncio.gather(*[demo__add(a=i, b=1) for i in range(20)], "
        f"{host_tool}(x=21))\n"
        "print(sum(int(r) for r in rs[:20]), rs[20])\n",
    )
    out["gather"] = shown(gathered)
    traced = await client.call_tool(
        "exec_code",
        {"code": f"print(await {host_tool}(x=2))\n"},
        read_timeout_seconds=WAIT,
        meta={"traceparent": spec["traceparent"]},
    )
    out["traced"] = shown(traced)
    out["failing"] = shown(await run(client, "print('before')\nraise ValueError('boom-' + 'marker')\n"))

    first = await run(client, "x = 41\nprint('set')\n")
    session = None
    if modern(client):
        session = (first.structured_content or {}).get("session", {}).get("id")
    out["state_session"] = session
    out["state"] = shown(await run(client, "print(x + 1)\n", session))

    seen = []
    started = time.monotonic()

    async def progress(progress, total, message):
        seen.append({"at": time.monotonic() - started, "message": message, "progress": progress})

    slow = await run(
        client,
        "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('last')\n",
        progress_callback=progress,
    )
    out["progress"] = {"seen": seen, "ended_at": time.monotonic() - started, "result": shown(slow)}

    files = await run(
        client,
        "import base64\n"
        f"save_file('dot.png', base64.b64decode('{PNG}'))\n"
        "save_file('notes.txt', 'hello from the run')\n"
        "print('saved')\n",
    )
    out["files"] = shown(files)
    reads = {}
    for block in files.content:
        if block.type == "resource_link":
            try:
                read = await client.read_resource(str(block.uri))
                reads[block.name] = [
                    c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in read.contents
                ]
            except Exception as e:  # noqa: BLE001 - the test judges it
                reads[block.name] = error_text(e)
    out["reads"] = reads

    bad = {}
    for name, args in [
        ("not_a_string", {"code": 5}),
        ("missing_code", {}),
        ("unknown_key", {"code": "print(1)", "cod": "x"}),
    ]:
        try:
            r = await client.call_tool("exec_code", args, read_timeout_seconds=WAIT)
            bad[name] = shown(r)
        except Exception as e:  # noqa: BLE001
            bad[name] = {"error": error_text(e)}
    out["bad"] = bad

    noisy = await run(
        client,
        "import os, sys\nprint('x' * 1_000_000)\nsys.stdout.flush()\n"
        'os.write(1, b\'\\n{"jsonrpc":"2.0","id":424242,"result":{}}\\n\')\n'
        "os.write(2, b'to stderr\\n')\n",
    )
    text = noisy.content[0].text if noisy.content else ""
    out["noisy"] = {
        "isError": bool(noisy.is_error),
        "x_count": text.count("x"),
        "len": len(text),
        "session": (noisy.structured_content or {}).get("session"),
    }
    out["after_noise"] = shown(await run(client, "print('still here')\n"))


def procs_with(needle):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            found.append(pid)
    return found


async def cancel(client, spec, out):
    # The process's argument is made in the run, so that no command line but its own has it
    # (this client's has the spec).
    marker = spec["marker"] + "9"
    started = anyio.Event()

    async def progress(progress, total, message):
        if message and "started" in message:
            started.set()

    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '{spec['marker']}' + '9'])\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\nprint('never')\n"
    )
    out["ended_by_itself"] = False
    async with anyio.create_task_group() as tg:

        async def call():
            r = await run(client, code, progress_callback=progress)
            out["ended_by_itself"] = shown(r)

        tg.start_soon(call)
        with anyio.move_on_after(WAIT):
            await started.wait()
        out["started"] = started.is_set()
        # Popen has forked by now; the exec of sleep may take a moment on a loaded machine.
        with anyio.move_on_after(5):
            while not procs_with(marker):
                await asyncio.sleep(0.02)
        out["before"] = len(procs_with(marker))
        tg.cancel_scope.cancel()
    deadline = time.monotonic() + 10
    while procs_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    out["after"] = len(procs_with(marker))
    out["gone_in"] = round(10 - (deadline - time.monotonic()), 2)
    out["next"] = shown(await run(client, "print('next run')\n"))


async def reload(client, spec, out):
    before = await client.list_tools()
    out["before"] = before.tools[0].description
    changed = anyio.Event()
    manifest = spec["manifest"]  # the sidecar's PTC_TOOLS_FILE
    with open(manifest) as f:
        tools = json.load(f)
    tools["tools"].append(
        {
            "name": "freshly_added",
            "description": "A tool added while the host was connected.",
            "input_schema": {"type": "object", "properties": {}},
        }
    )
    if modern(client):
        async with client.listen(tools_list_changed=True) as sub:
            with open(manifest + ".tmp", "w") as f:
                json.dump(tools, f)
            os.replace(manifest + ".tmp", manifest)
            with anyio.move_on_after(WAIT):
                async for _event in sub:
                    changed.set()
                    break
    else:
        with open(manifest + ".tmp", "w") as f:
            json.dump(tools, f)
        os.replace(manifest + ".tmp", manifest)
        with anyio.move_on_after(WAIT):
            await spec["_changed"].wait()
            changed.set()
    out["notified"] = changed.is_set()
    after = await client.list_tools(cache_mode="refresh") if modern(client) else await client.list_tools()
    out["after"] = after.tools[0].description


async def approve(client, spec, out):
    """Two calls that need a person (the demo's destructive toggle_extra): the host's user (the
    elicitation callback in `main`) allows the first and denies the second with a reason."""
    code = (
        "said = []\n"
        "for i in range(2):\n"
        "    try:\n"
        "        said.append(await demo__toggle_extra())\n"
        "    except ToolDenied as e:\n"
        "        said.append('denied: ' + str(e))\n"
        "print('\\n'.join(said))\n"
    )
    out["run"] = shown(await run(client, code))
    out["asked"] = spec["_asked"]


async def runs(client, spec, out):
    """Each of `spec["runs"]` (`name`, `lang`, `code`) through exec_code: what it showed, or
    the error the call got."""
    for case in spec["runs"]:
        try:
            out[case["name"]] = shown(await run(client, case["code"], lang=case["lang"]))
        except Exception as e:  # noqa: BLE001 - a refusal is the case's result
            out[case["name"]] = {"error": error_text(e)}


async def listing(client, spec, out):
    out["tools"] = [t.name for t in (await client.list_tools()).tools]


async def run_code(client, spec, out):
    """The tools, then `spec["code"]` run once through exec_code: what it showed."""
    out["tools"] = [t.name for t in (await client.list_tools()).tools]
    out["shown"] = shown(await run(client, spec["code"]))


async def main(spec):
    out = {}
    changed = anyio.Event()
    spec["_changed"] = changed

    asked = spec["_asked"] = []

    async def elicit(context, params):
        """The host's user: yes to the first question, no (with a reason) to the rest."""
        from mcp import types

        asked.append(params.message)
        if len(asked) == 1:
            return types.ElicitResult(action="accept", content={"approved": True})
        return types.ElicitResult(action="accept", content={"approved": False, "reason": "not now"})

    async def messages(message):
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()

    try:
        async with Client(
            target(spec),
            mode=spec.get("mode", "auto"),
            message_handler=messages,
            elicitation_callback=elicit,
            cache=None,
        ) as client:
            out["protocol"] = client.protocol_version
            scenario = {
                "tour": tour,
                "cancel": cancel,
                "reload": reload,
                "approve": approve,
                "runs": runs,
                "list": listing,
                "run": run_code,
            }[spec["scenario"]]
            with anyio.fail_after(120):
                await scenario(client, spec, out)
    except Exception as e:  # noqa: BLE001 - what failed is the result
        out["error"] = error_text(e)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
