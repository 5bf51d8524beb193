"""Streams bounded by what they carry, and the endpoint a user typed wrong (issue 19).

Hostile servers, played by the real FakeServer against bantam as a real subprocess: keep-alive
comments or empty deltas for ever (before the first output, and after it), output that never
ends while max_turn_seconds runs out, a command that outlives the turn, 100 MB of reasoning,
megabytes of one call's arguments. And the endpoint written
with /chat/completions, with an empty or non-numeric port, a 404 and an HTML error page.

Endless bodies come from endless(): a response item whose pieces are a generator, played
one every `delay` seconds until bantam hangs up (or the server stops at the test's end).
"""

import itertools
import json
import os
import subprocess
import sys
import time

from tests.support import (
    BantamTestCase, bantam_argv, chunk, error, json_reply, sse, stop_process, text_stream,
    tool_call_stream)

MB = 1 << 20
COMMENT = b": keep-alive\n\n"
FAST = dict(first_byte_timeout=1, timeout=1, backoff="0.01,0.01,0.01")   # 3 retries


def event(obj):
    """One SSE event: `data: <json>` and a blank line."""
    return ("data: %s\n\n" % json.dumps(obj)).encode()


def peak_memory(pid):
    """The peak resident memory of a running process in MB (VmHWM), 0 once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
    except (OSError, StopIteration):
        return 0


def endless(pieces, delay=0.1):
    """An SSE response item (chunked) whose body is the iterable pieces (bytes, or dicts sent
    as events), one every delay seconds: without an end, until the client goes away."""
    item = sse([], done=False, delay=delay)
    item["pieces"] = (p if isinstance(p, bytes) else event(p) for p in pieces)
    return item


class BoundsCase(BantamTestCase):
    """Helpers: a batch run with a deadline, and what the model got back."""

    def setUp(self):
        """As BantamTestCase, and the server's recorded requests are dropped at the end (some
        hold megabytes; the test runner keeps every finished test case)."""
        super().setUp()
        self.addCleanup(lambda: self.server.requests.clear())

    def batch(self, code, timeout=40, prompt="do the task"):
        """Run `bantam -p prompt`; assert the exit status; (CompletedProcess, seconds)."""
        started = time.monotonic()
        result = self.run_bantam("-p", prompt, timeout=timeout)
        shown = "stdout:\n%s\nstderr:\n%s" % (result.stdout[-3000:], result.stderr[-3000:])
        self.assertEqual(result.returncode, code, shown)
        return result, time.monotonic() - started

    def watch_peak(self, proc, seconds):
        """Wait up to seconds for proc to end; its peak memory in MB, read while it ran."""
        peak, deadline = 0, time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < deadline:
            peak = max(peak, peak_memory(proc.pid))
            time.sleep(0.02)
        return peak

    def tool_results(self, body):
        """[(tool_call_id, content)] of the tool messages in a request body, in order."""
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


class StalledStreamTests(BoundsCase):
    """Keep-alives, blank lines and empty deltas are not progress."""

    def test_comments_forever_end_within_first_byte_timeout_and_the_retries(self):
        """`: keep-alive` every 0.1 s and nothing else, first_byte_timeout=1: each attempt
        ends after about a second, retried like a dropped stream, and the run gives up (exit 1)
        after its 3 retries. (bantam 1.1.0 waited as long as the comments came.)"""
        self.ws.write_config(self.server, **FAST)
        self.push(*[endless(itertools.repeat(COMMENT)) for _ in range(4)])
        result, seconds = self.batch(1)
        self.assertEqual(len(self.server.posts), 4)
        self.assertIn("no output for 1 s, only keep-alives (first_byte_timeout)", result.stderr)
        self.assertIn("first_byte_timeout", result.stderr)
        self.assertIn("gave up after 3 retries", result.stderr)
        self.assertLess(seconds, 30)

    def test_empty_deltas_and_blank_lines_forever_are_no_output_either(self):
        """A role chunk, then empty content deltas, empty tool-call fragments and blank lines
        for ever: no output, so first_byte_timeout ends each attempt."""
        empty = [chunk({"content": ""}), b"\n", chunk({"content": None, "tool_calls": []}), b"\r\n",
                 chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]})]
        pieces = lambda: itertools.chain([chunk({"role": "assistant", "content": ""})],
                                         itertools.cycle(empty))
        self.ws.write_config(self.server, **FAST)
        self.push(*[endless(pieces()) for _ in range(4)])
        result, _ = self.batch(1)
        self.assertEqual(len(self.server.posts), 4)
        self.assertIn("first_byte_timeout", result.stderr)

    def test_a_line_that_never_ends_is_no_output(self):
        """`data: {"choices": ...` trickling in a byte every 0.05 s, never a whole line: no
        output, so first_byte_timeout ends each attempt (1.1.0 read it for ever)."""
        head = b'data: {"choices": [{"index": 0, "delta": {"content": "'
        self.ws.write_config(self.server, **dict(FAST, backoff="0"))
        self.push(*[endless(itertools.chain([head], itertools.repeat(b"a")), delay=0.05)
                    for _ in range(2)])
        result, _ = self.batch(1)
        self.assertEqual(len(self.server.posts), 2)
        self.assertIn("(first_byte_timeout)", result.stderr)

    def test_content_then_comments_forever_is_a_stalled_stream(self):
        """Some text, then only comments: once the reply flows, timeout=1 s without output is
        a stalled stream, retried; each attempt shows its text; the run gives up (exit 1)."""
        pieces = lambda: itertools.chain([chunk({"content": "Hello"})], itertools.repeat(COMMENT))
        self.ws.write_config(self.server, **FAST)
        self.push(*[endless(pieces()) for _ in range(4)])
        result, _ = self.batch(1)
        self.assertEqual(len(self.server.posts), 4)
        self.assertIn("no output for 1 s, only keep-alives (timeout)", result.stderr)
        self.assertIn("Hello", result.stdout)

    def test_output_between_comments_keeps_a_slow_reply_alive(self):
        """Text every 0.4 s with comments in between, timeout=1: 3 s in all, never a stall."""
        words = ["one ", "two ", "three ", "four ", "five ", "six ", "seven"]
        pieces = [COMMENT, chunk({"content": ""})]
        for word in words:
            pieces += [chunk({"content": word}), COMMENT, COMMENT]
        pieces += [chunk({}, finish_reason="stop"), b"data: [DONE]\n\n"]
        self.ws.write_config(self.server, **FAST)
        self.push(endless(pieces, delay=0.2 / 1.5))
        result, _ = self.batch(0)
        self.assertEqual(result.stdout.strip(), "".join(words))
        self.assertEqual(len(self.server.posts), 1)
        self.assertNotIn("retry", result.stderr)


class TurnTimeTests(BoundsCase):
    """max_turn_seconds while a reply streams and while a command runs."""

    def test_max_turn_seconds_stops_a_reply_that_never_ends(self):
        """Text every 0.2 s for ever (real output: no stall), max_turn_seconds=2: the reply is
        abandoned after about 2 s, the budget stop is said, and the final-answer call (no
        tools) gives the answer: exit 3. Nothing of the endless reply is stored."""
        self.ws.write_config(self.server, max_turn_seconds=2, timeout=5, first_byte_timeout=5)
        self.push(endless(itertools.repeat(chunk({"content": "tick "})), delay=0.2),
                  text_stream("The final answer."))
        result, seconds = self.batch(3)
        self.assertIn("tick", result.stdout)
        self.assertTrue(result.stdout.rstrip().endswith("The final answer."), result.stdout[-500:])
        self.assertIn("max_turn_seconds=2", result.stderr)
        final = self.server.bodies[1]
        self.assertNotIn("tools", final)
        self.assertEqual([m["role"] for m in final["messages"]], ["system", "user"])
        saved = [m for m in self.read_autosave()["messages"] if m["role"] == "assistant"]
        self.assertEqual([m["content"] for m in saved], ["The final answer."])
        self.assertLess(seconds, 30)

    def test_max_turn_seconds_bounds_the_final_answer_too(self):
        """Issue 30: max_turn_seconds=2 stops a reply that never ends, and the final-answer
        call trickles text for ever too: it gets a few seconds (5), not its own
        final_answer_timeout, so the turn ends well before 2 + 60 s; exit 3."""
        self.ws.write_config(self.server, max_turn_seconds=2, timeout=5, first_byte_timeout=5)
        ticks = lambda: endless(itertools.repeat(chunk({"content": "tick "})), delay=0.2)
        self.push(ticks(), ticks())
        result, seconds = self.batch(3, timeout=90)
        self.assertIn("no final answer", result.stderr)
        self.assertEqual(len(self.server.posts), 2)
        self.assertLess(seconds, 15)

    def test_max_turn_seconds_stops_a_command_and_the_calls_after_it(self):
        """`sleep 60` with max_turn_seconds=2 (shell_timeout 120): killed when the turn's time
        is up, its result saying why; the next call of the reply is not run; exit 3."""
        self.ws.write_config(self.server, max_turn_seconds=2)
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo started; sleep 60"}),
                                    ("c2", "shell_exec", {"command": "touch ran.txt"})]),
                  text_stream("Stopped in time."))
        result, seconds = self.batch(3)
        results = dict(self.tool_results(self.server.bodies[1]))
        self.assertIn("started", results["c1"])
        self.assertIn("the turn's time ran out (max_turn_seconds=2)", results["c1"])
        self.assertIn("process group was killed", results["c1"])
        self.assertIn("not run", results["c2"])
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "ran.txt")))
        self.assertTrue(result.stdout.rstrip().endswith("Stopped in time."))
        self.assertLess(seconds, 30)

    def test_shell_timeout_is_said_to_the_model_and_on_screen(self):
        """`echo partial; sleep 30` with shell_timeout=1: the model reads that it timed out
        after 1 s, and so does the user, in the plain view and in the terminal view's exit
        line (bantam 1.2.0 showed only "exit -15" there)."""
        self.ws.write_config(self.server, shell_timeout=1)
        for render in ("never", "always"):
            with self.subTest(render=render):
                self.push(tool_call_stream([("c1", "shell_exec",
                                             {"command": "echo partial; sleep 30"})]),
                          text_stream("It hung."))
                result = self.run_bantam("-p", "go", "--set", "render=" + render)
                self.assertEqual(result.returncode, 0, result.stderr)
                (_, sent), = self.tool_results(self.server.bodies[-1])
                self.assertIn("partial\n\n[timed out after 1 s: the command's process group "
                              "was killed]\n\nexit: -", sent)
                self.assertIn("timed out after 1 s", result.stdout)
                if render == "always":
                    self.assertRegex(result.stdout, r"\nexit -\d+ \u00b7 \d+\.\d s \u00b7 "
                                                    r"timed out after 1 s\n")


class ReasoningBoundTests(BoundsCase):
    """max_reasoning: what is kept, shown and sent back of a reply's reasoning."""

    def test_reasoning_over_max_reasoning_is_cut_once(self):
        """5,000 characters of reasoning_content (DeepSeek) before a tool call, max_reasoning=
        1000: 1,000 are shown and sent back, the cut is said once."""
        self.ws.write_config(self.server, max_reasoning=1000)
        events = [chunk({"role": "assistant", "content": None})]
        events += [chunk({"reasoning_content": "r" * 100}) for _ in range(50)]
        events += tool_call_stream([("c1", "shell_exec", {"command": "echo hi"})])["pieces"][1:]
        self.push(sse(events, done=False), text_stream("done"))
        result, _ = self.batch(0)
        echoed = self.server.bodies[1]["messages"][2]
        self.assertEqual(echoed["reasoning_content"], "r" * 1000)
        self.assertEqual(result.stdout.count("r" * 1000), 1)
        self.assertNotIn("r" * 1001, result.stdout)
        cuts = result.stderr.count("cut at 1000 characters (max_reasoning)")
        self.assertEqual(cuts, 1, result.stderr)

    def test_mistral_thinking_parts_are_bounded_too(self):
        """Mistral's thinking as content parts, 5,000 characters, max_reasoning=1000: 1,000
        are shown, the cut is said once, the answer is whole (bantam 1.2.0 kept it all)."""
        self.ws.write_config(self.server, max_reasoning=1000)
        events = [chunk({"content": [{"type": "thinking", "thinking": [
            {"type": "text", "text": "t" * 100}]}]}) for _ in range(50)]
        events += [chunk({"content": [{"type": "text", "text": "The answer."}]}),
                   chunk({}, finish_reason="stop")]
        self.push(sse(events))
        result, _ = self.batch(0)
        self.assertEqual(result.stdout.count("t" * 1000), 1)
        self.assertNotIn("t" * 1001, result.stdout)
        self.assertIn("The answer.", result.stdout)
        self.assertEqual(result.stderr.count("cut at 1000 characters (max_reasoning)"), 1,
                         result.stderr)

    def test_reasoning_details_over_max_reasoning_are_not_sent_back(self):
        """OpenRouter's reasoning_details in fragments of one block, over max_reasoning in
        all: the reasoning text is cut, so none goes back (a block cut short is worthless)."""
        self.ws.write_config(self.server, max_reasoning=1000)
        events = [chunk({"role": "assistant", "content": None})]
        events += [chunk({"reasoning": "d" * 100, "reasoning_details": [
            {"type": "reasoning.text", "index": 0, "text": "d" * 100}]}) for _ in range(20)]
        events += tool_call_stream([("c1", "shell_exec", {"command": "echo hi"})])["pieces"][1:]
        self.push(sse(events, done=False), text_stream("done"))
        result, _ = self.batch(0)
        echoed = self.server.bodies[1]["messages"][2]
        self.assertNotIn("reasoning_details", echoed)
        self.assertNotIn("d" * 1001, result.stdout)
        self.assertIn("(max_reasoning)", result.stderr)

    def test_100_mb_of_reasoning_in_bounded_memory(self):
        """100 MB of reasoning_content (1 MB a chunk) before a tool call: bantam's peak memory
        stays far below it (bantam 1.1.0: 534 MB), and the next request, the session file and
        what was printed hold max_reasoning characters of it at most.

        The peak is VmHWM of /proc/PID/status, read while bantam runs: its own peak since it
        started (ru_maxrss would also count the test process it was forked from)."""
        big = event(chunk({"reasoning_content": "r" * MB}))
        tail = tool_call_stream([("c1", "shell_exec", {"command": "echo hi"})])["pieces"][1:]
        self.push(endless(itertools.chain([event(chunk({"role": "assistant", "content": None}))],
                                          itertools.repeat(big, 100), tail), delay=0),
                  text_stream("done"))
        out_path, err_path = self.ws.path("tmp", "out.txt"), self.ws.path("tmp", "err.txt")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(bantam_argv("-p", "think hard"), cwd=self.ws.work,
                                    env=self.ws.env(), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True)
        self.addCleanup(stop_process, proc)
        peak = self.watch_peak(proc, 120)   # a hang fails the test
        with open(err_path, encoding="utf-8") as f:
            stderr = f.read()
        self.assertEqual(proc.returncode, 0, stderr)
        print("\n  100 MB of reasoning: peak RSS %.1f MB" % peak, file=sys.stderr)
        self.assertLess(peak, 150, "bantam peaked at %.0f MB" % peak)
        self.assertLess(os.path.getsize(out_path), MB)
        self.assertEqual(stderr.count("the reasoning was cut at 262144 characters"), 1, stderr)
        second = self.server.posts[1]
        self.assertLess(len(second["raw"]), MB)
        self.assertEqual(len(second["body"]["messages"][2]["reasoning_content"]), 262144)
        sessions = self.ws.sessions_dir()
        for name in os.listdir(sessions):
            self.assertLess(os.path.getsize(os.path.join(sessions, name)), MB, name)


