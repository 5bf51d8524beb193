"""Usage and the context window (issue 4): stream_options, the token line, the window from
GET /models, the offer to compact at 60%, /compact, compacting on context overflow (and never
looping), tool calls written as text, the empty-assistant repair, reasoning_effort and /model.

Context-overflow errors replayed by OverflowTests.test_overflow_compacts_and_retries_once
(one subTest per row of OVERFLOWS), for the README's server table:

| Server family | Overflow error |
| --- | --- |
| OpenAI | 400, `code: context_length_exceeded`, "maximum context length is ..." |
| Anthropic | 400, "prompt is too long: N tokens > M maximum" |
| llama.cpp | 400, `type: exceed_context_size_error`, "exceeds the available context size" |
| vLLM | 400, `object: error`, "This model's maximum context length is ..." |
| Gemini | 400, `status: INVALID_ARGUMENT`, "The input token count (N) exceeds the maximum number of tokens allowed (M)" |
| Groq | 400, `code: context_length_exceeded`, "Please reduce the length of the messages or completion" |
| Mistral | 400, "Prompt contains N tokens ... too large for model with M maximum context length" |
| DeepSeek | 400, `code: invalid_request_error`, "This model's maximum context length is ..." |
| LM Studio | 400, "... greater than the context length. Try to load the model with a larger context length" |
| any | 413 Request Entity Too Large |
| OpenRouter | HTTP 200, `error` inside the stream: "prompt is too long" |
| Moonshot Kimi | 400, "Invalid request: Your request exceeded model token limit: N (requested: M)" |
| Qwen (DashScope) | 400, `code: invalid_parameter_error`, "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, N]" |
| SGLang, vLLM through Chutes | 400, "The input (N tokens) is longer than the model's context length (M tokens)." |
| SGLang | 400, "Input length (N tokens) exceeds the maximum allowed length (M tokens)." |
| Zhipu GLM | 400, `code: "1261"`, "Prompt exceeds max length" |
| Anthropic | 400, "input length and `max_tokens` exceed context limit: N + M > W, decrease input length or `max_tokens` and try again" |
| OpenAI, Groq | 429 (OpenAI) or 413 (Groq), "Request too large for ... on tokens per minute (TPM): Limit N, Requested M": one request over the minute's allowance never fits, whatever the wait |

The last six are from other clients' bug reports (2025-2026), none compacted before:
https://github.com/MoonshotAI/kimi-cli/issues/2011, https://github.com/QwenLM/qwen-code/issues/98,
https://github.com/CherryHQ/cherry-studio/issues/5538, https://github.com/sgl-project/sglang/issues/4048,
https://github.com/mangowhoiscloud/geode/pull/668 (and https://github.com/NousResearch/hermes-agent/pull/1877),
https://github.com/continuedev/continue/issues/6080; the TPM rows from
https://github.com/DrShushen/climb/issues/13 and https://github.com/continuedev/continue/issues/10218.
"""

import json
import os
import re

from tests.support import (
    BantamTestCase, completion, error, sse, text_stream, tool_call_stream, usage)

SUMMARY = "SUMMARY-TEXT: the user asked about the weather."
AFTER = "Answer after compaction."


def repl_input(*lines):
    """The stdin of a REPL session typing these lines (then EOF)."""
    return "".join(line + "\n" for line in lines)


def token_lines(stderr):
    """The token lines bantam printed, in order."""
    return [line for line in stderr.splitlines() if re.match(r"\[test-model: \d+ prompt", line)]


def overflow(status, body):
    """An error response for a prompt that does not fit (status, JSON body)."""
    return error(status, body=body)


