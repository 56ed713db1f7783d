"""An agent loop on the Anthropic Messages API with ptc-sidecar's programmatic tool calling.

    PTC_ENABLED=true PTC_TOOLS_FILE=examples/agent-tools.json ptc-sidecar serve &
    python3 examples/anthropic_agent.py "Is it warmer in Paris or Oslo?"

Prints progress on stderr and the final answer (the argument of `complete`) on its last line.
ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL (any compatible endpoint), ANTHROPIC_MODEL; PTC_URL,
PTC_API_KEY for the sidecar (examples/ptc_client.py).
"""

import json
import os
import sys

import anthropic

import host_tools
from ptc_client import Sidecar, SidecarError, result_text

MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5-5")
# A model that never calls `complete` or `fail` is stopped after this many turns.
MAX_TURNS = 12
# Room for one turn's code and reasoning; the SDK refuses a non-streaming call far above this.
MAX_TOKENS = 4096
SYSTEM = (
    "Use exec_code to call tools from Python: await them, loop, use asyncio.gather for calls "
    "that do not depend on each other, and print only what you need. "
    "When done, call complete with the answer; call fail if the task cannot be done."
)


def main(task):
    client = anthropic.Anthropic()  # reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL
    sidecar = Sidecar("anthropic")
    messages = [{"role": "user", "content": task}]
    for turn in range(1, MAX_TURNS + 1):
        reply = client.messages.create(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            system=SYSTEM,
            tools=sidecar.refresh_tools(),  # a 304 until the catalog changes
            messages=messages,
        )
        messages.append({"role": "assistant", "content": reply.content})
        calls = [block for block in reply.content if block.type == "tool_use"]
        if not calls:
            messages.append({"role": "user", "content": "Call complete with your answer, or fail."})
            continue
        results = []
        for call in calls:
            print(f"[turn {turn}] {call.name}", file=sys.stderr)
            if call.name == "complete":
                print(call.input.get("answer", ""))
                return 0
            if call.name == "fail":
                print(f"FAILED: {call.input.get('reason', '')}")
                return 1
            result = run_tool(sidecar, call.name, call.input)
            results.append({"type": "tool_result", "tool_use_id": call.id, **result})
        messages.append({"role": "user", "content": results})
    print(f"FAILED: no answer after {MAX_TURNS} turns")
    return 1


def run_tool(sidecar, name, args):
    """One tool call of the model as a tool_result's content and is_error."""
    if name == "exec_code":
        done = sidecar.exec_code(args, host_tools.call)
        text = {"type": "text", "text": result_text(done)}
        # Images the run saved come as Anthropic image blocks, ready to show the model.
        return {"content": [text, *done.get("content", [])], "is_error": done["status"] != "ok"}
    if name in host_tools.TOOLS:  # a host tool the sidecar offers directly (PTC_DIRECT_TOOLS)
        try:
            return {"content": json.dumps(host_tools.call(name, args))}
        except Exception as e:
            return {"content": f"{type(e).__name__}: {e}", "is_error": True}
    offered = ", ".join(t["name"] for t in sidecar.tools)
    return {"content": f"unknown tool {name!r}; the tools are: {offered}", "is_error": True}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python3 examples/anthropic_agent.py "TASK"')
    try:
        sys.exit(main(sys.argv[1]))
    except SidecarError as e:
        sys.exit(str(e))
