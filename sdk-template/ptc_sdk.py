"""The SDK of a code run: tool errors, the IPC client, the tool stubs, `call_tool`, `describe`.

Owns what the user's code sees of the catalog (one async stub per tool, by its Python name, in
the `tools` module) and how a call reaches the sidecar (`POST /call` on its loopback IPC server,
docs/runner-protocol.md). It must not validate arguments against schemas (the sidecar does, and
answers `input` errors) and must not import more than the bootstrap already pays for: start-up
time is the latency of every cold run.

Errors raised here are the ones the model sees, so they say who has to act: `ToolInputError`
(fix the arguments), `ToolDenied` (a person said no, `denied`), `ToolError` with the sidecar's
`type` (`unknown_tool`, `tool`, `timeout`, `limit`, `rate_limited`, `unavailable`, or the `type`
of a non-200 answer), and two types of the SDK's own:
`timeout` (no answer within `call_timeout`) and `ipc` (the connection to the sidecar broke or
it answered something that is not the protocol).
"""

import asyncio
import inspect
import json
import keyword
import re
import socket
import sys
import types
import weakref
from collections import deque
from collections.abc import Coroutine

__all__ = ["ToolDenied", "ToolError", "ToolInputError", "call_tool", "describe", "search_tools"]

# Most connections open to the IPC server at once. Calls beyond it wait for a free one: a
# gather of thousands of calls must not open thousands of sockets on the sidecar.
MAX_CONNECTIONS = 32

# Longest response head accepted; a peer that never ends its headers cannot grow memory.
MAX_HEAD_BYTES = 64 * 1024

# An idle connection unused for longer than this is probed before reuse: the sidecar may have
# closed it while the user's code blocked the event loop (time.sleep, heavy work), and a request
# written to it would then fail after being sent, which is not retried.
IDLE_PROBE_SECONDS = 0.25

_HEAD_END = b"\r\n\r\n"
_CRLF = b"\r\n"


# ---------------------------------------------------------------------------------------------
# Errors


class ToolError(Exception):
    """A tool call failed. `str(e)` is the message; `e.type` says why (`tool`, `timeout`, ...)."""

    def __init__(self, message="", type="tool"):
        super().__init__(message)
        self.type = type


class ToolInputError(ToolError):
    """The arguments do not match the tool's input schema; nothing was dispatched."""

    def __init__(self, message="", type="input"):
        super().__init__(message, type)


class ToolDenied(ToolError):
    """A person denied the call, or did not answer in time (`PTC_APPROVE_TOOLS`): the tool was
    not called. `str(e)` carries their reason; the code may catch it and go on."""

    def __init__(self, message="", type="denied"):
        super().__init__(message, type)


# Tracebacks print `ToolError: msg`, as for a builtin: the user's code has them as globals.
ToolError.__module__ = "__main__"
ToolInputError.__module__ = "__main__"
ToolDenied.__module__ = "__main__"


def _error_from(error):
    """The exception for the `error` object of an answer."""
    if not isinstance(error, dict):
        return ToolError("malformed error from the sidecar: %r" % (error,), "ipc")
    kind = error.get("type")
    if not isinstance(kind, str) or not kind:
        kind = "tool"
    message = error.get("message")
    if not isinstance(message, str):
        message = kind if message is None else str(message)
    if kind == "input":
        return ToolInputError(message)
    if kind == "denied":
        return ToolDenied(message)
    return ToolError(message, kind)


class _Deadline(Exception):
    """Set on a connection's reader by the watchdog when a call outlives `call_timeout`."""


# ---------------------------------------------------------------------------------------------
# The IPC client


class _Conn:
    __slots__ = ("sock", "reader", "writer", "transport", "deadline", "timed_out", "last_used")

    def __init__(self, sock, reader, writer, now):
        self.sock = sock
        self.reader = reader
        # Kept alive on purpose: a collected StreamWriter closes its transport (3.11.5+).
        self.writer = writer
        self.transport = writer.transport
        # Loop time by which the call in flight must be answered; 0 while idle.
        self.deadline = 0.0
        self.timed_out = False
        self.last_used = now

    def closed_while_idle(self, now):
        """Whether the peer closed this idle connection, even if the loop has not seen it."""
        if self.transport.is_closing() or self.reader.at_eof():
            return True
        if now - self.last_used < IDLE_PROBE_SECONDS:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True  # b"": closed; a byte: an answer nobody asked for


