"""Persistence: JSON-RPC written straight into an MCP server's stdin: a tool call with no
policy check and no event. Must be refused (Landlock's ptrace scoping covers /proc/<pid>/fd)."""

mcp = ARGS["mcp_pid"]


def inject():
    request = {"jsonrpc": "2.0", "id": 424242, "method": "tools/call",
               "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    with open("/proc/%d/fd/0" % mcp, "w") as stdin:
        stdin.write(json.dumps(request) + "\n")
    return "wrote a tools/call into MCP server %d's stdin" % mcp


attempt("write JSON-RPC into /proc/%d/fd/0 (an MCP server)" % mcp, inject, refused=PROC_REFUSED)
