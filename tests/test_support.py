"""Tests of the test infrastructure itself (FakeServer, builders, Workspace, processes, Pty); no bantam.py needed."""

import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import unittest

from tests.support import (
    BantamTestCase, FakeServer, Pty, Workspace, chunk, completion, drop, error, hang,
    json_reply, run_program, sse, sse_events, strip_ansi, text_stream, tool_call_stream, usage)


def post(conn, body=None, path="/v1/chat/completions", headers=None):
    """POST JSON on an http.client connection; return the response (unread)."""
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request("POST", path, body=json.dumps(body or {"model": "m"}), headers=hdrs)
    return conn.getresponse()


def raw_exchange(server, request_bytes):
    """Send raw bytes on a fresh socket and return everything received until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request_bytes)
        data = b""
        while True:
            part = sock.recv(65536)
            if not part:
                return data
            data += part


def raw_post(path="/v1/chat/completions"):
    """Return a raw HTTP/1.1 POST that asks the server to close afterwards."""
    body = b'{"model": "m"}'
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def parse_chunked(data):
    """Split a raw chunked HTTP response into (head, [chunk payloads], terminated)."""
    head, rest = data.split(b"\r\n\r\n", 1)
    chunks = []
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return head, chunks, True
        chunks.append(rest[:size])
        rest = rest[size + 2:]
    return head, chunks, False


class ServerCase(unittest.TestCase):
    """Each test gets a started FakeServer and a keep-alive client connection."""

    def setUp(self):
        self.server = FakeServer().start()
        self.addCleanup(self.server.stop)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        self.addCleanup(self.conn.close)


class SseFramingTests(ServerCase):

    def test_events_raw_strings_and_done(self):
        self.server.push(sse([{"a": 1}, ": keep-alive\n\n", "event: x\n", {"b": "é"}]))
        resp = post(self.conn)
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.getheader("Content-Type"), "text/event-stream")
        self.assertEqual(resp.getheader("Transfer-Encoding"), "chunked")
        self.assertEqual(resp.read().decode("utf-8"),
                         'data: {"a": 1}\n\n: keep-alive\n\nevent: x\ndata: {"b": "é"}\n\ndata: [DONE]\n\n')

    def test_crlf_no_space_no_done(self):
        self.server.push(sse([{"a": 1}], crlf=True, space=False, done=False))
        self.assertEqual(post(self.conn).read(), b'data:{"a": 1}\r\n\r\n')

    def test_split_makes_one_chunk_per_piece(self):
        self.server.push(sse([{"t": "日本"}], split=3))
        head, chunks, terminated = parse_chunked(raw_exchange(self.server, raw_post()))
        body = 'data: {"t": "日本"}\n\ndata: [DONE]\n\n'.encode("utf-8")
        self.assertTrue(terminated)
        self.assertEqual(b"".join(chunks), body)
        self.assertEqual([len(c) for c in chunks[:-1]], [3] * (len(chunks) - 1))
        with self.assertRaises(UnicodeDecodeError):  # some boundary falls inside a character
            for c in chunks:
                c.decode("utf-8")

    def test_drop_after_cuts_the_body_without_terminator(self):
        self.server.push(sse([{"a": 1}, {"b": 2}], drop_after=10))
        resp = post(self.conn)
        with self.assertRaises(http.client.IncompleteRead) as cm:
            resp.read()
        self.assertEqual(cm.exception.partial, b'data: {"a"')
        self.server.push(sse([{"a": 1}], drop_after=10))
        head, chunks, terminated = parse_chunked(raw_exchange(self.server, raw_post()))
        self.assertFalse(terminated)
        self.assertEqual(b"".join(chunks), b'data: {"a"')

    def test_unchunked_stream_closes_connection(self):
        self.server.push(sse([{"a": 1}], chunked=False))
        resp = post(self.conn)
        self.assertIsNone(resp.getheader("Transfer-Encoding"))
        self.assertIsNone(resp.getheader("Content-Length"))
        self.assertEqual(resp.read(), b'data: {"a": 1}\n\ndata: [DONE]\n\n')
        self.assertTrue(resp.will_close)

    def test_delay_spaces_the_events(self):
        self.server.push(sse([{"a": 1}, {"b": 2}], delay=0.2))
        start = time.monotonic()
        post(self.conn).read()
        self.assertGreaterEqual(time.monotonic() - start, 0.35)

    def test_sse_headers_and_status(self):
        self.server.push(sse([], headers={"X-Test": "1", "content-type": "text/plain"}, status=201))
        resp = post(self.conn)
        self.assertEqual((resp.status, resp.getheader("X-Test")), (201, "1"))
        self.assertEqual(resp.getheader("Content-Type"), "text/plain")
        resp.read()


class ReplyTests(ServerCase):

    def test_json_reply(self):
        self.server.push(json_reply({"x": [1, 2]}, status=202, headers={"X-A": "b"}))
        resp = post(self.conn)
        body = resp.read()
        self.assertEqual((resp.status, resp.getheader("X-A")), (202, "b"))
        self.assertEqual(resp.getheader("Content-Length"), str(len(body)))
        self.assertEqual(json.loads(body), {"x": [1, 2]})

    def test_bare_dict_is_served_as_json(self):
        self.server.push(completion("hi", usage=usage(3, 4, cached=2)))
        reply = json.loads(post(self.conn).read())
        self.assertEqual(reply["choices"][0]["message"], {"role": "assistant", "content": "hi"})
        self.assertEqual(reply["usage"]["prompt_tokens_details"], {"cached_tokens": 2})

    def test_error_default_and_raw_bodies(self):
        self.server.push(error(429, "slow down", code="rate_limit", headers={"Retry-After": "1"}),
                         error(502, body="<html>bad gateway</html>"))
        resp = post(self.conn)
        self.assertEqual((resp.status, resp.getheader("Retry-After")), (429, "1"))
        self.assertEqual(json.loads(resp.read()),
                         {"error": {"message": "slow down", "type": None, "code": "rate_limit"}})
        resp = post(self.conn)
        self.assertEqual((resp.status, resp.read()), (502, b"<html>bad gateway</html>"))

    def test_callable_item_sees_the_request(self):
        self.server.push(lambda req: json_reply({"echo": req["body"]["model"]}))
        self.assertEqual(json.loads(post(self.conn, {"model": "zz"}).read()), {"echo": "zz"})

    def test_drop_closes_without_answer(self):
        self.server.push(drop())
        with self.assertRaises(http.client.RemoteDisconnected):
            post(self.conn)

    def test_hang_times_out_client_and_stop_is_quick(self):
        self.server.push(hang(30))
        self.conn.timeout = 0.3
        with self.assertRaises(socket.timeout):
            post(self.conn)
        start = time.monotonic()
        self.server.stop()
        self.assertLess(time.monotonic() - start, 3)

    def test_script_exhausted(self):
        self.server.push(json_reply({"first": True}))
        self.assertEqual(json.loads(post(self.conn).read()), {"first": True})
        self.assertFalse(self.server.exhausted)
        reply = json.loads(post(self.conn).read())
        self.assertEqual(reply["choices"][0]["message"]["content"], "(script exhausted)")
        self.assertTrue(self.server.exhausted)

    def test_models_default_and_error_item(self):
        self.conn.request("GET", "/v1/models")
        resp = self.conn.getresponse()
        self.assertEqual(json.loads(resp.read())["data"][0],
                         {"id": "test-model", "context_length": 100000})
        self.server.models = error(404)
        self.conn.request("GET", "/v1/models")
        resp = self.conn.getresponse()
        resp.read()
        self.assertEqual(resp.status, 404)

    def test_unknown_route_is_404(self):
        self.conn.request("GET", "/v1/nothing")
        resp = self.conn.getresponse()
        resp.read()
        self.assertEqual(resp.status, 404)


class RecordingTests(ServerCase):

    def test_requests_are_recorded(self):
        post(self.conn, {"model": "m", "stream": True},
             headers={"Authorization": "Bearer k", "User-Agent": "UA"}).read()
        req = self.server.requests[0]
        self.assertEqual((req["method"], req["path"]), ("POST", "/v1/chat/completions"))
        self.assertEqual(req["headers"]["authorization"], "Bearer k")
        self.assertEqual(req["headers"]["user-agent"], "UA")
        self.assertEqual(req["body"], {"model": "m", "stream": True})
        self.assertEqual(json.loads(req["raw"]), req["body"])
        self.assertEqual(self.server.bodies, [{"model": "m", "stream": True}])

    def test_non_json_body_is_none(self):
        self.conn.request("POST", "/v1/chat/completions", body=b"not json")
        self.conn.getresponse().read()
        self.assertIsNone(self.server.requests[0]["body"])
        self.assertEqual(self.server.requests[0]["raw"], b"not json")

    def test_keep_alive_counts_one_connection(self):
        post(self.conn).read()
        post(self.conn).read()
        self.assertEqual(self.server.connections, 1)
        other = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        self.addCleanup(other.close)
        post(other).read()
        self.assertEqual(self.server.connections, 2)
        self.assertEqual(len(self.server.posts), 3)

    def test_wait_requests(self):
        def later():
            time.sleep(0.2)
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
            post(conn).read()
            conn.close()
        thread = threading.Thread(target=later)
        thread.start()
        self.addCleanup(thread.join)
        self.assertEqual(len(self.server.wait_requests(1, timeout=5)), 1)
        with self.assertRaises(AssertionError):
            self.server.wait_requests(2, timeout=0.2)

    def test_context_manager_and_script_arg(self):
        with FakeServer(script=[json_reply({"n": 1})]) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            self.assertEqual(json.loads(post(conn).read()), {"n": 1})
            conn.close()
            self.assertTrue(server.url.endswith(":%d/v1" % server.port))
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


class BuilderTests(unittest.TestCase):

    def events(self, item):
        return sse_events(b"".join(item["pieces"]))

    def test_text_stream_assembles(self):
        events = self.events(text_stream("Hello, world", reasoning="think", usage=usage(5, 6)))
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events[-2]["choices"], [])
        self.assertEqual(events[-2]["usage"]["total_tokens"], 11)
        deltas = [e["choices"][0]["delta"] for e in events[:-2]]
        self.assertEqual("".join(d.get("content") or "" for d in deltas), "Hello, world")
        self.assertEqual("".join(d.get("reasoning_content", "") for d in deltas), "think")
        self.assertEqual(events[-3]["choices"][0]["finish_reason"], "stop")

    def test_tool_call_stream_assembles(self):
        events = self.events(tool_call_stream([("c1", "bash", '{"command": "ls -la"}'),
                                               ("c2", "read", {"path": "x"})]))
        calls = {}
        for e in events[:-1]:
            for frag in e["choices"][0]["delta"].get("tool_calls", []):
                call = calls.setdefault(frag["index"], {"id": None, "name": None, "args": ""})
                if "id" in frag:
                    self.assertEqual(frag["function"]["arguments"], "")
                    call["id"], call["name"] = frag["id"], frag["function"]["name"]
                else:
                    self.assertEqual(set(frag), {"index", "function"})
                call["args"] += frag["function"]["arguments"]
        self.assertEqual(calls, {0: {"id": "c1", "name": "bash", "args": '{"command": "ls -la"}'},
                                 1: {"id": "c2", "name": "read", "args": '{"path": "x"}'}})
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "tool_calls")

    def test_completion_with_tool_calls(self):
        reply = completion(tool_calls=[("c1", "bash", {"command": "ls"})], reasoning="r")
        choice = reply["choices"][0]
        self.assertEqual(choice["finish_reason"], "tool_calls")
        self.assertEqual(choice["message"]["reasoning_content"], "r")
        self.assertEqual(choice["message"]["tool_calls"][0],
                         {"id": "c1", "type": "function",
                          "function": {"name": "bash", "arguments": '{"command": "ls"}'}})

    def test_chunk(self):
        c = chunk({"content": "x"}, finish_reason="stop", index=1, usage=usage(1, 2))
        self.assertEqual(c["object"], "chat.completion.chunk")
        self.assertEqual(c["choices"], [{"index": 1, "delta": {"content": "x"}, "finish_reason": "stop"}])
        self.assertEqual(c["usage"], {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})

    def test_strip_ansi(self):
        self.assertEqual(strip_ansi("\x1b[1;33mhi\x1b[0m \x1b]0;t\x07x\x1b[K"), "hi x")


class WorkspaceTests(unittest.TestCase):

    def test_layout_config_env_cleanup(self):
        with FakeServer() as server, Workspace() as ws:
            for d in ("home", "work", "tmp"):
                self.assertTrue(os.path.isdir(ws.path(d)))
            self.assertEqual(ws.sessions_dir(), os.path.join(ws.home, ".bantam", "sessions"))
            path = ws.write_config(server, api_key=None, stream=False, extra="a b")
            with open(path) as f:
                lines = f.read().splitlines()
            self.assertEqual(lines, ["endpoint=" + server.url, "model=test-model", "stream=false",
                                     "color=never", "backoff=0.01,0.01,0.01", "timeout=10",
                                     "extra=a b"])
            os.environ["HTTPS_PROXY"] = "http://proxy.invalid"
            self.addCleanup(os.environ.pop, "HTTPS_PROXY", None)
            env = ws.env(FOO="1", PATH=os.environ["PATH"], TERM=None)
            self.assertEqual((env["HOME"], env["TMPDIR"], env["FOO"]), (ws.home, ws.tmp, "1"))
            self.assertNotIn("HTTPS_PROXY", env)
            self.assertNotIn("TERM", env)
            self.assertEqual(ws.env()["TERM"], "xterm")
        self.assertFalse(os.path.exists(ws.root))

    def test_run_program_environment_and_timeout(self):
        with Workspace() as ws:
            code = "import os,sys; print(os.getcwd(), os.environ['HOME'], sys.stdin.read()); sys.exit(3)"
            res = run_program(ws, [sys.executable, "-c", code], input="héllo", env={"X": "1"})
            self.assertEqual(res.returncode, 3)
            self.assertEqual(res.stdout.split(), [os.path.realpath(ws.work), ws.home, "héllo"])
            start = time.monotonic()
            with self.assertRaises(AssertionError) as cm:
                run_program(ws, [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"],
                            timeout=1)
            self.assertIn("started", str(cm.exception))
            self.assertLess(time.monotonic() - start, 10)


class PtyTests(unittest.TestCase):

    def spawn(self, code, **kw):
        term = Pty([sys.executable, "-c", code], cwd=os.getcwd(), **kw)
        self.addCleanup(term.kill)
        return term

    def test_expect_sendline_wait(self):
        term = self.spawn("import sys; print('hello ' + input('name? ')); sys.exit(4)")
        term.expect("name? ")
        term.sendline("bob")
        match = term.expect(re.compile(r"hello (\w+)"))
        self.assertEqual(match.group(1), "bob")
        self.assertEqual(term.wait(), 4)
        self.assertIn("bob", term.output)

    def test_window_size_and_tty(self):
        term = self.spawn("import os,sys; print(sys.stdin.isatty(), os.get_terminal_size())",
                          rows=30, cols=120)
        term.expect("True os.terminal_size(columns=120, lines=30)")
        self.assertEqual(term.wait(), 0)

    def test_ctrl_c_and_eof_and_timeout(self):
        term = self.spawn("input('> ')")
        term.expect("> ")
        with self.assertRaises(AssertionError):
            term.expect("never printed", timeout=0.3)
        term.send("\x03")
        status = term.wait()
        self.assertIn(status, (-signal.SIGINT, 1))
        with self.assertRaises(AssertionError) as cm:
            term.expect("never printed")
        self.assertIn("closed the terminal", str(cm.exception))

    def test_kill(self):
        term = self.spawn("import time; time.sleep(60)")
        self.assertTrue(term.alive())
        term.kill()
        self.assertEqual(term.status, -signal.SIGKILL)


class BaseCaseTests(BantamTestCase):

    def test_setup_writes_config_and_helpers(self):
        with open(self.ws.path("home", ".bantam", "model.cfg")) as f:   # the user's own config
            self.assertIn("endpoint=%s\n" % self.server.url, f.read())
        self.assertFalse(os.path.exists(self.ws.path("work", "model.cfg")))
        os.makedirs(self.ws.sessions_dir())
        with open(os.path.join(self.ws.sessions_dir(), "autosave.json"), "w") as f:
            json.dump({"messages": []}, f)
        self.assertEqual(self.read_autosave(), {"messages": []})
        other = self.make_server(script=[json_reply({"ok": 1})])
        self.assertNotEqual(other.port, self.server.port)


if __name__ == "__main__":
    unittest.main()