class _Pool:
    """The connections of one event loop: a LIFO of idle ones and FIFO waiters for a slot."""

    __slots__ = ("loop", "idle", "conns", "waiters", "opening", "timer")

    def __init__(self, loop):
        self.loop = loop
        self.idle = []
        self.conns = []
        self.waiters = deque()
        # Connections being opened: they count against MAX_CONNECTIONS before they exist.
        self.opening = 0
        self.timer = None


class _Client:
    """HTTP/1.1 keep-alive client of `POST /call`, one pool per event loop."""

    def __init__(self):
        self.host = None
        self.port = 0
        self.ipc = ""
        self.token = ""
        self.timeout = None
        self._prefix = b""
        self._pool = None
        self._pools = weakref.WeakKeyDictionary()
        # UTF-8 rather than \u escapes: up to 6x smaller bodies for non-ASCII text, which the
        # sidecar's body limit counts. NaN and Infinity are not JSON: refused here.
        self._encode = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode

    def configure(self, ipc, token, call_timeout):
        # A session's interpreter runs job after job, each on an event loop of its own: the
        # connections of the earlier runs' loops are closed here, or their descriptors would
        # pile up to the run's RLIMIT_NOFILE (the sidecar ends them on its side too).
        self.close_all()
        ipc = str(ipc or "")
        self.ipc = ipc
        self.token = str(token or "")
        host, _, port = ipc.rpartition(":")
        self.host = host[1:-1] if host.startswith("[") else host
        try:
            self.port = int(port)
        except ValueError:
            self.port = 0
        try:
            timeout = float(call_timeout)
        except (TypeError, ValueError):
            timeout = 0.0
        # Not positive: no client-side limit, the sidecar's per-call limit still applies.
        self.timeout = timeout if timeout > 0 else None
        # Everything but the length is the same for every call.
        self._prefix = (
            "POST /call HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
            "Content-Type: application/json\r\nContent-Length: " % (ipc, token or "")
        ).encode("latin-1")

    def close_all(self):
        """Closes every connection of every pool (their loops are over)."""
        for pool in list(self._pools.values()):
            for conn in pool.conns + pool.idle:
                try:
                    conn.sock.close()
                except OSError:
                    pass
            pool.conns.clear()
            pool.idle.clear()
        self._pools.clear()
        self._pool = None

    def _pool_for(self, loop):
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = _Pool(loop)
        self._pool = pool
        return pool

    async def call(self, tool, args):
        try:
            body = self._encode({"tool": tool, "args": args}).encode()
        except UnicodeEncodeError as e:
            raise ToolInputError(
                "arguments of %s are not JSON: a string holds the lone surrogate %r"
                % (tool, e.object[e.start:e.end])
            ) from None
        except (TypeError, ValueError) as e:
            raise ToolInputError("arguments of %s are not JSON: %s" % (tool, e)) from None
        request = b"%s%d\r\n\r\n%s" % (self._prefix, len(body), body)
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.loop is not loop:
            pool = self._pool_for(loop)

        retried = False
        while True:
            conn = None
            idle = pool.idle
            if idle:
                now = loop.time()
                while idle:
                    conn = idle.pop()
                    if conn.closed_while_idle(now):
                        self._discard(pool, conn)
                        conn = None
                        continue
                    break
            if conn is None:
                try:
                    conn = await self._acquire(pool)
                except ToolError as e:
                    # Connecting failed: nothing was sent, one more try is safe.
                    if retried or e.type != "ipc":
                        raise
                    retried = True
                    continue
            transport = conn.transport
            transport.write(request)
            if transport.is_closing():
                # The write failed at once: nothing reached the sidecar, so a retry cannot
                # dispatch the call twice.
                self._discard(pool, conn)
                if retried:
                    raise ToolError("the connection to the sidecar broke", "ipc")
                retried = True
                continue
            break

        timeout = self.timeout
        if timeout is not None:
            conn.deadline = deadline = loop.time() + timeout
            if pool.timer is None:
                pool.timer = loop.call_at(deadline, self._watch, pool)
        reader = conn.reader
        try:
            head = await reader.readuntil(_HEAD_END)
            while head[9:10] == b"1":
                # An interim 1xx answer; the real one follows.
                head = await reader.readuntil(_HEAD_END)
            if head[:7] != b"HTTP/1." or head[12:13] not in (b" ", b"\r"):
                raise ValueError("not an HTTP/1.x answer")
            status = int(head[9:12])
            lower = head.lower()
            keep = lower.find(b"\r\nconnection: close") < 0
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                body = await reader.readexactly(int(lower[i + 17 : lower.find(_CRLF, i + 17)]))
            elif lower.find(b"\r\ntransfer-encoding:") >= 0 and b"chunked" in lower:
                body = await _read_chunked(reader)
            else:
                body = await reader.read()
                keep = False
        except BaseException as e:
            conn.deadline = 0.0
            self._discard(pool, conn)
            if conn.timed_out:
                raise ToolError(
                    "no answer from the sidecar within %gs" % timeout, "timeout"
                ) from None
            if isinstance(e, (OSError, EOFError, ValueError, asyncio.LimitOverrunError)):
                raise ToolError(
                    "the connection to the sidecar broke during a call to %s: %s"
                    % (tool, type(e).__name__),
                    "ipc",
                ) from None
            raise
        conn.deadline = 0.0
        if keep and status == 200 and not transport.get_write_buffer_size():
            # Reused only after a normal answer to a request that went out whole: an error
            # status (413 above all) may come before the sidecar read the whole body, and the
            # rest of it would be taken for the next request, or the sidecar closes the
            # connection right after.
            conn.last_used = loop.time()
            self._release(pool, conn)
        else:
            self._discard(pool, conn)

        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if status == 200 and type(answer) is dict:
            if answer.get("ok") is True:
                return answer.get("result")
            if answer.get("ok") is False:
                raise _error_from(answer.get("error"))
        if status != 200:
            error = answer.get("error") if type(answer) is dict else None
            if isinstance(error, dict):
                message = error.get("message")
                kind = error.get("type")
            else:
                message = kind = None
            if not isinstance(message, str):
                message = "HTTP %d from the sidecar" % status
            if not isinstance(kind, str) or not kind:
                kind = "ipc"
            raise ToolError(message, kind)
        raise ToolError("malformed answer from the sidecar: %.200r" % (body,), "ipc")

    async def _acquire(self, pool):
        """A connection for one call: a new one while under the cap, else the next freed one."""
        loop = pool.loop
        while True:
            if len(pool.conns) + pool.opening < MAX_CONNECTIONS:
                pool.opening += 1
                try:
                    conn = await self._connect()
                except BaseException as e:
                    pool.opening -= 1
                    self._wake(pool, None)
                    if isinstance(e, (OSError, asyncio.TimeoutError)):
                        raise ToolError(
                            "cannot connect to the sidecar at %s:%s: %s%s"
                            % (self.host, self.port, e.__class__.__name__,
                               ": %s" % (e,) if str(e) else ""),
                            "ipc",
                        ) from None
                    raise
                pool.opening -= 1
                pool.conns.append(conn)
                return conn
            waiter = loop.create_future()
            pool.waiters.append(waiter)
            try:
                conn = await waiter
            except BaseException:
                # Cancelled after being handed a connection: pass it on, do not leak it.
                if waiter.done() and not waiter.cancelled():
                    handed = waiter.result()
                    if handed is None:
                        self._wake(pool, None)
                    else:
                        self._release(pool, handed)
                raise
            if conn is None:
                continue  # a slot freed up: open a connection
            if conn.closed_while_idle(loop.time()):
                self._discard(pool, conn)
                continue
            return conn

    async def _connect(self):
        if not self.port:
            raise ConnectionRefusedError("no IPC address")
        loop = asyncio.get_running_loop()
        # Our own socket, so that an idle connection can be probed (closed_while_idle).
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        try:
            sock.setblocking(False)
            connect = loop.sock_connect(sock, (self.host, self.port))
            # Only the connect is bounded here: on loopback it is instant unless the sidecar
            # is gone.
            if self.timeout is not None:
                await asyncio.wait_for(connect, self.timeout)
            else:
                await connect
            reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_HEAD_BYTES)
        except BaseException:
            sock.close()
            raise
        return _Conn(sock, reader, writer, loop.time())

    def _release(self, pool, conn):
        if not self._wake(pool, conn):
            pool.idle.append(conn)

    def _discard(self, pool, conn):
        try:
            pool.conns.remove(conn)
        except ValueError:
            return
        conn.transport.abort()
        self._wake(pool, None)

    def _wake(self, pool, value):
        """Hands `value` (a connection, or None: a freed slot to open one in) to the first live
        waiter; False when nobody waits."""
        waiters = pool.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(value)
                return True
        return False

    def _watch(self, pool):
        """The one timer of a pool: fails calls past their deadline, re-arms for the next."""
        pool.timer = None
        now = pool.loop.time()
        nearest = None
        for conn in list(pool.conns):
            deadline = conn.deadline
            if not deadline:
                continue
            if deadline <= now:
                conn.deadline = 0.0
                conn.timed_out = True
                conn.reader.set_exception(_Deadline())
                conn.transport.abort()
            elif nearest is None or deadline < nearest:
                nearest = deadline
        if nearest is not None:
            pool.timer = pool.loop.call_at(nearest, self._watch, pool)