class CallBoundTests(BoundsCase):
    """The arguments a reply may hold."""

    def test_megabytes_of_arguments_are_cut(self):
        """4 MB of one call's arguments in 64-byte fragments (adding each fragment to one string
        took minutes): cut at 1 MiB, so the call is not run (its JSON is broken) and stored
        with "{}"; the cut is said; the next request stays small."""
        args = json.dumps({"command": "echo " + "x" * (4 * MB)})
        head = [chunk({"role": "assistant", "content": None}),
                chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                       "function": {"name": "shell_exec", "arguments": ""}}]})]
        pieces = (chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 64]}}]})
                  for i in range(0, len(args), 64))   # made as sent: the test process stays small
        tail = [chunk({}, finish_reason="tool_calls"), b"data: [DONE]\n\n"]
        self.push(endless(itertools.chain(head, pieces, tail), delay=0), text_stream("done"))
        result, _ = self.batch(0, timeout=120)
        body = self.server.bodies[1]
        self.assertEqual(body["messages"][2]["tool_calls"][0]["function"]["arguments"], "{}")
        self.assertIn("not a valid JSON object", self.tool_results(body)[0][1])
        self.assertLess(len(self.server.posts[1]["raw"]), MB)
        self.assertIn("cut at 1048576 characters", result.stderr)


