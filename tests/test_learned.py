"""What providers send this year (issue 19): fixes a server's error teaches (kept for that
endpoint and model for the rest of the process), a model's slip retried, the window from
llama-server's /v1/models, and reasoning shown in the order it came, in every view.

The stream shapes of the same issue (Ollama's calls all at index 0, the reasoning order, LiteLLM's usage chunk, llama-server's error after text) are rows of the
table in tests/test_wire.py; xAI's camelCase refusal is a row of REFUSALS in
tests/test_providers.py.

The errors below teach bantam a fix (one case each), for the README's server table:

| Server family | Error | Case in tests/test_learned.py |
| --- | --- | --- |
| Moonshot Kimi K2.5/K2.6 (thinking on) | 400 "thinking is enabled but reasoning_content is missing in assistant tool call message at index N": `reasoning_content: ""` added where missing | `kimi_reasoning_content_missing` |
| Kimi through SiliconFlow | `{"code": 20015, "message": "thinking is enabled but reasoning_content is missing ..."}` | `kimi_through_siliconflow` |
| DeepSeek V4 (thinking mode) | 400 "The `reasoning_content` in the thinking mode must be passed back to the API." | `deepseek_v4_reasoning_content` |
| Claude through Databricks | 400 `{"error_code": "BAD_REQUEST", "message": "{\\"message\\":\\"messages: text content blocks must be non-empty\\"}"}`: `content: null` beside tool calls | `databricks_empty_text_block` |
| Claude through Requesty, one-api | 400 "anthropic: send request: messages: text content blocks must be non-empty" | `requesty_empty_text_block` |
| Groq | 400 `code: tool_use_failed` with `failed_generation`: retried as the model's slip, said when the retries run out | `groq_tool_use_failed` |
"""

import json
import re

from tests.support import (
    BantamTestCase, chunk, completion, error, sse, strip_ansi, text_stream, tool_call_stream, usage)
from tests.test_servers import NO_WINDOW, window_of

CALL = [("call_1", "shell_exec", {"command": "echo hi"})]


def reasoning_content_of(body):
    """The reasoning_content of the assistant tool-call message in a request body (missing: None)."""
    return [m for m in body["messages"] if m.get("tool_calls")][0].get("reasoning_content")


def content_of(body):
    """The content of the assistant tool-call message in a request body ("missing" if absent)."""
    return [m for m in body["messages"] if m.get("tool_calls")][0].get("content", "missing")


