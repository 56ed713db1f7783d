"""Reach: the control API, with its key as if stolen, running nested code that would escape
this run's limits. The connection must be refused (Landlock TCP: only the IPC port)."""

host, port = ARGS["control"]


def nested():
    body = json.dumps({"code": "print('nested run by escape')"}).encode()
    return http(host, port, "POST", "/v1/exec_code", body,
                [("X-API-Key", ARGS["api_key"]), ("Content-Type", "application/json")])


attempt("connect to the control API %s:%d and run nested code" % (host, port), nested)
