"""Batch mode end to end: exit codes, autosave, retries, streaming, the agentic loop and the tools.

bantam.py runs as a real subprocess (`bantam prompt.txt` or `bantam -`) against the scripted
FakeServer; tools run real shell commands in the workspace.
"""

import json
import os
import re
import signal
import stat
import subprocess
import unittest

from tests.support import (
    BantamTestCase, chunk, completion, drop, error, hang, sse, text_stream, tool_call_stream)

RAIL = "  \u2502 "
ISO_8601 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def full_stream(content="", reasoning="", calls=(), **sse_kw):
    """A streamed reply with reasoning, then content, then tool calls (id, name, args), in small pieces."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": reasoning[i:i + 5]}) for i in range(0, len(reasoning), 5)]
    events += [chunk({"content": content[i:i + 5]}) for i in range(0, len(content), 5)]
    for index, (call_id, name, args) in enumerate(calls):
        args = json.dumps(args)
        events.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 6]}}]})
                   for i in range(0, len(args), 6)]
    events.append(chunk({}, finish_reason="tool_calls" if calls else "stop"))
    return sse(events, **sse_kw)


def shell_call(call_id, command):
    """A (id, name, args) tool call of shell_exec."""
    return (call_id, "shell_exec", {"command": command})


class BatchCase(BantamTestCase):
    """Helpers over the recorded requests and the autosave."""

    def run_ok(self, prompt="do it", **kw):
        """Run a batch turn; assert exit 0; return the CompletedProcess."""
        result = self.run_batch(prompt, **kw)
        self.assertEqual(result.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result

    def saved_messages(self):
        """The messages of the autosave written by the last run."""
        return self.read_autosave()["messages"]

    def tool_results(self, request_index=-1):
        """{tool_call_id: content} of the tool messages in one recorded request."""
        messages = self.server.bodies[request_index]["messages"]
        return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}

    def assert_every_call_answered(self, messages):
        """Each assistant message with tool_calls is followed by exactly one tool message per call id."""
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            ids = [c["id"] for c in m["tool_calls"]]
            following = messages[i + 1:i + 1 + len(ids)]
            self.assertEqual([(f["role"], f["tool_call_id"]) for f in following],
                             [("tool", call_id) for call_id in ids], messages)


class BatchModeTests(BatchCase):
    """`bantam FILE` and `bantam -`: one turn, then exit with a meaningful code."""

    def test_prompt_file(self):
        """`bantam prompt.txt` sends the file as the user message, prints the reply, exits 0."""
        self.push(text_stream("The answer is 42."))
        result = self.run_ok("What is the answer?\nThink.\n")
        self.assertIn("The answer is 42.", result.stdout)
        messages = self.server.bodies[0]["messages"]
        self.assertEqual(messages[-1]["role"], "user")
        self.assertEqual(messages[-1]["content"].strip(), "What is the answer?\nThink.")
        self.assertEqual(len(self.server.posts), 1)

    def test_prompt_from_stdin(self):
        """`bantam -` reads the prompt from standard input."""
        self.push(text_stream("from stdin"))
        result = self.run_bantam("-", input="piped prompt\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("from stdin", result.stdout)
        self.assertEqual(self.server.bodies[0]["messages"][-1]["content"].strip(), "piped prompt")

    def test_usage_errors_exit_2(self):
        """Missing prompt file, empty prompt and bad arguments: a clear message on stderr, exit 2, no request."""
        self.ws.write("blank.txt", "  \n\n")
        cases = [  # (arguments, stdin, text the message must contain)
            (["missing.txt"], None, "missing.txt"),
            (["blank.txt"], None, "empty"),
            (["-"], "", "empty"),
            (["a.txt", "b.txt"], None, "unrecognized arguments: b.txt"),
            (["--frobnicate"], None, "unrecognized arguments: --frobnicate"),
        ]
        for args, stdin, expected in cases:
            with self.subTest(args=args):
                result = self.run_bantam(*args, input=stdin)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(expected, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, "one line")
                self.assertEqual(result.stdout, "")
                self.assertEqual(self.server.posts, [])

    def test_autosave_after_a_batch_turn(self):
        """Batch mode writes the conversation to its own session file (id, uid, cwd, times,
        summary, count, messages; mode 0600); autosave.json links to it."""
        self.push(text_stream("saved reply"))
        self.run_ok("remember this")
        path = os.path.join(self.ws.sessions_dir(), "autosave.json")
        session = self.read_autosave()
        own = os.path.join(self.ws.sessions_dir(), session["id"] + ".json")
        self.assertEqual(os.path.realpath(path), os.path.realpath(own))
        self.assertEqual(stat.S_IMODE(os.stat(own).st_mode), 0o600)
        self.assertEqual(sorted(session), ["count", "created_at", "cwd", "id", "messages", "saved_at",
                                           "summary", "uid"])
        self.assertRegex(session["id"], r"^\d{8}-\d{6}$")
        self.assertEqual(session["cwd"], os.path.realpath(self.ws.work))
        self.assertEqual(session["count"], 3)
        self.assertRegex(session["saved_at"], ISO_8601)
        self.assertEqual(session["summary"], "remember this")
        self.assertEqual([(m["role"], m["content"]) for m in session["messages"][1:]],
                         [("user", "remember this"), ("assistant", "saved reply")])
        self.assertEqual(session["messages"][0]["role"], "system")


class RetryTests(BatchCase):
    """The retry ladder: what is retried, what fails at once, and a clean failure."""

    def test_retryable_statuses_then_success(self):
        """408, 409, 429 and 5xx are retried with an announcement on stderr; the turn then succeeds."""
        for status in (408, 409, 429, 500, 502, 503):
            with self.subTest(status=status):
                before = len(self.server.posts)
                self.push(error(status, "busy-%d" % status), text_stream("recovered"))
                result = self.run_ok()
                self.assertIn("recovered", result.stdout)
                self.assertRegex(result.stderr, r"HTTP %d: busy-%d.*retry 1/3" % (status, status))
                self.assertEqual(len(self.server.posts) - before, 2)

    def test_client_errors_fail_at_once(self):
        """400, 401, 403 and 404 are not retried: exit 2 (final: the same run fails again) with
        the server's message on stderr."""
        cases = [(400, {"stream": False}), (401, {}), (403, {}), (404, {})]
        for status, cfg in cases:
            with self.subTest(status=status):
                self.ws.write_config(self.server, **cfg)
                before = len(self.server.posts)
                self.push(error(status, "server says no (%d)" % status))
                result = self.run_batch("go")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("server says no (%d)" % status, result.stderr)
                self.assertNotIn("retry", result.stderr)
                self.assertEqual(len(self.server.posts) - before, 1)
                self.assertFalse(self.server.exhausted)

    def test_ladder_exhausted_fails_cleanly(self):
        """When every retry fails: exit 1, one request per backoff step plus one, no assistant message saved."""
        self.ws.write_config(self.server, backoff="0.01,0.01")
        self.push(error(500, "down"), error(503, "down"), error(500, "still down"), text_stream("late"))
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(len(self.server.posts), 3)
        self.assertIn("retry 2/2", result.stderr)
        self.assertIn("still down", result.stderr)
        self.assertEqual([m["role"] for m in self.saved_messages()], ["system", "user"])

    def test_streams_cut_short_leave_no_half_message(self):
        """Replies that break off mid-stream are retried; if all break, nothing half-made is saved."""
        self.ws.write_config(self.server, backoff="0.01,0.01")
        broken = text_stream("a half-made answer that never ends", drop_after=700)
        self.push(broken, broken, broken)
        result = self.run_batch("go")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(len(self.server.posts), 3)
        self.assertIn("a half", result.stdout)   # the user saw the partial text...
        saved = self.saved_messages()             # ...but the conversation does not hold it
        self.assertEqual([m["role"] for m in saved], ["system", "user"])

    def test_dropped_connection_is_retried(self):
        """A connection closed without an answer is retried and the turn succeeds."""
        self.push(drop(), text_stream("after the drop"))
        result = self.run_ok()
        self.assertIn("after the drop", result.stdout)
        self.assertIn("retry 1/3", result.stderr)
        self.assertEqual(len(self.server.posts), 2)

    def test_timeout_is_retried(self):
        """A server that does not begin its answer within `first_byte_timeout` seconds is retried."""
        self.ws.write_config(self.server, first_byte_timeout=1)
        self.push(hang(30), text_stream("after the wait"))
        result = self.run_ok()
        self.assertIn("after the wait", result.stdout)
        self.assertIn("timeout", result.stderr)
        self.assertEqual(len(self.server.posts), 2)


