"""The runtime's side of ptc-sidecar for native PTC (the provider runs the model's code): the
native tool list (ETag-cached) and one tool call through the sidecar, for
examples/anthropic_native_agent.py and examples/openai_native_agent.py. Standard library only.

PTC_URL (default http://127.0.0.1:7400) is the sidecar; PTC_API_KEY its key, when it has one.
"""

import json
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ptc_client import HTTP_TIMEOUT_S, PTC_API_KEY, PTC_URL, SidecarError, _http

# Calls of one turn sent at once: a provider's code that gathered its calls gets them back
# together, and one waiting for a person holds up none of the others.
MAX_PARALLEL_CALLS = 16
# A call may wait for a person (PTC_APPROVAL_TIMEOUT, 300 s by default) and then for its tool
# (PTC_TOOL_TIMEOUT): the sidecar bounds both and answers; this only catches a dead sidecar.
CALL_TIMEOUT_S = 900


def _send(method, path, body=None, headers=None, timeout=HTTP_TIMEOUT_S):
    """One request: (status, JSON body); a refusal's body is read, not raised."""
    headers = dict(headers or {})
    if PTC_API_KEY:
        headers["X-API-Key"] = PTC_API_KEY
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(PTC_URL + path, data, headers, method=method)
    try:
        with _http.open(request, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 304:
            return 304, None
        text = e.read().decode("utf-8", "replace")
        if e.code == 401:
            raise SidecarError(f"ptc-sidecar refused {method} {path}: HTTP 401 (set PTC_API_KEY to the sidecar's key)") from None
        try:
            return e.code, json.loads(text)
        except json.JSONDecodeError:
            raise SidecarError(f"ptc-sidecar refused {method} {path}: HTTP {e.code}: {text[:500]}") from None
    except (urllib.error.URLError, OSError) as e:
        raise SidecarError(f"cannot reach ptc-sidecar at {PTC_URL} ({e}): start it or set PTC_URL") from None


class NativeSidecar:
    def __init__(self, fmt):
        self.format = fmt  # "anthropic" or "openai"
        self.etag = None
        self.tools = []

    def refresh_tools(self):
        """The native tool list (direct tools, the provider's code tool, the tools its code may
        call); refetched only when the catalog changed (ETag)."""
        headers = {"If-None-Match": self.etag} if self.etag else {}
        status, body = _send("GET", f"/v1/tools?format={self.format}&ptc=native", headers=headers)
        if status == 304:
            return self.tools
        if status != 200:
            raise SidecarError(f"ptc-sidecar refused GET /v1/tools: HTTP {status}: {body}")
        self.etag, self.tools = body["etag"], body["tools"]
        names = ", ".join(t.get("name") or t["type"] for t in self.tools)
        print(f"[tools] catalog version {body['version']}: {names}", file=sys.stderr)
        return self.tools

    def call(self, tool, input, caller=None, session_id=None):
        """One call through the sidecar (its schema check, approvals, limits, events):
        (True, result as text) or (False, the error as text, its type first)."""
        body = {"tool": tool, "input": input, "caller": caller or "runtime"}
        if session_id:
            body["session_id"] = session_id
        status, answer = _send("POST", "/v1/tools/call", body, timeout=CALL_TIMEOUT_S)
        if status == 200:
            result = answer["result"]
            return True, result if isinstance(result, str) else json.dumps(result)
        error = answer.get("error") or {}
        return False, f"{error.get('type', 'error')}: {error.get('message', answer)}"

    def call_all(self, calls):
        """`call(*args)` for each of `calls`, at once; the answers in order."""
        if len(calls) <= 1:
            return [self.call(*c) for c in calls]
        with ThreadPoolExecutor(min(len(calls), MAX_PARALLEL_CALLS)) as pool:
            return list(pool.map(lambda c: self.call(*c), calls))
