"""Reach: the host's callback URL, called straight, for the *direct* tool `complete` (never
callable from code, and its arguments unchecked). The connection must be refused; the harness
also checks that `complete` was never called."""

host, port, path = ARGS["callback"]


def call_complete():
    body = json.dumps({"id": "escape", "tool": "complete",
                       "input": {"answer": "forged by " + ARGS["mark"]}}).encode()
    return http(host, port, "POST", path, body,
                [("Authorization", ARGS["callback_auth"]), ("Content-Type", "application/json")])


attempt("POST %s:%d%s tool=complete" % (host, port, path), call_complete)
