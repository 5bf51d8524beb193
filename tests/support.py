"""Shared helpers for bantam's tests: a scripted model server, a throwaway home, real processes.

Fake the model, not the world: FakeServer is a real OpenAI-compatible HTTP server on
127.0.0.1 that answers from a script of response items; bantam runs as a real subprocess
(or on a real pseudo-terminal) in a temporary Workspace with its own HOME.

Response items are plain dicts built by sse(), json_reply(), error(), drop() and hang().
A script may also hold a bare dict (served as a JSON body, e.g. completion(...)) or a
callable taking the recorded request and returning a response item.
"""

import atexit
import codecs
import collections
import copy
import errno
import fcntl
import http.server
import json
import marshal
import os
import pty
import re
import select
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
BANTAM = os.path.abspath(os.path.join(TESTS_DIR, "..", "bantam.py"))
CERT_FILE = os.path.join(TESTS_DIR, "data", "selfsigned-cert.pem")   # for 127.0.0.1, until 2126
KEY_FILE = os.path.join(TESTS_DIR, "data", "selfsigned-key.pem")

# A shell starts background jobs with SIGINT ignored, and exec passes that on: bantam would
# never see the Ctrl+C of the tests that send one. A handler (which exec resets to the
# default) gives every child the default again; here nothing but SIGINT itself changes.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The REPL's prompt at the start of a line; readline may switch bracketed paste on just before it.
PROMPT_LINE = re.compile(r"\n(?:\x1b\[\?2004h)?> ")
MARK = "__fake_response__"  # key that tells a response item from a plain JSON object
DEFAULT_MODELS = {"object": "list", "data": [{"id": "test-model", "context_length": 100000}]}
CREATED = 1700000000


# ---------------------------------------------------------------- response builders

FRAMINGS = ("chunked", "length", "close")   # how a body's end is marked (RFC 9112 section 6)


def sse(events, *, headers=None, done=True, delay=0.0, split=None, drop_after=None,
        chunked=True, crlf=False, space=True, status=200, framing=None, keep_alive=True,
        http10=False, after_done=b"", first_delay=0.0, head_delay=0.0):
    """Build a text/event-stream response item.

    events: dicts are sent as `data: <json>` + blank line; str/bytes items are written raw.
    done appends `data: [DONE]`. delay: seconds between pieces. split=N re-cuts the whole
    body into N-byte pieces (each its own write/chunk). drop_after=N closes the socket after
    N body bytes, without the terminating chunk.

    framing says how the end of the body is marked: "chunked" (Transfer-Encoding), "length"
    (Content-Length) or "close" (neither; the server closes the connection). chunked=False is
    the old spelling of framing="close". keep_alive=False adds `Connection: close`; http10
    answers as an HTTP/1.0 server (kept alive only with `Connection: keep-alive` and a length).
    after_done: raw bytes sent after `data: [DONE]` (inside the body). head_delay: seconds of
    silence before the status line; first_delay: seconds between the headers and the body.
    """
    eol = "\r\n" if crlf else "\n"
    prefix = "data: " if space else "data:"
    pieces = []
    for event in events:
        if isinstance(event, bytes):
            pieces.append(event)
        elif isinstance(event, str):
            pieces.append(event.encode("utf-8"))
        else:
            text = json.dumps(event, ensure_ascii=False)
            pieces.append((prefix + text + eol + eol).encode("utf-8"))
    if done:
        pieces.append((prefix + "[DONE]" + eol + eol).encode("utf-8"))
    if after_done:
        pieces.append(after_done)
    if split:
        body = b"".join(pieces)
        pieces = [body[i:i + split] for i in range(0, len(body), split)]
    return {MARK: "body", "status": status, "headers": dict(headers or {}), "pieces": pieces,
            "content_type": "text/event-stream", "delay": delay, "drop_after": drop_after,
            "framing": framing or ("chunked" if chunked else "close"), "keep_alive": keep_alive,
            "http10": http10, "first_delay": first_delay, "head_delay": head_delay}