class StreamingTests(BatchCase):
    """SSE parsing and printing, and the non-streamed equivalent."""

    def test_content_and_reasoning_content(self):
        """Content is printed; reasoning_content is printed between the reasoning markers, before it."""
        self.push(text_stream("Final answer.", reasoning="Let me think."))
        result = self.run_ok()
        self.assertEqual(result.stdout, "--- reasoning start ---\nLet me think.\n"
                                        "--- reasoning end ---\nFinal answer.\n")
        self.assertEqual(self.saved_messages()[-1], {"role": "assistant", "content": "Final answer."})

    def test_reasoning_field(self):
        """A `reasoning` delta (not reasoning_content) is shown between the same markers."""
        self.push(sse([chunk({"role": "assistant"}), chunk({"reasoning": "pondering"}),
                       chunk({"content": "done"}), chunk({}, finish_reason="stop")]))
        result = self.run_ok()
        self.assertEqual(result.stdout, "--- reasoning start ---\npondering\n--- reasoning end ---\ndone\n")

    def test_awkward_stream_framing(self):
        """Events cut anywhere (even inside a UTF-8 character), CRLF lines, no [DONE]: same text."""
        text = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e"
        cases = [{"split": 3}, {"split": 1}, {"crlf": True}, {"done": False}, {"space": False},
                 {"chunked": False}]
        for options in cases:
            with self.subTest(options=options):
                self.push(text_stream(text, **options))
                result = self.run_ok()
                self.assertEqual(result.stdout, text + "\n")
                self.assertEqual(self.saved_messages()[-1]["content"], text)

    def test_stops_at_done(self):
        """Nothing after `data: [DONE]` is shown or stored."""
        self.push(sse([chunk({"content": "before"}), "data: [DONE]\n\n", chunk({"content": " after"})],
                      done=False))
        result = self.run_ok()
        self.assertEqual(result.stdout, "before\n")
        self.assertEqual(self.saved_messages()[-1]["content"], "before")

    def test_reader_closing_stdout_stops_the_run_quietly(self):
        """`bantam prompt.txt | head -c 20`: when the reader goes away, bantam stops at once
        (no more requests or tools), prints no traceback, exits 141 (as SIGPIPE would) and the
        conversation is still autosaved."""
        self.push(text_stream("line one\n" * 20000, pieces=50),
                  tool_call_stream([("c1", "shell_exec", {"command": "touch ran.txt"})]))
        self.ws.write("prompt.txt", "go")
        proc = self.start_bantam("prompt.txt")
        self.assertEqual(proc.stdout.read(20), b"line one\nline one\nli")
        proc.stdout.close()
        self.assertEqual(proc.wait(timeout=30), 141)
        self.assertEqual(proc.stderr.read().decode(), "")
        self.assertEqual(len(self.server.posts), 1)
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "ran.txt")))
        self.assertEqual([m["role"] for m in self.read_autosave()["messages"]], ["system", "user"])

    def test_terminal_that_cannot_show_unicode(self):
        """On a Latin-1 terminal an emoji is shown as '?' instead of crashing the turn; the
        stored answer keeps the real characters."""
        self.push(text_stream("emoji \U0001F600 and \u65e5\u672c ok"))
        self.ws.write("prompt.txt", "go")
        result = self.run_bantam("prompt.txt", env={"PYTHONIOENCODING": "latin-1"})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "emoji ? and ?? ok\n")
        self.assertEqual(self.saved_messages()[-1]["content"], "emoji \U0001F600 and \u65e5\u672c ok")

    def test_stream_without_finish_or_done(self):
        """A chunked stream that ends properly but sends neither a finish_reason nor [DONE] (some
        small servers) is a complete answer; the same stream without chunked encoding, whose end
        is only the connection closing, is taken as dropped and asked again."""
        events = [chunk({"content": "all "}), chunk({"content": "there"})]
        for chunked, posts in ((True, 1), (False, 2)):
            with self.subTest(chunked=chunked):
                self.server.requests.clear()
                self.push(sse(events, done=False, chunked=chunked), *[text_stream("all there")] * (posts - 1))
                result = self.run_ok()
                self.assertEqual(len(self.server.posts), posts, result.stderr)
                self.assertEqual(self.saved_messages()[-1]["content"], "all there")
                self.assertEqual("retry" in result.stderr, posts == 2, result.stderr)
                self.assertFalse(self.server.exhausted)

    def test_garbage_in_the_stream_is_skipped_with_one_warning(self):
        """Lines that are not JSON (an HTML error page, a truncated object) are skipped: the
        good chunks still make the answer, and one warning is printed, not one per line."""
        garbage = ["data: <html>502 Bad Gateway</html>\n\n", 'data: {"choices": [{"del\n\n',
                   "data: not json at all\n\n"]
        self.push(sse([chunk({"content": "good "})] + garbage + [chunk({"content": "answer"})]))
        result = self.run_ok()
        self.assertEqual(result.stdout, "good answer\n")
        self.assertEqual(self.saved_messages()[-1]["content"], "good answer")
        warnings = [line for line in result.stderr.splitlines() if "not JSON" in line]
        self.assertEqual(len(warnings), 1, result.stderr)

    def test_tool_call_deltas_merged_by_index(self):
        """Interleaved fragments of two tool calls are put together by their index."""
        def call_start(index, call_id):
            return chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                          "function": {"name": "shell_exec", "arguments": ""}}]})

        def args(index, text):
            return chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})

        self.push(sse([chunk({"role": "assistant", "content": None}),
                       call_start(0, "call_a"), args(0, '{"comm'),
                       call_start(1, "call_b"), args(1, '{"command": '),
                       args(0, 'and": "echo A"}'), args(1, '"echo B"}'),
                       chunk({}, finish_reason="tool_calls")]),
                  text_stream("both ran"))
        self.run_ok()
        assistant = self.server.bodies[1]["messages"][2]
        self.assertEqual([(c["id"], c["function"]["name"], c["function"]["arguments"])
                          for c in assistant["tool_calls"]],
                         [("call_a", "shell_exec", '{"command": "echo A"}'),
                          ("call_b", "shell_exec", '{"command": "echo B"}')])
        self.assertEqual(self.tool_results(1), {"call_a": "A\n\n\nexit: 0", "call_b": "B\n\n\nexit: 0"})

    def test_non_streamed_reply(self):
        """stream=false: a plain JSON request; reasoning is printed between the markers, then the content."""
        self.ws.write_config(self.server, stream=False)
        self.push(completion("Plain answer.", reasoning="Quiet thought."))
        result = self.run_ok()
        self.assertIs(self.server.bodies[0]["stream"], False)
        self.assertEqual(result.stdout, "--- reasoning start ---\nQuiet thought.\n"
                                        "--- reasoning end ---\nPlain answer.\n")
        self.assertEqual(self.saved_messages()[-1], {"role": "assistant", "content": "Plain answer."})

    def test_streamed_and_non_streamed_agree(self):
        """The same script streamed and not streamed prints the same and stores the same messages."""
        calls = [shell_call("call_1", "echo differential"), ("call_2", "run_nothing", {"x": 1})]
        turns = [("I will look.", "need to check", calls), ("All done.", "wrap up", [])]
        runs = []
        for stream in (True, False):
            with self.subTest(stream=stream):
                self.ws.write_config(self.server, stream=stream)
                for content, reasoning, turn_calls in turns:
                    self.push(full_stream(content, reasoning, turn_calls) if stream
                              else completion(content, turn_calls or None, reasoning))
                result = self.run_ok("same prompt")
                runs.append((result.stdout, self.saved_messages()))
        self.assertEqual(runs[0][0], runs[1][0])
        self.assertEqual(runs[0][1], runs[1][1])
        self.assertEqual(runs[0][1][-1], {"role": "assistant", "content": "All done."})
        self.assertEqual([m["role"] for m in runs[0][1]],
                         ["system", "user", "assistant", "tool", "tool", "assistant"])
        self.assertEqual(runs[0][1][2]["reasoning_content"], "need to check")


