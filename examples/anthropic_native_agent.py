"""An agent loop on the Anthropic Messages API with Anthropic's own programmatic tool calling
(the code execution tool runs the model's Python in Anthropic's container) and ptc-sidecar
serving and governing each tool call that code makes.

    python3 examples/native_host_tools.py &       # the host tools, the manifest's callback
    PTC_TOOLS_FILE=examples/native-tools.json PTC_MCP_CONFIG=examples/mcp.json ptc-sidecar serve &
    python3 examples/anthropic_native_agent.py "Is it warmer in Paris or Oslo?"

The tools come from GET /v1/tools?format=anthropic&ptc=native: the direct tools (`complete`,
`fail`), `code_execution`, and every tool the code may call, marked
`allowed_callers: ["code_execution_20260120"]`. Each `tool_use` the code makes (its `caller`
names the code run) goes to the sidecar's POST /v1/tools/call, and its answer back as the
`tool_result` for that id, with the response's `container` passed on the next request.

Prints progress on stderr and the final answer (the argument of `complete`) on its last line.
ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL (any compatible endpoint), ANTHROPIC_MODEL; PTC_URL,
PTC_API_KEY for the sidecar.
"""

import os
import sys

import anthropic

from ptc_client import SidecarError
from ptc_native import NativeSidecar

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5-5")
# A model that never calls `complete` or `fail` is stopped after this many turns.
MAX_TURNS = 12
# Room for one turn's code and reasoning; the SDK refuses a non-streaming call far above this.
MAX_TOKENS = 4096
SYSTEM = (
    "Use code execution to call the tools from Python: await them, loop, use asyncio.gather "
    "for calls that do not depend on each other, and print only what you need. Each tool "
    "returns a JSON string. When done, call complete with the answer; call fail if the task "
    "cannot be done."
)


def main(task):
    client = anthropic.Anthropic()  # reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL
    sidecar = NativeSidecar("anthropic")
    messages = [{"role": "user", "content": task}]
    container = None  # the code's container: every continuation must name it
    for turn in range(1, MAX_TURNS + 1):
        extra = {"container": container} if container else {}
        reply = client.messages.create(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            system=SYSTEM,
            tools=sidecar.refresh_tools(),  # a 304 until the catalog changes
            messages=messages,
            **extra,
        )
        if reply.container:
            container = reply.container.id
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason == "pause_turn":  # a long code run: let it go on
            continue
        calls = [block for block in reply.content if block.type == "tool_use"]
        if not calls:
            messages.append({"role": "user", "content": "Call complete with your answer, or fail."})
            continue
        for call in calls:
            if call.name == "complete":
                print(call.input.get("answer", ""))
                return 0
            if call.name == "fail":
                print(f"FAILED: {call.input.get('reason', '')}")
                return 1
        # Every call of the turn (the code's gathered ones together) through the sidecar.
        asked = []
        for call in calls:
            by = call.caller.to_dict() if call.caller and call.caller.type != "direct" else None
            print(f"[turn {turn}] {call.name} ({by['type'] if by else 'direct'})", file=sys.stderr)
            asked.append((call.name, call.input, by))
        results = []
        for call, (ok, text) in zip(calls, sidecar.call_all(asked)):
            # A programmatic call's result must be text; the code parses it.
            result = {"type": "tool_result", "tool_use_id": call.id, "content": text}
            if not ok:
                result["is_error"] = True
            results.append(result)
        messages.append({"role": "user", "content": results})
    print(f"FAILED: no answer after {MAX_TURNS} turns")
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python3 examples/anthropic_native_agent.py "TASK"')
    try:
        sys.exit(main(sys.argv[1]))
    except SidecarError as e:
        sys.exit(str(e))
