"""Secrets: the tools manifest (its callback's Authorization header) and the MCP config (a
server's env, a URL with an api_key) read from disk. Both reads must be refused."""

attempt("read the tools manifest %s" % ARGS["tools_file"],
        lambda: read_file(ARGS["tools_file"]).decode("utf-8", "replace"))
attempt("read the MCP config %s" % ARGS["mcp_config"],
        lambda: read_file(ARGS["mcp_config"]).decode("utf-8", "replace"))
