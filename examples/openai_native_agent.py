"""An agent loop on the OpenAI Responses API with OpenAI's own programmatic tool calling (the
model's JavaScript `program` runs at OpenAI) and ptc-sidecar serving and governing each tool
call that program makes.

    python3 examples/native_host_tools.py &       # the host tools, the manifest's callback
    PTC_TOOLS_FILE=examples/native-tools.json PTC_MCP_CONFIG=examples/mcp.json ptc-sidecar serve &
    python3 examples/openai_native_agent.py "Is it warmer in Paris or Oslo?"

The tools come from GET /v1/tools?format=openai&ptc=native: function tools for the direct
tools (`complete`, `fail`), `{"type": "programmatic_tool_calling"}`, and every tool the program
may call, marked `allowed_callers: ["programmatic"]`. Each `function_call` the program makes
(its `caller` names the program) goes to the sidecar's POST /v1/tools/call, and its answer back
as a `function_call_output` for that `call_id` with the same `caller`. Nothing is stored at
OpenAI (`store: false`): every item of the conversation, the `program` item with its
`fingerprint` included, is sent back on each request.

Prints progress on stderr and the final answer (the argument of `complete`) on its last line.
OPENAI_API_KEY, OPENAI_BASE_URL (any compatible endpoint), OPENAI_MODEL; PTC_URL, PTC_API_KEY
for the sidecar.
"""

import json
import os
import sys

import openai

from ptc_client import SidecarError
from ptc_native import NativeSidecar

MODEL = os.environ.get("OPENAI_MODEL", "gpt-5.5")
# A model that never calls `complete` or `fail` is stopped after this many turns.
MAX_TURNS = 12
INSTRUCTIONS = (
    "Write a program to call the tools: await them, loop, use Promise.all for calls that do "
    "not depend on each other, and return only what you need. Each tool returns a JSON string. "
    "When done, call complete with the answer; call fail if the task cannot be done."
)


def main(task):
    client = openai.OpenAI()  # reads OPENAI_API_KEY and OPENAI_BASE_URL
    sidecar = NativeSidecar("openai")
    items = [{"role": "user", "content": task}]
    for turn in range(1, MAX_TURNS + 1):
        response = client.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            tools=sidecar.refresh_tools(),  # a 304 until the catalog changes
            input=items,
            store=False,
        )
        # Every output item goes back as it came (program, reasoning, calls, messages).
        items.extend(item.to_dict() for item in response.output)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            items.append({"role": "user", "content": "Call complete with your answer, or fail."})
            continue
        asked = []
        for call in calls:
            try:
                args = json.loads(call.arguments or "{}")
            except json.JSONDecodeError as e:
                args = e  # answered below, without the sidecar
            if call.name == "complete" and isinstance(args, dict):
                print(args.get("answer", ""))
                return 0
            if call.name == "fail" and isinstance(args, dict):
                print(f"FAILED: {args.get('reason', '')}")
                return 1
            by = call.caller.to_dict() if call.caller and call.caller.type == "program" else None
            print(f"[turn {turn}] {call.name} ({by['type'] if by else 'direct'})", file=sys.stderr)
            asked.append((call, args, by))
        sent = [(c.name, a, by) for c, a, by in asked if isinstance(a, dict)]
        answers = iter(sidecar.call_all(sent))
        for call, args, by in asked:
            if isinstance(args, dict):
                ok, text = next(answers)
            else:
                text = f"input: the arguments are not JSON ({args}); send one JSON object"
            output = {"type": "function_call_output", "call_id": call.call_id, "output": text}
            if by:  # the program waiting for it is named as it named itself
                output["caller"] = by
            items.append(output)
    print(f"FAILED: no answer after {MAX_TURNS} turns")
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python3 examples/openai_native_agent.py "TASK"')
    try:
        sys.exit(main(sys.argv[1]))
    except SidecarError as e:
        sys.exit(str(e))
