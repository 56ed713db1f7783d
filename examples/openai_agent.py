"""An agent loop on OpenAI Chat Completions (function calling) with ptc-sidecar's programmatic
tool calling.

    PTC_ENABLED=true PTC_TOOLS_FILE=examples/agent-tools.json ptc-sidecar serve &
    python3 examples/openai_agent.py "Is it warmer in Paris or Oslo?"

Prints progress on stderr and the final answer (the argument of `complete`) on its last line.
OPENAI_API_KEY, OPENAI_BASE_URL (any compatible endpoint), OPENAI_MODEL; PTC_URL, PTC_API_KEY
for the sidecar (examples/ptc_client.py).
"""

import json
import os
import sys

import openai

import host_tools
from ptc_client import Sidecar, SidecarError, result_text

MODEL = os.environ.get("OPENAI_MODEL", "gpt-5.5")
# A model that never calls `complete` or `fail` is stopped after this many turns.
MAX_TURNS = 12
SYSTEM = (
    "Use exec_code to call tools from Python: await them, loop, use asyncio.gather for calls "
    "that do not depend on each other, and print only what you need. "
    "When done, call complete with the answer; call fail if the task cannot be done."
)


def main(task):
    client = openai.OpenAI()  # reads OPENAI_API_KEY and OPENAI_BASE_URL
    sidecar = Sidecar("openai")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for turn in range(1, MAX_TURNS + 1):
        reply = client.chat.completions.create(
            model=MODEL,
            tools=sidecar.refresh_tools(),  # a 304 until the catalog changes
            messages=messages,
        )
        message = reply.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            messages.append({"role": "user", "content": "Call complete with your answer, or fail."})
            continue
        for call in message.tool_calls:
            name = call.function.name
            print(f"[turn {turn}] {name}", file=sys.stderr)
            try:
                args = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError as e:
                text = f"error: the arguments are not JSON ({e}); send one JSON object"
            else:
                if name == "complete":
                    print(args.get("answer", ""))
                    return 0
                if name == "fail":
                    print(f"FAILED: {args.get('reason', '')}")
                    return 1
                text = run_tool(sidecar, name, args)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    print(f"FAILED: no answer after {MAX_TURNS} turns")
    return 1


def run_tool(sidecar, name, args):
    """One tool call of the model as the tool message's text (Chat Completions has no error
    flag: a failed run says `status: error` in the text)."""
    if name == "exec_code":
        return result_text(sidecar.exec_code(args, host_tools.call))
    if name in host_tools.TOOLS:  # a host tool the sidecar offers directly (PTC_DIRECT_TOOLS)
        try:
            return json.dumps(host_tools.call(name, args))
        except Exception as e:
            return f"error: {type(e).__name__}: {e}"
    offered = ", ".join(t["function"]["name"] for t in sidecar.tools)
    return f"error: unknown tool {name!r}; the tools are: {offered}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python3 examples/openai_agent.py "TASK"')
    try:
        sys.exit(main(sys.argv[1]))
    except SidecarError as e:
        sys.exit(str(e))