class LoopTests(BatchCase):
    """AL: tool calls traced, validated, run, answered, until no calls or max_al_iterations."""

    def test_tool_call_traces_and_results(self):
        """A tool call prints its trace and result; the model then gets the tool message with its id."""
        self.push(tool_call_stream([shell_call("call_1", "echo traced")]), text_stream("finished"))
        result = self.run_ok()
        self.assertIn('[tool call: shell_exec({"command": "echo traced"})]\n'
                      "[tool result: shell_exec]\ntraced\n", result.stdout)
        self.assertTrue(result.stdout.endswith("finished\n"), result.stdout)
        second = self.server.bodies[1]["messages"]
        self.assertEqual(second[-1], {"role": "tool", "tool_call_id": "call_1",
                                      "content": "traced\n\n\nexit: 0"})
        self.assertEqual(second[-2]["tool_calls"][0]["function"]["arguments"], '{"command": "echo traced"}')

    def test_bad_tool_calls_are_explained_to_the_model(self):
        """Invalid JSON arguments and unknown tools give the model a tool message saying what was wrong."""
        cases = [  # (name, raw arguments, words the tool message must contain)
            ("shell_exec", '{"command": "echo', "not a valid JSON"),
            ("shell_exec", '["echo hi"]', "not a valid JSON"),
            ("launch_rockets", '{"target": "moon"}', "unknown tool"),
        ]
        for name, raw, expected in cases:
            with self.subTest(name=name, raw=raw):
                before = len(self.server.posts)
                self.push(tool_call_stream([("call_x", name, raw)]), text_stream("corrected"))
                result = self.run_ok()
                self.assertIn("[tool call: %s(" % name, result.stdout)
                self.assertIn("corrected", result.stdout)
                self.assertEqual(len(self.server.posts) - before, 2)
                content = self.tool_results()["call_x"]
                self.assertIn(expected, content)
                self.assertIn(name, content)

    def test_every_call_gets_one_answer(self):
        """Several calls in one reply (good, broken, unknown) each get exactly one tool message, in order."""
        self.push(tool_call_stream([shell_call("c1", "echo first"), ("c2", "shell_exec", "{oops"),
                                    ("c3", "nope", "{}"), shell_call("c4", "echo last")]),
                  tool_call_stream([shell_call("c5", "true")]),
                  text_stream("end"))
        self.run_ok()
        messages = self.saved_messages()
        self.assert_every_call_answered(messages)
        self.assertEqual([m["role"] for m in messages],
                         ["system", "user", "assistant"] + ["tool"] * 4 + ["assistant", "tool", "assistant"])
        self.assertEqual(self.tool_results()["c4"], "last\n\n\nexit: 0")

    def test_max_al_iterations_stops_the_loop(self):
        """max_al_iterations=2 stops after two model calls even if the model keeps calling tools
        (with max_repair_calls=0, no final-answer call: the spec's loop exactly); exit 3."""
        self.ws.write_config(self.server, max_al_iterations=2, max_repair_calls=0)
        self.push(*[tool_call_stream([shell_call("c%d" % i, "echo %d" % i)]) for i in range(4)])
        result = self.run_batch("do it")
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertEqual(len(self.server.posts), 2)
        self.assertIn("max_al_iterations=2", result.stderr)
        messages = self.saved_messages()
        self.assert_every_call_answered(messages)
        self.assertEqual(messages[-1]["role"], "tool")


