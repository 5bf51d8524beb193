"""The event stream (issue 11): --jsonl, the schema of every event type, a golden run, the
trace file, the library API, two runs in two threads, and a fleet of 50.

bantam.py runs as a real subprocess against the scripted FakeServer; the library tests run
small Python programs that `import bantam` in a subprocess of their own.
"""

import json
import os
import re
import sys
import unittest

import bantam
from tests.support import (
    BantamTestCase, bantam_argv, chunk, completion, error, run_program, sse, text_stream,
    read_text, tool_call_stream, usage)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = {"type", "t", "depth"}
# The fields of each event type, besides type, t and depth: bantam.py's table of them.
FIELDS = {kind: set(fields.split()) for kind, fields in bantam.EVENTS.items()}
SECRET = "sk-secret-9f8e7d6c5b4a"
HEADER_SECRET = "hdr-secret-0a1b2c3d"
FORBIDDEN_MODULES = ("http.client", "socket", "subprocess", "ssl", "readline", "argparse")


def shell_call(call_id, command):
    """A (id, name, args) tool call of shell_exec."""
    return (call_id, "shell_exec", {"command": command})


def of_type(events, kind, depth=None):
    """The events of one type (at one depth, if given)."""
    return [e for e in events if e["type"] == kind and (depth is None or e["depth"] == depth)]


def joined(events, kind, depth=0):
    """The text of all events of a kind (text, reasoning, tool_output) at a depth, joined."""
    return "".join(e["text"] for e in of_type(events, kind, depth))


def merged(events):
    """Events with each run of text, reasoning or tool_output pieces (same depth) joined into one:
    how a stream is cut into pieces is not part of the schema."""
    out = []
    for event in events:
        last = out[-1] if out else None
        if (last and event["type"] in ("text", "reasoning", "tool_output") and last["type"] == event["type"]
                and last["depth"] == event["depth"]):
            out[-1] = dict(last, text=last["text"] + event["text"])
        else:
            out.append(dict(event))
    return out