async def _read_chunked(reader):
    parts = []
    while True:
        line = await reader.readuntil(_CRLF)
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            # Trailers, up to the empty line.
            while (await reader.readuntil(_CRLF)) != _CRLF:
                pass
            return b"".join(parts)
        chunk = await reader.readexactly(size + 2)
        parts.append(chunk[:-2])


_client = _Client()


def configure(job):
    """Points the client at the run's IPC server (the bootstrap calls this with the job)."""
    _client.configure(job.get("ipc"), job.get("token"), job.get("call_timeout"))


# ---------------------------------------------------------------------------------------------
# Calls: awaitable, and a hint when one is never awaited

# Calls created and neither started nor collected; only when it is not 0 does the exit check
# walk the heap.
_pending = 0
# `(label, filename, line)` of the call sites already hinted, so each prints once.
_hinted = set()


def _hint_unawaited(label, site):
    key = (label,) + site
    if key in _hinted:
        return
    _hinted.add(key)
    try:
        sys.stderr.write(
            "hint: %s(...) was never awaited; use await %s(...)\n" % (label, label)
        )
    except Exception:
        pass


class _Call(Coroutine):
    """One tool call: runs when awaited (or scheduled as a task), like a coroutine."""

    __slots__ = ("_tool", "_args", "_label", "_site", "_coro")

    def __init__(self, tool, args, label, site):
        global _pending
        self._coro = None
        self._tool = tool
        self._args = args
        self._label = label
        self._site = site
        _pending += 1

    def _start(self):
        global _pending
        if self._coro is not None:
            raise RuntimeError("cannot reuse already awaited coroutine")
        _pending -= 1
        self._coro = coro = _client.call(self._tool, self._args)
        return coro

    def __await__(self):
        return self._start().__await__()

    def send(self, value):
        coro = self._coro
        if coro is None:
            coro = self._start()
        return coro.send(value)

    def throw(self, *exc):
        coro = self._coro
        if coro is None:
            coro = self._start()
        return coro.throw(*exc)

    def close(self):
        coro = self._coro
        if coro is None:
            coro = self._start()
        coro.close()

    def __del__(self):
        global _pending
        if self._coro is None:
            _pending -= 1
            _hint_unawaited(self._label, self._site)

    def __repr__(self):
        return "<tool call %s(...)>" % self._label


