"""What a provider rejects is dropped, what it needs is sent (issue 9): request fields a
server names as unsupported (GPT-5's temperature, reasoning_effort on a model without
reasoning, Mistral's extra_forbidden, Anthropic's deprecated temperature, Groq refusing
reasoning_content on messages), the endpoint's query string (Azure), extra headers and
their secrecy, and session files that any model text can be written to.

The shapes the providers stream (Mistral's content parts, Gemini's signatures, refusals,
cut replies, UTF-16 halves) are rows of the table in tests/test_wire.py.
"""

import json
import os

from tests.support import BantamTestCase, error, text_stream, tool_call_stream

# What providers answer to a field they do not take: (name, field, response).
REFUSALS = [
    ("OpenAI GPT-5, temperature", "temperature", error(400, body={"error": {
        "message": "Unsupported value: 'temperature' does not support 0.7 with this model. Only the "
                   "default (1) value is supported.", "type": "invalid_request_error",
        "param": "temperature", "code": "unsupported_value"}})),
    ("OpenAI, reasoning_effort on a model without reasoning", "reasoning_effort", error(400, body={"error": {
        "message": "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
        "type": "invalid_request_error", "param": "reasoning_effort", "code": "unsupported_parameter"}})),
    ("Mistral, extra_forbidden", "stream_options", error(422, body={"object": "error", "message": {"detail": [
        {"type": "extra_forbidden", "loc": ["body", "stream_options"], "msg": "Extra inputs are not permitted",
         "input": {"include_usage": True}}]}, "type": "invalid_request_error", "param": None, "code": None})),
    ("Anthropic compatible endpoint, deprecated temperature", "temperature", error(400, body={
        "type": "error", "error": {"type": "invalid_request_error",
                                   "message": "`temperature` is deprecated for this model."}})),
    ("xAI grok-4, reasoning_effort in camelCase, error as a string", "reasoning_effort", error(400, body={
        "code": "Client specified an invalid argument",
        "error": "Model grok-4-0709 does not support parameter reasoningEffort."})),
    ("xAI grok-4.20, code invalid-argument", "reasoning_effort", error(400, body={
        "code": "invalid-argument", "error": "Model grok-4.20-0309-reasoning does not support parameter reasoningEffort."})),
    # Kimi K2.5/K2.6/K3 take only their own temperature (1, or 0.6 with thinking off), 2026:
    # https://github.com/NousResearch/hermes-agent/pull/12566, https://github.com/NoFxAiOS/nofx/pull/1415
    ("Moonshot Kimi K2.5, a fixed temperature", "temperature", error(400, body={"error": {
        "message": "invalid temperature: only 1 is allowed for this model", "type": "invalid_request_error"}})),
    ("Moonshot Kimi, thinking off", "temperature", error(400, body={"error": {
        "message": "invalid temperature: only 0.6 is allowed for this model", "type": "invalid_request_error"}})),
]