# What servers answer when the prompt does not fit: (family, response item).
OVERFLOWS = [
    ("OpenAI", overflow(400, {"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages "
                   "resulted in 130211 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
    ("Anthropic", overflow(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 208682 tokens > 200000 maximum"}})),
    ("llama.cpp", overflow(400, {"error": {
        "code": 400, "message": "request (5000 tokens) exceeds the available context size (4096 tokens), "
                                "try increasing it", "type": "exceed_context_size_error",
        "n_prompt_tokens": 5000, "n_ctx": 4096}})),
    ("vLLM", overflow(400, {
        "object": "error", "message": "This model's maximum context length is 4096 tokens. However, you "
        "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length "
        "of the messages or completion.", "type": "BadRequestError", "param": None, "code": 400})),
    ("Gemini", overflow(400, [{"error": {
        "code": 400, "message": "The input token count (1200293) exceeds the maximum number of tokens "
                                "allowed (1048576).", "status": "INVALID_ARGUMENT"}}])),
    ("Groq", overflow(400, {"error": {
        "message": "Please reduce the length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
    ("Mistral", overflow(400, {"object": "error", "message": "Prompt contains 40000 tokens and 0 draft "
                               "tokens, too large for model with 32768 maximum context length",
                               "type": "invalid_request_error", "param": None, "code": None})),
    ("DeepSeek", overflow(400, {"error": {
        "message": "This model's maximum context length is 131072 tokens. However, you requested 131749 "
                   "tokens (131749 in the messages, 0 in the completion). Please reduce the length of "
                   "the messages or completion.", "type": "invalid_request_error", "param": None,
        "code": "invalid_request_error"}})),
    ("LM Studio", overflow(400, {"error": "The number of tokens to keep from the initial prompt is "
                                          "greater than the context length. Try to load the model with "
                                          "a larger context length, or provide a shorter input"})),
    ("any, 413", overflow(413, {"error": {"message": "Request Entity Too Large"}})),
    ("Moonshot Kimi", overflow(400, {"error": {"message": "Invalid request: Your request exceeded model token "
                                               "limit: 262144 (requested: 269030)", "type": "invalid_request_error"}})),
    ("Qwen (DashScope)", overflow(400, {"error": {
        "code": "invalid_parameter_error", "param": None, "type": "invalid_request_error",
        "message": "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 204800]"},
        "id": "chatcmpl-9c1e", "request_id": "9c1e"})),
    ("SGLang, vLLM through Chutes", overflow(400, {
        "object": "error", "message": "The input (49146 tokens) is longer than the model's context length "
        "(40960 tokens).", "type": "BadRequestError", "param": None, "code": 400})),
    ("SGLang", overflow(400, {"object": "error", "message": "Input length (160062 tokens) exceeds the maximum "
                              "allowed length (59862 tokens).", "type": "BadRequestError", "param": None, "code": 400})),
    ("Zhipu GLM", overflow(400, {"error": {"code": "1261", "message": "Prompt exceeds max length"}})),
    ("Anthropic, input and max_tokens", overflow(400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "input length and `max_tokens` exceed context limit: 199759 + "
        "8192 > 200000, decrease input length or `max_tokens` and try again"}})),
    ("OpenAI, larger than the minute's tokens", overflow(429, {"error": {
        "message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
                   "Limit 30000, Requested 30601. The input or output tokens must be reduced in "
                   "order to run successfully.", "type": "tokens", "param": None,
        "code": "rate_limit_exceeded"}})),
    ("Groq, larger than the minute's tokens", overflow(413, {"error": {
        "message": "Request too large for model `llama-3.3-70b-versatile` in organization `org_x` "
                   "service tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested "
                   "14137, please reduce your message size and try again.", "type": "tokens",
        "code": "rate_limit_exceeded"}})),
    ("OpenRouter, in the stream", sse([{"id": "gen-1", "object": "chat.completion.chunk", "choices": [],
                                         "error": {"code": 400, "message": "prompt is too long: "
                                                   "1284668 tokens > 1000000 maximum"}}], done=False)),
]
OPENAI_OVERFLOW = OVERFLOWS[0][1]


class StreamOptionsTests(BantamTestCase):
    """stream_options: {"include_usage": true} asks streaming servers for the usage numbers."""

    def test_sent_when_streaming_only(self):
        """Streaming requests carry stream_options.include_usage; non-streamed ones do not."""
        for stream, expected in ((True, {"include_usage": True}), (False, None)):
            with self.subTest(stream=stream):
                self.ws.write_config(self.server, stream=stream)
                self.push(text_stream("ok") if stream else completion("ok"))
                proc = self.run_batch("hello")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                body = self.server.bodies[-1]
                self.assertIs(body["stream"], stream)
                self.assertEqual(body.get("stream_options"), expected)

    def test_rejected_once_then_left_out_for_the_session(self):
        """A server that rejects stream_options gets one retry without it (said in one line),
        and the later turns of the same REPL session leave it out."""
        self.push(error(400, "Unrecognized request argument supplied: stream_options",
                        type="invalid_request_error"),
                  text_stream("first answer"), text_stream("second answer"))
        proc = self.run_bantam(input=repl_input("one", "two"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("first answer", proc.stdout)
        self.assertIn("second answer", proc.stdout)
        self.assertEqual(proc.stderr.count("stream_options"), 1, "said once")
        self.assertNotIn("retry", proc.stderr)
        bodies = self.server.bodies
        self.assertEqual(len(bodies), 3)
        self.assertIn("stream_options", bodies[0])
        self.assertNotIn("stream_options", bodies[1])
        self.assertNotIn("stream_options", bodies[2], "remembered for the session")
        self.assertEqual(bodies[1]["messages"], bodies[0]["messages"])

    def test_other_bad_request_is_not_retried_and_keeps_stream_options(self):
        """A 400 that is not about stream_options fails the turn at once (one request), and the
        next turn still asks for usage."""
        self.push(error(400, "Invalid value for 'temperature': must be at most 2."),
                  text_stream("fine", usage=usage(10, 2)))
        proc = self.run_bantam(input=repl_input("one", "two"))
        self.assertIn("must be at most 2", proc.stderr)
        bodies = self.server.bodies
        self.assertEqual(len(bodies), 2, "the first turn sent one request")
        self.assertEqual(bodies[1].get("stream_options"), {"include_usage": True})
        self.assertEqual(token_lines(proc.stderr),
                         ["[test-model: 10 prompt + 2 completion | context: 10/100000 (0.0%)]"])


class TokenLineTests(BantamTestCase):
    """After every turn one line: model, prompt (cached / uncached), completion, context use."""

    def test_scripted_conversation(self):
        """Known usage numbers give exactly these lines, turn by turn (window 100000 from /models)."""
        deepseek = {"prompt_tokens": 3000, "completion_tokens": 7, "total_tokens": 3007,
                    "prompt_cache_hit_tokens": 2048, "prompt_cache_miss_tokens": 952}
        self.push(
            text_stream("one", usage=usage(1420, 85, cached=1000)),         # OpenAI, cache hit
            text_stream("two", usage=usage(2000, 50)),                      # no cache report
            text_stream("three", usage=deepseek),                           # DeepSeek's names
            tool_call_stream([("call_1", "shell_exec", {"command": "echo hi"})], usage=usage(4000, 20)),
            text_stream("four", usage=usage(4100, 30)),                     # the turn's last call
            text_stream("five"),                                            # no usage at all
            text_stream("six", usage=usage(65536, 1, cached=0)))
        proc = self.run_bantam(input=repl_input("t1", "t2", "t3", "t4", "t5", "t6"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(token_lines(proc.stderr), [
            "[test-model: 1420 prompt (1000 cached, 420 uncached) + 85 completion | context: 1420/100000 (1.4%)]",
            "[test-model: 2000 prompt + 50 completion | context: 2000/100000 (2.0%)]",
            "[test-model: 3000 prompt (2048 cached, 952 uncached) + 7 completion | context: 3000/100000 (3.0%)]",
            "[test-model: 4100 prompt + 30 completion | context: 4100/100000 (4.1%)]",
            "[test-model: 65536 prompt (0 cached, 65536 uncached) + 1 completion | context: 65536/100000 (65.5%)]",
        ])


class ContextWindowTests(BantamTestCase):
    """The window comes from GET {endpoint}/models, else the context_window key, else 262144
    (asked in the REPL: batch mode asks the server nothing for its token line)."""

    CASES = [
        # (what, /models answer, extra config, expected "context: ..." text)
        ("context_length (OpenRouter, local servers)",
         {"data": [{"id": "other", "context_length": 999}, {"id": "test-model", "context_length": 32768}]},
         {}, "context: 1000/32768 (3.1%)"),
        ("context_window (Groq)", {"data": [{"id": "test-model", "context_window": 131072}]},
         {}, "context: 1000/131072 (0.8%)"),
        ("max_model_len (vLLM)", {"object": "list", "data": [{"id": "test-model", "max_model_len": 4096}]},
         {}, "context: 1000/4096 (24.4%)"),
        ("top_provider.context_length (OpenRouter)",
         {"data": [{"id": "test-model", "top_provider": {"context_length": 200000}}]},
         {}, "context: 1000/200000 (0.5%)"),
        ("the key you set beats /models", {"data": [{"id": "test-model", "context_length": 32768}]},
         {"context_window": 50000}, "context: 1000/50000 (2.0%)"),
        ("/models fails: the key", error(500, "models are down"),
         {"context_window": 50000}, "context: 1000/50000 (2.0%)"),
        ("/models lacks the model: the key", {"data": [{"id": "other", "context_length": 999}]},
         {"context_window": 50000}, "context: 1000/50000 (2.0%)"),
        ("/models lacks the model, no key: 262144", {"data": [{"id": "other", "context_length": 999}]},
         {}, "context: 1000/262144 (0.4%)"),
        ("/models is missing (404), no key: 262144", error(404, "no such route"),
         {}, "context: 1000/262144 (0.4%)"),
        ("/models says nothing of windows: 262144", {"data": [{"id": "test-model"}]},
         {}, "context: 1000/262144 (0.4%)"),
    ]

    def test_window_sources(self):
        """Each source of the window shows in the token line's context part."""
        for what, models, cfg, expected in self.CASES:
            with self.subTest(what):
                self.server.models = models
                self.ws.write_config(self.server, **cfg)
                self.push(text_stream("ok", usage=usage(1000, 1)))
                proc = self.run_bantam(input="hello\n")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                lines = token_lines(proc.stderr)
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertTrue(lines[0].endswith(" | " + expected + "]"), lines[0])
                self.assertTrue(cfg or any(r["method"] == "GET" and r["path"] == "/v1/models"
                                           for r in self.server.requests))
                self.assertNotIn("cannot list models", proc.stderr, "discovery failures are quiet")

    def test_cfg_context_window_says_the_window_in_use_and_its_source(self):
        """Issue 30: /cfg context_window shows the key, then the window in use and where it
        comes from: the server's /models when you set none, yours when you set one."""
        self.server.models = {"data": [{"id": "test-model", "context_length": 32768}]}
        for cfg, expected in (({}, "[the window in use: 32768, from the server]"),
                              ({"context_window": 50000}, "[the window in use: 50000, from ")):
            with self.subTest(cfg=cfg):
                self.ws.write_config(self.server, **cfg)
                proc = self.run_bantam(input="/cfg context_window\n")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertIn(expected, proc.stdout + proc.stderr)
                if cfg:
                    self.assertIn("model.cfg", (proc.stdout + proc.stderr).split("in use")[1])

    def test_batch_run_makes_one_request_per_model_call(self):
        """Batch mode asks the server nothing but its model calls (issue 28): no GET /models
        for the token line, whose window is the context_window key's; one call and two."""
        for calls in (1, 2):
            with self.subTest(calls=calls):
                self.server.requests.clear()
                self.push(*[tool_call_stream([("call_1", "shell_exec", {"command": "echo hi"})])]
                          * (calls - 1) + [text_stream("done", usage=usage(1000, 1))])
                proc = self.run_batch("hello")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual([(r["method"], r["path"]) for r in self.server.requests],
                                 [("POST", "/v1/chat/completions")] * calls)
                self.assertIn("context: 1000/262144 (0.4%)", proc.stderr)

    def test_window_not_cached_on_disk(self):
        """A second run asks /models again: a changed window shows at once."""
        for window, expected in ((32768, "context: 1000/32768 (3.1%)"), (4096, "context: 1000/4096 (24.4%)")):
            self.server.models = {"data": [{"id": "test-model", "context_length": window}]}
            self.push(text_stream("ok", usage=usage(1000, 1)))
            proc = self.run_bantam(input="hello\n")
            self.assertIn(expected, proc.stderr)


class CompactionOfferTests(BantamTestCase):
    """At 60% of the window the REPL offers to compact; batch mode never asks."""

    def test_repl_asks_at_60_percent_and_enter_compacts(self):
        """Below 60% no question; at 60% "Compact conversation? [Y/n]" ("n" keeps all, and the
        question waits until 10 points more are used: not at 65%, at 70.5%); Enter
        sends the summary request (conversation + summary prompt, no tools) and the next turn
        starts from [system, user: summary, new prompt]."""
        self.push(text_stream("A1", usage=usage(59900, 5)),
                  text_stream("A2", usage=usage(60000, 5)),
                  text_stream("A3a", usage=usage(65000, 5)),
                  text_stream("A3", usage=usage(70500, 5)),
                  completion(SUMMARY),
                  text_stream("A4", usage=usage(900, 5)))
        term = self.pty()
        term.expect("> ")
        term.sendline("q1")
        term.expect("(59.9%)")
        term.expect("> ")
        self.assertNotIn("Compact", term.before)
        term.sendline("q2")
        term.expect("Context usage is at 60.0%")
        term.expect("Compact conversation? [Y/n]")
        term.sendline("n")
        term.expect("> ")
        self.assertEqual(len(self.server.posts), 2, "'n' compacts nothing")
        term.sendline("q3a")
        term.expect("(65.0%)")
        term.expect("> ")
        self.assertNotIn("Compact", term.before)   # declined at 60%: not asked again at 65%
        term.sendline("q3")
        term.expect("Compact conversation? [Y/n]")
        term.sendline("")
        term.expect("compacted")
        term.expect("> ")
        term.sendline("q4")
        term.expect("A4")
        term.expect("> ")
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0)

        bodies = self.server.bodies
        self.assertEqual(len(bodies), 6)
        conversation = bodies[3]["messages"] + [{"role": "assistant", "content": "A3"}]
        summary_request = bodies[4]
        self.assertEqual(summary_request["messages"][:-1], conversation)
        self.assertEqual(summary_request["messages"][-1]["role"], "user")
        self.assertNotIn("tools", summary_request)
        system = bodies[0]["messages"][0]
        after = bodies[5]["messages"]
        self.assertEqual(after[0], system)
        self.assertEqual(after[1]["role"], "user")
        self.assertIn(SUMMARY, after[1]["content"])
        self.assertTrue(after[1]["content"].endswith("\n\nq4"), "q4 joins the summary message")
        self.assertEqual(len(after), 2)
        saved = self.read_autosave()["messages"]
        self.assertEqual(saved, after + [{"role": "assistant", "content": "A4"}])

    def test_slash_compact(self):
        """/compact summarizes on request; the next turn starts from the summary."""
        self.push(text_stream("A1"), completion(SUMMARY), text_stream("A2"))
        proc = self.run_bantam(input=repl_input("q1", "/compact", "q2"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        bodies = self.server.bodies
        self.assertEqual(len(bodies), 3)
        self.assertEqual(bodies[1]["messages"][:-1], bodies[0]["messages"] + [
            {"role": "assistant", "content": "A1"}])
        self.assertNotIn("tools", bodies[1])
        self.assertEqual([m["role"] for m in bodies[2]["messages"]], ["system", "user"])
        self.assertTrue(bodies[2]["messages"][1]["content"].endswith("\n\nq2"))
        self.assertIn(SUMMARY, bodies[2]["messages"][1]["content"])

    def test_batch_mode_never_asks(self):
        """At 90% in batch mode: no question, no summary request, even with an answer on stdin."""
        self.push(text_stream("done", usage=usage(90000, 5)))
        self.ws.write("prompt.txt", "hello")
        proc = self.run_bantam("prompt.txt", "--set", "context_window=100000", input="\ny\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("(90.0%)", proc.stderr)
        self.assertNotIn("Compact", proc.stdout + proc.stderr)
        self.assertEqual(len(self.server.posts), 1)


class OverflowTests(BantamTestCase):
    """A prompt too long for the window is compacted and tried once more, never in a loop."""

    def test_overflow_compacts_and_retries_once(self):
        """Each family's overflow error: one summary request, then the turn is retried from the
        summary followed by the prompt word for word, and answered (batch mode)."""
        for family, response in OVERFLOWS:
            with self.subTest(family):
                self.server.requests.clear()
                self.push(response, completion(SUMMARY), text_stream(AFTER))
                proc = self.run_batch("What is the weather?")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertIn(AFTER, proc.stdout)
                self.assertIn("compacting", proc.stderr)
                self.assertNotIn('"message"', proc.stderr, "the error's message, not its JSON")
                bodies = self.server.bodies
                self.assertEqual(len(bodies), 3)
                first, summary_request, retry = bodies
                # the prompt, kept word for word after the summary, is not summarized
                self.assertEqual(summary_request["messages"][:-1], first["messages"][:-1])
                self.assertEqual(summary_request["messages"][-1]["role"], "user")
                self.assertNotIn("What is the weather?", summary_request["messages"][-1]["content"])
                self.assertNotIn("tools", summary_request)
                self.assertEqual(retry["messages"][0], first["messages"][0])
                self.assertEqual(len(retry["messages"]), 2)
                self.assertIn(SUMMARY, retry["messages"][1]["content"])
                self.assertTrue(retry["messages"][1]["content"].endswith("\n\nWhat is the weather?"))
                saved = self.read_autosave()["messages"]
                self.assertEqual(saved[-1], {"role": "assistant", "content": AFTER})
                self.assertIn(SUMMARY, saved[1]["content"])

    def test_summary_request_that_overflows_is_trimmed(self):
        """When the summary request itself is too long, the older half of the conversation is
        left out (a tool result with its call) and it is sent again; the turn then goes on
        from the summary."""
        self.push(tool_call_stream([("call_1", "shell_exec", {"command": "echo LONG-TOOL-OUTPUT"})]),
                  OPENAI_OVERFLOW,                 # the turn's second call
                  OPENAI_OVERFLOW,                 # the first summary request
                  completion(SUMMARY),             # the trimmed summary request
                  text_stream(AFTER))
        proc = self.run_batch("Run the long command")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(AFTER, proc.stdout)
        bodies = self.server.bodies
        self.assertEqual(len(bodies), 5)
        whole, trimmed = bodies[2]["messages"], bodies[3]["messages"]
        self.assertEqual([m["role"] for m in whole], ["system", "user", "assistant", "tool", "user"])
        self.assertIn("LONG-TOOL-OUTPUT", json.dumps(whole))
        self.assertEqual(trimmed, [whole[0], whole[-1]], "no tool result without its call")
        self.assertIn(SUMMARY, bodies[4]["messages"][1]["content"])

    def test_prompt_too_big_for_half_the_window_goes_into_the_summary(self):
        """A prompt that is itself most of the window is summarized (in the summary request,
        joined to the summary prompt: never two user messages in a row), not repeated."""
        huge = "numbers: " + " ".join(str(i) for i in range(60000))   # ~100k tokens > 100000/2
        self.push(OPENAI_OVERFLOW, completion(SUMMARY), text_stream(AFTER))
        proc = self.run_batch(huge)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        first, summary_request, retry = self.server.bodies
        self.assertEqual([m["role"] for m in summary_request["messages"]], ["system", "user"])
        self.assertTrue(summary_request["messages"][1]["content"].startswith(huge + "\n\n"))
        self.assertEqual(len(retry["messages"]), 2)
        self.assertNotIn("59999", retry["messages"][1]["content"])
        self.assertIn(SUMMARY, retry["messages"][1]["content"])
        self.assertIn("your prompt is more than half the context window: it is summarized",
                      proc.stderr)   # said: the answer is to a summary of the request

    def test_failed_compaction_fails_the_turn_without_looping(self):
        """A server that overflows on every request: the turn fails with a clear message and
        exit 2 (final) after a few requests; the conversation is kept."""
        self.push(*[OPENAI_OVERFLOW] * 20)
        proc = self.run_batch("What is the weather?")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("compaction failed", proc.stderr)
        self.assertIn("maximum context length", proc.stderr)
        posts = len(self.server.posts)
        self.assertLessEqual(posts, 7, "the compaction must not loop")
        self.assertGreater(self.server.pending, 0)
        saved = self.read_autosave()["messages"]
        self.assertEqual(saved[1:], [{"role": "user", "content": "What is the weather?"}])

    def test_overflow_after_compaction_fails_the_turn(self):
        """Still too long after compacting: the turn fails (exit 2, final) instead of compacting again."""
        self.push(OPENAI_OVERFLOW, completion(SUMMARY), *[OPENAI_OVERFLOW] * 10)
        proc = self.run_batch("What is the weather?")
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(len(self.server.posts), 3)
        self.assertIn("maximum context length", proc.stderr.splitlines()[-1])
        self.assertIn("even after compacting", proc.stderr.splitlines()[-1])


CONTENT_OR_TOOL_CALLS = "Invalid assistant message: content or tool_calls must be set"
NON_WHITESPACE = "messages: text content blocks must contain non-whitespace text"


def strict_server(answer, message=CONTENT_OR_TOOL_CALLS):
    """A response function that rejects (400, message) an assistant message with blank
    content and no tool calls, as strict servers do, and otherwise streams answer."""
    def respond(record):
        for m in record["body"]["messages"]:
            if m["role"] == "assistant" and not (m.get("content") or "").strip() and not m.get("tool_calls"):
                return error(400, message)
        return text_stream(answer)
    return respond


class EmptyAssistantTests(BantamTestCase):
    """A conversation holding a blank assistant message is repaired instead of stuck."""

    def write_session(self, sid, messages):
        """Write a crafted session file."""
        os.makedirs(self.ws.sessions_dir(), exist_ok=True)
        with open(os.path.join(self.ws.sessions_dir(), sid + ".json"), "w", encoding="utf-8") as f:
            json.dump({"id": sid, "saved_at": "2025-01-01T00:00:00", "summary": "crafted",
                       "messages": messages}, f)

    def test_blank_assistant_message_in_loaded_session_is_dropped(self):
        """A session loaded with /load whose assistant message is empty or only whitespace:
        the message is dropped (on load, or when the strict server rejects it, with one retry)
        and the next turn is answered; no error is shown."""
        for message in (CONTENT_OR_TOOL_CALLS, NON_WHITESPACE):
            for content in ("", " \n"):
                with self.subTest(message=message, content=content):
                    server = self.make_server([strict_server("Fresh answer.", message)] * 3)
                    self.ws.write_config(server)
                    self.write_session("crafted", [
                        {"role": "system", "content": "sys"}, {"role": "user", "content": "earlier"},
                        {"role": "assistant", "content": content}])
                    proc = self.run_bantam(input=repl_input("/load crafted", "next"))
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    self.assertIn("Fresh answer.", proc.stdout)
                    self.assertNotIn("error", proc.stderr)
                    self.assertEqual(server.bodies[-1]["messages"], [   # never two user messages in a row
                        {"role": "system", "content": "sys"}, {"role": "user", "content": "earlier\n\nnext"}])
                    self.assertLessEqual(len(server.posts), 2, "one retry at most")
                    saved = self.read_autosave()["messages"]
                    self.assertNotIn({"role": "assistant", "content": content}, saved)

    def test_reply_of_only_newlines_then_strict_server(self):
        """A model reply of only newlines counts as empty and is never stored, so the strict
        server accepts the next turn's request at once."""
        self.push(text_stream("\n\n"), *[strict_server("Fresh answer.", NON_WHITESPACE)] * 3)
        proc = self.run_bantam(input=repl_input("first", "second"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Fresh answer.", proc.stdout)
        self.assertIn("empty reply", proc.stderr)
        self.assertNotIn("error", proc.stderr)
        bodies = self.server.bodies
        self.assertEqual(bodies[-1]["messages"][1:], [{"role": "user", "content": "first\n\nsecond"}])
        self.assertEqual(len(bodies), 2, "the empty reply, the next turn")

    def test_empty_assistant_error_with_nothing_to_drop_fails_once(self):
        """The same 400 for a conversation with no blank message fails the turn after one request."""
        self.push(*[error(400, CONTENT_OR_TOOL_CALLS)] * 5)
        proc = self.run_batch("hello")
        self.assertEqual(proc.returncode, 2)
        self.assertIn("content or tool_calls must be set", proc.stderr)
        self.assertEqual(len(self.server.posts), 1)


class ConfigForwardingTests(BantamTestCase):
    """reasoning_effort is forwarded when set; /model lists the endpoint's models."""

    def test_reasoning_effort(self):
        """Set: sent as reasoning_effort; unset: no such key in the request."""
        for value, expected in (("high", "high"), ("low", "low"), (None, None)):
            with self.subTest(value=value):
                self.ws.write_config(self.server, reasoning_effort=value)
                self.push(text_stream("ok"))
                proc = self.run_batch("hello")
                self.assertEqual(proc.returncode, 0, proc.stderr)
                body = self.server.bodies[-1]
                if expected is None:
                    self.assertNotIn("reasoning_effort", body)
                else:
                    self.assertEqual(body["reasoning_effort"], expected)

    def test_models_lists_ids_and_marks_the_configured_one(self):
        """/model (and /models, its other name) prints every id, the configured model marked
        with *; no chat request."""
        self.server.models = {"object": "list", "data": [
            {"id": "alpha", "context_length": 8192}, {"id": "test-model"}, {"id": "zeta"}]}
        for command in ("/model", "/models"):
            proc = self.run_bantam(input=repl_input(command))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertEqual(proc.stdout, "> " + "  alpha\n* test-model\n  zeta\n"
                             "(/model <name> switches to one; now: test-model)\n" + "> \n")
        self.assertEqual(self.server.posts, [])

    def test_models_failure_is_reported(self):
        """/model against a server without the route says so in one line."""
        self.server.models = error(404, "no such route")
        proc = self.run_bantam(input=repl_input("/model"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("cannot list models", proc.stderr)
        self.assertIn("404", proc.stderr)