def report_unawaited():
    """At exit: a hint for every call still pending that was never awaited.

    `_pending` counts calls neither started nor finalized, including those in unreachable
    cycles, so when it is 0 there is nothing to find and the collection is skipped.
    """
    if _pending <= 0:
        return
    import gc

    # Finalizes unreachable calls first (their __del__ hints), then finds the reachable ones.
    gc.collect()
    if _pending <= 0:
        return
    for obj in gc.get_objects():
        if type(obj) is _Call and obj._coro is None:
            _hint_unawaited(obj._label, obj._site)


def _site(frame):
    return (frame.f_code.co_filename, frame.f_lineno)


def call_tool(name, args=None, /, **kwargs):
    """Calls a tool by its original name: `await call_tool("get-weather", city="Paris")`.

    The arguments go as given (a dict, keywords, or both): no defaults are filled in.
    """
    if args is None:
        merged = kwargs
    elif isinstance(args, dict):
        merged = dict(args)
        merged.update(kwargs)
    else:
        raise TypeError("call_tool() arguments must be a dict, not %s" % type(args).__name__)
    tool = _catalog.by_name.get(name)
    if tool is None:
        tool = _catalog.by_python_name.get(name)
    if tool is not None:
        name = tool["name"]
    elif not isinstance(name, str):
        raise TypeError("call_tool() tool name must be a str, not %s" % type(name).__name__)
    return _Call(name, merged, "call_tool", _site(sys._getframe(1)))


