#!/usr/bin/env python3
"""Benchmark for bantam: start-up, footprint, REPL, streams, tool loop, step saves, fleets, memory,
snapshots.

The tool loop runs once per HTTP framing the fake server can answer in (chunked,
Content-Length, close-delimited, HTTP/1.0, Connection: close; see FRAMINGS).

Every number is compared with a baseline measured in the same run; the script
reports medians and ratios and never fails on absolute times.

    python3 bench/run.py [--quick] [--json FILE] [--bantam PATH]
    python3 bench/run.py --serve 600      # only run the fake server (for profiling)

Standard library only, Python 3.8+.  Loopback only.  Every process it starts is
reaped (or killed by PID / its own process group); temp dirs are removed.
"""

import argparse
import fcntl
import json
import os
import pty
import queue
import re
import resource
import select
import shutil
import signal
import socket
import socketserver
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import warnings

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BANTAM = os.path.join(os.path.dirname(HERE), "bantam.py")

BIG_BYTES = 500 * 1000 * 1000
BIG_CMD = "head -c %d /dev/zero | tr '\\0' 'a'" % BIG_BYTES
QUIET_CMD = "head -c %d /dev/zero > /dev/null" % BIG_BYTES


# --------------------------------------------------------------------------
# Fake OpenAI-compatible server
# --------------------------------------------------------------------------

def sse(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def http_chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def chunked_body(events):
    """One HTTP chunk per SSE event, then data: [DONE] and the last chunk."""
    parts = [http_chunk(e) for e in events]
    parts.append(http_chunk(b"data: [DONE]\n\n"))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


WORD_EVENT = (b'data: {"id":"x","object":"chat.completion.chunk","choices":'
              b'[{"index":0,"delta":{"content":"word "}}]}\n\n')


# The rendering rows' answer: Markdown with a table, code blocks, lists, a quote, repeated
# as often as needed and cut into chunks of MD_CHUNK characters (about a token each).
MD_SAMPLE = """## Step {n}: what changed

The **parser** now reads `model.cfg` once, and *every* key has a default; see
[the notes](https://example.com/notes) for why. A longer paragraph follows, so that the
renderer has words to wrap at the terminal's width, as an answer explaining a change would.

| Key | Default | Meaning |
|-----|:-------:|---------|
| `render` | auto | Markdown on a terminal |
| `tool_lines` | 0 | lines of output shown |
| 名前 | ✅ | wide characters 🚀 |

```python
def main(argv=None):
    args = parse(argv or sys.argv[1:])   # a | pipe and *stars* stay as they are
    return run(args)
```

1. First, **install** it.
   - then configure the `endpoint`
2. Run `bantam -p "hi"`.

> Note: the conversation keeps the raw text.

---
"""
MD_CHUNK = 6


def markdown_text(n):
    """The Markdown answer of n chunks of MD_CHUNK characters."""
    parts, size, k = [], 0, 0
    while size < n * MD_CHUNK:
        parts.append(MD_SAMPLE.replace("{n}", str(k)))
        size += len(parts[-1])
        k += 1
    return "".join(parts)[:n * MD_CHUNK]


def chunk_obj(delta, finish=None):
    return {"id": "x", "object": "chat.completion.chunk", "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def text_events(text):
    ev = [sse(chunk_obj({"role": "assistant", "content": ""}))]
    for w in text.split(" "):
        ev.append(sse(chunk_obj({"content": w + " "})))
    ev.append(sse(chunk_obj({}, "stop")))
    return ev


def tool_events(call_id, command):
    args = json.dumps({"command": command})
    cut = len(args) // 2
    return [
        sse(chunk_obj({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": call_id, "type": "function",
             "function": {"name": "shell_exec", "arguments": ""}}]})),
        sse(chunk_obj({"tool_calls": [{"index": 0, "function": {"arguments": args[:cut]}}]})),
        sse(chunk_obj({"tool_calls": [{"index": 0, "function": {"arguments": args[cut:]}}]})),
        sse(chunk_obj({}, "tool_calls")),
    ]


def nonstream_reply(content=None, call=None):
    msg = {"role": "assistant", "content": content}
    finish = "stop"
    if call:
        msg["tool_calls"] = [{"id": call[0], "type": "function",
                              "function": {"name": "shell_exec",
                                           "arguments": json.dumps({"command": call[1]})}}]
        finish = "tool_calls"
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "bench",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


# How each response ends its body and whether the connection stays open, per framing:
# name -> (status-line version, body framing, server keeps the connection). "chunked" is
# Transfer-Encoding: chunked, "length" a Content-Length, "close" neither (the body ends
# when the server closes). Every framing has its own listening port, so requests that
# bantam sends outside the endpoint path (GET /props, POST /api/show ... while it looks
# for the context window) are framed like the rest of that run.
FRAMINGS = [
    ("chunked", ("HTTP/1.1", "chunked", True)),
    ("length", ("HTTP/1.1", "length", True)),
    ("close", ("HTTP/1.1", "close", False)),
    ("http10-length", ("HTTP/1.0", "length", True)),
    ("http10-close", ("HTTP/1.0", "close", False)),
    ("chunked-close", ("HTTP/1.1", "chunked", False)),
]
FRAMING_NAMES = [name for name, _ in FRAMINGS]


def keeps_alive(framing):
    """True if the server keeps the connection open after a response in this framing."""
    return dict(FRAMINGS)[framing][2]


class Stats(object):
    """Counters shared by every listener: connections, requests, and per-mode details."""

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0   # every request on any path, 404s included
        self.log = []       # (connection number, method, path) per request, for notes
        self.modes = {}

    def mode(self, name):
        with self.lock:
            return self.modes.setdefault(name, {
                "requests": 0, "max_tool_msgs": 0, "tool_content_len": [],
                "first_body": None})


class Handler(socketserver.StreamRequestHandler):
    rbufsize = 65536
    wbufsize = 0
    timeout = 600  # idle keep-alive connections die eventually

    def setup(self):
        socketserver.StreamRequestHandler.setup(self)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fake = self.server.fake
        st = self.fake.stats
        with st.lock:
            st.connections += 1
            self.number = st.connections

    def handle(self):
        for _ in range(1000000):  # bounded keep-alive loop
            try:
                if not self.one_request():
                    return
            except (OSError, ValueError):
                return

    def one_request(self):
        """Read one request and answer it; False when the connection is to be closed."""
        rf = self.rfile
        line = rf.readline(65537)
        while line in (b"\r\n", b"\n"):
            line = rf.readline(65537)
        if not line:
            return False
        parts = line.decode("latin-1").split()
        if len(parts) != 3:
            return False
        method, path, version = parts
        headers = {}
        for _ in range(200):
            h = rf.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        asked = headers.get("connection", "").lower()
        if version == "HTTP/1.1":
            keep = asked != "close"
        else:
            keep = asked == "keep-alive"
        self.keep = keep and self.server.framing[2]   # read by respond()
        if headers.get("expect", "").lower() == "100-continue" and self.server.framing[0] == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            bufs = []
            for _ in range(10000000):
                size = int(rf.readline(65537).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while rf.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                bufs.append(rf.read(size))
                rf.readline(65537)
            body = b"".join(bufs)
        elif headers.get("content-length"):
            body = rf.read(int(headers["content-length"]))
        st = self.fake.stats
        with st.lock:
            st.requests += 1
            st.log.append((self.number, method, path))
        self.route(method, path, body)
        return self.keep

    def respond(self, status, ctype, data, chunked):
        """Write the status line, headers and an already framed body."""
        version, framing, _ = self.server.framing
        head = "%s %s\r\nContent-Type: %s\r\n" % (version, status, ctype)
        if chunked:
            head += "Transfer-Encoding: chunked\r\n"
        elif framing == "length":
            head += "Content-Length: %d\r\n" % len(data)
        if ctype == "text/event-stream":
            head += "Cache-Control: no-cache\r\n"
        if not self.keep and version == "HTTP/1.1":
            head += "Connection: close\r\n"   # HTTP/1.0 closes by default: no header
        elif self.keep and version == "HTTP/1.0":
            head += "Connection: keep-alive\r\n"
        self.wfile.write(head.encode() + b"\r\n" + data)

    def send(self, status, ctype, payload):
        """Send one body (JSON) in this listener's framing."""
        chunked = self.server.framing[1] == "chunked"
        data = payload
        if chunked:  # an empty chunk would end the body early: only the last chunk then
            data = (http_chunk(payload) if payload else b"") + b"0\r\n\r\n"
        self.respond(status, ctype, data, chunked)

    def send_events(self, events):
        """Send an SSE stream (then data: [DONE]); one HTTP chunk per event when chunked."""
        chunked = self.server.framing[1] == "chunked"
        if chunked:
            data = chunked_body(events)
        else:
            data = b"".join(events) + b"data: [DONE]\n\n"
        self.respond("200 OK", "text/event-stream", data, chunked)

    def route(self, method, path, body):
        m = re.match(r"^/m/([A-Za-z0-9_.-]+)(/.*)$", path)
        if not m:
            self.send("404 Not Found", "application/json", b'{"error":"unknown path"}')
            return
        mode, rest = m.group(1), m.group(2)
        if method == "GET" and rest.rstrip("/").endswith("/models"):
            self.send("200 OK", "application/json",
                      b'{"object":"list","data":[{"id":"bench","object":"model","owned_by":"bench"}]}')
            return
        if method != "POST" or not rest.rstrip("/").endswith("/chat/completions"):
            self.send("404 Not Found", "application/json", b'{"error":"not found"}')
            return
        try:
            req = json.loads(body.decode("utf-8"))
        except ValueError:
            self.send("400 Bad Request", "application/json", b'{"error":"bad json"}')
            return
        plan = self.fake.plans.get(mode.partition("-")[0])
        if plan:   # a failure plan answers for itself (bench/fleet.py)
            plan(self, mode, req)
            return
        stream = bool(req.get("stream"))
        msgs = req.get("messages") or []
        tool_msgs = [x for x in msgs if isinstance(x, dict) and x.get("role") == "tool"]
        st = self.fake.stats
        ms = st.mode(mode)
        with st.lock:
            ms["requests"] += 1
            ms["max_tool_msgs"] = max(ms["max_tool_msgs"], len(tool_msgs))
            if tool_msgs:
                c = tool_msgs[-1].get("content")
                ms["tool_content_len"].append(len(c) if isinstance(c, str) else len(json.dumps(c)))
            if ms["first_body"] is None:
                ms["first_body"] = body
        kind, _, arg = mode.partition("-")
        if kind == "stream":
            n = int(arg or "1")
            if stream:
                chunked = self.server.framing[1] == "chunked"
                self.respond("200 OK", "text/event-stream",
                             self.fake.stream_body(n, chunked), chunked)
            else:
                self.send("200 OK", "application/json",
                          json.dumps(nonstream_reply("word " * n)).encode())
            return
        if kind == "md" and stream:
            chunked = self.server.framing[1] == "chunked"
            self.respond("200 OK", "text/event-stream",
                         self.fake.markdown_body(int(arg), chunked), chunked)
            return
        call = None
        if kind == "loop":
            if len(tool_msgs) < int(arg or "0"):
                call = ("call_%d" % len(tool_msgs), "true")
        elif kind == "tool":
            if not tool_msgs:
                call = ("call_0", self.fake.commands[arg])
        else:
            self.send("404 Not Found", "application/json", b'{"error":"unknown mode"}')
            return
        final = "All done, the command finished."
        if stream:
            self.send_events(tool_events(*call) if call else text_events(final))
        else:
            self.send("200 OK", "application/json",
                      json.dumps(nonstream_reply(None if call else final, call)).encode())


class Listener(socketserver.TCPServer):
    """One port of the fake server; every response on it uses one framing.

    Connections go to a pool of worker threads that grows when none is free. Starting a
    thread per connection (ThreadingTCPServer) costs about 0.35 ms on a small VM, and the
    close framings open a connection per request: that cost would be charged to bantam."""
    allow_reuse_address = True

    def __init__(self, fake, framing):
        socketserver.TCPServer.__init__(self, ("127.0.0.1", 0), Handler)
        self.fake = fake
        self.framing = dict(FRAMINGS)[framing]
        self.port = self.server_address[1]
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2})
        self.thread.daemon = True
        self.queue = queue.Queue()
        self.pool_lock = threading.Lock()
        self.free = 0      # workers waiting for a connection that none has been promised
        self.workers = 0

    def process_request(self, request, client_address):
        """Hand the connection to a free worker, or to a new one if none is free."""
        with self.pool_lock:
            if self.free:
                self.free -= 1
            else:
                self.workers += 1
                t = threading.Thread(target=self.work)
                t.daemon = True   # a client may leave a keep-alive connection idle
                t.start()
        self.queue.put((request, client_address))

    def work(self):
        """Serve connections from the queue until stop() sends None."""
        while True:
            item = self.queue.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)
            with self.pool_lock:
                self.free += 1

    def stop_workers(self):
        """Let every worker that is waiting for a connection end."""
        with self.pool_lock:
            n = self.workers
        for _ in range(n):   # busy ones (a client still connected) end when it goes
            self.queue.put(None)


