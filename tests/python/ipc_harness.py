"""A stand-in for the sidecar's IPC server, for testing the SDK: HTTP/1.1 keep-alive `POST /call`
on 127.0.0.1, bearer token checked, every request and TCP connection recorded.

It runs its own event loop in a thread, so a test can run the real bootstrap as a subprocess
against it. The Rust integration tests cover the real server; this one only has to speak the
wire format of docs/runner-protocol.md and behave as each test needs (tools by name below).
"""

import asyncio
import json
import socket
import struct
import threading

# Upper bound on any one simulated tool, so a broken test cannot hang the harness forever.
MAX_SLEEP_SECONDS = 30


def _json_response(status, payload, extra_headers=b""):
    body = json.dumps(payload).encode()
    reason = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found",
              413: b"Payload Too Large"}.get(status, b"Status")
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
            % (status, reason, len(body), extra_headers, body))


def _error(status, kind, message):
    return _json_response(status, {"ok": False, "error": {"type": kind, "message": message}})


class _Connection(asyncio.Protocol):
    def __init__(self, server):
        self.server = server
        self.buffer = bytearray()
        self.transport = None
        # A request being answered asynchronously: later ones wait, as on a real server.
        self.busy = False

    def connection_made(self, transport):
        self.transport = transport
        self.server.connections += 1

    def data_received(self, data):
        self.buffer += data
        if not self.busy:
            self._process()

    def _process(self):
        while not self.busy and self.transport is not None and not self.transport.is_closing():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if length > self.server.max_body and len(self.buffer) > end + 4 + self.server.max_body:
                # Like the sidecar (axum's to_bytes with a limit): 413 once the limit is passed,
                # the rest of the body unread, the connection closed.
                self.server.requests.append({"method": method, "path": path,
                                             "headers": headers, "body": None, "json": None})
                self.transport.write(_error(413, "too_large", "a body is limited to %d bytes"
                                            % self.server.max_body))
                self.transport.close()
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4:end + 4 + length])
            del self.buffer[:end + 4 + length]
            self._handle(method, path, headers, body)

    def _handle(self, method, path, headers, body):
        server = self.server
        record = {"method": method, "path": path, "headers": headers, "body": body}
        try:
            record["json"] = json.loads(body)
        except ValueError:
            record["json"] = None
        server.requests.append(record)
        if headers.get("authorization") != "Bearer " + server.token:
            self.transport.write(_error(401, "unauthorized", "missing or wrong run token"))
            return
        if method != "POST" or path != "/call":
            self.transport.write(_error(404, "not_found", "no such path"))
            return
        call = record["json"]
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
            self.transport.write(_error(400, "bad_request", "malformed call"))
            return
        tool, args = call["tool"], call.get("args") or {}
        handler = getattr(self, "tool_" + tool.replace("-", "_"), None)
        if handler is None:
            self._answer({"ok": True, "result": {"tool": tool, "args": args}})
        else:
            handler(args)

    def _answer(self, payload, extra_headers=b""):
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_json_response(200, payload, extra_headers))

    def _later(self, coro):
        self.busy = True

        async def run():
            try:
                await coro
            finally:
                self.busy = False
                if self.transport is not None and not self.transport.is_closing():
                    self._process()

        asyncio.ensure_future(run())

    # Tools with behaviours; any other name answers {"tool", "args"}.

    def tool_noop(self, args):
        self._answer({"ok": True, "result": None})

    def tool_sleep(self, args):
        async def sleep():
            await asyncio.sleep(min(float(args.get("seconds", 0)), MAX_SLEEP_SECONDS))
            self._answer({"ok": True, "result": args.get("value")})

        self._later(sleep())

    def tool_fail(self, args):
        self._answer({"ok": False, "error": {"type": args.get("type", "tool"),
                                             "message": args.get("message", "it failed")}})

    def tool_status(self, args):
        status = int(args.get("status", 500))
        self.transport.write(_error(status, args.get("type", "bad_request"),
                                    args.get("message", "HTTP error")))

    def tool_chunked(self, args):
        body = json.dumps({"ok": True, "result": args.get("value")}).encode()
        half = len(body) // 2
        chunks = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\n\r\n" % (
            half, body[:half], len(body) - half, body[half:])
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n" + chunks)

    def tool_close_after(self, args):
        self._answer({"ok": True, "result": args.get("value")}, b"Connection: close\r\n")
        self.transport.close()

    def tool_close_later(self, args):
        # Answers, then closes the idle connection (FIN) shortly after.
        self._answer({"ok": True, "result": args.get("value")})
        transport = self.transport
        asyncio.get_running_loop().call_later(0.05, transport.close)

    def tool_reset_later(self, args):
        # Answers, then resets the idle connection (RST) shortly after.
        self._answer({"ok": True, "result": args.get("value")})
        transport = self.transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        asyncio.get_running_loop().call_later(0.05, transport.abort)

    def tool_drop(self, args):
        # Breaks the connection after reading the request: the call may have been dispatched.
        self.transport.abort()

    def tool_hang(self, args):
        async def hang():
            await asyncio.sleep(MAX_SLEEP_SECONDS)

        self._later(hang())

    def connection_lost(self, exc):
        self.transport = None


class IpcServer:
    """`with IpcServer(token) as server:` serves on `server.address` until the block ends."""

    def __init__(self, token="test-token", max_body=4 << 20):
        self.token = token
        self.max_body = max_body
        self.requests = []
        self.connections = 0
        self.address = None
        self._loop = None
        self._thread = None
        self._server = None

    def __enter__(self):
        ready = threading.Event()

        def serve():
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                loop.create_server(lambda: _Connection(self), "127.0.0.1", 0))
            host, port = self._server.sockets[0].getsockname()[:2]
            self.address = "%s:%d" % (host, port)
            ready.set()
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("IPC harness did not start")
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def calls(self):
        """The `/call` bodies received, in order."""
        return [r["json"] for r in self.requests]