def json_reply(obj, status=200, headers=None, framing="length", keep_alive=True, http10=False,
               trailing=b"", split=None, head_delay=0.0):
    """Build a JSON response item, framed with a Content-Length unless framing says otherwise.

    trailing: raw bytes after the JSON document (inside the body, e.g. b"\n\n"); split=N
    sends the body in N-byte pieces. The other keywords are as in sse().
    """
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8") + trailing
    pieces = [body[i:i + split] for i in range(0, len(body), split)] if split else [body]
    return {MARK: "body", "status": status, "headers": dict(headers or {}), "pieces": pieces,
            "content_type": "application/json", "delay": 0.0, "drop_after": None,
            "framing": framing, "keep_alive": keep_alive, "http10": http10, "first_delay": 0.0,
            "head_delay": head_delay}


def error(status, message="fake error", *, body=None, headers=None, code=None, type=None):
    """Build an error response item; body defaults to {"error": {message, type, code}}, a str body is sent raw."""
    if body is None:
        body = {"error": {"message": message, "type": type, "code": code}}
    if isinstance(body, (str, bytes)):
        raw = body.encode("utf-8") if isinstance(body, str) else body
        item = json_reply(None, status=status, headers=headers)
        item.update(content_type="text/plain; charset=utf-8", pieces=[raw])
        return item
    return json_reply(body, status=status, headers=headers)


def drop():
    """Build an item that closes the connection without sending anything."""
    return {MARK: "drop"}


def hang(seconds):
    """Build an item that reads the request, stays silent for `seconds` (cut short by stop()), then closes."""
    return {MARK: "hang", "seconds": seconds}


