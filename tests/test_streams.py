"""bantam's own streams when they are not what a program expects: stdout full or closed, stderr
full or closed, stdin closed, Python's output unbuffered (PYTHONUNBUFFERED=1), and the results a
tool reports as errors. A real bantam.py runs under bash with each redirection."""

import json
import shlex
import subprocess

from tests.support import (
    BantamTestCase, Pty, _env_for, bantam_argv, error, text_stream, tool_call_stream)


class StreamTests(BantamTestCase):
    """What a script sees when bantam's standard streams are broken."""

    def shell(self, redirect, *args, env=None):
        """Run bantam with args under bash, followed by redirect (e.g. '>/dev/full')."""
        command = " ".join(shlex.quote(a) for a in bantam_argv(*args)) + " " + redirect
        return subprocess.run(["bash", "-c", command], cwd=self.ws.work, env=_env_for(self.ws, env),
                              capture_output=True, text=True, timeout=60)

    def test_a_full_stdout_is_an_error_not_a_silent_success(self):
        """-q, plain and --jsonl to /dev/full: exit 1 and one line naming the cause."""
        for mode in ("-q", "--set=color=never", "--jsonl"):
            with self.subTest(mode=mode):
                self.push(text_stream("the answer"))
                result = self.shell(">/dev/full", mode, "-p", "hi")
                self.assertEqual(result.returncode, 1, result.stderr)
                if mode != "--jsonl":   # (--jsonl's errors are events, on that stdout)
                    self.assertIn("error: cannot write the output: No space left on device",
                                  result.stderr)
                self.assertNotIn("Traceback", result.stderr)

    def test_a_failing_stderr_leaves_the_answer_on_stdout(self):
        """A retry's line cannot be written (stderr is /dev/full): the answer still comes, exit 0."""
        self.push(error(500, "busy"), text_stream("THE ANSWER"))
        result = self.shell("2>/dev/full", "-q", "--set", "backoff=0.01", "-p", "hi")
        self.assertEqual((result.returncode, result.stdout), (0, "THE ANSWER\n"))

    def test_closed_stdin_and_stderr_are_nothing_to_read_or_write(self):
        """<&- and 2>&-: the run goes on as with /dev/null (once a traceback, exit 1)."""
        for redirect in ("<&-", "2>&-"):
            with self.subTest(redirect=redirect):
                self.push(text_stream("answered"))
                result = self.shell(redirect, "-q", "-p", "hi")
                self.assertEqual((result.returncode, result.stdout), (0, "answered\n"))
                self.assertNotIn("Traceback", result.stderr)

    def test_a_closed_stdout_stops_before_any_request(self):
        """>&-: exit 2 (the same run fails the same way again), one line, nothing sent."""
        result = self.shell(">&-", "-q", "-p", "hi")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, "error: stdout is closed: there is nowhere to write the "
                                        "answer\n")
        self.assertEqual(self.server.requests, [])

    def test_unbuffered_output_to_a_reader_that_leaves_is_exit_141(self):
        """PYTHONUNBUFFERED=1 (set in many container images): a long answer piped to a reader
        that stops early gives 141, as without it; a short write once lost the rest, exit 0."""
        answer = "\n".join("line %d" % i for i in range(200000))
        for mode in ("-q", "--set=color=never"):
            with self.subTest(mode=mode):
                self.push(text_stream(answer, pieces=65536))
                result = self.shell("| (sleep 0.3; head -1 >/dev/null); exit ${PIPESTATUS[0]}",
                                    mode, "-p", "hi", env={"PYTHONUNBUFFERED": "1"})
                self.assertEqual(result.returncode, 141, result.stderr)