class UnsupportedFieldTests(BantamTestCase):
    """A field the server names as unsupported is left out for the rest of the process."""

    def test_each_refusal(self):
        """Each refusal: one dim line naming the field, the request sent again without it at
        once (no retry), and the next turn of the session leaves it out too."""
        for name, field, response in REFUSALS:
            with self.subTest(name):
                self.server.requests.clear()
                self.ws.write_config(self.server, reasoning_effort="high")
                self.push(response, text_stream("first"), text_stream("second"))
                result = self.run_bantam(input="one\ntwo\n")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("second", result.stdout)
                bodies = self.server.bodies
                self.assertEqual(len(bodies), 3)
                self.assertIn(field, bodies[0])
                self.assertNotIn(field, bodies[1])
                self.assertNotIn(field, bodies[2], "remembered for the session")
                self.assertEqual(bodies[1]["messages"], bodies[0]["messages"])
                notes = [line for line in result.stderr.splitlines() if field in line]
                self.assertEqual(len(notes), 1, result.stderr)
                self.assertIn("does not support", notes[0])
                self.assertNotIn("retry", result.stderr)

    def test_two_fields_one_after_the_other(self):
        """temperature, then reasoning_effort: both dropped, three requests for the turn."""
        self.ws.write_config(self.server, reasoning_effort="high")
        self.push(REFUSALS[0][2], REFUSALS[1][2], text_stream("finally"))
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        last = self.server.bodies[-1]
        self.assertNotIn("temperature", last)
        self.assertNotIn("reasoning_effort", last)

    def test_other_errors_are_not_mistaken(self):
        """A 400 that names a field without saying it is unsupported fails the turn as before."""
        self.push(error(400, "Invalid value for 'temperature': must be at most 2.", type="invalid_request_error"))
        result = self.run_batch("hi")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(self.server.posts), 1)
        self.assertIn("must be at most 2", result.stderr)

    def test_message_field_another_provider_refuses(self):
        """A conversation from a DeepSeek session (reasoning_content on a message) continued
        on Groq, which refuses that property: it is left out of the requests, and kept in
        the conversation file."""
        sessions = self.ws.sessions_dir()
        os.makedirs(sessions)
        earlier = [{"role": "system", "content": "sys"}, {"role": "user", "content": "list"},
                   {"role": "assistant", "content": "", "reasoning_content": "I will run ls.",
                    "tool_calls": [{"id": "c1", "type": "function",
                                    "function": {"name": "shell_exec", "arguments": "{\"command\": \"ls\"}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "a.txt\n\nexit: 0"},
                   {"role": "assistant", "content": "There is a.txt."}]
        with open(os.path.join(sessions, "ds.json"), "w") as f:
            json.dump({"id": "ds", "saved_at": "", "summary": "", "messages": earlier}, f)
        self.push(error(400, body={"error": {"message": "property 'reasoning_content' is unsupported",
                                             "type": "invalid_request_error"}}),
                  text_stream("continued on groq"))
        result = self.run_bantam(input="/load ds\nand now?\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("continued on groq", result.stdout)
        sent = self.server.bodies
        self.assertIn("reasoning_content", sent[0]["messages"][2])
        self.assertNotIn("reasoning_content", sent[1]["messages"][2])
        with open(os.path.join(sessions, "autosave.json")) as f:
            self.assertEqual(json.load(f)["messages"][2]["reasoning_content"], "I will run ls.")


class EndpointTests(BantamTestCase):
    """The endpoint as written, and the headers providers need."""

    def test_query_string_goes_on_every_request(self):
        """Azure's classic URL: the ?api-version=... goes on chat and /models requests (the REPL
        asks /models for its token line)."""
        endpoint = self.server.url.replace("/v1", "/openai/deployments/gpt4o") + "?api-version=2024-10-21"
        self.ws.write_config(self.server, endpoint=endpoint)
        self.push(text_stream("azure answer"))
        result = self.run_bantam(input="hi\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        paths = [r["path"] for r in self.server.requests]
        self.assertEqual(paths, ["/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
                                 "/openai/deployments/gpt4o/models?api-version=2024-10-21"])

    def test_headers_key_is_sent_and_kept_secret(self):
        """headers={"api-key": ..., "X-Title": ...}: sent on every request; api-key replaces
        the Bearer token (Azure); the values never show in output or in session files, even
        when the model repeats them."""
        secret = "azure-secret-4821"
        self.ws.write_config(self.server, headers=json.dumps({"api-key": secret, "X-Title": "bantam tests"}))
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo %s" % secret})]),
                  text_stream("your key is " + secret))
        result = self.run_batch("what is my key?")
        self.assertEqual(result.returncode, 0, result.stderr)
        for request in self.server.requests:
            self.assertEqual(request["headers"]["api-key"], secret)
            self.assertEqual(request["headers"]["x-title"], "bantam tests")
            self.assertNotIn("authorization", request["headers"])
        self.assertNotIn(secret, result.stdout + result.stderr)
        self.assertIn("your key is ***", result.stdout)
        for name in os.listdir(self.ws.sessions_dir()):
            with open(os.path.join(self.ws.sessions_dir(), name)) as f:
                self.assertNotIn(secret, f.read())

    def test_headers_from_the_environment(self):
        """BANTAM_HEADERS works like the key; the Bearer token still goes when there is no api-key."""
        self.ws.write_config(None, api_key=None)
        self.push(text_stream("ok"))
        result = self.run_batch("hi", env={"BANTAM_HEADERS": '{"HTTP-Referer": "https://example.org"}',
                                           "BANTAM_API_KEY": "sk-env-key-1", "BANTAM_ENDPOINT": self.server.url})
        self.assertEqual(result.returncode, 0, result.stderr)
        headers = self.server.posts[0]["headers"]
        self.assertEqual(headers["http-referer"], "https://example.org")
        self.assertEqual(headers["authorization"], "Bearer sk-env-key-1")

    def test_bad_headers_value(self):
        """headers that are not a JSON object of strings: exit 2, one line naming the key."""
        for value in ("api-key: x", '["x"]', '{"n": 1}'):
            with self.subTest(value=value):
                self.ws.write_config(self.server, headers=value)
                result = self.run_batch("hi")
                self.assertEqual(result.returncode, 2)
                self.assertRegex(result.stderr, r"model\.cfg:\d+: headers: expected a JSON object of strings")
                self.assertEqual(len(result.stderr.strip().splitlines()), 1)


class SessionFileTests(BantamTestCase):
    """Nothing a model sends can stop a session file from being written."""

    def test_lone_surrogates_in_tool_arguments_and_reasoning(self):
        """Lone UTF-16 halves in tool arguments and reasoning: the session file is written
        (valid UTF-8 JSON) and loads again."""
        raw = ('data: {"choices":[{"index":0,"delta":{"reasoning_content":"think \\ud83d"}}]}\n\n'
               'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function",'
               '"function":{"name":"shell_exec","arguments":"{\\"command\\": \\"echo \\\\ude00 x\\"}"}}]}}]}\n\n'
               'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n')
        from tests.support import sse
        self.push(sse([raw]), text_stream("done"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(os.path.join(self.ws.sessions_dir(), "autosave.json"), encoding="utf-8") as f:
            saved = json.load(f)["messages"]
        self.assertEqual(saved[-1]["content"], "done")
        result = self.run_bantam(input="/load autosave\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("[continuing %s: 5 messages, " % json.load(open(os.path.join(
            self.ws.sessions_dir(), "autosave.json")))["id"], result.stdout)