def usage(prompt, completion, cached=None):
    """Return an OpenAI usage dict; cached adds prompt_tokens_details.cached_tokens."""
    u = {"prompt_tokens": prompt, "completion_tokens": completion,
         "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


def chunk(delta, finish_reason=None, index=0, usage=None, id="chatcmpl-1"):
    """Return one chat.completion.chunk dict with a single choice (plus usage when given)."""
    c = {"id": id, "object": "chat.completion.chunk", "created": CREATED, "model": "test-model",
         "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}]}
    if usage is not None:
        c["usage"] = usage
    return c


def usage_chunk(u, id="chatcmpl-1"):
    """Return the usage-only chunk (choices: []) sent last with stream_options.include_usage."""
    return {"id": id, "object": "chat.completion.chunk", "created": CREATED,
            "model": "test-model", "choices": [], "usage": u}


def pieces_of(text, size=4):
    """Cut text into pieces of `size` characters (an explicit list is returned as is)."""
    if isinstance(text, (list, tuple)):
        return list(text)
    return [text[i:i + size] for i in range(0, len(text), size)]


def _args_text(args):
    """Return tool-call arguments as a JSON string (dicts are dumped, strings kept verbatim)."""
    return args if isinstance(args, str) else json.dumps(args)


def text_stream(text, pieces=None, usage=None, reasoning=None, **sse_kw):
    """Return an sse() streaming a role chunk, reasoning_content pieces, text pieces, finish "stop", then usage.

    pieces: None (4-character pieces), an int piece size, or an explicit list of text pieces.
    Extra keywords (delay, split, drop_after, ...) go to sse().
    """
    size = pieces if isinstance(pieces, int) else 4
    events = [chunk({"role": "assistant", "content": ""})]
    if reasoning:
        events += [chunk({"reasoning_content": p}) for p in pieces_of(reasoning, size)]
    parts = pieces if isinstance(pieces, (list, tuple)) else pieces_of(text, size)
    events += [chunk({"content": p}) for p in parts]
    events.append(chunk({}, finish_reason="stop"))
    if usage is not None:
        events.append(usage_chunk(usage))
    return sse(events, **sse_kw)


def tool_call_stream(calls, content=None, usage=None, **sse_kw):
    """Return an sse() streaming tool calls OpenAI-style, then finish_reason "tool_calls".

    calls: list of (id, name, arguments) with arguments a JSON string (or a dict to dump).
    Each call opens with {index, id, type, function: {name, arguments: ""}}; its arguments
    follow in ~3 fragments carrying only index and function.arguments.
    """
    events = [chunk({"role": "assistant", "content": None})]
    if content:
        events += [chunk({"content": p}) for p in pieces_of(content)]
    for index, (call_id, name, args) in enumerate(calls):
        args = _args_text(args)
        events.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        cuts = [0, len(args) // 3, 2 * len(args) // 3, len(args)]
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                events.append(chunk({"tool_calls": [{"index": index,
                                                     "function": {"arguments": args[a:b]}}]}))
    events.append(chunk({}, finish_reason="tool_calls"))
    if usage is not None:
        events.append(usage_chunk(usage))
    return sse(events, **sse_kw)


def completion(content=None, tool_calls=None, reasoning=None, usage=None, finish_reason=None):
    """Return a full non-streamed chat.completion dict; tool_calls are (id, name, args) tuples."""
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": _args_text(args)}}
            for call_id, name, args in tool_calls]
    reply = {"id": "chatcmpl-1", "object": "chat.completion", "created": CREATED,
             "model": "test-model",
             "choices": [{"index": 0, "message": message,
                          "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}]}
    if usage is not None:
        reply["usage"] = usage
    return reply


def sse_events(body):
    """Parse an SSE body (bytes or str) into the list of its data payloads (JSON decoded when possible)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    out = []
    for block in re.split(r"\r?\n\r?\n", body):
        data = [line[5:].lstrip(" ") if line.startswith("data:") else None
                for line in block.splitlines()]
        data = [d for d in data if d is not None]
        if not data:
            continue
        text = "\n".join(data)
        try:
            out.append(json.loads(text))
        except ValueError:
            out.append(text)
    return out


# ---------------------------------------------------------------- the fake server

def _as_item(item, record):
    """Turn a script entry into a response item: call callables, wrap bare dicts as JSON."""
    if callable(item):
        item = item(record)
    if isinstance(item, dict) and MARK in item:
        return item
    return json_reply(item)


class _HTTPServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer that skips the reverse DNS lookup and stays quiet about dropped clients."""

    daemon_threads = True

    def server_bind(self):
        """Bind without socket.getfqdn(), which can stall on a machine with slow DNS."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        """Ignore socket errors (a client went away); print anything else."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Record each request, then play the response item the FakeServer chooses."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeLLM/1.0"

    def setup(self):
        """Count the new connection and disable Nagle so small pieces go out at once."""
        self.fake = self.server.fake
        self.timeout = self.fake.idle_close   # None: keep an idle connection open forever
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fake._opened(self.connection)

    def finish(self):
        """Forget the connection once the handler is done with it."""
        try:
            super().finish()
        finally:
            self.fake._closed(self.connection)

    def log_message(self, format, *args):
        """Stay silent: tests read the recorded requests instead."""

    def do_GET(self):
        """Answer any method through respond()."""
        self.respond()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def read_body(self):
        """Return the raw request body (Content-Length or chunked)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def respond(self):
        """Record the request, pick the response item, and send it."""
        raw = self.read_body()
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            body = None
        record = {"method": self.command, "path": self.path,
                  "headers": {k.lower(): v for k, v in self.headers.items()},
                  "body": body, "raw": raw}
        self.fake._record(record)
        path = self.path.split("?", 1)[0].rstrip("/")
        if (self.command, path) in self.fake.routes:
            item = self.fake.routes[(self.command, path)]
        elif self.command == "POST" and path.endswith("/chat/completions"):
            item = self.fake._next_item()
        elif self.command == "GET" and path.endswith("/models"):
            item = self.fake.models
        else:
            item = error(404, "fake server has no route for %s %s" % (self.command, self.path))
        item = _as_item(item, record)
        getattr(self, "send_" + item[MARK])(item)

    def send_head(self, status, headers, defaults):
        """Send the status line and headers; `headers` override `defaults` case-insensitively."""
        merged = dict(defaults)
        for key, value in headers.items():
            for old in [k for k in merged if k.lower() == key.lower()]:
                del merged[old]
            merged[key] = value
        self.send_response(status)
        for key, value in merged.items():
            self.send_header(key, str(value))
        self.end_headers()

    def send_body(self, item):
        """Send a response item: status line and headers, then the body pieces in the item's
        framing (chunked, Content-Length or close-delimited), maybe cut short or as HTTP/1.0."""
        framing, limit = item["framing"], item["drop_after"]
        pieces = item["pieces"]
        defaults = {"Content-Type": item["content_type"]}
        if item["content_type"] == "text/event-stream":
            defaults["Cache-Control"] = "no-cache"
        if framing == "chunked":
            defaults["Transfer-Encoding"] = "chunked"
        elif framing == "length":
            defaults["Content-Length"] = sum(len(p) for p in pieces)
        keep = item["keep_alive"] and framing != "close"
        if item["http10"]:
            keep = keep and framing == "length"   # HTTP/1.0 has no chunked encoding
            if keep:
                defaults["Connection"] = "keep-alive"
        elif not keep:
            defaults["Connection"] = "close"
        if not keep:
            self.close_connection = True
        if item["head_delay"]:
            self.fake._stopping.wait(item["head_delay"])
        self.protocol_version = "HTTP/1.0" if item["http10"] else "HTTP/1.1"
        try:
            self.send_head(item["status"], item["headers"], defaults)
        finally:
            self.protocol_version = "HTTP/1.1"
        if any(k.lower() == "connection" and v.lower() == "close" for k, v in item["headers"].items()):
            self.close_connection = True
        if item["first_delay"]:
            self.wfile.flush()
            self.fake._stopping.wait(item["first_delay"])
        sent = 0
        for i, piece in enumerate(pieces):
            if i and item["delay"]:
                self.fake._stopping.wait(item["delay"])
            if limit is not None:
                piece = piece[:max(0, limit - sent)]
            if piece:  # an empty chunk would end a chunked body
                # chunk framing: b"<hex size>\r\n<data>\r\n", ended by b"0\r\n\r\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if framing == "chunked" else piece)
                sent += len(piece)
            if limit is not None and sent >= limit:
                break
        if limit is not None:
            self.close_connection = True  # dropped: no terminating chunk, a short length
        elif framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")

    def send_drop(self, item):
        """Close the connection without a response."""
        self.close_connection = True

    def send_hang(self, item):
        """Say nothing for a while (until stop() at the latest), then close."""
        self.fake._stopping.wait(item["seconds"])
        self.close_connection = True


class FakeServer:
    """A scripted OpenAI-compatible server on 127.0.0.1; POST /chat/completions plays the script in order.

    Attributes: url, port, requests (recorded dicts: method, path, headers, body, raw), connections
    (TCP connections accepted), models (GET /models answer: a JSON object or a response item),
    exhausted (True once a POST found the script empty and got "(script exhausted)").
    """

    def __init__(self, script=None, models=None, idle_close=None, tls=False):
        """Prepare a server with an optional script; call start() or use it as a context manager.
        idle_close: seconds after which an idle kept-alive connection is closed by the server.
        tls: serve HTTPS with the self-signed certificate in tests/data (CERT_FILE)."""
        self.idle_close = idle_close
        self.tls = tls
        self.routes = {}   # {("GET", "/props"): response item}: more routes, e.g. local servers' APIs
        self.requests = []
        self.connections = 0
        self.models = copy.deepcopy(DEFAULT_MODELS) if models is None else models
        self.exhausted = False
        self._script = collections.deque(script or [])
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._sockets = set()
        self._httpd = None
        self._thread = None
        self.port = None

    def start(self):
        """Bind a free port and serve in a daemon thread; returns self."""
        self._stopping.clear()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        if self.tls:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(CERT_FILE, KEY_FILE)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="FakeServer", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop serving, cut every open connection, close the listening socket. Safe to call twice."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        with self._cond:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._thread.join(5)
        self._httpd = None

    def __enter__(self):
        """Start the server."""
        return self.start()

    def __exit__(self, *exc):
        """Stop the server."""
        self.stop()

    @property
    def url(self):
        """The endpoint base, e.g. http://127.0.0.1:PORT/v1 (https:// with tls)."""
        return "%s://127.0.0.1:%d/v1" % ("https" if self.tls else "http", self.port)

    def push(self, *responses):
        """Append response items to the script."""
        with self._cond:
            self._script.extend(responses)

    @property
    def pending(self):
        """Number of scripted responses not yet served."""
        with self._cond:
            return len(self._script)

    @property
    def posts(self):
        """The recorded POST requests, in order."""
        with self._cond:
            return [r for r in self.requests if r["method"] == "POST"]

    @property
    def bodies(self):
        """The parsed JSON bodies of the recorded POST requests, in order."""
        return [r["body"] for r in self.posts]

    def wait_requests(self, n, timeout=10):
        """Block until at least n POST requests were recorded; return them (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                posts = [r for r in self.requests if r["method"] == "POST"]
                left = deadline - time.monotonic()
                if len(posts) >= n:
                    return posts
                if left <= 0:
                    raise AssertionError("waited %ss for %d POST requests, got %d"
                                         % (timeout, n, len(posts)))
                self._cond.wait(left)

    def _record(self, record):
        """Store a request and wake waiters."""
        with self._cond:
            self.requests.append(record)
            self._cond.notify_all()

    def _next_item(self):
        """Pop the next scripted item, or the "(script exhausted)" completion."""
        with self._cond:
            if self._script:
                return self._script.popleft()
            self.exhausted = True
        return completion("(script exhausted)")

    def _opened(self, sock):
        """Count and remember a new connection."""
        with self._cond:
            self.connections += 1
            self._sockets.add(sock)

    def _closed(self, sock):
        """Forget a finished connection."""
        with self._cond:
            self._sockets.discard(sock)


# ---------------------------------------------------------------- the workspace

class Workspace:
    """A temporary directory with home/, work/ (bantam's cwd) and tmp/; cleanup() removes it."""

    def __init__(self):
        """Create the directory tree."""
        self.root = tempfile.mkdtemp(prefix="bantam-test-")
        self.home = os.path.join(self.root, "home")
        self.work = os.path.join(self.root, "work")
        self.tmp = os.path.join(self.root, "tmp")
        for d in (self.home, self.work, self.tmp):
            os.mkdir(d)

    def cleanup(self):
        """Remove the whole tree."""
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        """Use the workspace in a with block."""
        return self

    def __exit__(self, *exc):
        """Remove the workspace."""
        self.cleanup()

    def path(self, *parts):
        """Join parts under the workspace root."""
        return os.path.join(self.root, *parts)

    def sessions_dir(self):
        """Return home/.bantam/sessions."""
        return os.path.join(self.home, ".bantam", "sessions")

    def write(self, relpath, text):
        """Write a UTF-8 text file under work/ (creating folders); return its path."""
        path = os.path.join(self.work, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def write_config(self, server=None, **keys):
        """Write the user's own config, home/.bantam/model.cfg, as key=value lines: fast test
        defaults plus keys (None removes one); return its path. (A model.cfg in work/ is the
        folder's: it steers bantam only once the folder is trusted.)"""
        cfg = collections.OrderedDict()
        if server is not None:
            cfg["endpoint"] = server.url
        cfg.update([("model", "test-model"), ("api_key", "test-key"), ("stream", "true"),
                    ("color", "never"), ("backoff", "0.01,0.01,0.01"), ("timeout", "10")])
        for key, value in keys.items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = _cfg_value(value)
        path = os.path.join(self.home, ".bantam", "model.cfg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join("%s=%s\n" % kv for kv in cfg.items()))
        os.chmod(path, 0o600)   # bantam refuses a key that others can read
        return path

    def env(self, **extra):
        """Return bantam's environment: HOME/TMPDIR here, TERM=xterm, no proxies or BANTAM_/OPENAI_/NO_COLOR.

        COLUMNS and LINES are dropped too, so the terminal size comes from the tty. extra is
        applied last; a None value deletes the variable.
        """
        env = dict(os.environ)
        for key in list(env):
            if (key.lower().endswith("_proxy") or key.startswith(("BANTAM_", "OPENAI_"))
                    or key in ("NO_COLOR", "PYTHONUNBUFFERED", "COLUMNS", "LINES")):
                del env[key]
        env.update(HOME=self.home, TMPDIR=self.tmp, TERM="xterm")
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env


def _cfg_value(value):
    """Format a config value: booleans as true/false, lists comma-joined."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------- processes

def _env_for(ws, env):
    """Return ws.env() with env (a dict, None values delete) applied."""
    return ws.env(**(env or {}))


def _killpg(pgid):
    """SIGKILL the process group pgid, which we started as a session; gone already is fine.

    Linux keeps a group's id reserved while any member lives, so this never hits a stranger.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_program(ws, argv, env=None, stdin=subprocess.DEVNULL):
    """Start argv in ws.work in a new session (so its process group can be killed); return the Popen."""
    return subprocess.Popen([str(a) for a in argv], cwd=ws.work, env=_env_for(ws, env),
                            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def stop_process(proc):
    """Kill proc's process group (led by proc.pid) if anything is left, reap it, close its pipes."""
    _killpg(proc.pid)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def as_nobody(test):
    """Give test's workspace to the user nobody; the command prefix that runs a program as nobody
    (the test is skipped where this Python cannot run as nobody: its files private to root)."""
    if subprocess.run(NOBODY + [sys.executable, "-c", "pass"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        test.skipTest("this Python cannot run as nobody (its files are private)")
    os.chmod(test.ws.root, 0o755)
    for folder, _, files in os.walk(test.ws.root):
        for name in [folder] + [os.path.join(folder, f) for f in files]:
            os.chown(name, 65534, 65534)
    return list(NOBODY)


def run_program(ws, argv, input=None, env=None, timeout=60):
    """Run argv in ws.work and return a CompletedProcess with text stdout/stderr.

    input (str or bytes) is fed to stdin, otherwise stdin is /dev/null. On timeout the process
    group is killed and AssertionError shows what was printed. Leftover group members are
    killed at the end.
    """
    if isinstance(input, str):
        input = input.encode("utf-8")
    proc = start_program(ws, argv, env, subprocess.PIPE if input is not None else subprocess.DEVNULL)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc.pid)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out = err = b""
        raise AssertionError("%s did not finish in %ss\n--- stdout:\n%s\n--- stderr:\n%s"
                             % (argv, timeout, _decode(out)[-3000:], _decode(err)[-3000:]))
    finally:
        stop_process(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, _decode(out), _decode(err))


def _decode(data):
    """Decode process output as UTF-8, replacing bad bytes."""
    return (data or b"").decode("utf-8", errors="replace")


# The tests start bantam hundreds of times. `python bantam.py` compiles its ~3700 lines on
# every start (a script's bytecode is never cached, and PYTHONDONTWRITEBYTECODE may be set),
# and site imports whatever the site-packages' .pth files ask for. So bantam_argv() runs a
# small launcher instead, `python -S launch_bantam.py args`, from a temporary folder made once
# per test run: it reads bantam.py, takes the code compiled when the folder was made if the
# source is still byte for byte the same (else compiles it afresh: a test always runs the
# current bantam.py), and runs it as __main__ with sys.argv[0] == bantam.py and bantam's
# folder first on sys.path, as `python bantam.py` does. -S also keeps site-packages off
# sys.path: bantam must run on the standard library alone.
LAUNCH = """\
import sys
def launch(path, cache):
    import marshal, os
    with open(path, "rb") as f:
        source = f.read()
    try:
        with open(cache, "rb") as f:
            cached_source, code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        cached_source = code = None
    if cached_source != source:
        code = compile(source, path, "exec", dont_inherit=True)
    sys.argv[0] = path
    sys.path[0] = os.path.dirname(path)
    return code
code = launch(%r, %r)
globals().update(__file__=sys.argv[0], __cached__=None, __loader__=None)
del launch, sys
exec(globals().pop("code"))
"""


def _make_launcher():
    """Compile bantam.py into a temporary folder (removed at exit) with its launcher; return the launcher's path."""
    folder = tempfile.mkdtemp(prefix="bantam-tests-")
    creator = os.getpid()
    # forked test workers inherit the folder; only the process that made it removes it
    atexit.register(lambda: os.getpid() == creator and shutil.rmtree(folder, ignore_errors=True))
    cache = os.path.join(folder, "bantam.code")
    with open(BANTAM, "rb") as f:
        source = f.read()
    with open(cache, "wb") as f:
        marshal.dump((source, compile(source, BANTAM, "exec", dont_inherit=True)), f)
    launcher = os.path.join(folder, "launch_bantam.py")
    with open(launcher, "w", encoding="utf-8") as f:
        f.write(LAUNCH % (BANTAM, cache))
    return launcher


# a copy of tests/ with no bantam.py beside it still loads (tests/spec.py -- a port)
LAUNCHER = _make_launcher() if os.path.exists(BANTAM) else None


def bantam_argv(*args):
    """Return the argv that runs the current bantam.py with args, as `python bantam.py *args` would.

    run_bantam, start_bantam and bantam_pty start bantam through this, so the faster
    start-up above applies to every test that uses them.
    """
    return [sys.executable, "-S", LAUNCHER] + [str(a) for a in args]


def run_bantam(ws, *args, input=None, env=None, timeout=60):
    """Run `python bantam.py *args` in ws (see run_program)."""
    return run_program(ws, bantam_argv(*args), input=input, env=env, timeout=timeout)


def start_bantam(ws, *args, env=None, stdin=subprocess.DEVNULL):
    """Start `python bantam.py *args` in ws and return the Popen; the caller must stop_process() it."""
    return start_program(ws, bantam_argv(*args), env=env, stdin=stdin)


# ---------------------------------------------------------------- pseudo-terminal

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text):
    """Remove ANSI escape sequences (CSI, OSC and two-byte escapes) from text."""
    return ANSI_RE.sub("", text)


# Readline switches the terminal's bracketed-paste mode on before each prompt and off (with a
# carriage return) after each line; Pty leaves these out of its text, so "\n> " finds a prompt.
PASTE_MODE = ("\x1b[?2004l\r", "\x1b[?2004h", "\x1b[?2004l")


class Pty:
    """A child process on a real pseudo-terminal, driven pexpect-style.

    expect() searches the output received since the last successful expect; `output` is
    everything so far (UTF-8, bad bytes replaced); `before` is the text that preceded the
    last match.
    """

    def __init__(self, argv, cwd=None, env=None, rows=24, cols=100):
        """Fork argv onto a new pty of rows x cols, in cwd with env."""
        argv = [str(a) for a in argv]
        env = dict(os.environ if env is None else env)
        winsize = struct.pack("HHHH", rows, cols, 0, 0)
        self.argv = argv
        self.status = None
        self.before = ""
        self._text = ""
        self._pos = 0
        self._eof = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child: the pty slave is fds 0, 1 and 2
            try:
                if cwd:
                    os.chdir(cwd)
                fcntl.ioctl(0, termios.TIOCSWINSZ, winsize)
                os.execvpe(argv[0], argv, env)
            except BaseException as exc:
                os.write(2, ("Pty: cannot run %r: %s\n" % (argv, exc)).encode())
            finally:
                os._exit(127)
        os.set_inheritable(self.fd, False)  # later children must not hold this terminal open
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, winsize)

    def __enter__(self):
        """Use the terminal in a with block."""
        return self

    def __exit__(self, *exc):
        """Kill the child."""
        self.kill()

    def _read(self, timeout):
        """Read what arrives within timeout; return False at EOF or when nothing came."""
        if self.fd is None or self._eof:
            return False
        ready = select.select([self.fd], [], [], max(0.0, timeout))[0]
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError as exc:  # Linux: EIO once every slave fd is closed
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self._eof = True
            text, self._held = self._held, ""
            self._text += text
            return False
        text = self._held + self._decoder.decode(data)
        cut = text.rfind("\x1b", max(0, len(text) - 8))   # a sequence split by the read: wait for the rest
        self._held = text[cut:] if cut >= 0 and any(p.startswith(text[cut:]) and p != text[cut:] for p in PASTE_MODE) else ""
        text = text[:len(text) - len(self._held)]
        for sequence in PASTE_MODE:
            text = text.replace(sequence, "")
        self._text += text
        return True

    def _drain(self):
        """Collect whatever output is already waiting, without blocking."""
        while self._read(0):
            pass

    @property
    def output(self):
        """All output received so far."""
        self._drain()
        return self._text

    def expect(self, pattern, timeout=10):
        """Wait for pattern (str literal or compiled regex) in new output; return the match.

        Raises AssertionError with the tail of the output on timeout or EOF.
        """
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self._text, self._pos)
            if match:
                self.before = self._text[self._pos:match.start()]
                self._pos = match.end()
                return match
            left = deadline - time.monotonic()
            if self._eof or left <= 0:
                why = "the process closed the terminal" if self._eof else "timed out after %ss" % timeout
                raise AssertionError("expected %r: %s; output since last match (tail):\n%s"
                                     % (regex.pattern, why, self._text[self._pos:][-2000:]))
            self._read(min(left, 0.5))

    def send(self, text):
        """Write text (str or bytes) to the terminal as typed, e.g. "\\x03" for Ctrl+C."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        while data:
            data = data[os.write(self.fd, data):]

    def sendline(self, text=""):
        """Type text and press Enter ("\\r")."""
        self.send(text + "\r")

    def resize(self, rows, cols):
        """Change the window size; the kernel sends SIGWINCH to the foreground group."""
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def alive(self):
        """Return True while the child has not exited."""
        return self._poll() is None

    def _poll(self):
        """Reap the child if it exited; return its status (code or -signal) or None."""
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = _exit_status(status)
        return self.status

    def wait(self, timeout=10):
        """Wait for exit while collecting output; return the exit code or -signal (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while self._poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError("%s still running after %ss; output tail:\n%s"
                                     % (self.argv, timeout, self.output[-2000:]))
            if not self._read(0.05) and self._eof:
                time.sleep(0.02)
        self._drain()
        return self.status

    def kill(self):
        """SIGKILL the child's process group if anything is left, reap it, close the terminal."""
        _killpg(self.pid)
        if self.status is None:
            try:  # a just-forked child may not lead its own group yet
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.status = _exit_status(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                pass
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _exit_status(status):
    """Turn a waitpid status into an exit code, or -signal for a killed process."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def bantam_pty(ws, *args, env=None, rows=24, cols=100):
    """Start `python bantam.py *args` on a pty in ws.work with ws.env() (+ env)."""
    return Pty(bantam_argv(*args), cwd=ws.work, env=_env_for(ws, env),
               rows=rows, cols=cols)


def read_text(path):
    """The text of path exactly as on disk (line ends kept), or '' while it does not exist."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------- base test case

class BantamTestCase(unittest.TestCase):
    """A TestCase with a started FakeServer (self.server) and a Workspace (self.ws) whose home holds model.cfg.

    Everything made through its helpers is stopped in cleanup: processes first, then
    servers, then the workspace.
    """

    def setUp(self):
        """Start the server, create the workspace, write the user's default model.cfg."""
        super().setUp()
        self.ws = Workspace()
        self.addCleanup(self.ws.cleanup)
        self.server = self.make_server()
        self.ws.write_config(self.server)

    def make_server(self, script=None, models=None):
        """Start another FakeServer that is stopped in cleanup."""
        server = FakeServer(script, models).start()
        self.addCleanup(server.stop)
        return server

    def push(self, *responses):
        """Append response items to self.server's script."""
        self.server.push(*responses)

    def run_bantam(self, *args, **kw):
        """run_bantam() in self.ws."""
        return run_bantam(self.ws, *args, **kw)

    def run_batch(self, prompt_text, *args, **kw):
        """Write work/prompt.txt and run `bantam.py prompt.txt *args`."""
        self.ws.write("prompt.txt", prompt_text)
        return self.run_bantam("prompt.txt", *args, **kw)

    def start_bantam(self, *args, **kw):
        """start_bantam() in self.ws; the process is killed in cleanup."""
        proc = start_bantam(self.ws, *args, **kw)
        self.addCleanup(stop_process, proc)
        return proc

    def pty(self, *args, **kw):
        """bantam_pty() in self.ws; the terminal is killed in cleanup."""
        term = bantam_pty(self.ws, *args, **kw)
        self.addCleanup(term.kill)
        return term

    def type_line(self, term, line, *expected):
        """Type line + Enter at the REPL, wait for each expected text in order, then the next
        prompt; return the raw output in between."""
        start = len(term.output)
        term.sendline(line)
        for text in expected:
            term.expect(text)
        term.expect(PROMPT_LINE)
        return term.output[start:]

    def leave(self, term, keys="/quit\r"):
        """Leave the REPL with keys (/quit or Ctrl+D at the prompt) and assert a clean exit."""
        term.send(keys)
        self.assertEqual(term.wait(), 0, term.output[-2000:])

    def read_autosave(self):
        """Return the parsed ~/.bantam/sessions/autosave.json."""
        with open(os.path.join(self.ws.sessions_dir(), "autosave.json"), encoding="utf-8") as f:
            return json.load(f)
