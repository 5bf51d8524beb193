"""Every HTTP framing on one kept-alive connection (issue 8, part 1).

A server may end a body by chunked encoding, by Content-Length, or by closing the
connection; it may keep the connection alive or close it, speak HTTP/1.0, close an idle
connection, or send bytes after `data: [DONE]`. For each, a batch turn with two tool steps
must succeed quietly, send every request exactly once, and use one TCP connection wherever
the server keeps connections alive.
"""

import time

from tests.support import (
    BantamTestCase, FakeServer, completion, json_reply, sse, text_stream,
    tool_call_stream, usage)

# (name, response keywords, whether the server keeps the connection alive)
FRAMINGS = [
    ("chunked keep-alive", dict(framing="chunked"), True),
    ("length keep-alive", dict(framing="length"), True),
    ("close-delimited", dict(framing="close"), False),
    ("chunked Connection: close", dict(framing="chunked", keep_alive=False), False),
    ("length Connection: close", dict(framing="length", keep_alive=False), False),
    ("HTTP/1.0 length keep-alive", dict(framing="length", http10=True), True),
    ("HTTP/1.0 length close", dict(framing="length", http10=True, keep_alive=False), False),
    ("HTTP/1.0 close-delimited", dict(framing="close", http10=True), False),
]


def streamed(framing, **extra):
    """A tool step, a second tool step and a final answer, streamed in this framing."""
    kw = dict(framing, **extra)
    return [tool_call_stream([("c1", "shell_exec", {"command": "echo one"})], **kw),
            tool_call_stream([("c2", "shell_exec", {"command": "echo two"})], **kw),
            text_stream("all done", usage=usage(50, 5), **kw)]


def plain(framing, trailing=b""):
    """The same three replies, not streamed (JSON bodies), in this framing."""
    kw = {k: v for k, v in framing.items() if k in ("framing", "keep_alive", "http10")}
    return [json_reply(completion(tool_calls=[("c1", "shell_exec", {"command": "echo one"})]), trailing=trailing, **kw),
            json_reply(completion(tool_calls=[("c2", "shell_exec", {"command": "echo two"})]), trailing=trailing, **kw),
            json_reply(completion("all done", usage=usage(50, 5)), trailing=trailing, **kw)]


class FramingCase(BantamTestCase):
    """Run the three-step turn against a fresh server per framing."""

    def run_turn(self, script, stream=True, models=None, window=None, prompt="count", **server_kw):
        """Start a server with script, run one batch turn against it (context_window: window);
        (result, server)."""
        server = FakeServer(script, models, **server_kw).start()
        self.addCleanup(server.stop)
        self.ws.write_config(server, stream=stream, context_window=window)
        started = time.monotonic()
        result = self.run_batch(prompt)
        return result, server, time.monotonic() - started

    def assertQuietTurn(self, result, server, keep_alive, seconds):
        """Exit 0, the answer printed, no retry or error, each request sent once, the
        connection count right, and no second-long stall."""
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("all done", result.stdout)
        for word in ("retry", "error", "Traceback", "Request-sent"):
            self.assertNotIn(word, result.stderr)
        self.assertEqual(len(server.posts), 3, "every request is sent exactly once")
        self.assertEqual(server.bodies[1]["messages"][-1]["content"], "one\n\n\nexit: 0")
        self.assertEqual(server.bodies[2]["messages"][-1]["content"], "two\n\n\nexit: 0")
        requests = len(server.requests)   # 3 POSTs (and GET /models when asked)
        self.assertEqual(server.connections, 1 if keep_alive else requests)
        self.assertLess(seconds, 8)


