#!/usr/bin/env python3
"""Benchmark for bantam: start-up, REPL prompt, stream throughput, tool loop, memory.

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
import json
import os
import pty
import queue
import re
import select
import shutil
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
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
        self.commands = {"big": BIG_CMD, "quiet": QUIET_CMD}
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
                         "LC_ALL": "C.UTF-8", "TERM": "xterm"})
        self.server = None
        self.results = {}
        self.rows = []
        self.notes = []
        self.reader = self._write("reader.py", READER_SRC)
        self.looper = self._write("loop.py", LOOP_SRC)
        self.rss_helper = self._write("rss_helper.py", RSS_HELPER_SRC)
        self.errlog = os.path.join(self.tmp, "stderr.log")

    def _write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def workdir(self, mode, framing="chunked", **cfg):
        """A directory with model.cfg (endpoint: mode in framing) and prompt.txt."""
        d = os.path.join(self.tmp, "w-" + mode + ("" if framing == "chunked" else "-" + framing))
        if not os.path.isdir(d):
            os.mkdir(d)
        conf = {"endpoint": self.server.endpoint(mode, framing), "model": "bench", "api_key": "x",
                "stream": "true", "color": "never", "timeout": "300",
                "shell_timeout": "300", "max_al_iterations": "1000",
                "max_tool_res": "65536", "backoff": "0.1,0.2"}
        conf.update(cfg)
        with open(os.path.join(d, "model.cfg"), "w") as f:
            f.write("# written by bench/run.py\n")
            for k, v in conf.items():
                f.write("%s=%s\n" % (k, v))
        with open(os.path.join(d, "prompt.txt"), "w") as f:
            f.write("Run the benchmark step.\n")
        return d

    def run(self, argv, cwd, timeout=300, capture=False):
        """Run argv, return (seconds, rc, stdout-bytes-or-None).  Own session so a
        timeout can kill the process and whatever it spawned."""
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

def bench_startup(b, reps):
    cwd = b.workdir("stream-1")
    dt, rc, out = b.run(b.bantam_argv("--version"), cwd, capture=True)
    b.check(rc, "bantam --version")
    version = out.decode("utf-8", "replace").strip()
    if not version.startswith("bantam "):
        b.notes.append("--version printed %r (expected 'bantam X.Y.Z')" % version)
    b.results["version"] = version
    # The installed `bantam` command is pip's console-script shim: it imports the module, so
    # Python compiles bantam.py once and reuses the cached .pyc. `python3 bantam.py` runs it as
    # a script, which Python recompiles on every start; that form is shown for information.
    lib = os.path.join(b.tmp, "lib")
    os.makedirs(lib, exist_ok=True)
    shutil.copy(b.bantam, os.path.join(lib, "bantam.py"))
    command = [PY, "-c", "import sys; sys.path.insert(0, %r); from bantam import main; "
               "sys.exit(main())" % lib, "--version"]
    b.run(command, cwd)   # writes the .pyc, as the first run after `pip install` does
    tb, ts, tp = [], [], []
    for _ in range(reps):  # interleaved so drift hits both sides alike
        tb.append(b.run(command, cwd)[0])
        ts.append(b.run(b.bantam_argv("--version"), cwd)[0])
        tp.append(b.run([PY, "-c", "pass"], cwd)[0])
    mb, ms, mp = med(tb), med(ts), med(tp)
    b.results["startup"] = {"bantam_s": mb, "script_s": ms, "python_s": mp, "ratio": mb / mp,
                            "runs": reps}
    b.row("start-up: `bantam --version` vs `python3 -c pass`", fmt_ms(mb), fmt_ms(mp),
          "%.2fx" % (mb / mp), "<= 2x", mb / mp <= 2.0)
    b.row("start-up: `python3 bantam.py --version` (no .pyc)", fmt_ms(ms), fmt_ms(mp),
          "%.2fx" % (ms / mp), "—")


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
             ("reader", lambda m: [PY, b.reader, b.server.endpoint(m)])]
    if curl:
        progs.append(("curl", curl_argv))
    times = {name: {"n": [], "1": []} for name, _ in progs}
    for _ in range(reps):
        for name, argv in progs:
            for key, mode, cwd in (("1", one, cwd_1), ("n", big, cwd_n)):
                dt, rc, _ = b.run(argv(mode), cwd)
                b.check(rc, "%s (%s)" % (name, mode))
                times[name][key].append(dt)
    res = {}
    for name, _ in progs:
        tn, t1 = med(times[name]["n"]), med(times[name]["1"])
        net = max(tn - t1, 1e-6)
        res[name] = {"total_s": tn, "one_chunk_s": t1, "net_s": net, "chunks_per_s": n / net}
    ratio = res["bantam"]["chunks_per_s"] / res["reader"]["chunks_per_s"]
    res["ratio_vs_reader"] = ratio
    res["chunks"] = n
    res["runs"] = reps
    b.row("stream %d chunks: chunks/s vs stdlib reader" % n,
          "%.0f/s" % res["bantam"]["chunks_per_s"], "%.0f/s" % res["reader"]["chunks_per_s"],
          "%.2f" % ratio, ">= 0.9", ratio >= 0.9)
    if curl:
        rc_ = res["bantam"]["chunks_per_s"] / res["curl"]["chunks_per_s"]
        res["ratio_vs_curl"] = rc_
        b.row("stream %d chunks: chunks/s vs `curl -sN`" % n,
              "%.0f/s" % res["bantam"]["chunks_per_s"], "%.0f/s" % res["curl"]["chunks_per_s"],
              "%.2f" % rc_, "—")
    else:
        b.notes.append("stream: curl not found, curl row skipped.")
    b.notes.append("stream: wall time for %d chunks incl. start-up: bantam %s, reader %s%s; "
                   "1-chunk run (fixed cost, subtracted): bantam %s, reader %s." % (
                       n, fmt_ms(res["bantam"]["total_s"]), fmt_ms(res["reader"]["total_s"]),
                       (", curl " + fmt_ms(res["curl"]["total_s"])) if curl else "",
                       fmt_ms(res["bantam"]["one_chunk_s"]), fmt_ms(res["reader"]["one_chunk_s"])))
    b.results["stream"] = res


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
    path = os.path.join(b.tmp, "loop-req.json")
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
    c0, r0, chat0 = st.connections, st.requests, st.mode(mode_k)["requests"]
    dt, rc, _ = b.run(b.bantam_argv("prompt.txt"), b.workdir(mode_k, framing), timeout=120)
    b.check(rc, "bantam %s [%s]" % (mode_k, framing))
    rec["total_s"].append(dt)
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
    recs = dict((f, {"total_s": [], "zero_iter_s": [], "connections": [], "requests": [],
                     "problems": {}, "stderr": [], "failed": None}) for f in FRAMING_NAMES)
    lk, l0 = [], []
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
        dt, rc, _ = b.run([PY, b.looper, b.server.endpoint(mode_k), req_path, str(k + 5)], cwd_k)
        b.check(rc, "baseline %s" % mode_k)
        lk.append(dt)
    if st.mode(mode_k)["max_tool_msgs"] != k:
        b.notes.append("loop: bantam sent at most %d tool messages, expected %d"
                       % (st.mode(mode_k)["max_tool_msgs"], k))
    li = max(med(lk) - med(l0), 1e-9) / k
    res = {"iterations": k, "runs": reps, "baseline_body_source": source,
           "baseline": {"total_s": med(lk), "zero_iter_s": med(l0), "per_iter_s": li},
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
        res["framings"][framing] = dict(rec, per_iter_s=bi, ratio=ratio)
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
    for framing, got, base, target, met in conn_rows:
        b.row("tool loop [%s]: TCP connections per bantam run" % framing, got, base, "—",
              target, met)
    b.results["loop"] = res
    b.notes.append("loop: baseline replays %s on chunked keep-alive; %d-iteration run %s "
                   "total, 0-iteration run %s; bantam %d-iteration runs: %s." % (
                       source, k, fmt_ms(med(lk)), fmt_ms(med(l0)), k, ", ".join(
                           "%s %s" % (f, fmt_ms(med(recs[f]["total_s"])))
                           for f in FRAMING_NAMES if recs[f]["total_s"])))
    failed = [f for f in FRAMING_NAMES if recs[f]["failed"]]
    if failed:  # main() reports it and exits 1: these measurements could not be made
        raise RuntimeError("bantam failed in framing %s (see the notes above)" % ", ".join(failed))


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    ap.add_argument("--bantam", default=DEFAULT_BANTAM, help="path to bantam.py")
    ap.add_argument("--only", default="startup,repl,stream,loop,memory",
                    help="comma list of: startup,repl,stream,loop,memory")
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
    started = time.perf_counter()
    b = Bench(args)
    status = 0
    try:
        b.server = FakeServer().start()
        steps = [("startup", lambda: bench_startup(b, 10 if q else 30)),
                 ("repl", lambda: bench_repl(b, 5 if q else 15)),
                 ("stream", lambda: bench_stream(b, 2 if q else 5, 50000)),
                 ("loop", lambda: bench_loop(b, 1 if q else 3, 100 if q else 200)),
                 ("memory", lambda: bench_memory(b, 1 if q else 2))]
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