class EventCase(BantamTestCase):
    """Helpers: parse and check a JSONL stream, run bantam with --jsonl, a library program."""

    def parse(self, text):
        """The events of a JSONL text, after checking every line: a JSON object with a known
        type, exactly its type's fields, a number t that never decreases within a run (a
        trace file holds run after run), an integer depth."""
        events, last_t = [], 0.0
        for number, line in enumerate(text.splitlines(), 1):
            try:
                event = json.loads(line)
            except ValueError:
                self.fail("line %d is not JSON: %r\n%s" % (number, line, text[-3000:]))
            self.assertIsInstance(event, dict, line)
            self.assertIn(event.get("type"), FIELDS, "unknown event type: %s" % line)
            self.assertEqual(set(event), BASE | FIELDS[event["type"]], "fields of %s" % line)
            self.assertIsInstance(event["t"], (int, float), line)
            if event["type"] == "start":   # t counts from its process's start: a new run starts again
                last_t = 0.0
            self.assertGreaterEqual(event["t"], last_t, "t decreased at line %d" % number)
            last_t = event["t"]
            self.assertIsInstance(event["depth"], int, line)
            self.assertGreaterEqual(event["depth"], 0, line)
            events.append(event)
        return events

    def run_jsonl(self, *args, code=0, **kw):
        """Run `bantam --jsonl *args`; assert the exit code; return (result, parsed events)."""
        result = self.run_bantam("--jsonl", *args, **kw)
        self.assertEqual(result.returncode, code, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result, self.parse(result.stdout)

    def one(self, events, kind, depth=0):
        """The single event of a type at a depth."""
        found = of_type(events, kind, depth)
        self.assertEqual(len(found), 1, "one %s event expected: %s" % (kind, found))
        return found[0]

    def run_python(self, code, *args, env=None, timeout=60):
        """Run `python -c code *args` in the workspace with bantam importable; the CompletedProcess."""
        env = dict(env or {}, PYTHONPATH=ROOT)
        return run_program(self.ws, [sys.executable, "-c", code] + list(args), env=env, timeout=timeout)

    def read_json(self, path):
        """A JSON file's value."""
        with open(path, encoding="utf-8") as f:
            return json.load(f)


class EventSchemaTests(EventCase):
    """One test per event type: its place in the run and the values of its fields."""

    def tool_run(self, *args, command="echo hi", code=0):
        """A run making one shell_exec call, then answering "Done."; (result, events)."""
        self.push(tool_call_stream([shell_call("call_1", command)], usage=usage(30, 7)),
                  text_stream("Done.", usage=usage(50, 4)))
        return self.run_jsonl("-p", "do it", *args, code=code)

    def test_start(self):
        """start: first, with the version, the model, the mode (batch) and the session id."""
        self.push(text_stream("ok"))
        _, events = self.run_jsonl("--session", "s-start", "-p", "hi")
        self.assertEqual(events[0], dict(events[0], type="start", depth=0, version=bantam.VERSION,
                                         model="test-model", mode="batch", session="s-start"))
        self.assertEqual(len(of_type(events, "start")), 1)

    def test_start_in_the_repl(self):
        """start: mode is "repl" without a prompt."""
        result = self.run_bantam("--trace", "t.jsonl", input="")
        self.assertEqual(result.returncode, 0, result.stderr)
        events = self.parse(read_text(self.ws.path("work", "t.jsonl")))
        self.assertEqual(events[0]["mode"], "repl")

    def test_prompt(self):
        """prompt: the user's prompt, before the turn starts."""
        self.push(text_stream("ok"))
        _, events = self.run_jsonl("-p", "the prompt text")
        event = self.one(events, "prompt")
        self.assertEqual(event["text"], "the prompt text")
        self.assertLess(events.index(event), events.index(self.one(events, "turn_start")))

    def test_turn_start(self):
        """turn_start: the number of messages the turn starts with (system + prompt)."""
        self.push(text_stream("ok"))
        _, events = self.run_jsonl("-p", "hi")
        self.assertEqual(self.one(events, "turn_start")["messages"], 2)

    def test_request(self):
        """request: one per model call, with the model, the messages sent and whether it streams."""
        _, events = self.tool_run()
        requests = of_type(events, "request")
        self.assertEqual([(e["model"], e["messages"], e["stream"]) for e in requests],
                         [("test-model", 2, True), ("test-model", 4, True)])
        self.push(text_stream("ok"))
        _, events = self.run_jsonl("--set", "stream=false", "-p", "hi")
        self.assertIs(self.one(events, "request")["stream"], False)

    def test_reasoning(self):
        """reasoning: the reasoning pieces, in order, before the answer's text."""
        self.push(text_stream("The answer.", reasoning="Thinking it over."))
        _, events = self.run_jsonl("-p", "hi")
        self.assertEqual(joined(events, "reasoning"), "Thinking it over.")
        last_reasoning = max(i for i, e in enumerate(events) if e["type"] == "reasoning")
        first_text = min(i for i, e in enumerate(events) if e["type"] == "text")
        self.assertLess(last_reasoning, first_text)

    def test_text(self):
        """text: the answer's pieces, which join to the whole answer, between request and reply_end."""
        self.push(text_stream("A streamed answer in many pieces.", pieces=3))
        _, events = self.run_jsonl("-p", "hi")
        self.assertEqual(joined(events, "text"), "A streamed answer in many pieces.")
        types = [e["type"] for e in merged(events)]
        self.assertEqual(types[types.index("request"):types.index("reply_end") + 1],
                         ["request", "text", "reply_end"])

    def test_reply_end(self):
        """reply_end: one per model call, with its finish reason."""
        _, events = self.tool_run()
        self.assertEqual([e["finish"] for e in of_type(events, "reply_end")], ["tool_calls", "stop"])

    def test_reply(self):
        """reply: the whole assistant message of each model call."""
        _, events = self.tool_run()
        replies = of_type(events, "reply")
        self.assertEqual(len(replies), 2)
        self.assertEqual(replies[0]["message"]["tool_calls"][0]["function"],
                         {"name": "shell_exec", "arguments": '{"command": "echo hi"}'})
        self.assertEqual(replies[1]["message"], {"role": "assistant", "content": "Done."})
        self.assertEqual([r["quiet"] for r in replies], [False, False])

    def test_usage(self):
        """usage: one per model call with the server's token figures and timing in seconds."""
        self.push(text_stream("ok", usage=usage(12, 5, cached=4)))
        _, events = self.run_jsonl("-p", "hi")
        event = self.one(events, "usage")
        self.assertEqual({k: event[k] for k in ("model", "prompt_tokens", "cached_tokens", "completion_tokens",
                                                "estimated", "quiet")},
                         {"model": "test-model", "prompt_tokens": 12, "cached_tokens": 4, "completion_tokens": 5,
                          "estimated": False, "quiet": False})
        self.assertGreaterEqual(event["seconds"], 0)
        self.assertGreaterEqual(event["first_output"], 0)
        self.assertLessEqual(event["first_output"], event["seconds"])

    def test_usage_estimated(self):
        """usage: without the server's figures, estimated is true and the counts are positive."""
        self.push(text_stream("an answer without usage"))
        _, events = self.run_jsonl("-p", "hi")
        event = self.one(events, "usage")
        self.assertIs(event["estimated"], True)
        self.assertGreater(event["prompt_tokens"], 0)
        self.assertGreater(event["completion_tokens"], 0)
        self.assertIsNone(event["cached_tokens"])

    def test_message(self):
        """message: each message added to the conversation, as the session file holds them."""
        _, events = self.tool_run("--session", "s-msg")
        added = [e["message"] for e in of_type(events, "message")]
        self.assertEqual([m["role"] for m in added], ["assistant", "tool", "assistant"])
        saved = self.read_json(os.path.join(self.ws.sessions_dir(), "s-msg.json"))["messages"]
        self.assertEqual(saved[2:], added)

    def test_tool_call(self):
        """tool_call: the call's id, the tool's name and its arguments as JSON text."""
        _, events = self.tool_run()
        event = self.one(events, "tool_call")
        self.assertEqual((event["id"], event["name"], json.loads(event["arguments"])),
                         ("call_1", "shell_exec", {"command": "echo hi"}))

    def test_tool_output(self):
        """tool_output: a command's output as it comes, between its tool_call and tool_result."""
        _, events = self.tool_run(command="echo first; sleep 0.3; echo second")
        outputs = of_type(events, "tool_output")
        self.assertGreaterEqual(len(outputs), 2, "output arrives as it is printed")
        self.assertEqual(joined(events, "tool_output"), "first\nsecond\n")
        call = events.index(self.one(events, "tool_call"))
        result = events.index(self.one(events, "tool_result"))
        self.assertTrue(all(call < events.index(e) < result for e in outputs))

    def test_tool_result(self):
        """tool_result: the call's id, the tool's name, the result sent to the model, ok true."""
        _, events = self.tool_run()
        event = self.one(events, "tool_result")
        self.assertEqual((event["id"], event["name"], event["content"], event["ok"]),
                         ("call_1", "shell_exec", "hi\n\n\nexit: 0", True))

    def test_tool_result_not_ok(self):
        """tool_result: ok is false for a call that could not run (an unknown tool)."""
        self.push(tool_call_stream([("call_x", "no_such_tool", {})]), text_stream("Done."))
        _, events = self.run_jsonl("-p", "hi")
        event = self.one(events, "tool_result")
        self.assertIs(event["ok"], False)
        self.assertIn("unknown tool", event["content"])

    def test_retry(self):
        """retry: the error, the attempt number, the number of retries allowed, and the wait."""
        self.push(error(503, "busy right now"), text_stream("recovered"))
        _, events = self.run_jsonl("--set", "backoff=0.01,0.02", "-p", "hi")
        event = self.one(events, "retry")
        self.assertIn("busy right now", event["error"])
        self.assertEqual((event["attempt"], event["of"], event["wait"]), (1, 2, 0.01))
        self.assertEqual(joined(events, "text"), "recovered")

    def test_note(self):
        """note: a diagnostic with its level (a reply cut at the token limit is a warning)."""
        self.push(sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "cut sho"}),
                       chunk({}, finish_reason="length")]))
        _, events = self.run_jsonl("-p", "hi")
        event = self.one(events, "note")
        self.assertEqual(event["level"], "warning")
        self.assertIn("finish_reason: length", event["text"])
        kinds = [e["type"] for e in events]   # said of the reply once it is shown whole
        self.assertLess(kinds.index("reply_end"), kinds.index("note"))

    def test_error(self):
        """error: a failed turn's message (exit 2: a wrong key is final), after turn_end with status "failed"."""
        self.push(error(401, "the key is not valid"))
        result, events = self.run_jsonl("-p", "hi", code=2)
        event = self.one(events, "error")
        self.assertIn("the key is not valid", event["message"])
        turn_end = self.one(events, "turn_end")
        self.assertEqual(turn_end["status"], "failed")
        self.assertIn("the key is not valid", turn_end["error"])
        self.assertLess(events.index(turn_end), events.index(event))

    def test_compaction(self):
        """compaction: the messages summarized and the messages after; the prompt that
        overflowed is not summarized but kept word for word after the summary."""
        self.push(error(400, body={"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages "
                       "resulted in 130211 tokens.", "type": "invalid_request_error",
            "code": "context_length_exceeded"}}),
            completion("SUMMARY of the talk"), text_stream("after compaction"))
        _, events = self.run_jsonl("-p", "a prompt that overflows")
        event = self.one(events, "compaction")
        self.assertEqual((event["before"], event["after"]), (1, 2))
        self.assertTrue(self.server.bodies[-1]["messages"][1]["content"].endswith(
            "as I wrote it:\n\na prompt that overflows"))
        self.assertEqual(joined(events, "text"), "after compaction")
        self.assertIn("SUMMARY of the talk", self.server.bodies[-1]["messages"][1]["content"])

    def test_context(self):
        """context: after the turn, the last call's figures and the share of the window it fills."""
        _, events = self.tool_run()
        event = self.one(events, "context")
        self.assertEqual(events[-1], event)
        self.assertEqual({k: event[k] for k in FIELDS["context"]},
                         {"model": "test-model", "prompt_tokens": 50, "cached_tokens": None,
                          "completion_tokens": 4, "estimated": False, "window": 262144, "share": 50 / 262144,
                          "cost": None, "session_cost": None})

    def test_context_with_prices(self):
        """context: with prices set, what the turn and the session cost (every call of the turn)."""
        _, events = self.tool_run("--set", "price_in=2", "--set", "price_out=10")
        event = self.one(events, "context")
        # two calls: (30 + 50) prompt tokens at $2/M, (7 + 4) completion tokens at $10/M
        self.assertAlmostEqual(event["cost"], (80 * 2 + 11 * 10) / 1e6)
        self.assertAlmostEqual(event["session_cost"], event["cost"])
        self.assertEqual([e["cost"] for e in of_type(events, "usage")], [(30 * 2 + 7 * 10) / 1e6, (50 * 2 + 4 * 10) / 1e6])

    def test_approval(self):
        """approval: each command's decision, with the rule that made it."""
        _, events = self.tool_run("--set", "deny=echo *", command="echo hello")
        event = self.one(events, "approval")
        self.assertEqual({k: event[k] for k in FIELDS["approval"]},
                         {"id": "call_1", "tool": "shell_exec", "command": "echo hello", "path": None,
                          "decision": "refuse", "rule": "deny echo *", "reason": None, "edited": None})

    def test_budget_stop(self):
        """budget_stop: which budget stopped the turn, its limit and what was used; turn_end says "budget"."""
        _, events = self.tool_run("--set", "max_turn_tokens=20", code=3)
        event = self.one(events, "budget_stop")
        self.assertEqual({k: event[k] for k in FIELDS["budget_stop"]},
                         {"reason": "max_turn_tokens", "limit": 20, "used": 37})
        self.assertEqual(self.one(events, "turn_end")["status"], "budget")

    def test_turn_end(self):
        """turn_end: status "done" and no error after a finished turn."""
        _, events = self.tool_run()
        event = self.one(events, "turn_end")
        self.assertEqual((event["status"], event["error"]), ("done", None))

    def test_subagent_events_are_one_level_deeper(self):
        """A subagent's events carry depth 1; its answer is the parent's tool result at depth 0."""
        self.push(tool_call_stream([("call_s", "run_subagent", {"prompt": "child task"})]),
                  text_stream("child answer"), text_stream("parent done"))
        _, events = self.run_jsonl("-p", "delegate")
        self.assertEqual(joined(events, "text", depth=1), "child answer")
        self.assertEqual(joined(events, "text", depth=0), "parent done")
        self.assertEqual([e["depth"] for e in of_type(events, "turn_start")], [0, 1])
        self.assertEqual([e["depth"] for e in of_type(events, "turn_end")], [1, 0])
        self.assertEqual(self.one(events, "tool_result")["content"], "child answer")