class StreamedFramingTests(FramingCase):

    def test_every_framing_streamed(self):
        """Streamed replies in every framing."""
        for name, framing, keep in FRAMINGS:
            with self.subTest(framing=name):
                result, server, seconds = self.run_turn(streamed(framing))
                self.assertQuietTurn(result, server, keep, seconds)

    def test_every_framing_not_streamed(self):
        """Plain JSON replies (stream=false) in every framing, some with trailing newlines."""
        for name, framing, keep in FRAMINGS:
            for trailing in (b"", b"\n\n"):
                with self.subTest(framing=name, trailing=trailing):
                    result, server, seconds = self.run_turn(plain(framing, trailing), stream=False)
                    self.assertQuietTurn(result, server, keep, seconds)

    def test_models_list_in_every_framing(self):
        """The GET /models answer in each framing keeps the connection usable (asked before
        the turn: the prompt is over half the default window; a window you set is not asked)."""
        for name, framing, keep in FRAMINGS:
            kw = {k: v for k, v in framing.items() if k in ("framing", "keep_alive", "http10")}
            models = json_reply({"object": "list", "data": [{"id": "test-model", "context_length": 400000}]}, **kw)
            with self.subTest(framing=name):
                result, server, seconds = self.run_turn(streamed(framing), models=models,
                                                        prompt="count " + "x " * 270000)
                self.assertQuietTurn(result, server, keep, seconds)
                self.assertIn("/400000", result.stderr)

    def test_body_after_done(self):
        """Events and bytes after `data: [DONE]` are read past, not taken as the next reply."""
        extra = b'data: {"choices":[{"index":0,"delta":{"content":"LATE"}}]}\n\n: bye\n\n'
        for name, framing, keep in FRAMINGS[:2] + FRAMINGS[5:6]:
            with self.subTest(framing=name):
                result, server, seconds = self.run_turn(streamed(framing, after_done=extra))
                self.assertQuietTurn(result, server, keep, seconds)
                self.assertNotIn("LATE", result.stdout)

    def test_idle_close_between_steps(self):
        """A server that closes connections idle for 0.3 s, and a tool that takes 0.6 s: the
        next request goes out on a new connection, quietly, and nothing is sent twice."""
        for name, framing, keep in FRAMINGS[:2]:
            script = [tool_call_stream([("c1", "shell_exec", {"command": "sleep 0.6; echo one"})], **framing),
                      text_stream("all done", **framing)]
            with self.subTest(framing=name):
                result, server, seconds = self.run_turn(script, idle_close=0.3)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("all done", result.stdout)
                self.assertNotIn("retry", result.stderr)
                self.assertEqual(len(server.posts), 2)
                self.assertEqual(server.connections, 2)

    def test_content_length_stream_cut_short_is_retried(self):
        """A Content-Length stream that ends before its length is a dropped reply: retried,
        and the text is not printed twice."""
        script = [text_stream("all done", framing="length", drop_after=60),
                  text_stream("all done", framing="length")]
        server = FakeServer(script).start()
        self.addCleanup(server.stop)
        self.ws.write_config(server)
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("retry 1/", result.stderr)
        self.assertEqual(len(server.posts), 2)

    def test_done_alone_is_an_empty_stream(self):
        """`data: [DONE]` and nothing before it: not an empty answer but a failed stream, asked
        again without streaming."""
        server = FakeServer([sse([]), completion("the answer")]).start()
        self.addCleanup(server.stop)
        self.ws.write_config(server)
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("without sending anything", result.stderr)
        self.assertIn("the answer", result.stdout)
        self.assertEqual([b["stream"] for b in server.bodies], [True, False])

    def test_empty_stream_is_a_failed_request(self):
        """HTTP 200 with an empty stream (no [DONE], no finish_reason, nothing) is retried,
        then reported as a failure (exit 1), never taken as an empty answer."""
        script = [sse([], done=False, framing=f) for f in ("chunked", "length", "close", "chunked")]
        server = FakeServer(script).start()
        self.addCleanup(server.stop)
        self.ws.write_config(server)
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("without sending anything", result.stderr)
        self.assertEqual(result.stderr.count("retry"), 3)
        self.assertNotIn("empty reply", result.stderr)
        self.assertEqual(len(server.posts), 4)