# ---------------------------------------------------------------------------------------------
# Stubs


class _Unset:
    """The default of an optional parameter without a schema default: never sent."""

    __slots__ = ()

    def __repr__(self):
        return "<tool default>"


_UNSET = _Unset()


def _is_name(name):
    """A name usable as a Python parameter; the same as the signature line prints bare."""
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def _resolve(root, schema, seen):
    """Follows local `$ref`s (`#/$defs/X`), each at most once."""
    while isinstance(schema, dict):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#") or ref in seen:
            return schema
        seen.append(ref)
        target = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict):
                target = target.get(part)
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return None
        schema = target
    return schema


def _merge_all_of(root, schema, props, required, seen):
    for member in schema.get("allOf") or ():
        member = _resolve(root, member, seen)
        if not isinstance(member, dict):
            continue
        more = member.get("properties")
        if isinstance(more, dict):
            for key, value in more.items():
                props.setdefault(key, value)
        for key in member.get("required") or ():
            if key not in required:
                required.append(key)
        _merge_all_of(root, member, props, required, seen)


def _params(schema):
    """`(fields, open)` of an input schema, as the signature line shows them: `fields` is a
    list of `(name, required, default, description)`, required first, each group in schema
    order, or None when the schema lists no properties (`(**kwargs)`); `open` says whether
    names outside the properties may be passed."""
    root = schema
    schema = _resolve(root, schema, [])
    if not isinstance(schema, dict):
        return None, True
    props = schema.get("properties")
    props = dict(props) if isinstance(props, dict) else None
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    if schema.get("allOf"):
        merged = {} if props is None else props
        _merge_all_of(root, schema, merged, required, [])
        if props is not None or merged:
            props = merged
    if props is None:
        return None, True
    # Names outside the properties are accepted only where the schema says so: a misspelt
    # keyword is a TypeError at the call, as for any Python function, not a silent no-op.
    extra = schema.get("additionalProperties")
    is_open = extra is True or isinstance(extra, dict) or bool(schema.get("patternProperties"))
    fields = []
    for name, prop in props.items():
        prop = _resolve(root, prop, [])
        if not isinstance(prop, dict):
            prop = {}
        default = prop["default"] if "default" in prop else _UNSET
        description = prop.get("description")
        if not isinstance(description, str):
            description = ""
        fields.append((name, name in required, default, description))
    fields.sort(key=lambda f: not f[1])
    return fields, is_open


def _quote(names):
    quoted = ["%r" % n for n in names]
    if len(quoted) == 1:
        return quoted[0]
    return "%s and %s" % (", ".join(quoted[:-1]), quoted[-1])