class ToolErrorTests(BantamTestCase):
    """A tool's own error is reported as one (the spec: red for tool errors)."""

    def test_a_tool_result_that_is_an_error_is_not_ok(self):
        """shell_exec with an empty command answers "error: ..." : its tool_result has ok false;
        a command that ran, even one that failed, is ok (its exit code says the rest)."""
        calls = [("c1", "shell_exec", {"command": " "}), ("c2", "shell_exec", {"command": "exit 3"})]
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_bantam("--jsonl", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        events = [json.loads(line) for line in result.stdout.splitlines()]
        results = {e["id"]: e for e in events if e["type"] == "tool_result"}
        self.assertFalse(results["c1"]["ok"])
        self.assertTrue(results["c1"]["content"].startswith("error:"))
        self.assertTrue(results["c2"]["ok"])


class InputBytesTests(BantamTestCase):
    """Prompts whose bytes are not UTF-8, from stdin or an argument; -o that cannot be written."""

    def test_bytes_that_are_not_utf8_are_sent_as_replacement_characters(self):
        """stdin and -p: an invalid byte becomes U+FFFD in the request (a lone surrogate once
        went out, which servers refuse: HTTP 400), and a BOM on stdin is dropped."""
        self.push(text_stream("one"), text_stream("two"))
        stdin = StreamTests.shell(self, "< <(printf '\\xef\\xbb\\xbfsay hi \\xff')", "-q", "-")
        self.assertEqual((stdin.returncode, stdin.stdout), (0, "one\n"), stdin.stderr)
        argv = StreamTests.shell(self, "", "-q", "-p", b"caf\xe9".decode("utf-8", "surrogateescape"))
        self.assertEqual((argv.returncode, argv.stdout), (0, "two\n"), argv.stderr)
        prompts = [b["messages"][-1]["content"] for b in self.server.bodies]
        self.assertEqual(prompts, ["say hi \ufffd", "caf\ufffd"])


class NoAnswerTests(BantamTestCase):
    """A batch turn that ends without an answer."""

    def test_a_continued_conversation_never_prints_an_earlier_answer(self):
        """-c -q whose turn gets only empty replies: nothing on stdout (the earlier turn's
        answer was once printed as this one's), exit 1, and it is said."""
        self.push(text_stream("the first answer"))
        first = self.run_bantam("-q", "-p", "one")
        self.assertEqual((first.returncode, first.stdout), (0, "the first answer\n"))
        self.push(*[text_stream("") for _ in range(3)])
        second = self.run_bantam("-c", "-q", "-p", "two")
        self.assertEqual((second.returncode, second.stdout), (1, ""))
        self.assertIn("[no answer: the turn ended without one]", second.stderr)


class LiveOutputTests(BantamTestCase):
    """A command's output as it is shown live (tool_output events): split reads."""

    def test_a_secret_or_a_character_split_between_reads_is_shown_whole(self):
        """The key printed in two writes 0.3 s apart is *** on screen, never in clear, and an
        e-acute split between two writes is one character, not two U+FFFD."""
        self.ws.write_config(self.server, api_key="sk-live-secret-98765")
        command = ("printf 'key: sk-live-'; sleep 0.3; printf 'secret-98765 caf\\303'; sleep 0.3; "
                   "printf '\\251\\n'")
        self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]), text_stream("ok"))
        result = self.run_bantam("--jsonl", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        events = [json.loads(line) for line in result.stdout.splitlines()]
        shown = "".join(e["text"] for e in events if e["type"] == "tool_output")
        self.assertEqual(shown, "key: *** caf\u00e9\n")
        self.assertGreater(len([e for e in events if e["type"] == "tool_output"]), 1)


class TerminalStreamTests(BantamTestCase):
    """At a terminal, with stderr sent somewhere that fails."""

    def test_a_failing_stderr_leaves_the_terminal_its_answers(self):
        """stdout a terminal, stderr /dev/full: a retry's line cannot be written, and the
        answers still show on the terminal, turn after turn (a failing stderr once took the
        terminal's stdout with it)."""
        self.push(error(500, "busy"), text_stream("first answer"), text_stream("second answer"))
        self.ws.write_config(self.server, backoff="0.01")
        command = " ".join(shlex.quote(a) for a in bantam_argv()) + " 2>/dev/full"
        term = Pty(["bash", "-c", command], cwd=self.ws.work, env=_env_for(self.ws, None))
        self.addCleanup(term.kill)
        term.expect("> ")
        term.sendline("one")
        term.expect("first answer")
        term.expect("> ")
        term.sendline("two")
        term.expect("second answer")
        term.expect("> ")
        self.leave(term)