class ShellExecTests(BatchCase):
    """shell_exec as the model sees it: output + "\\n\\nexit: CODE"."""

    def run_commands(self, commands, **cfg):
        """Run the commands as one reply's tool calls; return their results in order."""
        if cfg:
            self.ws.write_config(self.server, **cfg)
        calls = [shell_call("call_%d" % i, c) for i, c in enumerate(commands)]
        self.push(tool_call_stream(calls), text_stream("ok"))
        self.run_ok(timeout=30)
        results = self.tool_results()
        return [results["call_%d" % i] for i in range(len(commands))]

    def test_command_results(self):
        """Output, merged stderr, exit codes, empty stdin, pagers off, invalid UTF-8: one table."""
        cases = [  # (command, exact result)
            ("echo hello", "hello\n\n\nexit: 0"),
            ("printf 'a\\nb'", "a\nb\n\nexit: 0"),
            ("echo out; echo err >&2; echo out2", "out\nerr\nout2\n\n\nexit: 0"),
            ("exit 3", "\n\nexit: 3"),
            ("echo partial; false", "partial\n\n\nexit: 1"),
            ("echo \"$PAGER $GIT_PAGER\"", "cat cat\n\n\nexit: 0"),
            ("printf 'ok\\377\\376end'", "ok\ufffd\ufffdend\n\nexit: 0"),
            ("", "error: shell_exec needs a non-empty 'command' string"),
        ]
        results = self.run_commands([c for c, _ in cases])
        for (command, expected), result in zip(cases, results):
            with self.subTest(command=command):
                self.assertEqual(result, expected)

    def test_stdin_is_empty(self):
        """Commands read an empty stdin, not bantam's: `cat` and `read` return at once."""
        self.ws.write_config(self.server, shell_timeout=10)
        self.ws.write("prompt.txt", "read something")
        self.push(tool_call_stream([shell_call("c1", "cat"), shell_call("c2", 'read line; echo "read:$?"')]),
                  text_stream("ok"))
        proc = self.start_bantam("prompt.txt", stdin=subprocess.PIPE)   # an open, silent stdin
        self.assertEqual(proc.wait(timeout=60), 0, proc.stderr.read())
        self.assertEqual(self.tool_results(), {"c1": "\n\nexit: 0", "c2": "read:1\n\n\nexit: 0"})

    def test_missing_command_reports_shell_error(self):
        """A command that does not exist reports the shell's message and exit 127."""
        result, = self.run_commands(["no-such-command-xyz"])
        self.assertIn("no-such-command-xyz", result)
        self.assertTrue(result.endswith("\n\nexit: 127"), result)

    def test_own_process_group(self):
        """The command runs as the leader of its own process group, not in bantam's."""
        result, = self.run_commands(["echo $$ $(cut -d' ' -f5 /proc/$$/stat) $(cut -d' ' -f5 /proc/$PPID/stat)"])
        shell_pid, shell_group, bantam_group = result.split("\n")[0].split()
        self.assertEqual(shell_pid, shell_group)
        self.assertNotEqual(shell_group, bantam_group)

    def test_timeout_kills_the_group(self):
        """shell_timeout kills the whole group: partial output kept, a timed-out note, the child gone."""
        pid_file = os.path.join(self.ws.work, "child.pid")
        self.addCleanup(kill_if_sleep, pid_file)
        result, = self.run_commands(["echo partial; sh -c 'echo $$ > child.pid; exec sleep 100'; echo never"],
                                    shell_timeout=1)
        self.assertTrue(result.startswith("partial\n"), result)
        self.assertIn("timed out", result)
        self.assertNotIn("never", result)
        self.assertRegex(result, r"\n\nexit: -?\d+$")
        self.assertFalse(sleep_alive(pid_file), "the timed-out command's child still runs")

    def test_background_child_does_not_block(self):
        """`sleep 30 & echo hi` returns as soon as the shell exits, even though sleep holds the output open."""
        group_file = os.path.join(self.ws.work, "group.pid")
        self.addCleanup(kill_group_in, group_file)
        result, = self.run_commands(["echo $$ > group.pid; sleep 30 & echo hi"])   # run_ok guards with 30 s
        self.assertEqual(result, "hi\n\n\nexit: 0")