GOLDEN = [
    {"type": "start", "depth": 0, "version": bantam.VERSION, "model": "test-model", "mode": "batch",
     "session": "golden"},
    {"type": "prompt", "depth": 0, "text": "say hello with a command", "session": "golden"},
    {"type": "turn_start", "depth": 0, "messages": 2},
    {"type": "request", "depth": 0, "model": "test-model", "messages": 2, "stream": True},
    {"type": "reply_end", "depth": 0, "finish": "tool_calls"},
    {"type": "reply", "depth": 0, "quiet": False, "message": {
        "role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "shell_exec", "arguments": '{"command": "echo hello"}'}}]}},
    {"type": "usage", "depth": 0, "model": "test-model", "prompt_tokens": 30, "cached_tokens": None,
     "completion_tokens": 7, "estimated": False, "quiet": False, "seconds": "S", "first_output": "S",
     "cost": None},
    {"type": "message", "depth": 0, "message": {
        "role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "shell_exec", "arguments": '{"command": "echo hello"}'}}]}},
    {"type": "tool_call", "depth": 0, "id": "call_1", "name": "shell_exec",
     "arguments": '{"command": "echo hello"}'},
    {"type": "approval", "depth": 0, "id": "call_1", "tool": "shell_exec", "command": "echo hello",
     "path": None, "decision": "run", "rule": "approve=auto", "reason": None, "edited": None},
    {"type": "tool_output", "depth": 0, "text": "hello\n"},
    {"type": "tool_result", "depth": 0, "id": "call_1", "name": "shell_exec",
     "content": "hello\n\n\nexit: 0", "ok": True},
    {"type": "message", "depth": 0, "message": {"role": "tool", "tool_call_id": "call_1",
                                                "content": "hello\n\n\nexit: 0"}},
    {"type": "request", "depth": 0, "model": "test-model", "messages": 4, "stream": True},
    {"type": "text", "depth": 0, "text": "It printed hello."},
    {"type": "reply_end", "depth": 0, "finish": "stop"},
    {"type": "reply", "depth": 0, "quiet": False, "message": {"role": "assistant", "content": "It printed hello."}},
    {"type": "usage", "depth": 0, "model": "test-model", "prompt_tokens": 50, "cached_tokens": None,
     "completion_tokens": 4, "estimated": False, "quiet": False, "seconds": "S", "first_output": "S",
     "cost": None},
    {"type": "message", "depth": 0, "message": {"role": "assistant", "content": "It printed hello."}},
    {"type": "turn_end", "depth": 0, "status": "done", "error": None},
    {"type": "context", "depth": 0, "model": "test-model", "prompt_tokens": 50, "cached_tokens": None,
     "completion_tokens": 4, "estimated": False, "window": 262144, "share": 50 / 262144, "cost": None,
     "session_cost": None},
]


class JsonlTests(EventCase):
    """--jsonl as a whole: a golden run, nothing but JSON on stdout, no secrets."""

    def test_golden_run(self):
        """A scripted run (a tool call, then an answer) gives exactly the expected events, t and timings aside."""
        self.push(tool_call_stream([shell_call("call_1", "echo hello")], usage=usage(30, 7)),
                  text_stream("It printed hello.", usage=usage(50, 4)))
        _, events = self.run_jsonl("--session", "golden", "-p", "say hello with a command")
        normal = []
        for event in merged(events):
            event = {k: v for k, v in event.items() if k != "t"}
            if event["type"] == "start":
                self.assertRegex(event.pop("time"), r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
            for key in ("seconds", "first_output"):
                if isinstance(event.get(key), (int, float)):
                    event[key] = "S"
            normal.append(event)
        self.assertEqual(normal, GOLDEN)

    def test_stdout_holds_only_json_lines(self):
        """With --jsonl, a run with a retry, escapes and trace-like tool output prints only JSON lines."""
        self.ws.write_config(self.server, backoff="0.01,0.01", unknown_key="x")
        self.push(error(500, "flaky"),
                  tool_call_stream([shell_call("call_1", r"printf '\033[31mred\033[0m\n[tool result: fake]\n> '")]),
                  text_stream("Final\nanswer\n", reasoning="hmm"))
        result, events = self.run_jsonl("-p", "go")
        self.assertTrue(result.stdout.endswith("\n"))
        self.assertIn("retry", [e["type"] for e in events])
        self.assertIn("\033[31mred", joined(events, "tool_output"))
        self.assertEqual(joined(events, "text"), "Final\nanswer\n")
        self.assertIn("unknown config key", result.stderr)   # config warnings stay on stderr

    def test_repl_stdout_holds_only_json_lines(self):
        """With --jsonl, the REPL (prompts piped in) prints only JSON lines on stdout."""
        self.push(text_stream("repl answer"))
        result = self.run_bantam("--jsonl", input="hello\n/help\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        events = self.parse(result.stdout)
        self.assertEqual(joined(events, "text"), "repl answer")

    def test_secrets_never_appear(self):
        """The api_key and header values never appear in the JSONL, even when the model and a tool print them."""
        self.ws.write_config(self.server, api_key=SECRET, headers=json.dumps({"x-token": HEADER_SECRET}))
        self.push(tool_call_stream([shell_call("call_1", "echo %s %s" % (SECRET, HEADER_SECRET))]),
                  text_stream("The key is %s and %s." % (SECRET, HEADER_SECRET), pieces=3))
        result, events = self.run_jsonl("--trace", "t.jsonl", "-p", "show me the key")
        self.assertEqual(self.server.posts[0]["headers"]["authorization"], "Bearer " + SECRET)
        trace = read_text(self.ws.path("work", "t.jsonl"))
        for secret in (SECRET, HEADER_SECRET):
            self.assertNotIn(secret, result.stdout)
            self.assertNotIn(secret, result.stderr)
            self.assertNotIn(secret, trace)
        self.assertIn("The key is *** and ***.", joined(events, "text"))
        self.assertIn("*** ***", self.one(events, "tool_result")["content"])

    def test_a_secret_typed_in_a_prompt_is_not_saved(self):
        """A prompt holding the key (pasted by mistake) leaves no copy in the session file."""
        self.ws.write_config(self.server, api_key=SECRET)
        self.push(text_stream("noted"))
        result = self.run_bantam("-p", "my key is %s, keep it" % SECRET)
        self.assertEqual(result.returncode, 0, result.stderr)
        folder = self.ws.sessions_dir()
        saved = "".join(read_text(os.path.join(folder, n)) for n in os.listdir(folder))
        self.assertIn("my key is ***, keep it", saved)
        self.assertNotIn(SECRET, saved)


class TraceFileTests(EventCase):
    """--trace FILE and trace_file: the same events appended to a file, run after run."""

    def test_trace_holds_the_jsonl_events(self):
        """--trace FILE gets exactly the lines --jsonl prints."""
        self.push(tool_call_stream([shell_call("call_1", "echo traced")]), text_stream("ok"))
        result, _ = self.run_jsonl("--trace", "trace.jsonl", "-p", "go")
        self.assertEqual(read_text(self.ws.path("work", "trace.jsonl")), result.stdout)

    def test_trace_appends_run_after_run(self):
        """Two batch runs with --trace append: two start events, each run's events whole and in order."""
        self.push(text_stream("first"), text_stream("second"))
        for prompt in ("prompt one", "prompt two"):
            result = self.run_bantam("--trace", "trace.jsonl", "-p", prompt)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertNotIn('"type"', result.stdout)   # the human view stays on stdout
        events = self.parse(read_text(self.ws.path("work", "trace.jsonl")))
        starts = [i for i, e in enumerate(events) if e["type"] == "start"]
        self.assertEqual(len(starts), 2)
        runs = [events[starts[0]:starts[1]], events[starts[1]:]]
        self.assertEqual([self.one(run, "prompt")["text"] for run in runs], ["prompt one", "prompt two"])
        self.assertEqual([joined(run, "text") for run in runs], ["first", "second"])
        for run in runs:
            self.assertEqual([run[0]["type"], run[-1]["type"]], ["start", "context"])

    def test_a_trace_that_cannot_be_written_is_said_once_and_the_run_goes_on(self):
        """--trace on a full disk (/dev/full): one warning on stderr, the answer still shown,
        exit 0 (the trace stops; the run neither crashes nor goes on in silence)."""
        self.push(tool_call_stream([shell_call("call_1", "echo step")]), text_stream("the answer"))
        result = self.run_bantam("--trace", "/dev/full", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("the answer", result.stdout)
        warnings = [line for line in result.stderr.splitlines() if "cannot write events" in line]
        self.assertEqual(warnings, ["warning: cannot write events to /dev/full; no more are "
                                    "written there"])

    def test_trace_file_key_in_repl_and_batch(self):
        """trace_file in model.cfg: a REPL run then a batch run append to it, in that order."""
        self.ws.write_config(self.server, trace_file="events.jsonl")
        self.push(text_stream("repl answer"), text_stream("batch answer"))
        result = self.run_bantam(input="repl prompt\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        result = self.run_bantam("-p", "batch prompt")
        self.assertEqual(result.returncode, 0, result.stderr)
        events = self.parse(read_text(self.ws.path("work", "events.jsonl")))
        self.assertEqual([e["mode"] for e in of_type(events, "start")], ["repl", "batch"])
        self.assertEqual([e["text"] for e in of_type(events, "prompt")], ["repl prompt", "batch prompt"])
        self.assertEqual(joined(events, "text"), "repl answerbatch answer")


IMPORT_PROBE = r"""
import json, os, signal, sys
def handlers():
    found = {}
    for sig in signal.valid_signals():
        try:
            found[int(sig)] = repr(signal.getsignal(sig))
        except (OSError, ValueError):
            pass
    return found
def files(root):
    return sorted(os.path.join(d, n) for d, dirs, names in os.walk(root) for n in dirs + names)
home = os.path.expanduser("~")
before = handlers(), files(home), set(sys.modules), dict(os.environ), os.getcwd()
import bantam
after = handlers(), files(home), set(sys.modules), dict(os.environ), os.getcwd()
with open(sys.argv[1], "w") as f:
    json.dump({"signals": [s for s in before[0] if before[0][s] != after[0].get(s)],
               "files": [p for p in after[1] if p not in before[1]],
               "modules": sorted(after[2] - before[2]),
               "environ": before[3] == after[3], "cwd": before[4] == after[4]}, f)
"""

README_ENDPOINT = '"http://localhost:11434/v1"'   # the endpoint the README's example names


def readme_example():
    """The README's library example (the python block of its "Library use" section), exactly
    as printed, and the model it names."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        section = f.read().split("## Library use", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return code, re.search(r'"model": "([^"]+)"', code).group(1)


# What the test adds around the README's example: the endpoint pointed at the test server, and
# the example's messages, events and cfg written to a file for the checks.
EXAMPLE_AROUND = r"""
import json as _json, sys as _sys
with open(_sys.argv[2], "w") as _f:
    _json.dump({"messages": messages, "events": events, "cfg_keys": sorted(cfg)}, _f)
"""

PLAIN_EXAMPLE = r"""
import sys
import bantam
cfg = bantam.load_config(overrides={"endpoint": sys.argv[1], "model": "m", "color": "never"})
bantam.AL(cfg, [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
"""

THREADS = r"""
import json, sys, threading
import bantam

def run(name, url, model, key):
    cfg = bantam.load_config(overrides={"endpoint": url, "model": model, "api_key": key})
    messages = [{"role": "system", "content": cfg["system_prompt"]},
                {"role": "user", "content": "task " + name}]
    events = []
    bantam.AL(cfg, messages, on_event=events.append)
    results[name] = {"messages": messages, "events": events}

results = {}
threads = [threading.Thread(target=run, args=("a", sys.argv[1], "model-a", "key-aaaa")),
           threading.Thread(target=run, args=("b", sys.argv[2], "model-b", "key-bbbb"))]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[3], "w") as f:
    json.dump(results, f)
"""


class LibraryTests(EventCase):
    """`import bantam`: no side effects, cheap; load_config + AL with an event callback."""

    def test_import_has_no_side_effects(self):
        """import bantam prints nothing, writes nothing under HOME, changes no signal handler or environment."""
        out = self.ws.path("tmp", "probe.json")
        result = self.run_python(IMPORT_PROBE, out)
        self.assertEqual((result.returncode, result.stdout, result.stderr), (0, "", ""))
        probe = self.read_json(out)
        self.assertEqual(probe["signals"], [])
        self.assertEqual(probe["files"], [])
        self.assertTrue(probe["environ"])
        self.assertTrue(probe["cwd"])
        self.assertIn("bantam", probe["modules"])
        for name in FORBIDDEN_MODULES:
            self.assertNotIn(name, probe["modules"])

    def test_import_is_cheap(self):
        """`python -X importtime -c "import bantam"` imports no network, process, readline or argparse module."""
        result = self.run_python("import bantam")
        self.assertEqual(result.returncode, 0, result.stderr)
        result = run_program(self.ws, [sys.executable, "-X", "importtime", "-c", "import bantam"],
                             env={"PYTHONPATH": ROOT})
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                    if line.startswith("import time:")}
        self.assertIn("bantam", imported)
        for name in FORBIDDEN_MODULES:
            self.assertNotIn(name, imported)

    def test_readme_example(self):
        """The README's example, as printed there (load_config + AL with on_event): AL prints
        nothing, the example prints the answer and the tools run; the events are collected."""
        code, model = readme_example()
        self.assertEqual(code.count(README_ENDPOINT), 1, "the README example names its endpoint once")
        program = code.replace(README_ENDPOINT, "__import__('sys').argv[1]") + EXAMPLE_AROUND
        self.push(tool_call_stream([shell_call("call_1", "echo from-the-tool")]),
                  text_stream("Hello from the library."))
        out = self.ws.path("tmp", "example.json")
        result = self.run_python(program, self.server.url, out)
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        self.assertEqual(result.stdout, "Hello from the library.\n['shell_exec']\n")
        data = self.read_json(out)
        self.assertEqual(data["messages"][-1], {"role": "assistant", "content": "Hello from the library."})
        self.assertEqual([m["role"] for m in data["messages"]], ["system", "user", "assistant", "tool", "assistant"])
        events = self.parse("".join(json.dumps(e) + "\n" for e in data["events"]))
        self.assertEqual([events[0]["type"], events[-1]["type"]], ["turn_start", "turn_end"])
        self.assertEqual(joined(events, "tool_output"), "from-the-tool\n")
        self.assertEqual(joined(events, "text"), "Hello from the library.")
        self.assertEqual(self.server.bodies[0]["model"], model)
        self.assertNotIn("run", data["cfg_keys"], "AL leaves the caller's cfg as it was")

    def test_al_without_callback_prints_plain_traces(self):
        """AL(cfg, messages) without on_event prints the spec's plain traces and the answer on stdout."""
        self.push(tool_call_stream([shell_call("call_1", "echo plain-tool")]), text_stream("Plain answer."))
        result = self.run_python(PLAIN_EXAMPLE, self.server.url)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, '[tool call: shell_exec({"command": "echo plain-tool"})]\n'
                                        "[tool result: shell_exec]\nplain-tool\n\n\nexit: 0\nPlain answer.\n")

    def test_two_runs_in_two_threads(self):
        """Two overlapping AL runs in two threads: each its own connection, model, events and usage."""
        server_a = self.make_server([
            tool_call_stream([shell_call("call_a", "echo from-a")], usage=usage(101, 11), delay=0.05),
            text_stream("Answer A, slowly.", pieces=1, usage=usage(102, 12), delay=0.03)])
        server_b = self.make_server([
            tool_call_stream([shell_call("call_b", "echo from-b")], usage=usage(201, 21), delay=0.05),
            text_stream("Answer B, slowly.", pieces=1, usage=usage(202, 22), delay=0.03)])
        out = self.ws.path("tmp", "threads.json")
        result = self.run_python(THREADS, server_a.url, server_b.url, out)
        self.assertEqual((result.returncode, result.stdout, result.stderr), (0, "", ""))
        data = self.read_json(out)
        a, b = data["a"]["events"], data["b"]["events"]
        # the runs overlapped in time ("t" is one clock for the whole process)
        self.assertLess(a[0]["t"], b[-1]["t"])
        self.assertLess(b[0]["t"], a[-1]["t"])
        for name, server, events, other in (("a", server_a, a, "b"), ("b", server_b, b, "a")):
            with self.subTest(run=name):
                self.assertEqual(server.connections, 1)
                self.assertEqual(len(server.posts), 2)
                self.assertEqual({body["model"] for body in server.bodies}, {"model-" + name})
                self.assertEqual({p["headers"]["authorization"] for p in server.posts}, {"Bearer key-%s" % (name * 4)})
                self.assertEqual(joined(events, "text"), "Answer %s, slowly." % name.upper())
                self.assertEqual(joined(events, "tool_output"), "from-%s\n" % name)
                base = 100 if name == "a" else 200
                self.assertEqual([(e["model"], e["prompt_tokens"], e["completion_tokens"])
                                  for e in of_type(events, "usage")],
                                 [("model-" + name, base + 1, base // 10 + 1),
                                  ("model-" + name, base + 2, base // 10 + 2)])
                text = json.dumps(events) + json.dumps(data[name]["messages"])
                for foreign in ("model-" + other, "from-" + other, "Answer %s" % other.upper(), "task " + other):
                    self.assertNotIn(foreign, text)
                self.assertEqual(data[name]["messages"][-1]["content"], "Answer %s, slowly." % name.upper())

    def test_two_threads_on_one_endpoint_never_share_a_connection(self):
        """Two overlapping two-step runs against one endpoint: a connection in use by one run
        is never the other's (b's second request comes while a's answer streams, on the
        connection a's first reply left idle: shared, one would read the other's reply)."""
        def answer(record):
            messages = record["body"]["messages"]
            name = messages[1]["content"][-1]
            if messages[-1]["role"] == "user":   # a: a slow first reply; b: a slow command
                command = "echo from-a" if name == "a" else "sleep 0.5; echo from-b"
                return tool_call_stream([shell_call("call_" + name, command)],
                                        head_delay=0.3 if name == "a" else 0.0)
            return text_stream("Answer %s, slowly." % name, pieces=8, delay=0.1)
        server = self.make_server([answer] * 4)
        out = self.ws.path("tmp", "threads.json")
        result = self.run_python(THREADS, server.url, server.url, out)
        self.assertEqual((result.returncode, result.stderr), (0, ""))
        data = self.read_json(out)
        for name in "ab":
            with self.subTest(run=name):
                events = data[name]["events"]
                self.assertEqual(of_type(events, "retry"), [])
                self.assertEqual(joined(events, "tool_output"), "from-%s\n" % name)
                self.assertEqual(data[name]["messages"][-1]["content"], "Answer %s, slowly." % name)
        self.assertEqual(len(server.posts), 4)

FLEET = 50
FLEET_SCRIPT = r"""
mkdir -p out
seq -w 1 %d | xargs -P %d -I {} sh -c '
  "$@" --session run-{} --jsonl -p "task-{}: greet me" > out/{}.jsonl 2> out/{}.err
  echo $? > out/{}.rc' sh "$@"
"""


class FleetTests(EventCase):
    """50 batch runs at once through xargs -P, each with its own --session and --jsonl."""

    def answer_by_prompt(self, record):
        """The fake server's answer to one request of a fleet run: a tool call for its number, then its answer."""
        messages = record["body"]["messages"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        n = re.match(r"task-(\d+):", prompt).group(1)
        if messages[-1]["role"] == "user":
            return tool_call_stream([shell_call("call_%s" % n, "echo tool-%s" % n)])
        return text_stream("answer-%s" % n)

    def test_fifty_runs_at_once(self):
        """50 parallel runs exit 0; each session file and JSONL stream holds only its own run; autosave is one."""
        self.push(*[self.answer_by_prompt] * (2 * FLEET + 20))   # a few spare for retries
        result = run_program(self.ws, ["sh", "-c", FLEET_SCRIPT % (FLEET, FLEET), "sh"] + bantam_argv(),
                             timeout=180)
        self.assertEqual(result.returncode, 0, result.stderr)
        numbers = ["%02d" % n for n in range(1, FLEET + 1)]
        tag = re.compile(r"(?:task|tool|answer)-(\d\d)")
        for n in numbers:
            with self.subTest(run=n):
                out = self.ws.path("work", "out", n)
                self.assertEqual(read_text(out + ".rc").strip(), "0", read_text(out + ".err"))
                stream = read_text(out + ".jsonl")
                events = self.parse(stream)
                self.assertEqual(self.one(events, "start")["session"], "run-" + n)
                self.assertEqual(joined(events, "text"), "answer-" + n)
                self.assertEqual(set(tag.findall(stream)), {n})
                path = os.path.join(self.ws.sessions_dir(), "run-%s.json" % n)
                text = read_text(path)
                session = json.loads(text)
                self.assertEqual(session["id"], "run-" + n)
                self.assertEqual([m["role"] for m in session["messages"]],
                                 ["system", "user", "assistant", "tool", "assistant"])
                self.assertEqual([(m["role"], m.get("content")) for m in session["messages"][1:]
                                  if not m.get("tool_calls")],
                                 [("user", "task-%s: greet me" % n), ("tool", "tool-%s\n\n\nexit: 0" % n),
                                  ("assistant", "answer-" + n)])
                self.assertEqual(set(tag.findall(text)), {n}, "nothing of another run")
        self.assertFalse(self.server.exhausted)
        names = sorted(os.listdir(self.ws.sessions_dir()))
        self.assertEqual([n for n in names if not n.startswith(".")],
                         sorted(["autosave.json"] + ["run-%s.json" % n for n in numbers]))
        autosave = os.path.join(self.ws.sessions_dir(), "autosave.json")
        target = os.path.realpath(autosave)
        self.assertRegex(os.path.basename(target), r"^run-\d\d\.json$")
        self.assertEqual(self.read_json(autosave), self.read_json(target))
        self.assertEqual(self.read_json(autosave)["id"], os.path.basename(target)[:-5])


if __name__ == "__main__":
    unittest.main()