def _make_stub(tool):
    name = tool["name"]
    python_name = tool["python_name"]
    fields, is_open = _params(tool.get("input_schema"))
    fields = fields or []

    # Positional binding follows the signature line, up to the first name that cannot be a
    # Python parameter: after it, names are keyword-only, so a positional argument never skips
    # a parameter the model saw.
    positional = []
    for field in fields:
        if not _is_name(field[0]):
            break
        positional.append(field[0])
    positional = tuple(positional)
    npos = len(positional)
    known = frozenset(f[0] for f in fields)
    required = tuple(f[0] for f in fields if f[1])
    defaults = tuple((f[0], f[2]) for f in fields if not f[1] and f[2] is not _UNSET)
    label = python_name

    def stub(*args, **kwargs):
        if args:
            if len(args) > npos:
                raise TypeError(
                    "%s() takes %d positional argument%s but %d %s given"
                    % (label, npos, "" if npos == 1 else "s", len(args),
                       "was" if len(args) == 1 else "were")
                )
            # Arguments in signature order, as the tool (and the events) will see them.
            bound = dict(zip(positional, args))
            if kwargs:
                for key in kwargs:
                    if key in bound:
                        raise TypeError(
                            "%s() got multiple values for argument %r" % (label, key)
                        )
                bound.update(kwargs)
            kwargs = bound
        if not is_open:
            for key in kwargs:
                if key not in known:
                    raise TypeError(
                        "%s() got an unexpected keyword argument %r" % (label, key)
                    )
        for key in required:
            if key not in kwargs:
                missing = [k for k in required if k not in kwargs]
                raise TypeError(
                    "%s() missing %d required argument%s: %s"
                    % (label, len(missing), "" if len(missing) == 1 else "s", _quote(missing))
                )
        for key, default in defaults:
            if key not in kwargs:
                kwargs[key] = default
        for value in kwargs.values():
            if value is _UNSET:
                # Passed explicitly (it is visible in __signature__): same as leaving it out.
                kwargs = {k: v for k, v in kwargs.items() if v is not _UNSET}
                break
        return _Call(name, kwargs, label, _site(sys._getframe(1)))

    params = []
    keyword_only = False
    for field_name, is_required, default, _ in fields:
        if not _is_name(field_name):
            keyword_only = True
            continue
        kind = (
            inspect.Parameter.KEYWORD_ONLY if keyword_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        if is_required:
            params.append(inspect.Parameter(field_name, kind))
        else:
            params.append(inspect.Parameter(field_name, kind, default=default))
    if is_open or keyword_only:
        var = "kwargs"
        while var in known:
            var += "_"
        params.append(inspect.Parameter(var, inspect.Parameter.VAR_KEYWORD))

    stub.__name__ = python_name
    stub.__qualname__ = python_name
    stub.__module__ = "tools"
    stub.__signature__ = inspect.Signature(params, __validate_parameters__=False)
    stub.__doc__ = _doc(tool, fields)
    stub._ptc_tool = tool
    _mark_coroutine_function(stub)
    return stub


def _mark_coroutine_function(func):
    """So that `inspect`/`asyncio.iscoroutinefunction` say what the stub behaves as."""
    mark = getattr(inspect, "markcoroutinefunction", None)
    if mark is not None:
        mark(func)
        return
    marker = getattr(sys.modules.get("asyncio.coroutines"), "_is_coroutine", None)
    if marker is not None:
        func._is_coroutine = marker


def _doc(tool, fields):
    lines = [tool.get("signature") or tool["python_name"] + "(...)"]
    description = (tool.get("description") or "").strip()
    if description:
        lines.append("")
        lines.append(description)
    if fields:
        lines.append("")
        lines.append("Parameters:")
        for field_name, _, _, text in fields:
            text = " ".join(text.split())
            lines.append("  %s: %s" % (field_name, text) if text else "  %s" % field_name)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The catalog, `tools` and `describe`


class _Catalog:
    def __init__(self, tools):
        self.tools = tools
        self.by_name = {t["name"]: t for t in tools}
        self.by_python_name = {t["python_name"]: t for t in tools}


_catalog = _Catalog([])


def load_catalog(path):
    """The tools of catalog.json (`{"version", "tools": [...]}`), each with name and python_name."""
    with open(path, "rb") as f:
        return catalog_tools(json.load(f))


def catalog_tools(data):
    """The tools of a parsed catalog.json, each with name and python_name."""
    tools = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(tools, list):
        raise ValueError("catalog.json has no tools list")
    return [
        t for t in tools
        if isinstance(t, dict) and isinstance(t.get("name"), str)
        and isinstance(t.get("python_name"), str) and t["python_name"].isidentifier()
    ]


def build(tools):
    """Makes the stubs and the `tools` module (registered in sys.modules); returns the stubs
    by Python name."""
    global _catalog
    _catalog = _Catalog(tools)
    stubs = {}
    for tool in tools:
        stubs[tool["python_name"]] = _make_stub(tool)
    module = types.ModuleType("tools", "The tools this code may call, by Python name.")
    module.__dict__.update(stubs)
    module.__all__ = sorted(stubs)
    module.__getattr__ = _module_getattr
    sys.modules["tools"] = module
    return stubs, module


def _module_getattr(name):
    """`tools.x` for an unknown x: the usual AttributeError, with a suggestion."""
    message = "module 'tools' has no attribute %r" % name
    if not name.startswith("__"):
        suggestions = suggest(name)
        if suggestions:
            message += "; did you mean %s?" % _or(suggestions)
    raise AttributeError(message)


def _or(names):
    if len(names) == 1:
        return names[0]
    return "%s or %s" % (", ".join(names[:-1]), names[-1])


def suggest(name):
    """Tool Python names the model may have meant by `name`: the tool `server__name` first,
    then close matches."""
    python_names = list(_catalog.by_python_name)
    found = [p for p in python_names if "__" in p and p.split("__", 1)[1] == name]
    import difflib

    stripped = {}
    for p in python_names:
        if "__" in p:
            stripped.setdefault(p.split("__", 1)[1], []).append(p)
    for match in difflib.get_close_matches(name, python_names + list(stripped), n=3, cutoff=0.75):
        for p in stripped.get(match, [match]) if match not in _catalog.by_python_name else [match]:
            if p not in found:
                found.append(p)
    return found[:5]


def name_error_hint(exc):
    """The hint line for an uncaught NameError, or None."""
    if not isinstance(exc, NameError) or isinstance(exc, UnboundLocalError):
        return None
    name = getattr(exc, "name", None)
    if not name:
        m = re.match(r"name '([^']+)' is not defined", str(exc))
        if not m:
            return None
        name = m.group(1)
    if name in _catalog.by_python_name:
        return None
    suggestions = suggest(name)
    if not suggestions:
        return None
    return "hint: did you mean %s?" % _or(suggestions)


def describe(name=None):
    """Prints everything about a tool: signature, full description, input and output schemas.

    `name` is the Python name, the original name, or the stub itself; without it, prints the
    signature of every tool.
    """
    if name is None:
        for tool in _catalog.tools:
            print(tool.get("signature") or tool["python_name"] + "(...)")
        return None
    tool = getattr(name, "_ptc_tool", None)
    if tool is None:
        tool = _catalog.by_python_name.get(name) or _catalog.by_name.get(name)
    if tool is None:
        message = "no tool named %r" % (name,)
        suggestions = suggest(name) if isinstance(name, str) else []
        if suggestions:
            message += "; did you mean %s?" % _or(suggestions)
        raise ToolError(message, "unknown_tool")
    out = [tool.get("signature") or tool["python_name"] + "(...)"]
    if tool["name"] != tool["python_name"]:
        out.append("Dispatched as: %s" % tool["name"])
    description = (tool.get("description") or "").strip()
    if description:
        out.append("")
        out.append(description)
    out.append("")
    out.append("Input schema:")
    out.append(json.dumps(tool.get("input_schema"), indent=2, ensure_ascii=False))
    output_schema = tool.get("output_schema")
    if output_schema is not None:
        out.append("")
        out.append("Output schema:")
        out.append(json.dumps(output_schema, indent=2, ensure_ascii=False))
    else:
        learned = _learned_shape(tool["name"])
        if learned:
            out.append("")
            out.append(learned)
    print("\n".join(out))
    return None


def _learned_shape(name):
    """The line describe() adds for a tool without an output schema once calls taught the
    sidecar what its results look like; None when nothing is known (or the sidecar cannot say)."""
    try:
        reply = _lookup("/describe", {"tool": name}, "describe")
    except ToolError:
        return None
    returns = reply.get("returns")
    if not isinstance(returns, str):
        return None
    calls = reply.get("calls")
    return "Returns (learned from %s call%s, no output schema): %s" % (
        calls, "" if calls == 1 else "s", returns)


# Longest answer to a `/search` or `/describe` request read: 20 hits with their signatures.
_MAX_LOOKUP_ANSWER = 256 * 1024
# Longest wait for one when the run has no call timeout: the sidecar answers from memory, so a
# silent bridge is a broken one, and `describe` must not hang on it.
_LOOKUP_TIMEOUT = 10.0


def _post_once(path, content_type, body, max_answer, timeout, what):
    """POSTs `body` to the bridge's `path` on a connection of its own (not the calls' kept-alive
    one) and reads at most `max_answer` bytes back; the answer's dict, or the error it carries
    raised. `what` names the request in errors."""
    c = _client
    head = (
        "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
        "Content-Type: %s\r\nContent-Length: %d\r\n"
        "Connection: close\r\n\r\n" % (path, c.ipc, c.token, content_type, len(body))
    ).encode("latin-1")
    try:
        with socket.create_connection((c.host, c.port), timeout=timeout) as sock:
            sock.sendall(head)
            sock.sendall(body)
            answer = b""
            while len(answer) <= max_answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
    except OSError as e:
        raise ToolError("%s could not reach the sidecar: %s" % (what, e), "ipc") from None
    _, _, raw = answer.partition(_HEAD_END)
    try:
        reply = json.loads(raw)
    except ValueError:
        raise ToolError("malformed answer from the sidecar to %s" % what, "ipc") from None
    if not isinstance(reply, dict) or not reply.get("ok"):
        raise _error_from(reply.get("error") if isinstance(reply, dict) else reply)
    return reply


# Longest wait for a search: the sidecar may wait up to 30 s for the search model to embed a
# new catalog (embed::MODEL_WAIT) before it answers.
_SEARCH_TIMEOUT = 45.0


def _lookup(path, payload, what, timeout=None):
    """A `/search` or `/describe` request: `payload` as JSON, the answer's dict."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    timeout = timeout or _client.timeout or _LOOKUP_TIMEOUT
    return _post_once(path, "application/json", body, _MAX_LOOKUP_ANSWER, timeout, what)


def search_tools(query, limit=5):
    """The tools that best match `query` (a few words on what you need), best first: a list of
    dicts with `name` (call it by this), `signature`, `summary` and, when calls taught the
    sidecar, `returns` (the shape of its results). Print it, then call the one you need."""
    if not isinstance(query, str) or not query.strip():
        raise ToolInputError("search_tools(query, limit=5): query must be a non-empty str")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ToolInputError("search_tools(query, limit=5): limit must be a positive int")
    answer = _lookup("/search", {"query": query, "limit": limit}, "search_tools",
                     max(_client.timeout or 0, _SEARCH_TIMEOUT))
    if answer.get("note"):
        # The search model did not rank these (its vectors were not ready): say so.
        print("search_tools: %s" % answer["note"], file=sys.stderr)
    return answer.get("results") or []


# Longest answer to a `save_file` request read: a file entry, not a file.
_MAX_SAVE_ANSWER = 64 * 1024


def save_file(name, data, /):
    """Saves `data` (bytes, or str as UTF-8) as the file `name` among the run's files (in a
    session, its working directory) and returns `{name, size, mime, url}`. The run's result
    lists the file; an image also comes back as an image the model can see."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    elif not isinstance(data, bytes):
        raise TypeError("save_file(name, data): data must be bytes or str, not %s"
                        % type(data).__name__)
    if not isinstance(name, str) or not name:
        raise TypeError("save_file(name, data): name must be a non-empty str")
    from urllib.parse import quote

    path = "/file?name=%s" % quote(name, safe="")
    reply = _post_once(path, "application/octet-stream", data, _MAX_SAVE_ANSWER,
                       _client.timeout, "save_file")
    return reply.get("file")


def code_globals(stubs, module):
    """The globals of the user's code, exactly as the runner protocol lists them."""
    import builtins

    g = dict(stubs)
    g.update(
        __name__="__main__",
        __builtins__=builtins,
        tools=module,
        call_tool=call_tool,
        describe=describe,
        search_tools=search_tools,
        save_file=save_file,
        ToolError=ToolError,
        ToolInputError=ToolInputError,
        ToolDenied=ToolDenied,
        asyncio=asyncio,
        json=json,
        re=re,
    )
    return g
