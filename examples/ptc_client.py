"""The runtime's side of ptc-sidecar, for the example agents: the tool list (ETag-cached), an
exec_code run over the attached event stream with host tool calls answered as they arrive,
and the run's result as the text the model reads. Standard library only.

PTC_URL (default http://127.0.0.1:7400) is the sidecar; PTC_API_KEY its key, when it has one.
"""

import json
import os
import sys
import urllib.error
import urllib.request

PTC_URL = os.environ.get("PTC_URL", "http://127.0.0.1:7400").rstrip("/")
PTC_API_KEY = os.environ.get("PTC_API_KEY")
# A request to the sidecar that gets no byte for this long is dead: the event stream sends a
# keep-alive every 15 s, and a run is bounded by the sidecar's PTC_TIMEOUT.
HTTP_TIMEOUT_S = 60
# The sidecar is beside the runtime: never send its traffic (or its key) through a proxy.
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SidecarError(Exception):
    """The sidecar could not be reached or refused a request; the message says why."""


def _request(method, path, body=None, headers=None):
    """One request to the sidecar; a 304 comes back as the HTTPError urllib raises for it."""
    headers = dict(headers or {})
    if PTC_API_KEY:
        headers["X-API-Key"] = PTC_API_KEY
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(PTC_URL + path, data, headers, method=method)
    try:
        return _http.open(request, timeout=HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 304:
            raise
        detail = e.read().decode("utf-8", "replace")[:500]
        hint = " (set PTC_API_KEY to the sidecar's key)" if e.code == 401 else ""
        raise SidecarError(f"ptc-sidecar refused {method} {path}: HTTP {e.code}{hint}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        raise SidecarError(f"cannot reach ptc-sidecar at {PTC_URL} ({e}): start it or set PTC_URL") from None


class Sidecar:
    def __init__(self, fmt):
        self.format = fmt  # "anthropic" or "openai": the shape of the tool list
        self.etag = None
        self.tools = []

    def refresh_tools(self):
        """The tool list to hand the model; refetched only when the catalog changed (ETag)."""
        headers = {"If-None-Match": self.etag} if self.etag else {}
        try:
            with _request("GET", f"/v1/tools?format={self.format}", headers=headers) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 304:
                return self.tools
            raise
        self.etag, self.tools = body["etag"], body["tools"]
        names = ", ".join(t.get("name") or t["function"]["name"] for t in self.tools)
        print(f"[tools] catalog version {body['version']}: {names}", file=sys.stderr)
        return self.tools

    def exec_code(self, args, host_call):
        """Runs the model's exec_code call; `host_call(name, input)` answers host tool calls.
        Returns the run's result (`done`): {status, stdout, stderr, exit_code, tool_calls, ...}.

        Calls are answered one at a time, as they arrive; a runtime with slow tools can answer
        them from threads instead (the sidecar takes answers in any order, in any number of
        requests), or the calls the code gathered wait for each other."""
        body = {"code": args["code"]}
        if args.get("timeout"):
            body["timeout"] = args["timeout"]
        exec_id = None
        with _request("POST", "/v1/exec_code", body, {"Accept": "text/event-stream"}) as stream:
            for event, data in _events(stream):
                if event == "started":
                    exec_id = data["exec_id"]
                elif event == "tool_call":
                    answer = {"id": data["id"]}
                    try:
                        answer["result"] = host_call(data["tool"], data["input"])
                    except Exception as e:  # the model's code gets it as a ToolError
                        answer["error"] = f"{type(e).__name__}: {e}"
                    _request("POST", f"/v1/exec/{exec_id}/results", {"results": [answer]}).close()
                elif event == "done":
                    return data
        raise SidecarError("ptc-sidecar's event stream ended without a result")


def _events(stream):
    """Server-sent events as (event, data) pairs; keep-alive comments are skipped."""
    event, data = None, []
    for raw in stream:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and event:
            yield event, json.loads("\n".join(data))
            event, data = None, []


def result_text(done):
    """A run's result as the model reads it best: what the code printed, then stderr and the
    status only when there is something to say, then the files the run made."""
    parts = [done["stdout"].rstrip("\n")] if done["stdout"] else []
    if done["stderr"]:
        parts.append("stderr:\n" + done["stderr"].rstrip("\n"))
    if done["status"] != "ok":
        parts.append(f"status: {done['status']} (exit code {done.get('exit_code')})")
    for f in done.get("files", []):
        parts.append(f"file: {f['name']} ({f['mime']}, {f['size']} bytes) at {PTC_URL}{f['url']}")
    return "\n".join(parts) or "(the code printed nothing)"