class EndpointTests(BoundsCase):
    """The endpoint a user typed wrong."""

    def test_chat_completions_at_the_end_is_dropped_with_a_note(self):
        """-e .../v1/chat/completions posts to .../v1/chat/completions (not twice), saying so
        in one line; so does the Azure form with its query string after it."""
        self.push(text_stream("hi"), text_stream("hi again"))
        result = self.run_bantam("-e", self.server.url + "/chat/completions", "-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.server.posts[0]["path"], "/v1/chat/completions")
        notes = [line for line in result.stderr.splitlines() if "/chat/completions" in line]
        self.assertEqual(len(notes), 1, result.stderr)
        self.assertIn("using " + self.server.url, notes[0])
        azure = self.server.url + "/chat/completions/?api-version=1"
        self.ws.write_config(self.server, endpoint=azure)
        result = self.run_bantam("-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.server.posts[1]["path"], "/v1/chat/completions?api-version=1")
        self.assertIn("model.cfg:1: endpoint:", result.stderr)

    def test_an_empty_or_wrong_port_is_a_config_error(self):
        """http://127.0.0.1:/v1 (empty port), a port that is not a number: exit 2,
        one line naming where it was set, no request."""
        for url in ("http://127.0.0.1:/v1", "http://127.0.0.1:80a/v1", "http://127.0.0.1: 80/v1"):
            with self.subTest(url=url):
                result = self.run_bantam("-e", url, "-p", "hi")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertIn("--endpoint: endpoint:", result.stderr)
                self.assertIn("port number", result.stderr)
        self.ws.write_config(self.server, endpoint="http://127.0.0.1:/v1")
        result = self.run_bantam("-p", "hi")
        self.assertEqual(result.returncode, 2)
        self.assertIn("model.cfg:1: endpoint:", result.stderr)
        self.assertEqual(self.server.requests, [])

    def test_404_names_the_url_and_the_setting(self):
        """A 404 says the URL it posted to and which setting chose the endpoint: the file and
        line, the variable, or the command line."""
        wrong = self.server.url.replace("/v1", "/api")
        self.push(*[error(404, "no such route") for _ in range(3)])
        path = self.ws.write_config(self.server, endpoint=wrong)
        runs = [(self.run_bantam("-p", "hi"), path + ":1"),
                (self.run_bantam("-e", wrong, "-p", "hi"), "flag")]
        self.ws.write_config(self.server, endpoint=None)
        result = self.run_bantam("-p", "hi", env={"BANTAM_ENDPOINT": wrong})
        runs.append((result, "BANTAM_ENDPOINT"))
        for result, source in runs:
            with self.subTest(source=source):
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn("HTTP 404: no such route", result.stderr)
                self.assertIn("POST %s/chat/completions" % wrong, result.stderr)
                self.assertIn("check endpoint, from %s, and model" % source, result.stderr)



DEEP = b"[" * 200000 + b"]" * 200000


class HostileBytesTests(BoundsCase):
    """No byte from a server ends in a traceback (issue 30): a one-line error or a warning."""

    def assertClean(self, result):
        """No traceback on stderr; every stderr line is one of bantam's."""
        self.assertNotIn("Traceback", result.stderr)
        self.assertNotIn("RecursionError", result.stderr)

    def test_deep_nesting_anywhere(self):
        """200,000 nested [ ] as an SSE event, as a whole JSON reply, as an error body and
        as a tool call's arguments: bantam goes on or fails in one line, never a traceback."""
        self.ws.write_config(self.server, backoff="0.01")
        deep_args = chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                            "function": {"name": "shell_exec",
                                                         "arguments": DEEP.decode()}}]})
        cases = [
            ([sse([b"data: " + DEEP + b"\n\n", chunk({"content": "after"})])], 0),
            ([{"__raw_json__": True}], None),
            ([error(400, body=DEEP)], 2),
            ([sse([deep_args, chunk({}, "tool_calls")]), text_stream("fixed")], 0),
        ]
        nonstream = json_reply(None)
        nonstream["pieces"] = [b'{"choices": ' + DEEP + b"}"]
        cases[1] = ([nonstream, nonstream], None)
        for script, code in cases:
            with self.subTest(script=str(script)[:60]):
                self.push(*script)
                result = self.run_bantam("-p", "hi", "--set", "stream=%s" % (
                    "false" if script[0] is nonstream else "true"), timeout=60)
                self.assertClean(result)
                if code is not None:
                    self.assertEqual(result.returncode, code, result.stderr[-2000:])
                self.assertLessEqual(len(result.stderr.strip().splitlines()), 4, result.stderr)
                while self.server.pending:
                    self.server._script.popleft()

    def test_random_events_never_crash(self):
        """Random and adversarial events (huge numbers, lone surrogates, invalid UTF-8, odd
        types where objects belong): a clean line each time, never a traceback."""
        import random
        rng = random.Random(30)
        odd = [b'{"choices": [{"delta": {"content": 1e999999}}]}', b'{"choices": 7}',
               b'{"choices": [{"delta": "x"}]}', b'{"choices": [{"delta": {"tool_calls": 5}}]}',
               b'{"choices": [{"delta": {"content": "\\ud800"}}]}', b"\xff\xfe\x00garbage",
               b'{"choices": [{"delta": {"tool_calls": [{"index": "a"}]}}]}', b"9" * 5000,
               b'{"choices": [{"delta": {"content": ["x"]}}]}', b'{"error": 5}', b'[]', b'""']
        self.ws.write_config(self.server, backoff="0.01")
        for n in range(12):
            events = [b"data: " + rng.choice(odd) + b"\n\n" for _ in range(rng.randint(1, 4))]
            self.push(sse(events + [chunk({"content": "ok"})]), text_stream("ok"))
            with self.subTest(n=n, events=events):
                result = self.run_bantam("-p", "hi", timeout=60)
                self.assertClean(result)
                self.assertIn(result.returncode, (0, 1, 2), result.stderr[-2000:])
            while self.server.pending:
                self.server._script.popleft()

    def test_an_event_over_16_mb_fails_in_bounded_memory(self):
        """One `data:` line of 24 MB (a string that never ends): exit 2 in one line naming the
        bound, and bantam's peak memory stays a small multiple of it (1.2.0: 522 MB for 10 MB)."""
        piece = b"x" * MB
        self.push(endless(itertools.chain([b'data: {"choices": [{"delta": {"content": "'],
                                          itertools.repeat(piece, 24)), delay=0))
        err_path = self.ws.path("tmp", "err.txt")
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(bantam_argv("-p", "hi"), cwd=self.ws.work, env=self.ws.env(),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True)
        self.addCleanup(stop_process, proc)
        peak = self.watch_peak(proc, 60)
        with open(err_path, encoding="utf-8") as f:
            stderr = f.read()
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertEqual(stderr, "error: the server sent a stream event over 16 MB\n")
        self.assertLess(peak, 120, "bantam peaked at %.0f MB" % peak)
