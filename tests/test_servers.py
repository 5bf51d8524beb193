"""The wire as real servers speak it (issue 8, parts 2-4): a slow first token, the context
window from local servers' own APIs and from overflow errors, token figures estimated when
a server sends no usage, and errors that retrying cannot fix (an untrusted certificate)
failing at once with what to do.
"""

import re
import time

from tests.support import (
    CERT_FILE, BantamTestCase, FakeServer, completion, error, hang, json_reply, sse, strip_ansi,
    text_stream, usage)
from tests.test_context import OVERFLOWS, SUMMARY, AFTER

NO_WINDOW = {"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "me"}]}


def window_of(stderr):
    """The context window shown on the token line, or None."""
    match = re.search(r"context: ~?\d+/(\d+) ", stderr)
    return int(match.group(1)) if match else None


class FirstByteTests(BantamTestCase):
    """first_byte_timeout bounds the wait for a reply to begin; timeout the gaps after that."""

    def setUp(self):
        super().setUp()
        self.ws.write_config(self.server, timeout=1, first_byte_timeout=8)

    def test_silence_before_the_headers(self):
        """A server silent for 2.5 s (longer than timeout=1) before it answers at all."""
        self.push(text_stream("thought long", head_delay=2.5))
        result = self.run_batch("think")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("thought long", result.stdout)
        self.assertNotIn("retry", result.stderr)
        self.assertEqual(len(self.server.posts), 1)

    def test_silence_between_headers_and_first_event(self):
        """Headers at once, then 2.5 s of silence before the first event (llama.cpp reading a
        long prompt, a reasoning model thinking)."""
        self.push(text_stream("thought long", first_delay=2.5))
        result = self.run_batch("think")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("retry", result.stderr)
        self.assertEqual(len(self.server.posts), 1)

    def test_stall_once_the_reply_flows_is_a_timeout(self):
        """Once text flows, a gap longer than timeout is a stalled reply: retried, saying so."""
        self.push(text_stream("slow words here", pieces=["slow ", "words ", "here"], delay=2.5),
                  text_stream("second try"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("stalled for 1 s (timeout)", result.stderr)
        self.assertIn("second try", result.stdout)

    def test_nothing_within_first_byte_timeout(self):
        """No answer at all within first_byte_timeout: retried, naming that setting."""
        self.ws.write_config(self.server, timeout=1, first_byte_timeout=1.5)
        self.push(text_stream("too late", head_delay=4), text_stream("in time"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("no answer within 1.5 s (first_byte_timeout)", result.stderr)
        self.assertIn("in time", result.stdout)

    def test_a_silent_server_is_said_and_retried_once(self):
        """A server that accepts the connection and never answers: retried once only, then
        exit 1, naming first_byte_timeout (issue 30; 1.2.0 waited six times in silence)."""
        self.ws.write_config(self.server, timeout=1, first_byte_timeout=2, backoff="0.01,0.01,0.01")
        for args in ((), ("-q",)):
            with self.subTest(args=args):
                before = len(self.server.posts)
                self.push(hang(30), hang(30))   # a third request gets "(script exhausted)"
                result = self.run_batch("go", *args)
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertEqual(len(self.server.posts) - before, 2)
                self.assertIn("gave up after 1 retry", result.stderr)
                self.assertIn("no answer within 2 s (first_byte_timeout)", result.stderr)

    def test_slow_summary_for_compact(self):
        """/compact's summary is not streamed; a summary that takes longer than timeout to
        arrive still succeeds within first_byte_timeout."""
        self.push(text_stream("first answer"), json_reply(completion(SUMMARY), head_delay=2.5))
        result = self.run_bantam(input="hello\n/compact\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("[compacted", result.stdout)
        self.assertNotIn("retry", result.stderr)


class WindowTests(BantamTestCase):
    """The window as local servers report it, when GET /models does not."""

    def window_with(self, routes, models=NO_WINDOW):
        """Run a REPL turn against a server with these extra routes; the window on the token line."""
        self.server.models = models
        self.server.routes.update(routes)
        self.push(text_stream("hi", usage=usage(100, 2)))
        result = self.run_bantam(input="hello\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        return window_of(result.stderr), [(r["method"], r["path"]) for r in self.server.requests[1:]]

    def test_llama_cpp_props(self):
        """llama.cpp: GET /props at the server root, default_generation_settings.n_ctx."""
        window, asked = self.window_with({("GET", "/props"): {
            "default_generation_settings": {"id": 0, "n_ctx": 2048, "params": {}}, "total_slots": 1}})
        self.assertEqual(window, 2048)
        self.assertEqual(asked, [("GET", "/v1/models"), ("GET", "/props")])

    def test_llama_cpp_models_meta_is_the_training_window_not_the_window(self):
        """llama.cpp's /v1/models meta.n_ctx_train is not taken as the window; /props is."""
        models = {"object": "list", "data": [{"id": "test-model", "meta": {"n_ctx_train": 131072}}]}
        window, _ = self.window_with({("GET", "/props"): {"default_generation_settings": {"n_ctx": 4096}}},
                                     models=models)
        self.assertEqual(window, 4096)

    def test_ollama_num_ctx(self):
        """Ollama: POST /api/show, num_ctx in parameters wins over the model's own limit."""
        window, asked = self.window_with({("POST", "/api/show"): {
            "parameters": "temperature 0.6\nnum_ctx                        8192\nstop \"<|im_end|>\"",
            "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}})
        self.assertEqual(window, 8192)
        self.assertIn(("POST", "/api/show"), asked)
        show = [r for r in self.server.requests if r["path"] == "/api/show"][0]
        self.assertEqual(show["body"]["model"], "test-model")

    def test_ollama_model_info(self):
        """Ollama without num_ctx: the model's own limit from model_info."""
        window, _ = self.window_with({("POST", "/api/show"): {
            "parameters": "", "model_info": {"llama.embedding_length": 4096, "llama.context_length": 131072}}})
        self.assertEqual(window, 131072)

    def test_no_source_falls_back_to_the_key(self):
        """No source at all: the context_window key."""
        self.ws.write_config(self.server, context_window=3000)
        window, _ = self.window_with({})
        self.assertEqual(window, 3000)

    def test_odd_answers_fall_back_to_the_key(self):
        """A probe's answer with a number where a list belongs is no window (and no crash)."""
        self.ws.write_config(self.server, context_window=3000)
        window, _ = self.window_with({("GET", "/v1/model/info"): {"data": 5},
                                      ("POST", "/api/show"): {"parameters": ""},
                                      ("GET", "/api/ps"): {"models": 7},
                                      ("GET", "/api/v0/models"): {"data": True}})
        self.assertEqual(window, 3000)

    def test_window_field_in_models_needs_no_probe(self):
        """A window in GET /models: no other request is made."""
        window, asked = self.window_with({}, models={"data": [{"id": "test-model", "max_model_len": 16384}]})
        self.assertEqual((window, asked), (16384, [("GET", "/v1/models")]))

    def test_overflow_errors_teach_the_window(self):
        """An overflow error that names the window sets it for the rest of the process: the
        token line after the compaction shows it, not /models' 100000."""
        named = {"OpenAI": 128000, "llama.cpp": 4096, "vLLM": 4096, "Mistral": 32768, "Gemini": 1048576,
                 "Anthropic": 200000, "OpenRouter, in the stream": 1000000}
        for family, response in OVERFLOWS:
            if family not in named:
                continue
            with self.subTest(family):
                self.push(response, completion(SUMMARY), text_stream(AFTER, usage=usage(900, 5)))
                result = self.run_batch("What is the weather?")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(window_of(result.stderr), named[family])

    def test_window_in_the_error_field_of_an_old_llama_cpp(self):
        """llama.cpp's structured error carries n_ctx even when its message names no number."""
        self.push(error(500, body={"error": {"code": 500, "message": "the request exceeds the available "
                  "context size. try increasing the context size or enable context shift",
                  "type": "exceed_context_size_error", "n_prompt_tokens": 1407, "n_ctx": 1024}}),
                  completion(SUMMARY), text_stream(AFTER, usage=usage(300, 5)))
        result = self.run_batch("What is the weather?")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(window_of(result.stderr), 1024)
        self.assertNotIn("retry", result.stderr)


class UsageEstimateTests(BantamTestCase):
    """A server that sends no usage still gets a token line, estimated and marked ~."""

    def test_estimated_token_line(self):
        """No usage in the stream: figures estimated from the text, marked ~ (batch mode: the
        window of the context_window key, the server is not asked)."""
        self.push(text_stream("x" * 400))
        result = self.run_batch("y" * 4000)
        self.assertEqual(result.returncode, 0, result.stderr)
        match = re.search(r"\[test-model: ~(\d+) prompt \+ ~(\d+) completion \| context: ~(\d+)/262144", result.stderr)
        self.assertIsNotNone(match, result.stderr)
        prompt, completion_tokens = int(match.group(1)), int(match.group(2))
        self.assertTrue(1000 <= prompt <= 1600, prompt)      # 4000 characters and the rest, / 4
        self.assertTrue(100 <= completion_tokens <= 110, completion_tokens)

    def test_compaction_offer_from_the_estimate(self):
        """In the REPL, the 60% offer works from estimated figures too."""
        self.server.models = {"data": [{"id": "test-model", "context_length": 1500}]}
        self.push(text_stream("fine"))
        term = self.pty()
        term.expect("> ")
        term.sendline("z" * 4000)
        term.expect("Compact conversation? [Y/n]")
        self.assertRegex(strip_ansi(term.output), r"context: ~\d+/1500")
        term.sendline("n")
        term.expect("> ")
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0)


class OddStreamTests(BantamTestCase):
    """Errors sent in a stream in ways the SSE format does not foresee."""

    def test_llama_cpp_error_line(self):
        """Older llama.cpp: HTTP 200, then `error: {...}` (not data:), then [DONE]: reported
        as the error it is, an overflow here (compacted and retried), not an empty reply."""
        self.push(sse(['error: {"code":400,"message":"the request exceeds the available context size. '
                       'try increasing the context size or enable context shift","type":"invalid_request_error"}\n\n']),
                  completion(SUMMARY), text_stream(AFTER))
        result = self.run_batch("What is the weather?")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("compacting", result.stderr)
        self.assertIn(AFTER, result.stdout)
        self.assertNotIn("empty reply", result.stderr)

    def test_bare_json_error_body_in_an_event_stream(self):
        """A proxy that answers 200 text/event-stream with a bare JSON error body: the error's
        message is reported (after the retries), not "an empty reply"."""
        bad = sse(['{"error":{"message":"upstream model is loading"}}'], done=False, framing="close")
        self.push(bad, bad, bad, bad)
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 1)
        self.assertIn("upstream model is loading", result.stderr)


class FailAtOnceTests(BantamTestCase):
    """What retrying cannot fix fails at once, saying what to do."""

    def test_self_signed_certificate(self):
        """An HTTPS server with a self-signed certificate: one line naming the host and
        SSL_CERT_FILE, exit 2 (final), no retries; with SSL_CERT_FILE pointing at it, it works."""
        server = FakeServer([text_stream("over TLS")], tls=True).start()
        self.addCleanup(server.stop)
        self.ws.write_config(server, backoff="1,1,1")
        started = time.monotonic()
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertLess(time.monotonic() - started, 2.5, "no retry ladder")
        self.assertNotIn("retry", result.stderr)
        self.assertRegex(result.stderr, r"certificate of 127\.0\.0\.1 is not trusted .*SSL_CERT_FILE")
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)
        result = self.run_batch("hi", env={"SSL_CERT_FILE": CERT_FILE})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("over TLS", result.stdout)

    def test_https_to_a_plain_http_server(self):
        """https:// given for a plain-HTTP server ([SSL: WRONG_VERSION_NUMBER]): one line saying
        it does not speak TLS and the http:// URL to try, exit 2, no retries (issue 30)."""
        endpoint = self.server.url.replace("http://", "https://")
        self.ws.write_config(self.server, endpoint=endpoint, backoff="1,1,1")
        started = time.monotonic()
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertLess(time.monotonic() - started, 2.5, "no retry ladder")
        self.assertNotIn("retry", result.stderr)
        self.assertIn("127.0.0.1:%d does not speak TLS; try %s" % (self.server.port,
                      self.server.url), result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)
        self.assertEqual(self.server.requests, [])

    def test_refused_connection_is_retried(self):
        """A server that is not up yet (connection refused) is retried along the ladder."""
        server = FakeServer().start()
        port = server.port
        server.stop()
        self.ws.write_config(endpoint="http://127.0.0.1:%d/v1" % port, backoff="0.01,0.01")
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 1)
        self.assertIn("retry 2/2", result.stderr)
        self.assertIn("connection refused", result.stderr)


class LlamaCppPythonTests(BantamTestCase):
    """Shapes seen from a real llama-cpp-python server (see the README's real-server notes)."""

    def test_empty_stream_then_asked_without_streaming(self):
        """A prompt that does not fit: the streamed request gets HTTP 200 and an empty body;
        asked again without streaming, the server names the overflow, and bantam compacts."""
        over = error(400, body={"error": {"message": "This model's maximum context length is 2048 tokens. "
                     "However, you requested 2385 tokens (2285 in the messages, 100 in the completion). Please "
                     "reduce the length of the messages or completion.", "type": "invalid_request_error",
                     "param": "messages", "code": "context_length_exceeded"}})
        self.push(sse([], done=False), over, completion(SUMMARY), text_stream(AFTER))
        result = self.run_batch("What is the weather?")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("without sending anything", result.stderr)
        self.assertIn("compacting", result.stderr)
        self.assertEqual([b["stream"] for b in self.server.bodies], [True, False, False, True])
        self.assertEqual(window_of(result.stderr), 2048)

    def test_raw_newline_inside_tool_arguments(self):
        """Small models write a raw newline inside a JSON string; the call still runs."""
        from tests.support import tool_call_stream
        self.push(tool_call_stream([("c1", "shell_exec", '{"command": "echo one\necho two"}')]),
                  text_stream("done"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.server.bodies[1]["messages"][-1]["content"], "one\ntwo\n\n\nexit: 0")