def read_pid(path):
    """The pid written in path, or None."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def sleep_alive(pid_file):
    """True if the pid in pid_file is a running (not zombie) sleep process."""
    pid = read_pid(pid_file)
    if pid is None:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"sleep" in cmdline and fields[1].split()[0] != "Z"


def kill_if_sleep(pid_file):
    """Cleanup: kill the sleep a test started, by its recorded pid, if it still runs."""
    if sleep_alive(pid_file):
        os.kill(read_pid(pid_file), signal.SIGKILL)


def kill_group_in(group_file):
    """Cleanup: kill the process group whose id a test command recorded (its background sleep)."""
    group = read_pid(group_file)
    if group:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass


class SubagentTests(BatchCase):
    """run_subagent: a fresh child conversation whose last answer is the tool result."""

    def test_child_runs_fresh_and_returns_its_last_answer(self):
        """The child gets only system + child note and the prompt; its last answer is the result;
        its output is railed."""
        self.ws.write("system.txt", "SYSTEM PROMPT")
        self.push(full_stream("Delegating.", calls=[("sub_1", "run_subagent", {"prompt": "count the files"})]),
                  full_stream("Child looking.", calls=[shell_call("child_1", "echo child-shell")]),
                  text_stream("child final answer"),
                  text_stream("parent wrap-up"))
        result = self.run_ok("parent task")
        child_first = self.server.bodies[1]["messages"]
        self.assertEqual(child_first, [
            {"role": "system", "content": "SYSTEM PROMPT\n\nImportant: this is a child agent"},
            {"role": "user", "content": "count the files"}])
        self.assertEqual([t["function"]["name"] for t in self.server.bodies[1]["tools"]],
                         ["shell_exec", "run_subagent"])
        self.assertEqual(self.tool_results(3), {"sub_1": "child final answer"})
        lines = result.stdout.splitlines()
        for text in ("Child looking.", "[tool call: shell_exec(", "child-shell", "child final answer"):
            with self.subTest(child_line=text):
                line = next(l for l in lines if text in l and "run_subagent" not in l)
                self.assertTrue(line.startswith(RAIL), line)
        for text in ("Delegating.", "[tool call: run_subagent(", "parent wrap-up"):
            with self.subTest(parent_line=text):
                line = next(l for l in lines if text in l)
                self.assertFalse(line.startswith(RAIL), line)
        self.assertEqual([m["role"] for m in self.saved_messages()],
                         ["system", "user", "assistant", "tool", "assistant"])

    def test_child_failure_is_a_tool_result(self):
        """When the child's model call fails, the parent gets an error tool message and goes on."""
        self.push(tool_call_stream([("sub_1", "run_subagent", {"prompt": "fail please"})]),
                  error(401, "child key rejected"),
                  text_stream("parent recovers"))
        result = self.run_ok()
        self.assertIn("parent recovers", result.stdout)
        self.assertIn("child key rejected", self.tool_results()["sub_1"])

    def test_subagents_nest_only_four_deep(self):
        """A model that delegates forever is stopped: the fifth nested run_subagent gets an
        error tool message instead of a new child, and the chain unwinds with answers."""
        calls = [tool_call_stream([("sub_%d" % d, "run_subagent", {"prompt": "delegate %d" % d})])
                 for d in range(1, 6)]
        self.push(*calls + [text_stream("answer %d" % d) for d in range(5, 0, -1)])
        result = self.run_ok()
        self.assertEqual(len(self.server.posts), 10)
        deepest = self.server.posts[5]["body"]["messages"]   # the 4th child, told no at the 5th call
        self.assertEqual(deepest[-1]["role"], "tool")
        self.assertIn("nest only 4 deep", deepest[-1]["content"])
        self.assertEqual(deepest[1]["content"], "delegate 4")
        self.assertIn("  \u2502   \u2502   \u2502   \u2502 [tool call: run_subagent", result.stdout)
        self.assertEqual(self.saved_messages()[-1]["content"], "answer 1")


if __name__ == "__main__":
    unittest.main()