# Errors about the assistant message with tool calls, and what the request sent again (and
# every later request of that endpoint and model) has there instead:
# (name, response, what to look at, value before, value after).
MESSAGE_FIXES = [
    ("kimi_reasoning_content_missing", error(400, body={"error": {
        "message": "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2",
        "type": "invalid_request_error"}}), reasoning_content_of, None, ""),
    ("kimi_through_siliconflow", error(400, body={
        "code": 20015, "message": "thinking is enabled but reasoning_content is missing in assistant tool call "
                                  "message at index 2", "data": None}), reasoning_content_of, None, ""),
    ("deepseek_v4_reasoning_content", error(400, body={"error": {
        "message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}}),
     reasoning_content_of, None, ""),
    ("databricks_empty_text_block", error(400, body={
        "error_code": "BAD_REQUEST", "message": '{"message":"messages: text content blocks must be non-empty"}'}),
     content_of, "", None),
    ("requesty_empty_text_block", error(400, body={"error": {
        "message": "anthropic: send request: messages: text content blocks must be non-empty",
        "type": "invalid_request_error"}}), content_of, "", None),
]


class LearnedFixTests(BantamTestCase):
    """An error that says what the server needs: the request is sent again with it, at once
    (no retry), one dim line says so, and every later request to that endpoint and model has
    it too; the conversation file keeps the messages as they were."""

    def test_message_fixes(self):
        """Turn one runs a tool; the request after it is refused; turn two follows."""
        for name, response, look, before, after in MESSAGE_FIXES:
            with self.subTest(name):
                self.server.requests.clear()
                self.push(tool_call_stream(CALL), response, text_stream("after the tool"), text_stream("turn two"))
                result = self.run_bantam(input="one\ntwo\n")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("turn two", result.stdout)
                bodies = self.server.bodies
                self.assertEqual(len(bodies), 4)
                self.assertEqual(look(bodies[1]), before)
                self.assertEqual(look(bodies[2]), after, "sent again, fixed")
                self.assertEqual(look(bodies[3]), after, "and from then on")
                self.assertEqual(len([m for m in bodies[2]["messages"] if m["role"] == "assistant"]), 1)
                self.assertNotIn("retry", result.stderr)
                self.assertEqual(len(re.findall(r"from now on", result.stderr)), 1, result.stderr)
                saved = self.read_autosave()["messages"]
                self.assertEqual(look({"messages": saved}), before, "the file keeps them as they were")
                stored = [m for m in saved if m.get("tool_calls")][0]
                self.assertEqual(stored["content"], "")
                self.assertNotIn("reasoning_content", stored)

    def test_fix_is_kept_for_that_model_only(self):
        """Learned for test-model; after /model other-model the field is not added (Groq and
        Cerebras reject it), and back on test-model it is again."""
        self.push(tool_call_stream(CALL), MESSAGE_FIXES[0][1], text_stream("after the tool"),
                  text_stream("other model"), text_stream("back again"))
        result = self.run_bantam(input="one\n/model other-model\ntwo\n/model test-model\nthree\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        bodies = [r["body"] for r in self.server.posts if r["path"].endswith("/chat/completions")]
        self.assertEqual([b["model"] for b in bodies[3:]], ["other-model", "test-model"])
        self.assertIsNone(reasoning_content_of(bodies[3]))
        self.assertEqual(reasoning_content_of(bodies[4]), "")

    def test_groq_tool_use_failed(self):
        """Groq's tool_use_failed is the model's slip: asked again (a retry, said so)."""
        self.push(error(400, body=GROQ_FAILED), tool_call_stream(CALL), text_stream("done"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("done", result.stdout)
        self.assertIn("(a malformed tool call from the model); retry 1/3", result.stderr)
        self.assertEqual(len(self.server.posts), 3)
        self.assertEqual(self.server.bodies[1]["messages"], self.server.bodies[0]["messages"])

    def test_groq_tool_use_failed_every_time(self):
        """When every retry fails the same way: exit 1, the last line says the model's calls
        were malformed and that it gave up."""
        self.push(*[error(400, body=GROQ_FAILED) for _ in range(4)])
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(len(self.server.posts), 4)
        last = result.stderr.strip().splitlines()[-1]
        self.assertIn("a malformed tool call from the model", last)
        self.assertIn("gave up after 3 retries", last)

    def test_table_names_every_case(self):
        """The table in this module's docstring names each case tested here."""
        named = [row.rsplit("`", 2)[1] for row in __doc__.splitlines() if row.startswith("| ") and "`" in row]
        cases = [c[0] for c in MESSAGE_FIXES] + [n[5:] for n in dir(self) if n[5:] in named]
        self.assertEqual(sorted(named), sorted(cases))


GROQ_FAILED = {"error": {"message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' "
                                    "for more details.", "type": "invalid_request_error", "code": "tool_use_failed",
                         "failed_generation": "<function=shell_exec{\"command\": \"ls\"}</function>"}}


class WindowTests(BantamTestCase):
    """The window llama-server reports in /v1/models."""

    def window(self, routes, models=NO_WINDOW, **keys):
        """Run a REPL turn (keys: config); the window on the token line and the GET requests made."""
        self.ws.write_config(self.server, **keys)
        self.server.models = models
        self.server.routes.update(routes)
        self.push(text_stream("hi", usage=usage(360, 2)))
        result = self.run_bantam(input="Say hi.\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        return window_of(result.stderr), [r["path"] for r in self.server.requests if r["method"] == "GET"]

    def test_llama_server_models_meta_n_ctx_before_props(self):
        """llama-server's /v1/models meta.n_ctx is the window it runs with: /props is not asked."""
        models = {"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "llamacpp",
                                              "meta": {"n_ctx_train": 8192, "n_ctx": 4096, "n_vocab": 49152}}]}
        window, asked = self.window({("GET", "/props"): {"default_generation_settings": {"n_ctx": 2048}}},
                                    models=models)
        self.assertEqual(window, 4096)
        self.assertEqual(asked, ["/v1/models"])


class ViewTests(BantamTestCase):
    """The reasoning order, in the JSONL view and on a terminal; a <think> block in -q's answer."""

    def jsonl(self, *responses):
        """Run -p with --jsonl against these responses; the events."""
        self.push(*responses)
        result = self.run_bantam("--jsonl", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        return [json.loads(line) for line in result.stdout.splitlines()]

    def test_reasoning_order_in_jsonl(self):
        """Every reasoning piece before the first text piece, joined as sent."""
        self.ws.write_config(self.server, api_key="sk-test-4d9c2b")
        events = self.jsonl(sse([chunk({"reasoning_content": p}) for p in ("thinking-", "RC about ", "numbers")]
                                + [chunk({"content": "The answer is 42."}), chunk({}, "stop")]))
        pieces = [(e["type"], e["text"]) for e in events if e["type"] in ("reasoning", "text")]
        kinds = [k for k, _ in pieces]
        self.assertEqual(kinds, sorted(kinds, key=lambda k: k != "reasoning"), pieces)
        self.assertEqual("".join(t for k, t in pieces if k == "reasoning"), "thinking-RC about numbers")

    def test_reasoning_order_on_a_terminal(self):
        """One reasoning block, then the answer."""
        self.ws.write_config(self.server, api_key="sk-test-4d9c2b")
        self.push(sse([chunk({"reasoning_content": p}) for p in ("thinking-", "RC about ", "numbers")]
                      + [chunk({"content": "The answer is 42."}), chunk({}, "stop")]))
        term = self.pty()
        term.expect("> ")
        shown = strip_ansi(self.type_line(term, "go", "The answer is 42."))
        self.assertEqual(shown.count("reasoning start"), 1, shown)
        self.assertIn("thinking-RC about numbers", shown)
        self.assertLess(shown.index("numbers"), shown.index("The answer is 42."))
        self.leave(term)

    def test_think_block_left_out_of_quiet_output(self):
        """<think> content is shown and kept as sent (text events, the reply event); -q's
        answer leaves the block out."""
        sent = "<think>\nThe user wants a number.\n</think>\n\nThe answer is 42."
        events = self.jsonl(text_stream(sent, pieces=5))
        self.assertEqual("".join(e["text"] for e in events if e["type"] == "text"), sent)
        self.assertEqual([e["message"]["content"] for e in events if e["type"] == "reply"], [sent])
        self.push(completion(sent))
        result = self.run_bantam("-q", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "The answer is 42.\n")
