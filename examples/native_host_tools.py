"""The example's host tools (examples/host_tools.py) served as ptc-sidecar's host callback, for
the native PTC examples (examples/anthropic_native_agent.py, examples/openai_native_agent.py).

There the provider runs the model's code, and every call it makes goes to the sidecar's
POST /v1/tools/call; a host tool's call then comes here, the manifest's `callback.url`
(examples/native-tools.json: http://127.0.0.1:7401/), as POST {id, tool, input} → {result} or
{error}. Standard library only.

    python3 examples/native_host_tools.py [PORT]      # default 7401; 0 picks a free port

Prints `listening on http://127.0.0.1:PORT/` once it takes calls.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import host_tools

# A call is a small JSON object; a bigger body is refused before it is read.
MAX_BODY_BYTES = 1 << 20


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            return self._answer(413, {"error": f"the body is limited to {MAX_BODY_BYTES} bytes"})
        try:
            call = json.loads(self.rfile.read(length))
            answer = {"result": host_tools.call(call["tool"], call.get("input") or {})}
        except Exception as e:  # the caller's code gets it as the tool's error
            answer = {"error": f"{type(e).__name__}: {e}"}
        self._answer(200, answer)

    def _answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet: the sidecar's events say what was called
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 7401
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