class FakeServer(object):
    """The fake OpenAI-compatible server: one listener per framing, shared counters."""

    def __init__(self):
        self.stats = Stats()
        self.plans = {}   # mode prefix -> function(handler, mode, request) that answers
        self.commands = {"big": BIG_CMD, "quiet": QUIET_CMD, "true": "true"}
        self._bodies = {}
        self._blk = threading.Lock()
        self.listeners = dict((name, Listener(self, name)) for name in FRAMING_NAMES)
        self.port = self.listeners["chunked"].port

    def stream_body(self, n, chunked=True):
        """The n-word SSE stream, encoded once (chunked: one HTTP chunk per event)."""
        with self._blk:
            b = self._bodies.get((n, chunked))
            if b is None:
                ev = [WORD_EVENT] * n
                ev.append(sse(chunk_obj({}, "stop")))
                if chunked:
                    b = chunked_body(ev)
                else:
                    b = b"".join(ev) + b"data: [DONE]\n\n"
                self._bodies[(n, chunked)] = b
            return b

    def markdown_body(self, n, chunked=True):
        """The n-chunk Markdown stream (see MD_SAMPLE), encoded once."""
        with self._blk:
            b = self._bodies.get(("md", n, chunked))
            if b is None:
                text = markdown_text(n)
                ev = [sse(chunk_obj({"role": "assistant", "content": ""}))]
                ev += [sse(chunk_obj({"content": text[i:i + MD_CHUNK]}))
                       for i in range(0, len(text), MD_CHUNK)]
                ev.append(sse(chunk_obj({}, "stop")))
                b = chunked_body(ev) if chunked else b"".join(ev) + b"data: [DONE]\n\n"
                self._bodies[("md", n, chunked)] = b
            return b

    def endpoint(self, mode, framing="chunked"):
        return "http://127.0.0.1:%d/m/%s/v1" % (self.listeners[framing].port, mode)

    def requests_on(self, first, last):
        """{connection number: [(method, path), ...]} for connections first..last."""
        out = {}
        with self.stats.lock:
            for number, method, path in self.stats.log:
                if first <= number <= last:
                    out.setdefault(number, []).append((method, path))
        return out

    def start(self):
        for lst in self.listeners.values():
            lst.thread.start()
        return self

    def stop(self):
        # shutdown() waits out a poll interval: stop every listener in parallel
        stoppers = [threading.Thread(target=lst.shutdown) for lst in self.listeners.values()
                    if lst.thread.is_alive()]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(5)
        for lst in self.listeners.values():
            lst.server_close()
            lst.thread.join(5)
            lst.stop_workers()


# --------------------------------------------------------------------------
# Baseline programs (written to the temp dir, run as subprocesses)
# --------------------------------------------------------------------------

READER_SRC = r'''
import http.client, json, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1] + "/chat/completions")
body = json.dumps({"model": "bench", "stream": True,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
conn.request("POST", url.path, body, {"Content-Type": "application/json",
                                      "Authorization": "Bearer x"})
resp = conn.getresponse()
out = sys.stdout
rest = b""
done = False
while not done:
    block = resp.read1(65536)
    if not block:
        break
    lines = (rest + block).split(b"\n")
    rest = lines.pop()
    for line in lines:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        obj = json.loads(data)
        for ch in obj.get("choices") or ():
            c = (ch.get("delta") or {}).get("content")
            if c:
                out.write(c)
    out.flush()
out.write("\n")
conn.close()
'''

LOOP_SRC = r'''
import http.client, json, subprocess, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1] + "/chat/completions")
with open(sys.argv[2], "rb") as f:
    req = json.loads(f.read().decode("utf-8"))
req["stream"] = True
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
out = sys.stdout
for _ in range(int(sys.argv[3])):
    conn.request("POST", url.path, json.dumps(req).encode("utf-8"),
                 {"Content-Type": "application/json", "Authorization": "Bearer x"})
    resp = conn.getresponse()
    content, calls, rest, done = [], {}, b"", False
    while not done:
        block = resp.read1(65536)
        if not block:
            break
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            for ch in json.loads(data).get("choices") or ():
                d = ch.get("delta") or {}
                if d.get("content"):
                    content.append(d["content"])
                    out.write(d["content"])
                for tc in d.get("tool_calls") or ():
                    c = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "args": ""})
                    c["id"] = tc.get("id") or c["id"]
                    fn = tc.get("function") or {}
                    c["name"] = fn.get("name") or c["name"]
                    c["args"] += fn.get("arguments") or ""
        out.flush()
    resp.read()  # rest of the chunked body, so the connection can be reused
    if not calls:
        out.write("\n")
        break
    tcs = [{"id": c["id"], "type": "function",
            "function": {"name": c["name"], "arguments": c["args"]}}
           for _, c in sorted(calls.items())]
    req["messages"].append({"role": "assistant", "content": "".join(content) or None,
                            "tool_calls": tcs})
    for tc in tcs:
        cmd = json.loads(tc["function"]["arguments"])["command"]
        out.write("[tool call: shell_exec(%s)]\n" % tc["function"]["arguments"])
        p = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        res = p.stdout.decode("utf-8", "replace")
        out.write("[tool result: shell_exec]\n%s\n" % res)
        req["messages"].append({"role": "tool", "tool_call_id": tc["id"],
                                "content": "%s\n\nexit: %d" % (res, p.returncode)})
conn.close()
'''

# Runs argv (its own session), waits with os.wait4 and prints that one child's
# rusage: ru_maxrss of bantam (and its reaped descendants) only.
RSS_HELPER_SRC = r'''
import json, os, signal, subprocess, sys, threading, time
spec = json.loads(sys.argv[1])
err = open(spec["stderr"], "wb")
t0 = time.perf_counter()
p = subprocess.Popen(spec["argv"], cwd=spec["cwd"], env=spec["env"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                     start_new_session=True)
def kill():
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
t = threading.Timer(spec["timeout"], kill)
t.daemon = True
t.start()
_, status, ru = os.wait4(p.pid, 0)
wall = time.perf_counter() - t0
t.cancel()
try:
    os.killpg(p.pid, signal.SIGKILL)   # leftovers of its tool, if any
except OSError:
    pass
print(json.dumps({"status": status, "maxrss_kb": ru.ru_maxrss, "wall": wall,
                  "timed_out": wall >= spec["timeout"]}))
'''


# Starts every argv of a fleet at once, each in its own session, reaps each by its PID with
# os.wait4 and prints one rusage line per run. A process's ru_maxrss counts the peak RSS of
# the process that forked it (Linux folds the old mm's high-water mark in at exec), so the
# fleet is spawned from this small helper, not from run.py with its server and buffers; the
# helper's own peak is printed too (a floor under every figure). On timeout every process
# group still running gets SIGTERM (bantam then stops its tool's group), SIGKILL 3 s later. The PIDs are written to a file as they start, so that run.py
# can kill their groups should the helper itself die.
FLEET_HELPER_SRC = r"""
import json, os, resource, signal, subprocess, sys, threading, time
spec = json.loads(sys.argv[1])
procs, results, reaped, killed = [], [], set(), set()
lock = threading.Lock()


def kill(pid, sig=signal.SIGKILL):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def running(pid):   # True while pid (a child not reaped yet) has not exited
    if not hasattr(os, "waitid"):
        return True
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def signal_all(sig):
    with lock:   # never a PID already reaped: it may be someone else's by now
        for p in procs:
            if p.pid not in reaped:
                if running(p.pid):
                    killed.add(p.pid)
                kill(p.pid, sig)   # its group: what it started may still run


def kill_all():
    # SIGTERM first: bantam then saves and stops its tool's process group (its own session)
    signal_all(signal.SIGTERM)
    last = threading.Timer(3.0, signal_all, [signal.SIGKILL])
    last.daemon = True
    last.start()


dog = threading.Timer(spec["timeout"], kill_all)
dog.daemon = True
t0 = time.perf_counter()
try:
    with open(spec["pids"], "w") as pids:
        for argv, errpath in zip(spec["argvs"], spec["stderr"]):
            with open(errpath, "wb") as err:
                p = subprocess.Popen(argv, cwd=spec["cwd"], env=spec["env"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=err, start_new_session=True)
            procs.append(p)
            pids.write("%d\n" % p.pid)
            pids.flush()
    dog.start()
    for p in procs:
        if hasattr(os, "waitid"):   # wait without reaping, then reap under the lock
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
        with lock:
            _, status, ru = os.wait4(p.pid, 0)
            reaped.add(p.pid)
        p.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        results.append({"rc": p.returncode, "maxrss_kb": ru.ru_maxrss, "user_s": ru.ru_utime,
                        "sys_s": ru.ru_stime, "cpu_s": ru.ru_utime + ru.ru_stime,
                        "wall_s": time.perf_counter() - t0})
finally:
    dog.cancel()
    with lock:   # an exception above: kill and reap whatever is left
        for p in procs:
            if p.pid not in reaped:
                kill(p.pid)
                try:
                    os.wait4(p.pid, 0)
                except ChildProcessError:
                    pass
                reaped.add(p.pid)
# this process's own high-water mark, as its children inherit it (VmHWM); its ru_maxrss
# would hold run.py's peak, folded in at its own exec
hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with open("/proc/self/status") as f:
        hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
except (OSError, StopIteration, ValueError, IndexError):
    pass
print(json.dumps({"runs": results, "timed_out": bool(killed), "killed": len(killed),
                  "started": len(procs), "helper_maxrss_kb": hwm}))
"""


# The step-save micro-benchmark: imports bantam (importlib, from --bantam) with HOME in the
# temp dir, grows a conversation the way the tool loop does (an assistant message with one
# shell_exec call, then its tool message) and times every save of it, for each strategy:
#   whole    bantam's save_session at every message (the whole <id>.json rewritten, fsynced)
#   nofsync  the same with os.fsync made a no-op (how much of it is fsync)
# Each growth starts after the prompt's save (untimed, it creates the file).
# Prints JSON: {strategy: [one dict per rep]}.
STEPS_SRC = r"""
import importlib.util, json, os, sys, time
spec = json.loads(sys.argv[1])
os.environ["HOME"] = spec["home"]
os.chdir(spec["cwd"])
mod = importlib.util.spec_from_file_location("bantam", spec["bantam"])
bantam = importlib.util.module_from_spec(mod)
sys.modules["bantam"] = bantam
mod.loader.exec_module(bantam)
cfg = bantam.load_config(config_file=spec["config"])
real_fsync = os.fsync


def no_fsync(fd):
    pass


def grow(strategy, n):
    session = bantam.new_session()
    messages = [{"role": "system", "content": cfg["system_prompt"]}]
    bantam.append_user(messages, "Run the benchmark step.\n")
    bantam.save_session(cfg, session, messages)   # the prompt's save: creates the file
    os.fsync = no_fsync if strategy == "nofsync" else real_fsync
    steps, clock = [], time.perf_counter
    try:
        for i in range(n // 2):
            call = {"id": "call_%d" % i, "type": "function",
                    "function": {"name": "shell_exec", "arguments": '{"command": "true"}'}}
            for m in ({"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": call["id"], "content": "\n\nexit: 0"}):
                messages.append(m)
                t0 = clock()
                bantam.save_session(cfg, session, messages, link=False)
                steps.append(clock() - t0)
    finally:
        os.fsync = real_fsync
    path = bantam.session_path(session["id"])
    with open(path, encoding="utf-8") as f:
        saved = len(json.load(f)["messages"])
    os.unlink(path)
    tail = steps[-max(1, n // 10):]
    return {"step_mean_s": sum(steps) / len(steps), "tail_mean_s": sum(tail) / len(tail),
            "step_max_s": max(steps), "saved_messages": saved,
            "expected_messages": len(messages)}


out = dict((s, []) for s in spec["strategies"])
grow("whole", 40)   # warm-up: imports, caches, the sessions folder
for _ in range(spec["reps"]):
    for strategy in spec["strategies"]:
        out[strategy].append(grow(strategy, spec["messages"]))
print(json.dumps(out))
"""


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

class Bench(object):
    def __init__(self, args):
        self.args = args
        self.bantam = os.path.abspath(args.bantam)
        self.tmp = tempfile.mkdtemp(prefix="bantam-bench-")
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        self.env = dict(os.environ)
        for k in list(self.env):
            if k.startswith(("PYTHON", "OPENAI", "BANTAM")):
                del self.env[k]
        tmpdir = os.path.join(self.tmp, "tmp")  # bantam's spill files land in here
        os.mkdir(tmpdir)
        self.env.update({"HOME": self.home, "TMPDIR": tmpdir, "NO_COLOR": "1",
                         "LC_ALL": "C.UTF-8", "TERM": "xterm",
                         "BANTAM_TRUST": "1"})   # the work folders' model.cfg name the endpoint
        self.server = None
        self.results = {}
        self.rows = []
        self.notes = []
        self.reader = self._write("reader.py", READER_SRC)
        self.looper = self._write("loop.py", LOOP_SRC)
        self.rss_helper = self._write("rss_helper.py", RSS_HELPER_SRC)
        self.steps_helper = self._write("steps.py", STEPS_SRC)
        self.fleet_helper = self._write("fleet.py", FLEET_HELPER_SRC)
        self.errlog = os.path.join(self.tmp, "stderr.log")
        self.lib = None
        self.fleet_helper_kb = 0
        self.last_cpu = None

    def _write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def workdir(self, mode, framing="chunked", tag="", **cfg):
        """A directory with model.cfg (endpoint: mode in framing) and prompt.txt; tag names
        a variant with other cfg keys."""
        d = os.path.join(self.tmp, "w-" + mode + ("" if framing == "chunked" else "-" + framing) + tag)
        if not os.path.isdir(d):
            os.mkdir(d)
        conf = {"endpoint": self.server.endpoint(mode, framing), "model": "bench", "api_key": "x",
                "stream": "true", "color": "never", "timeout": "300",
                "shell_timeout": "300", "max_al_iterations": "1000",
                "max_tool_res": "65536", "backoff": "0.1,0.2",
                # the loop's model calls `true` 200 times on purpose: no cycle guard here
                "max_identical_calls": "0"}
        conf.update(cfg)
        with open(os.path.join(d, "model.cfg"), "w") as f:
            f.write("# written by bench/run.py\n")
            for k, v in conf.items():
                f.write("%s=%s\n" % (k, v))
        os.chmod(os.path.join(d, "model.cfg"), 0o600)   # it holds a key: bantam wants it private
        with open(os.path.join(d, "prompt.txt"), "w") as f:
            f.write("Run the benchmark step.\n")
        return d

    def run(self, argv, cwd, timeout=300, capture=False):
        """Run argv, return (seconds, rc, stdout-bytes-or-None).  Own session so a
        timeout can kill the process and whatever it spawned. self.last_cpu is then the
        CPU seconds (user + system) of the process and the children it reaped (run.py
        starts children from its main thread only, one at a time)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(self.errlog, "wb") as err:
            t0 = time.perf_counter()
            p = subprocess.Popen(argv, cwd=cwd, env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                                 stderr=err, start_new_session=True)
            # A watchdog instead of communicate(timeout=...): Popen's timed wait
            # polls with sleeps of up to 50 ms, which would quantize the timings.
            fired = []
            dog = threading.Timer(timeout, lambda: (fired.append(1), killpg(p.pid)))
            dog.daemon = True
            dog.start()
            try:
                out, _ = p.communicate()
            finally:
                dog.cancel()
            dt = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.last_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if fired:
                raise RuntimeError("timed out after %ss: %s" % (timeout, " ".join(argv)))
        return dt, p.returncode, out

    def stderr_tail(self):
        try:
            with open(self.errlog, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_lines(self, limit=200000):
        """The whole lines of the last run's stderr (its last `limit` bytes)."""
        try:
            with open(self.errlog, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                data = f.read()
        except OSError:
            return []
        lines = data.decode("utf-8", "replace").splitlines()
        return lines[1:] if size > limit else lines   # the first may be cut

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("%s exited %s; stderr:\n%s" % (what, rc, self.stderr_tail()))

    def bantam_argv(self, *extra):
        return [PY, self.bantam] + list(extra)

    def installed_argv(self, *extra):
        """bantam as the installed command runs it. pip's console-script shim imports the
        module (`from bantam import main`), so Python compiles bantam.py once and reuses the
        cached .pyc; `python3 bantam.py` recompiles the file on every start."""
        if self.lib is None:
            self.lib = os.path.join(self.tmp, "lib")
            os.makedirs(self.lib, exist_ok=True)
            shutil.copy(self.bantam, os.path.join(self.lib, "bantam.py"))
            argv = [PY, "-c", "import sys; sys.path.insert(0, %r); import bantam" % self.lib]
            _, rc, _ = self.run(argv, self.tmp)   # writes the .pyc, as after `pip install`
            self.check(rc, "import bantam")
        return [PY, "-c", "import sys; sys.path.insert(0, %r); from bantam import main; "
                "sys.exit(main())" % self.lib] + list(extra)

    def row(self, measure, bantam, baseline, ratio, target, met=None):
        self.rows.append((measure, bantam, baseline, ratio, target, met))

    def cleanup(self):
        if self.server is not None:
            self.server.stop()
            self.server = None
        shutil.rmtree(self.tmp, ignore_errors=True)


def killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def med(xs):
    return statistics.median(xs)


def fmt_ms(s):
    return "%.1f ms" % (s * 1000.0)


def progress(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------

IMPORT_TIME = re.compile(r"^import time:\s*(\d+) \|\s*(\d+) \| ( *)(\S+)\s*$")


def import_times(text):
    """{top-level module: cumulative microseconds} from `python3 -X importtime` output."""
    out = {}
    for line in text.splitlines():
        m = IMPORT_TIME.match(line)
        if m and not m.group(3):
            out[m.group(4)] = int(m.group(2))
    return out


def bench_startup(b, reps):
    cwd = b.workdir("stream-1")
    dt, rc, out = b.run(b.bantam_argv("--version"), cwd, capture=True)
    b.check(rc, "bantam --version")
    version = out.decode("utf-8", "replace").strip()
    if not version.startswith("bantam "):
        b.notes.append("--version printed %r (expected 'bantam X.Y.Z')" % version)
    b.results["version"] = version
    _, rc, out = b.run(b.bantam_argv("--help"), cwd, capture=True)
    b.check(rc, "bantam --help")
    if b"--version" not in out:
        b.notes.append("--help did not list --version: %r" % out[:200])
    # The installed `bantam` command is pip's console-script shim (see installed_argv); the
    # rows with `python3 bantam.py` (recompiled every time) are for information.
    command = b.installed_argv("--version")
    tb, ts, th, tp = [], [], [], []
    for _ in range(reps):  # interleaved so drift hits every command alike
        tb.append(b.run(command, cwd)[0])
        ts.append(b.run(b.bantam_argv("--version"), cwd)[0])
        th.append(b.run(b.bantam_argv("--help"), cwd)[0])
        tp.append(b.run([PY, "-c", "pass"], cwd)[0])
    mb, ms, mh, mp = med(tb), med(ts), med(th), med(tp)
    # What the command line costs: bantam's imports as `-X importtime` reports them on the
    # --version path (argparse's line is its cost on top of what bantam imports anyway).
    imports = {}
    for _ in range(max(3, reps // 3)):
        _, rc, _ = b.run([PY, "-X", "importtime"] + command[1:], cwd)
        b.check(rc, "bantam --version (-X importtime)")
        with open(b.errlog, encoding="utf-8", errors="replace") as f:
            for name, us in import_times(f.read()).items():
                imports.setdefault(name, []).append(us)
    argparse_us = med(imports["argparse"]) if "argparse" in imports else None
    bantam_us = med(imports["bantam"]) if "bantam" in imports else None
    b.results["startup"] = {"bantam_s": mb, "script_s": ms, "help_s": mh, "python_s": mp,
                            "ratio": mb / mp, "runs": reps,
                            "argparse_import_us": argparse_us, "bantam_import_us": bantam_us}
    b.row("start-up: `bantam --version` vs `python3 -c pass`", fmt_ms(mb), fmt_ms(mp),
          "%.2fx" % (mb / mp), "<= 2x", mb / mp <= 2.0)
    b.row("start-up: `python3 bantam.py --version` (no .pyc)", fmt_ms(ms), fmt_ms(mp),
          "%.2fx" % (ms / mp), "—")
    b.row("start-up: `python3 bantam.py --help` (no .pyc)", fmt_ms(mh), fmt_ms(mp),
          "%.2fx" % (mh / mp), "—")
    if argparse_us is None:
        b.notes.append("start-up: `bantam --version` did not import argparse (-X importtime).")
    else:
        budget = 2.0 * mp - mb
        b.notes.append("start-up: `bantam --version` imports argparse: %.1f ms (-X importtime, "
                       "cumulative, median of %d; `import bantam` itself %.1f ms); the run is "
                       "%s %s the 2x target (2 x `python3 -c pass`)." % (
                           argparse_us / 1000.0, len(imports["argparse"]),
                           (bantam_us or 0) / 1000.0, fmt_ms(abs(budget)),
                           "under" if budget >= 0 else "over"))


ANSI = re.compile(rb"\x1b(\[[0-9;?<=>]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>])")


def pty_session(argv, cwd, env, wait_prompt, timeout=20.0):
    """Spawn argv under a pty.  With wait_prompt, return seconds until '> ' shows,
    then send Ctrl+D; else return seconds until the child exits.  Always reaps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        pid, fd = pty.fork()
    if pid == 0:  # child: only exec-safe calls
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    buf = b""
    found = None
    exited = None
    deadline = t0 + timeout
    try:
        while time.perf_counter() < deadline:
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                buf += data
                if wait_prompt:
                    clean = ANSI.sub(b"", buf)
                    if clean.endswith(b"> ") or re.search(rb"(^|[\r\n])> ", clean):
                        found = time.perf_counter() - t0
                        break
            wp, st = os.waitpid(pid, os.WNOHANG)
            if wp:
                exited = st
                break
        if not wait_prompt and exited is None:
            wp, st = os.waitpid(pid, os.WNOHANG)
            if wp:
                exited = st
        if not wait_prompt:
            found = time.perf_counter() - t0
        eof_ok = False
        if wait_prompt and found is not None and exited is None:
            os.write(fd, b"\x04")
            end = time.perf_counter() + 5.0
            while time.perf_counter() < end:
                r, _, _ = select.select([fd], [], [], 0.05)
                if r:
                    try:
                        if not os.read(fd, 65536):
                            pass
                    except OSError:
                        pass
                wp, st = os.waitpid(pid, os.WNOHANG)
                if wp:
                    exited = st
                    eof_ok = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
                    break
    finally:
        if exited is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
        os.close(fd)
    if found is None:
        raise RuntimeError("no '> ' prompt within %ss; output: %r" % (timeout, buf[-500:]))
    return found, (eof_ok if wait_prompt else True)


def bench_repl(b, reps):
    cwd = b.workdir("stream-1")
    tb, tp, tr = [], [], []
    eof_fail = 0
    for _ in range(reps):
        t, ok = pty_session(b.bantam_argv(), cwd, b.env, True)
        tb.append(t)
        eof_fail += 0 if ok else 1
        tp.append(pty_session([PY, "-c", "pass"], cwd, b.env, False)[0])
        tr.append(pty_session([PY, "-c", "import readline; input('> ')"], cwd, b.env, True)[0])
    mb, mp, mr = med(tb), med(tp), med(tr)
    b.results["repl_prompt"] = {"bantam_s": mb, "python_s": mp, "ratio": mb / mp,
                                "python_readline_prompt_s": mr, "runs": reps,
                                "ctrl_d_failures": eof_fail}
    b.row("time to REPL `> ` (pty, `python3 bantam.py`) vs `python3 -c pass`", fmt_ms(mb),
          fmt_ms(mp), "%.2fx" % (mb / mp), "<= 4x", mb / mp <= 4.0)
    b.notes.append("REPL: a bare `python3 -c \"import readline; input('> ')\"` shows its "
                   "prompt in %s (bantam %.2fx that)." % (fmt_ms(mr), mb / mr))
    if eof_fail:
        b.notes.append("REPL: Ctrl+D did not end bantam cleanly (exit 0 within 5 s) "
                       "in %d of %d runs (killed by PID)." % (eof_fail, reps))


def bench_stream(b, reps, n):
    big, one = "stream-%d" % n, "stream-1"
    cwd_n, cwd_1 = b.workdir(big), b.workdir(one)
    b.server.stream_body(n)  # pre-encode outside the timings
    # correctness check once
    _, rc, out = b.run(b.bantam_argv("prompt.txt"), cwd_n, capture=True)
    b.check(rc, "bantam stream run")
    got = out.count(b"word")
    if got < n:
        b.notes.append("stream: bantam printed %d of %d words" % (got, n))
    _, rc, out = b.run(b.bantam_argv("--jsonl", "prompt.txt"), cwd_n, capture=True)
    b.check(rc, "bantam --jsonl stream run")
    words, bad, types = 0, 0, {}
    for line in out.splitlines():
        try:
            ev = json.loads(line.decode("utf-8"))
        except ValueError:
            bad += 1
            continue
        types[ev.get("type")] = types.get(ev.get("type"), 0) + 1
        if ev.get("type") == "text" and isinstance(ev.get("text"), str):
            words += ev["text"].count("word")
    if bad or words < n:
        b.notes.append("stream: `--jsonl` printed %d of %d words in text events, %d lines "
                       "that are not JSON" % (words, n, bad))
    b.results["jsonl_events"] = types
    _, rc, out = b.run([PY, b.reader, b.server.endpoint(big)], cwd_n, capture=True)
    b.check(rc, "reader")
    if out.count(b"word") != n:
        b.notes.append("stream: reader printed %d of %d words" % (out.count(b"word"), n))

    curl = shutil.which("curl")
    body_path = os.path.join(b.tmp, "curl-body.json")
    with open(body_path, "w") as f:
        json.dump({"model": "bench", "stream": True,
                   "messages": [{"role": "user", "content": "hi"}]}, f)

    def curl_argv(mode):
        return [curl, "-sSN", "--http1.1", "-o", "/dev/null", "-H",
                "Content-Type: application/json", "--data-binary", "@" + body_path,
                b.server.endpoint(mode) + "/chat/completions"]

    progs = [("bantam", lambda m: b.bantam_argv("prompt.txt")),
             ("jsonl", lambda m: b.bantam_argv("--jsonl", "prompt.txt")),
             ("reader", lambda m: [PY, b.reader, b.server.endpoint(m)])]
    if curl:
        progs.append(("curl", curl_argv))
    times = {name: {"n": [], "1": [], "cpu_n": [], "cpu_1": []} for name, _ in progs}
    for _ in range(reps):
        for name, argv in progs:
            for key, mode, cwd in (("1", one, cwd_1), ("n", big, cwd_n)):
                dt, rc, _ = b.run(argv(mode), cwd)
                b.check(rc, "%s (%s)" % (name, mode))
                times[name][key].append(dt)
                times[name]["cpu_" + key].append(b.last_cpu)
    res = {}
    for name, _ in progs:
        tn, t1 = med(times[name]["n"]), med(times[name]["1"])
        net = max(tn - t1, 1e-6)
        cpu = max(med(times[name]["cpu_n"]) - med(times[name]["cpu_1"]), 1e-6)
        res[name] = {"total_s": tn, "one_chunk_s": t1, "net_s": net, "chunks_per_s": n / net,
                     "cpu_net_s": cpu, "cpu_us_per_chunk": cpu / n * 1e6}
    ratio = res["bantam"]["chunks_per_s"] / res["reader"]["chunks_per_s"]
    res["ratio_vs_reader"] = ratio
    res["chunks"] = n
    res["runs"] = reps
    b.row("stream %d chunks: chunks/s vs stdlib reader" % n,
          "%.0f/s" % res["bantam"]["chunks_per_s"], "%.0f/s" % res["reader"]["chunks_per_s"],
          "%.2f" % ratio, ">= 0.9", ratio >= 0.9)
    rj = res["jsonl"]["chunks_per_s"] / res["bantam"]["chunks_per_s"]
    res["ratio_jsonl_vs_human"] = rj
    b.row("stream %d chunks: `--jsonl` chunks/s vs human output" % n,
          "%.0f/s" % res["jsonl"]["chunks_per_s"], "%.0f/s" % res["bantam"]["chunks_per_s"],
          "%.2f" % rj, ">= 0.9", rj >= 0.9)
    if curl:
        rc_ = res["bantam"]["chunks_per_s"] / res["curl"]["chunks_per_s"]
        res["ratio_vs_curl"] = rc_
        b.row("stream %d chunks: chunks/s vs `curl -sN`" % n,
              "%.0f/s" % res["bantam"]["chunks_per_s"], "%.0f/s" % res["curl"]["chunks_per_s"],
              "%.2f" % rc_, "—")
    else:
        b.notes.append("stream: curl not found, curl row skipped.")
    b.notes.append("stream: wall time for %d chunks incl. start-up: bantam %s, bantam --jsonl "
                   "%s, reader %s%s; 1-chunk run (fixed cost, subtracted): bantam %s, "
                   "--jsonl %s, reader %s; --jsonl printed %s." % (
                       n, fmt_ms(res["bantam"]["total_s"]), fmt_ms(res["jsonl"]["total_s"]),
                       fmt_ms(res["reader"]["total_s"]),
                       (", curl " + fmt_ms(res["curl"]["total_s"])) if curl else "",
                       fmt_ms(res["bantam"]["one_chunk_s"]), fmt_ms(res["jsonl"]["one_chunk_s"]),
                       fmt_ms(res["reader"]["one_chunk_s"]),
                       ", ".join("%d %s" % (c, t) for t, c in sorted(
                           types.items(), key=lambda x: -x[1])[:4])))
    b.notes.append("stream: CPU time (user+sys, the 1-chunk run's subtracted) per chunk: "
                   "bantam %.1f µs, --jsonl %.1f µs, reader %.1f µs; the same ratios by CPU "
                   "time (less sensitive to load than wall time): bantam / reader %.2f, "
                   "--jsonl / human %.2f." % (
                       res["bantam"]["cpu_us_per_chunk"], res["jsonl"]["cpu_us_per_chunk"],
                       res["reader"]["cpu_us_per_chunk"],
                       res["reader"]["cpu_net_s"] / res["bantam"]["cpu_net_s"],
                       res["bantam"]["cpu_net_s"] / res["jsonl"]["cpu_net_s"]))
    b.results["stream"] = res


def pty_run(argv, cwd, env, cols=100, rows=40, timeout=300):
    """Run argv with a pty of cols x rows as its terminal, reading everything it prints;
    return (seconds, exit status, output bytes, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        pid, fd = pty.fork()
    if pid == 0:  # child: only exec-safe calls
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out, deadline = [], t0 + timeout
    try:
        while time.perf_counter() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:   # EIO: the child closed the terminal
                    data = b""
                if not data:
                    break
                out.append(data)
        else:
            killpg(pid)
        status = os.waitpid(pid, 0)[1]
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    return dt, rc, b"".join(out), cpu


def bench_render(b, reps, n):
    """Markdown rendered to a pty (render=always) vs the raw text (render=never), same
    stream; and the rendered run at twice the length, for linearity."""
    env = dict(b.env)
    env.pop("NO_COLOR", None)   # rendered as a person sees it: with color
    double = 2 * n
    runs = {}   # (render, chunks) -> [(wall, cpu)]
    dirs = {}
    for render in ("always", "never"):
        for k in (1, n, double):
            dirs[render, k] = b.workdir("md-%d" % k, tag="-" + render, render=render, color="always")
            b.server.markdown_body(k)   # pre-encoded outside the timings
    argv = b.bantam_argv("prompt.txt")
    for render, marks, raw in (("always", "\u2500\u2500\u2500 python".encode(), None),
                               ("never", b"```python", None)):   # a fence's label, or as written
        _, rc, out, _ = pty_run(argv, dirs[render, n], env)   # checked once
        if rc != 0:
            raise RuntimeError("render=%s run exited %s: %r" % (render, rc, out[-500:]))
        if marks not in out or (raw and raw in out):
            b.notes.append("render: render=%s printed no %r (or a raw %r)" % (render, marks, raw))
    for _ in range(reps):
        for render, k in (("always", 1), ("always", n), ("never", 1), ("never", n), ("always", double)):
            dt, rc, out, cpu = pty_run(argv, dirs[render, k], env)
            if rc != 0:
                raise RuntimeError("render=%s, %d chunks: exit %s: %r" % (render, k, rc, out[-500:]))
            runs.setdefault((render, k), []).append((dt, cpu))

    def net(render, k, which=0):
        return max(med([r[which] for r in runs[render, k]]) - med([r[which] for r in runs[render, 1]]), 1e-6)
    on, off, on_double = net("always", n), net("never", n), net("always", double)
    ratio, growth = off / on, on_double / on
    res = {"chunks": n, "runs": reps, "on_s": on, "off_s": off, "double_on_s": on_double,
           "on_chunks_per_s": n / on, "off_chunks_per_s": n / off, "ratio_on_off": ratio,
           "doubling": growth, "cpu_ratio_on_off": net("never", n, 1) / net("always", n, 1),
           "cpu_doubling": net("always", double, 1) / net("always", n, 1),
           "text_chars": n * MD_CHUNK}
    b.results["render"] = res
    b.row("render %d chunks to a pty: chunks/s, Markdown on vs off" % n, "%.0f/s" % (n / on),
          "%.0f/s" % (n / off), "%.2fx" % ratio, ">= 0.5x", ratio >= 0.5)
    cpu_on, cpu_double = net("always", n, 1), net("always", double, 1)
    b.row("render: CPU time for %d chunks / for %d (rendered)" % (double, n), fmt_ms(cpu_double),
          fmt_ms(cpu_on), "%.2fx" % res["cpu_doubling"], "<= 2.2x", res["cpu_doubling"] <= 2.2)
    b.row("render: wall time for %d chunks / for %d (rendered)" % (double, n), fmt_ms(on_double),
          fmt_ms(on), "%.2fx" % growth, "—")
    b.notes.append("render: %d chunks of %d characters (%d KB of Markdown: tables, code blocks, "
                   "lists, a quote), batch run with stdout a 100x40 pty, color on; the 1-chunk run "
                   "subtracted; median of %d. On/off by CPU time: %.2fx. Doubling is judged by CPU "
                   "time: on a loaded machine the wall time of one run varies more than 2x, and "
                   "the CPU time is what the renderer does." % (
                       n, MD_CHUNK, n * MD_CHUNK // 1000, reps, res["cpu_ratio_on_off"]))


def loop_request_body(b, mode_k):
    """Write the baseline's first request: bantam's own (same system prompt and tools) when
    the server kept it, else a synthetic one. Returns (path, where it came from)."""
    first = b.server.stats.mode(mode_k)["first_body"]
    try:
        req = json.loads(first.decode("utf-8"))
        assert isinstance(req.get("messages"), list)
        source = "bantam's first request body"
    except Exception:
        req = {"model": "bench", "stream": True, "messages": [
            {"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "Run the benchmark step."}]}
        source = "a synthetic body (could not reuse bantam's)"
    path = os.path.join(b.tmp, mode_k + "-req.json")
    with open(path, "wb") as f:
        f.write(json.dumps(req).encode("utf-8"))
    return path, source


# bantam's token line ends every batch run on stderr; anything else there is worth a note
TOKEN_LINE = re.compile(r"^\[\S+: ~?\d+ prompt")


def describe_connections(requests_on, limit=6):
    """'#1: 201 x POST /m/loop-200/v1/chat/completions, GET /props; #2: ...' for a note;
    consecutive connections that carried the same requests share one entry."""
    groups = []   # [first number, last number, description]
    for number in sorted(requests_on):
        runs = []
        for req in requests_on[number]:
            if runs and runs[-1][0] == req:
                runs[-1][1] += 1
            else:
                runs.append([req, 1])
        text = ", ".join(("%d x " % n if n > 1 else "") + "%s %s" % req for req, n in runs)
        if groups and groups[-1][2] == text and groups[-1][1] == number - 1:
            groups[-1][1] = number
        else:
            groups.append([number, number, text])
    parts = ["#%d: %s" % (a, t) if a == z else "#%d-#%d (%d connections, each): %s" % (
        a, z, z - a + 1, t) for a, z, t in groups[:limit]]
    if len(groups) > limit:
        parts.append("... %d more" % (len(groups) - limit))
    return "; ".join(parts)


def bantam_loop_runs(b, framing, k, rec):
    """One 0-iteration and one k-iteration bantam run against framing; adds to rec."""
    mode_k = "loop-%d" % k
    st = b.server.stats
    # timeouts far above a normal run (about 1 s) but short enough that a framing that
    # hangs bantam, or costs it a second per step, cannot stall the whole benchmark
    dt, rc, _ = b.run(b.bantam_argv("prompt.txt"), b.workdir("loop-0", framing), timeout=60)
    b.check(rc, "bantam loop-0 [%s]" % framing)
    rec["zero_iter_s"].append(dt)
    rec["zero_iter_cpu_s"].append(b.last_cpu)
    c0, r0, chat0 = st.connections, st.requests, st.mode(mode_k)["requests"]
    dt, rc, _ = b.run(b.bantam_argv("prompt.txt"), b.workdir(mode_k, framing), timeout=120)
    b.check(rc, "bantam %s [%s]" % (mode_k, framing))
    rec["total_s"].append(dt)
    rec["total_cpu_s"].append(b.last_cpu)
    conns, reqs = st.connections - c0, st.requests - r0
    rec["connections"].append(conns)
    rec["requests"].append(reqs)
    chat = st.mode(mode_k)["requests"] - chat0
    if chat != k + 1:
        rec["problems"].setdefault("chat", []).append(
            "bantam made %d chat requests, expected %d" % (chat, k + 1))
    expected = 1 if keeps_alive(framing) else reqs
    if conns != expected:   # evidence: which requests went on which connection
        rec["problems"].setdefault("connections", []).append(
            "%d connections for %d requests: %s" % (conns, reqs, describe_connections(
                b.server.requests_on(c0 + 1, st.connections))))
    for line in b.stderr_lines():
        if line.strip() and not TOKEN_LINE.match(line) and line not in rec["stderr"]:
            rec["stderr"].append(line)


def bench_loop(b, reps, k):
    """The tool-loop rows: time per iteration and TCP connections, once per framing."""
    mode_k, mode_0 = "loop-%d" % k, "loop-0"
    cwd_k, cwd_0 = b.workdir(mode_k), b.workdir(mode_0)
    st = b.server.stats
    recs = dict((f, {"total_s": [], "zero_iter_s": [], "total_cpu_s": [], "zero_iter_cpu_s": [],
                     "connections": [], "requests": [], "problems": {}, "stderr": [],
                     "failed": None}) for f in FRAMING_NAMES)
    lk, l0, ck, c0 = [], [], [], []
    closing = [f for f in FRAMING_NAMES if not keeps_alive(f)]
    same = dict((f, {"k": [], "0": []}) for f in closing)   # the minimal loop on that framing
    req_path = source = None
    for _ in range(reps):  # framings and baseline interleaved, so drift hits all alike
        for framing in FRAMING_NAMES:
            if recs[framing]["failed"]:
                continue
            try:   # one framing failing must not cost the others their rows
                bantam_loop_runs(b, framing, k, recs[framing])
            except RuntimeError as e:
                msg = str(e)
                if "stderr:" not in msg:   # a timeout: what bantam said is the evidence
                    msg += "; stderr:\n" + b.stderr_tail()[-1000:]
                recs[framing]["failed"] = msg
        if req_path is None:
            req_path, source = loop_request_body(b, mode_k)
        # the baseline: a minimal keep-alive loop, on chunked keep-alive only
        dt, rc, _ = b.run([PY, b.looper, b.server.endpoint(mode_0), req_path, str(k + 5)], cwd_0)
        b.check(rc, "baseline loop-0")
        l0.append(dt)
        c0.append(b.last_cpu)
        dt, rc, _ = b.run([PY, b.looper, b.server.endpoint(mode_k), req_path, str(k + 5)], cwd_k)
        b.check(rc, "baseline %s" % mode_k)
        lk.append(dt)
        ck.append(b.last_cpu)
        for framing in closing:   # a framing that closes after every reply costs a connection each
            for tag, mode, cwd in (("0", mode_0, cwd_0), ("k", mode_k, cwd_k)):
                dt, rc, _ = b.run([PY, b.looper, b.server.endpoint(mode, framing), req_path, str(k + 5)], cwd)
                b.check(rc, "baseline %s [%s]" % (mode, framing))
                same[framing][tag].append(dt)
    if st.mode(mode_k)["max_tool_msgs"] != k:
        b.notes.append("loop: bantam sent at most %d tool messages, expected %d"
                       % (st.mode(mode_k)["max_tool_msgs"], k))
    li = max(med(lk) - med(l0), 1e-9) / k
    lc = max(med(ck) - med(c0), 1e-9) / k
    res = {"iterations": k, "runs": reps, "baseline_body_source": source,
           "baseline": {"total_s": med(lk), "zero_iter_s": med(l0), "per_iter_s": li,
                        "cpu_per_iter_s": lc},
           "framings": {}}
    conn_rows = []
    for framing in FRAMING_NAMES:
        rec = recs[framing]
        if rec["failed"]:
            res["framings"][framing] = rec
            b.row("tool loop [%s]: time per iteration (%d x `true`)" % (framing, k), "failed",
                  fmt_ms(li), "—", "<= 1.2", False)
            conn_rows.append((framing, "failed", "—", "—", False))
            b.notes.append("loop [%s]: FAILED: %s" % (framing, rec["failed"]))
            continue
        bi = max(med(rec["total_s"]) - med(rec["zero_iter_s"]), 1e-9) / k
        ratio = bi / li
        bc = max(med(rec["total_cpu_s"]) - med(rec["zero_iter_cpu_s"]), 1e-9) / k
        res["framings"][framing] = dict(rec, per_iter_s=bi, ratio=ratio, cpu_per_iter_s=bc)
        b.row("tool loop [%s]: time per iteration (%d x `true`)" % (framing, k), fmt_ms(bi),
              fmt_ms(li), "%.2f" % ratio, "<= 1.2", ratio <= 1.2)
        conns, reqs = rec["connections"], rec["requests"]
        if keeps_alive(framing):
            conn_rows.append((framing, "%d" % max(conns), "1", "== 1",
                              all(c == 1 for c in conns)))
        else:  # the server closes after every reply: one connection per request
            n = "/".join(str(r) for r in sorted(set(reqs)))
            conn_rows.append((framing, "/".join(str(c) for c in sorted(set(conns))),
                              "%s requests" % n, "== requests (%s)" % n,
                              all(c == r for c, r in zip(conns, reqs))))
        for kind in sorted(rec["problems"]):   # the first run's words, and how often
            seen = rec["problems"][kind]
            b.notes.append("loop [%s]: %s%s" % (framing, seen[0], "" if len(seen) == 1 else
                                                " (in %d of %d runs)" % (len(seen), reps)))
        if rec["stderr"]:
            b.notes.append("loop [%s]: bantam stderr: %s" % (framing, " | ".join(rec["stderr"][:5])))
    for framing in closing:
        rec = res["framings"].get(framing) or {}
        if "per_iter_s" not in rec or not same[framing]["k"]:
            continue
        si = max(med(same[framing]["k"]) - med(same[framing]["0"]), 1e-9) / k
        rec["same_framing_per_iter_s"] = si
        b.row("tool loop [%s]: time per iteration vs a minimal loop on the same framing" % framing,
              fmt_ms(rec["per_iter_s"]), fmt_ms(si), "%.2f" % (rec["per_iter_s"] / si), "<= 1.2",
              rec["per_iter_s"] / si <= 1.2)
    for framing, got, base, target, met in conn_rows:
        b.row("tool loop [%s]: TCP connections per bantam run" % framing, got, base, "—",
              target, met)
    b.results["loop"] = res
    b.notes.append("loop: baseline replays %s on chunked keep-alive; %d-iteration run %s "
                   "total, 0-iteration run %s; bantam %d-iteration runs: %s." % (
                       source, k, fmt_ms(med(lk)), fmt_ms(med(l0)), k, ", ".join(
                           "%s %s" % (f, fmt_ms(med(recs[f]["total_s"])))
                           for f in FRAMING_NAMES if recs[f]["total_s"])))
    cpus = [(f, res["framings"][f]["cpu_per_iter_s"]) for f in FRAMING_NAMES
            if "cpu_per_iter_s" in res["framings"].get(f, {})]
    if cpus:
        b.notes.append("loop: CPU time per iteration (user+sys, with the tool's bash; "
                       "the 0-iteration run's subtracted), less sensitive to load than wall "
                       "time: baseline %s; bantam %s." % (fmt_ms(lc), ", ".join(
                           "%s %s (%.2fx)" % (f, fmt_ms(c), c / lc) for f, c in cpus)))
    failed = [f for f in FRAMING_NAMES if recs[f]["failed"]]
    if failed:  # main() reports it and exits 1: these measurements could not be made
        raise RuntimeError("bantam failed in framing %s (see the notes above)" % ", ".join(failed))


def filesystem_of(path):
    """The type of the filesystem holding path (from /proc/self/mounts), or '?'."""
    try:
        path = os.path.realpath(path)
        best, kind = "", "?"
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2:
                    mnt = parts[1].replace("\\040", " ")
                    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, parts[2]
        return kind
    except OSError:
        return "?"


def us(seconds):
    return "%.0f µs" % (seconds * 1e6)


def bench_steps(b, reps, n):
    """Step saves: bantam's save_session (the whole file, fsynced) at every message of a
    conversation growing by n messages of the tool loop's shape, as bantam saves at each reply
    and once its tool results are in; timed in-process (STEPS_SRC); without fsync beside it."""
    root = os.path.join(b.tmp, "steps")
    home, cwd = os.path.join(root, "home"), os.path.join(root, "cwd")
    os.makedirs(home)
    os.makedirs(cwd)
    config = os.path.join(cwd, "model.cfg")
    with open(config, "w") as f:   # a key as long as a real one: every saved line is redacted
        f.write("endpoint=%s\nmodel=bench\napi_key=sk-bench-%s\n" % (
            b.server.endpoint("loop-0"), "0123456789abcdef" * 3))
    strategies = ["whole", "nofsync"]
    spec = {"bantam": b.bantam, "home": home, "cwd": cwd, "config": config, "reps": reps,
            "messages": n, "strategies": strategies}
    _, rc, out = b.run([PY, b.steps_helper, json.dumps(spec)], cwd, timeout=240, capture=True)
    b.check(rc, "step-save micro-benchmark")
    runs = json.loads(out.decode("utf-8"))
    res = {"messages": n, "runs": reps, "filesystem": filesystem_of(home)}
    for strategy in strategies:
        rs = runs[strategy]
        res[strategy] = dict((k, med([r[k] for r in rs])) for k in (
            "step_mean_s", "tail_mean_s", "step_max_s"))
        lost = [r for r in rs if r["saved_messages"] != r["expected_messages"]]
        if lost:
            b.notes.append("steps [%s]: the saved file held %d of %d messages" % (
                strategy, lost[0]["saved_messages"], lost[0]["expected_messages"]))
    w, nf = res["whole"], res["nofsync"]
    b.row("step saves: a whole save per step, %d messages (fsync vs none)" % n,
          us(w["step_mean_s"]), us(nf["step_mean_s"]),
          "%.2f" % (w["step_mean_s"] / nf["step_mean_s"]), "—")
    loop = b.results.get("loop", {}).get("framings", {}).get("chunked", {})
    if loop.get("per_iter_s"):   # an iteration adds two messages: the call and its result
        it = loop["per_iter_s"]
        share = 2 * w["step_mean_s"] / it
        res.update(loop_iter_s=it, share_of_iteration=share)
        b.row("step saves: share of one tool-loop iteration [chunked] (2 saves)",
              "%.1f%%" % (100 * share), fmt_ms(it), "—", "—")
    else:
        b.notes.append("steps: no tool-loop row in this run (--only), so no share of an "
                       "iteration; run with --only loop,steps for it.")
    b.notes.append("steps: median of %d growths by %d messages on %s (HOME in the temp dir): "
                   "%s/save (%s over the last tenth, %s at most); without fsync %s/save "
                   "(last tenth %s)." % (
                       reps, n, res["filesystem"], us(w["step_mean_s"]), us(w["tail_mean_s"]),
                       us(w["step_max_s"]), us(nf["step_mean_s"]), us(nf["tail_mean_s"])))
    b.results["steps"] = res


def run_fleet(b, argvs, cwd, timeout, tag):
    """Run every argv at once through FLEET_HELPER_SRC (each in its own session, stdout to
    /dev/null, stderr to a file of its own, reaped by PID with os.wait4); one dict per run:
    exit status, ru_maxrss (KB), CPU seconds (user + system, with its reaped children).
    Raises RuntimeError when a run timed out (all were killed) or exited non-zero."""
    errs = [os.path.join(b.tmp, "stderr-%s-%d.log" % (tag, i)) for i in range(len(argvs))]
    pids = os.path.join(b.tmp, "fleet-%s.pids" % tag)
    spec = {"argvs": argvs, "cwd": cwd, "env": b.env, "timeout": timeout, "stderr": errs,
            "pids": pids}
    try:
        p = subprocess.run([PY, b.fleet_helper, json.dumps(spec)], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=timeout + 30)
        out = json.loads(p.stdout.decode("utf-8"))
    except (subprocess.TimeoutExpired, ValueError) as e:   # the helper itself failed
        try:
            with open(pids) as f:
                for line in f:
                    killpg(int(line))
        except (OSError, ValueError):
            pass
        raise RuntimeError("%s: the fleet helper failed (%s); its runs were killed" % (tag, e))
    results = out["runs"]
    b.fleet_helper_kb = max(b.fleet_helper_kb, out["helper_maxrss_kb"])
    if out["timed_out"]:
        raise RuntimeError("%s: timed out after %ss: %d of %d runs still running were "
                           "stopped (SIGTERM, then SIGKILL after 3 s)" % (
                               tag, timeout, out["killed"], len(argvs)))
    for i, r in enumerate(results):
        if r["rc"] != 0:
            with open(errs[i], "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace")
            raise RuntimeError("%s: run %d of %d exited %s; stderr:\n%s" % (
                tag, i + 1, len(argvs), r["rc"], tail))
    return results


def check_fleet_sessions(b, sids, prompts):
    """Problems with the conversation files of a fleet: each must exist, parse, hold its own
    prompt and the whole turn (5 messages)."""
    problems = []
    sessions = os.path.join(b.home, ".bantam", "sessions")
    for sid, prompt in zip(sids, prompts):
        path = os.path.join(sessions, sid + ".json")
        try:
            with open(path, encoding="utf-8") as f:
                msgs = json.load(f)["messages"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append("%s: %s" % (sid, e))
            continue
        users = [str(m.get("content")).strip() for m in msgs if m.get("role") == "user"]
        if users != [prompt.strip()] or len(msgs) != 5:
            problems.append("%s: %d messages, user messages %r" % (sid, len(msgs), users[:2]))
    link = os.path.join(sessions, "autosave.json")
    target = os.path.basename(os.readlink(link))[:-5] if os.path.islink(link) else None
    if target not in sids:
        problems.append("autosave.json points at %r, not at a run of this fleet" % target)
    return problems


def bench_fleet(b, rounds, n):
    """Fleets (issue 11): n batch runs at once, each with its own --session, one `true` tool
    call and an answer; peak RSS per run and CPU time per run vs one run alone. bantam runs
    as the installed command (the .pyc cached), as a fleet on a runner would. The same fleet
    of the minimal stdlib client (LOOP_SRC: same requests, `bash -c true`) shows what running
    n at once costs any process on this machine (cache, scheduler, the loaded server)."""
    mode = "tool-true"
    cwd = b.workdir(mode)
    prompts = ["Run the benchmark step (run %d).\n" % i for i in range(n)]
    for i, text in enumerate(prompts):
        with open(os.path.join(cwd, "prompt-%d.txt" % i), "w") as f:
            f.write(text)

    def argv(sid, i):
        return b.installed_argv("--session", sid, "prompt-%d.txt" % i)

    _, rc, _ = b.run(argv("warm-up", 0), cwd)   # the sessions folder; bantam's request body
    b.check(rc, "bantam (fleet warm-up run)")
    req_path, _ = loop_request_body(b, mode)
    ref = [PY, b.looper, b.server.endpoint(mode), req_path, "5"]
    chat0 = b.server.stats.mode(mode)["requests"]
    runs = {"alone": [], "fleet": [], "ref_alone": [], "ref_fleet": []}
    walls, problems = [], []

    def alone(r):
        for k in range(5):
            runs["alone"] += run_fleet(b, [argv("alone-%s-%d" % (r, k), k)], cwd, 60, "alone")
            runs["ref_alone"] += run_fleet(b, [ref], cwd, 60, "ref")

    for r in range(rounds):   # runs alone before and after each fleet, so drift hits both
        alone(r)
        sids = ["fleet-%d-%d" % (r, i) for i in range(n)]
        t0 = time.perf_counter()
        runs["fleet"] += run_fleet(b, [argv(sid, i) for i, sid in enumerate(sids)], cwd, 180, "fleet")
        walls.append(time.perf_counter() - t0)
        problems += check_fleet_sessions(b, sids, prompts)
        runs["ref_fleet"] += run_fleet(b, [ref] * n, cwd, 180, "ref-fleet")
    alone("end")
    chat = b.server.stats.mode(mode)["requests"] - chat0
    expected = 2 * sum(len(v) for v in runs.values())
    stat = dict((k, {"cpu_s": med([x["cpu_s"] for x in v]), "user_s": med([x["user_s"] for x in v]),
                     "sys_s": med([x["sys_s"] for x in v]),
                     "maxrss_kb": med([x["maxrss_kb"] for x in v]),
                     "maxrss_kb_max": max(x["maxrss_kb"] for x in v), "runs": len(v)})
                for k, v in runs.items())
    fl, al = stat["fleet"], stat["alone"]
    ratio = fl["cpu_s"] / al["cpu_s"]
    ref_ratio = stat["ref_fleet"]["cpu_s"] / stat["ref_alone"]["cpu_s"]
    res = dict(stat, runs_at_once=n, rounds=rounds, ratio=ratio, ref_ratio=ref_ratio,
               fleet_wall_s=walls, chat_requests=chat, problems=problems)
    b.results["fleet"] = res
    b.row("fleet: %d runs at once: peak RSS per run (max / median)" % n,
          "%.1f / %.1f MB" % (fl["maxrss_kb_max"] / 1024.0, fl["maxrss_kb"] / 1024.0),
          "%.1f MB alone" % (al["maxrss_kb"] / 1024.0), "—", "<= 25 MB",
          fl["maxrss_kb_max"] <= 25 * 1024)
    b.row("fleet: %d runs at once: CPU time per run (median) vs one run alone" % n,
          fmt_ms(fl["cpu_s"]), fmt_ms(al["cpu_s"]), "%.2f" % ratio, "<= 1.3", ratio <= 1.3)
    b.row("fleet: same for the minimal stdlib client (reference)",
          fmt_ms(stat["ref_fleet"]["cpu_s"]), fmt_ms(stat["ref_alone"]["cpu_s"]),
          "%.2f" % ref_ratio, "—")
    b.notes.append("fleet: %d round(s) of %d runs (bantam as installed, its own --session "
                   "each); a round took %s wall; %d runs alone; CPU per run user+sys: fleet "
                   "%s+%s, alone %s+%s; reference client fleet %s+%s, alone %s+%s; every run "
                   "exited 0; %d chat requests (expected %d)." % (
                       rounds, n, "/".join("%.1f s" % w for w in walls), al["runs"],
                       fmt_ms(fl["user_s"]), fmt_ms(fl["sys_s"]), fmt_ms(al["user_s"]),
                       fmt_ms(al["sys_s"]), fmt_ms(stat["ref_fleet"]["user_s"]),
                       fmt_ms(stat["ref_fleet"]["sys_s"]), fmt_ms(stat["ref_alone"]["user_s"]),
                       fmt_ms(stat["ref_alone"]["sys_s"]), chat, expected))
    b.notes.append("fleet: runs are spawned by a small helper process (peak RSS %.1f MB), "
                   "not by run.py: Linux counts the spawning process's peak in a child's "
                   "ru_maxrss." % (b.fleet_helper_kb / 1024.0))
    if problems:
        b.notes.append("fleet: conversation files: %s%s" % (
            "; ".join(problems[:5]), " ... %d more" % (len(problems) - 5)
            if len(problems) > 5 else ""))
        raise RuntimeError("fleet: %d conversation file problem(s), see the note" % len(problems))


def bench_memory(b, reps):
    out = {}
    for mode in ("tool-quiet", "tool-big"):
        cwd = b.workdir(mode)
        rss, walls = [], []
        for _ in range(reps):
            spec = {"argv": b.bantam_argv("prompt.txt"), "cwd": cwd, "env": b.env,
                    "stderr": b.errlog, "timeout": 240}
            p = subprocess.run([PY, b.rss_helper, json.dumps(spec)], stdout=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=300)
            r = json.loads(p.stdout.decode())
            if r["timed_out"]:
                raise RuntimeError("bantam %s timed out (killed)" % mode)
            st = r["status"]
            rc = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
            b.check(rc, "bantam " + mode)
            rss.append(r["maxrss_kb"])
            walls.append(r["wall"])
        out[mode] = {"maxrss_kb": max(rss), "maxrss_runs_kb": rss, "wall_s": med(walls)}
        lens = b.server.stats.mode(mode)["tool_content_len"]
        out[mode]["tool_result_chars_sent"] = max(lens) if lens else None
    big, quiet = out["tool-big"]["maxrss_kb"], out["tool-quiet"]["maxrss_kb"]
    ratio = big / float(quiet)
    out["ratio"] = ratio
    out["runs"] = reps
    b.results["memory"] = out
    b.row("peak RSS: tool prints 500 MB vs prints nothing", "%.1f MB" % (big / 1024.0),
          "%.1f MB" % (quiet / 1024.0), "%.2f" % ratio, "<= 1.5", ratio <= 1.5)
    sent = out["tool-big"]["tool_result_chars_sent"]
    b.notes.append("memory: 500 MB run took %.1f s (quiet run, same `head` work: %.1f s); "
                   "tool result sent to the model: %s chars (max_tool_res=65536)." % (
                       out["tool-big"]["wall_s"], out["tool-quiet"]["wall_s"], sent))
    if sent is None:
        b.notes.append("memory: bantam sent no tool message back in the 500 MB run.")
    elif sent > 65536 + 4096:
        b.notes.append("memory: tool result sent to the model exceeds max_tool_res.")


# Earlier releases measured beside this one: (label, git revision of bantam.py).
RELEASES = (("1.0.0", "5d40e98~1"), ("1.2.0", "f0e28ac"))


def bantam_at(b, rev):
    """bantam.py as git has it at rev, in the bench's temp dir, or None when git cannot show
    it (not a checkout)."""
    path = os.path.join(b.tmp, "bantam-%s.py" % re.sub(r"\W", "_", rev))
    if not os.path.exists(path):
        try:
            old = subprocess.run(["git", "show", rev + ":bantam.py"], cwd=HERE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if old.returncode != 0:
            return None
        with open(path, "wb") as f:
            f.write(old.stdout)
    return path


def peak_rss_kb(b, argv, cwd, reps):
    """The highest peak RSS (KB) of reps runs of argv, each reaped by the small rss helper."""
    rss = []
    for _ in range(reps):
        spec = {"argv": argv, "cwd": cwd, "env": b.env, "stderr": b.errlog, "timeout": 120}
        p = subprocess.run([PY, b.rss_helper, json.dumps(spec)], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=180)
        r = json.loads(p.stdout.decode())
        st = r["status"]
        rc = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
        b.check(-1 if r["timed_out"] else rc, " ".join(argv[1:]))
        rss.append(r["maxrss_kb"])
    return max(rss)


def cached_argv(b):
    """(argv, cwd) that run bantam from its cached bytecode: `python3 -m bantam` in the
    project folder (so that it is importable), after one warm-up run that writes __pycache__."""
    folder, name = os.path.split(b.bantam)
    argv = [PY, "-m", os.path.splitext(name)[0]]
    _, rc, _ = b.run(argv + ["--version"], folder)
    b.check(rc, "python3 -m bantam --version (warm-up)")
    import importlib.util
    if not os.path.exists(importlib.util.cache_from_source(b.bantam)):
        b.notes.append("footprint: the warm-up wrote no __pycache__ (a read-only folder?): "
                       "the cached rows compile the file like the script rows.")
    return argv, folder


def bench_requests(b):
    """A batch run with N model calls makes N requests, every path counted (the context
    window is asked only when needed): N = 1 (an answer) and N = 4 (3 tool calls, then one)."""
    for calls in (1, 4):
        cwd = b.workdir("loop-%d" % (calls - 1))
        before = len(b.server.stats.log)
        _, rc, _ = b.run(b.bantam_argv("prompt.txt"), cwd)
        b.check(rc, "bantam prompt.txt (loop-%d)" % (calls - 1))
        log = b.server.stats.log[before:]
        made = len(log)
        if made != calls:
            b.notes.append("requests: the batch run with %d model calls asked %s" % (
                calls, ", ".join("%s %s" % (m, p.split("/", 3)[-1]) for _, m, p in log)))
        b.results.setdefault("requests", {})[str(calls)] = made
        b.row("requests: a batch run with %d model call%s" % (calls, "s" if calls > 1 else ""),
              "%d requests" % made, "%d" % calls, "%.2f" % (made / float(calls)),
              "== %d" % calls, made == calls)


def bench_footprint(b, reps):
    """What the size of the file costs at every start (`python3 bantam.py` compiles it each
    time) and in memory, and the same from cached bytecode (`python3 -m bantam`), against
    `python3 -c pass` and against earlier releases (RELEASES) in the same run."""
    cwd = b.workdir("stream-1")
    with open(os.path.join(cwd, "hi.txt"), "w") as f:   # 1.0 has no -p: its batch mode reads a file
        f.write("hi\n")
    olds = []
    for label, rev in RELEASES:
        path = bantam_at(b, rev)
        if path is None:
            b.notes.append("footprint: git could not show bantam %s (%s:bantam.py); its "
                           "figures are missing." % (label, rev))
        else:
            olds.append((label, path))
    cached, project = cached_argv(b)
    times = dict((k, []) for k in ["script", "cached", "python"] + [l for l, _ in olds])
    for _ in range(reps):  # interleaved so drift hits every command alike
        times["script"].append(b.run(b.bantam_argv("--version"), cwd)[0])
        times["cached"].append(b.run(cached + ["--version"], project)[0])
        for label, path in olds:
            times[label].append(b.run([PY, path, "--version"], cwd)[0])
        times["python"].append(b.run([PY, "-c", "pass"], cwd)[0])
    m = dict((k, med(v)) for k, v in times.items())
    n = max(3, reps // 5)
    config = os.path.join(cwd, "model.cfg")
    rss = {"script": peak_rss_kb(b, b.bantam_argv("-p", "hi"), cwd, n),
           "cached": peak_rss_kb(b, cached + ["--config", config, "-p", "hi"], project, n),
           "python": peak_rss_kb(b, [PY, "-c", "pass"], cwd, 3)}
    for label, path in olds:   # 1.0 has no -p and no --config
        argv = [PY, path, "hi.txt"] if label == "1.0.0" else [PY, path, "-p", "hi"]
        rss[label] = peak_rss_kb(b, argv, cwd, n)
    b.results["footprint"] = {"runs": reps, "seconds": m, "maxrss_kb": rss}
    mp, rp = m["python"], float(rss["python"])
    was = "".join(" (%s: %.2fx)" % (l, m[l] / mp) for l, _ in olds)
    b.row("start-up: `python3 bantam.py --version` vs `python3 -c pass`%s" % was,
          fmt_ms(m["script"]), fmt_ms(mp), "%.2fx" % (m["script"] / mp), "—")
    b.row("start-up, cached bytecode: `python3 -m bantam --version` vs `python3 -c pass`",
          fmt_ms(m["cached"]), fmt_ms(mp), "%.2fx" % (m["cached"] / mp), "<= 1.5x",
          m["cached"] / mp <= 1.5)
    was = "".join(" (%s: %.1f MB)" % (l, rss[l] / 1024.0) for l, _ in olds)
    b.row("peak RSS: one-shot `python3 bantam.py -p hi`%s vs `python3 -c pass`" % was,
          "%.1f MB" % (rss["script"] / 1024.0), "%.1f MB" % (rp / 1024.0),
          "%.2fx" % (rss["script"] / rp), "—")
    b.row("peak RSS, cached bytecode: one-shot `python3 -m bantam -p hi` vs `python3 -c pass`",
          "%.1f MB" % (rss["cached"] / 1024.0), "%.1f MB" % (rp / 1024.0),
          "%.2fx" % (rss["cached"] / rp), "<= 22 MB", rss["cached"] <= 22 * 1024)
    bench_requests(b)


def bench_snapshot(b, reps, files=10000):
    """The work tree's snapshots around a turn (for /diff and /undo) in a git repository of
    10,000 files with work in progress: a one-shot batch run with snapshots on vs off."""
    cwd = b.workdir("stream-1", tag="-snapshot")
    for i in range(files):
        folder = os.path.join(cwd, "src", "d%03d" % (i // 100))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "f%05d.txt" % i), "w") as f:
            f.write("line %d\n" % i)
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "files"]):
        subprocess.run(git + argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(cwd, "src", "d000", "f00000.txt"), "a") as f:
        f.write("work in progress\n")
    with open(os.path.join(cwd, "model.cfg")) as f:
        conf = f.read()
    times = {"true": [], "false": []}
    for _ in range(reps):   # interleaved so drift hits both alike
        for on in ("true", "false"):
            with open(os.path.join(cwd, "model.cfg"), "w") as f:
                f.write(conf + "snapshots=%s\n" % on)
            seconds, rc, _ = b.run(b.bantam_argv("prompt.txt"), cwd)
            b.check(rc, "bantam prompt.txt (snapshots=%s)" % on)
            times[on].append(seconds)
    on, off = med(times["true"]), med(times["false"])
    b.results["snapshot"] = {"files": files, "on_s": on, "off_s": off}
    b.row("snapshots: a batch turn in a git tree of %d files, snapshots on vs off" % files,
          fmt_ms(on), fmt_ms(off), "+%s" % fmt_ms(on - off), "< +1 s", on - off < 1.0)


# --------------------------------------------------------------------------

def print_report(b, elapsed):
    lines = ["| measure | bantam | baseline | ratio | target |",
             "| --- | --- | --- | --- | --- |"]
    for m, v, base, r, t, _ in b.rows:
        lines.append("| %s | %s | %s | %s | %s |" % (m, v, base, r, t))
    lines.append("")
    for m, v, base, r, t, met in b.rows:
        if met is not None:
            lines.append("- %s: target %s %s (%s)" % (m, t, "met" if met else "NOT MET",
                                                     r if r != "—" else v))
    lines.append("")
    for n in b.notes:
        lines.append("note: " + n)
    lines.append("benchmark took %.1f s (%s)" % (elapsed, "quick" if b.args.quick else "full"))
    print("\n".join(lines))
    sys.stdout.flush()


def serve_only(seconds):
    srv = FakeServer().start()
    try:
        print("fake server on 127.0.0.1 for %ss; endpoints (chunked keep-alive):" % seconds)
        for mode in ("stream-50000", "stream-1", "loop-200", "loop-0", "tool-big", "tool-quiet"):
            print("  endpoint=%s" % srv.endpoint(mode))
        print("the same modes in other framings (one port each):")
        for framing in FRAMING_NAMES[1:]:
            print("  %-13s endpoint=%s" % (framing, srv.endpoint("loop-200", framing)))
        sys.stdout.flush()
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(min(1.0, max(0.0, end - time.time())))
    except KeyboardInterrupt:
        pass
    finally:
        print("connections accepted: %d" % srv.stats.connections)
        srv.stop()


ALL_STEPS = "startup,footprint,repl,stream,render,loop,steps,fleet,memory,snapshot"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    ap.add_argument("--bantam", default=DEFAULT_BANTAM, help="path to bantam.py")
    ap.add_argument("--only", default=ALL_STEPS,
                    help="comma list of: " + ALL_STEPS)
    ap.add_argument("--serve", type=float, metavar="SECONDS",
                    help="only run the fake server for SECONDS (for profiling)")
    args = ap.parse_args()
    if args.serve is not None:
        serve_only(args.serve)
        return 0
    if not os.path.isfile(args.bantam):
        sys.stderr.write("bench: %s not found\n" % args.bantam)
        return 2
    q = args.quick
    only = set(x.strip() for x in args.only.split(",") if x.strip())
    if only - set(ALL_STEPS.split(",")):
        sys.stderr.write("bench: --only: unknown %s (expected some of %s)\n" % (
            ", ".join(sorted(only - set(ALL_STEPS.split(",")))), ALL_STEPS))
        return 2
    started = time.perf_counter()
    b = Bench(args)
    status = 0
    try:
        b.server = FakeServer().start()
        steps = [("startup", lambda: bench_startup(b, 10 if q else 30)),
                 ("footprint", lambda: bench_footprint(b, 10 if q else 30)),
                 ("repl", lambda: bench_repl(b, 5 if q else 15)),
                 ("stream", lambda: bench_stream(b, 3 if q else 5, 50000)),
                 ("render", lambda: bench_render(b, 3 if q else 5, 50000)),
                 ("loop", lambda: bench_loop(b, 1 if q else 3, 100 if q else 200)),
                 ("steps", lambda: bench_steps(b, 3 if q else 7, 400)),
                 ("fleet", lambda: bench_fleet(b, 1 if q else 2, 50)),
                 ("memory", lambda: bench_memory(b, 1 if q else 2)),
                 ("snapshot", lambda: bench_snapshot(b, 3 if q else 7))]
        for name, fn in steps:
            if name not in only:
                continue
            progress("%s ..." % name)
            t = time.perf_counter()
            try:
                fn()
            except Exception as e:  # report and go on with the other measures
                status = 1
                b.notes.append("%s: FAILED: %s" % (name, e))
                b.results.setdefault("errors", {})[name] = str(e)
            progress("%s done in %.1f s" % (name, time.perf_counter() - t))
        b.results["connections_total"] = b.server.stats.connections
    finally:
        b.cleanup()
    elapsed = time.perf_counter() - started
    b.results["elapsed_s"] = elapsed
    b.results["quick"] = q
    b.results["targets"] = [{"measure": m, "ratio": r, "target": t, "met": met}
                            for m, _, _, r, t, met in b.rows if met is not None]
    print_report(b, elapsed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(b.results, f, indent=2, sort_keys=True)
            f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
