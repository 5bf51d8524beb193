"""What a new user trips on in the first hour (issue 20): the command line (a prompt as the
argument, a quiet -q, the token line and the usage key, -o's last line, a stdin that
never closes, a prompt larger than the context window) and first run and mistakes (no
config at all, a typo in model.cfg, /model with a name the server does not list).

bantam.py runs as a real subprocess, or on a real pseudo-terminal, against the scripted
FakeServer; the checks are what is printed, what the server got and what is on disk.
"""

import json
import os
import select
import subprocess
import time
import unittest

from tests.support import (
    PROMPT_LINE, BantamTestCase, chunk, error, read_text, sse, strip_ansi, text_stream,
    tool_call_stream)

TOKEN_LINE = "[test-model:"


def shell_call(call_id, command):
    """A (id, name, args) tool call of shell_exec."""
    return (call_id, "shell_exec", {"command": command})


class FirstHourCase(BantamTestCase):
    """Helpers: the user messages the server got, a usage error, the REPL on a terminal."""

    def user_texts(self, request=-1):
        """The contents of the user messages of a request the server got."""
        return [m["content"] for m in self.server.bodies[request]["messages"] if m["role"] == "user"]

    def assert_one_line_error(self, result, *expected):
        """Exit 2, nothing on stdout, one line on stderr holding every expected text, no POST."""
        self.assertEqual(result.returncode, 2, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        self.assertEqual(result.stdout, "")
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, "exactly one line on stderr:\n" + result.stderr)
        for text in expected:
            self.assertIn(text, lines[0])
        self.assertEqual(self.server.posts, [], "no request may be sent")
        return lines[0]

    def repl(self, *args, cols=100, env=None):
        """bantam's REPL on a terminal cols wide, at its first prompt."""
        term = self.pty(*args, cols=cols, env=env)
        term.expect(PROMPT_LINE)
        return term

    def typed(self, term, line, *expected):
        """Type a line at the REPL; the text shown until the next prompt, without escapes."""
        return strip_ansi(self.type_line(term, line, *expected).replace("\r", ""))


class PromptArgumentTests(FirstHourCase):
    """`bantam "what is in this folder"`: an argument that names no file and does not look
    like a path is the prompt; one that looks like a path keeps the error."""

    def test_an_argument_that_is_not_a_path_is_the_prompt(self):
        """A sentence, a question and a single word without '/' or an extension are sent as
        the prompt, as -p would send them."""
        for text in ("what is in this folder", "why?", "hello", "what is 2.5 times 2?"):
            with self.subTest(text=text):
                self.push(text_stream("answered: " + text))
                result = self.run_bantam(text)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("answered: " + text, result.stdout)
                self.assertEqual(self.user_texts()[-1], text)

    def test_piped_stdin_joins_an_argument_prompt_as_with_p(self):
        """`git diff | bantam "review this"`: the piped text is added as context, as with -p."""
        self.push(text_stream("reviewed"))
        result = self.run_bantam("review this", input="diff --git a b\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.user_texts()[-1], "review this\n\n<stdin>\ndiff --git a b\n</stdin>")

    def test_an_existing_file_is_still_read(self):
        """A file that exists is the prompt file, even with a space in its name."""
        self.ws.write("my prompt", "the file's prompt")
        self.push(text_stream("from the file"))
        result = self.run_bantam("my prompt")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.user_texts()[-1], "the file's prompt")

    def test_a_missing_path_keeps_the_error(self):
        """A missing argument that looks like a path (an extension, a '/') is an error, exit 2."""
        for path in ("notes.txt", "src/task", "./prompt"):
            with self.subTest(path=path):
                result = self.run_bantam(path)
                self.assert_one_line_error(result, "%s: cannot read prompt file" % path)


class QuietTests(FirstHourCase):
    """-q: stdout the final answer only, stderr only problems."""

    def test_quiet_stderr_is_empty_when_nothing_went_wrong(self):
        """Tool calls, their output, the answer's stream and the token line stay off stderr."""
        self.push(tool_call_stream([shell_call("call_1", "echo tool-output-marker")]),
                  text_stream("The final answer."))
        result = self.run_bantam("-q", "-p", "do it")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "The final answer.\n")
        self.assertEqual(result.stderr, "")

    def test_quiet_stderr_has_the_problems(self):
        """A retry and a cut reply (a warning) reach stderr under -q; the answer does not."""
        cut = sse([chunk({"role": "assistant", "content": "Cut short"}), chunk({}, finish_reason="length")])
        self.push(error(500, "server hiccup"), cut)
        result = self.run_bantam("-q", "-p", "go")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, "Cut short\n")
        self.assertIn("retry 1/3", result.stderr)
        self.assertNotIn("Cut short", result.stderr)
        self.assertEqual(len(result.stderr.splitlines()), 2, result.stderr)

    def test_quiet_on_a_terminal_shows_the_answer_once(self):
        """On a terminal (stdout and stderr the same screen) the answer appears once."""
        self.push(text_stream("Only once here."))
        term = self.pty("-q", "-p", "go")
        self.assertEqual(term.wait(), 0, term.output)
        self.assertEqual(strip_ansi(term.output).replace("\r", ""), "Only once here.\n")


class TokenLineTests(FirstHourCase):
    """The token line: on stderr in batch mode and in the REPL; usage=false turns it off."""

    def test_batch_token_line_on_stderr_and_usage_false(self):
        """Without -q the token line is on stderr, never stdout; usage=false leaves it out."""
        self.push(text_stream("counted"))
        result = self.run_bantam("-p", "go")
        self.assertIn(TOKEN_LINE, result.stderr)
        self.assertNotIn(TOKEN_LINE, result.stdout)
        self.push(text_stream("not counted"))
        result = self.run_bantam("-p", "go", "--set", "usage=false")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("not counted", result.stdout)
        self.assertEqual(result.stderr, "")

    def test_repl_token_line_and_usage_false(self):
        """The REPL shows the token line after a turn; with usage=false in model.cfg it does not."""
        self.push(text_stream("one"), text_stream("two"))
        term = self.repl()
        self.assertIn(TOKEN_LINE, self.typed(term, "first", "one"))
        self.leave(term)
        self.ws.write_config(self.server, usage=False)
        term = self.repl()
        out = self.typed(term, "second", "two")
        self.assertNotIn(TOKEN_LINE, out)
        self.assertNotIn("unknown config key", strip_ansi(term.output))
        self.leave(term)


class QuietAnswerTests(FirstHourCase):
    """-q's answer is text for a file (`-q > FILE`): it ends with a newline."""

    def test_quiet_answer_ends_with_a_newline(self):
        """An answer without a final line break gets one on stdout; one with it keeps one."""
        for answer in ("no line break", "has one\n"):
            with self.subTest(answer=answer):
                self.push(text_stream(answer))
                result = self.run_bantam("-q", "-p", "go")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, answer.rstrip("\n") + "\n")


class StdinTests(FirstHourCase):
    """A stdin that never closes is named on stderr; one that ends at once goes on silently."""

    def read_stderr_until(self, proc, text, timeout=20):
        """What proc wrote on stderr until text appeared (or timeout, or its end)."""
        seen, deadline = b"", time.monotonic() + timeout
        while text.encode() not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 0.2)[0]:
                data = os.read(proc.stderr.fileno(), 4096)
                if not data:
                    break
                seen += data
        return seen.decode("utf-8", "replace")

    def test_an_empty_stdin_that_ends_at_once_says_nothing(self):
        """An empty pipe that is closed at once: no note, the prompt goes as it is."""
        self.push(text_stream("quiet start"))
        result = self.run_bantam("-p", "hi", "--set", "usage=false", input="")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        self.assertEqual(self.user_texts()[-1], "hi")


class PromptSizeTests(FirstHourCase):
    """A prompt larger than the model's context window stops before any request."""

    def setUp(self):
        """The key says 1000 tokens; the server reports 4000 for test-model, which a window
        you set wins over (issue 30)."""
        super().setUp()
        self.server.models = {"object": "list", "data": [{"id": "test-model", "context_length": 4000}]}
        self.ws.write_config(self.server, context_window=1000)

    def test_piped_input_larger_than_the_window(self):
        """-p with 8000 piped characters (about 2000 tokens) against 1000: exit 2, both sizes."""
        result = self.run_bantam("-p", "summarize", input="x" * 8000)
        line = self.assert_one_line_error(result, "context window")
        self.assertRegex(line, r"\b20\d\d tokens")
        self.assertIn("1000 tokens", line)

    def test_prompt_file_larger_than_the_window(self):
        """A prompt file over the window: exit 2, and a file that fits is sent."""
        self.ws.write("big.txt", "word " * 1000)
        self.assert_one_line_error(self.run_bantam("big.txt"), "1250 tokens", "1000 tokens")
        self.ws.write("fits.txt", "word " * 600)
        self.push(text_stream("fits"))
        result = self.run_bantam("fits.txt")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.server.posts), 1)


class FirstRunTests(FirstHourCase):
    """No key, no model.cfg, the default endpoint: say what is missing and how to fix it."""

    FIXES = ("OPENAI_API_KEY", "~/.bantam/model.cfg", "-e")

    def setUp(self):
        """No config file at all (and ws.env() sets no key)."""
        super().setUp()
        os.remove(self.ws.write_config(self.server))

    def test_batch_stops_with_the_three_fixes(self):
        """Batch mode: exit 2 with one line naming the key variable, model.cfg and -e."""
        line = self.assert_one_line_error(self.run_bantam("-p", "hi"), *self.FIXES)
        self.assertIn("no API key", line)

    def test_repl_says_it_at_start(self):
        """The REPL says it before the first prompt, at 100 and at 40 columns."""
        for cols in (100, 40):
            with self.subTest(cols=cols):
                term = self.repl(cols=cols)
                rows = strip_ansi(term.output).replace("\r", "").split("\n")
                for text in self.FIXES:
                    self.assertIn(text, " ".join(rows))
                self.leave(term)

    def test_a_local_server_or_a_key_is_enough(self):
        """With -e (no key, no file), or a model.cfg without a key, the run goes ahead."""
        self.push(text_stream("local one"), text_stream("local two"))
        result = self.run_bantam("-e", self.server.url, "-m", "test-model", "-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("no API key", result.stderr)
        self.ws.write_config(self.server, api_key=None)
        result = self.run_bantam("-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(self.server.posts), 2)


    def watch(self):
        """A server to be HTTPS_PROXY, and that env: a connection bantam opens to the default
        endpoint (https://api.openai.com) reaches it, and is counted, instead of the internet."""
        proxy = self.make_server()
        return proxy, {"HTTPS_PROXY": "http://127.0.0.1:%d" % proxy.port}

    def test_a_model_cfg_without_a_key_stops_too(self):
        """A model.cfg naming a model but no key nor endpoint: exit 2 with the fixes, and no
        connection opened to the default endpoint."""
        self.ws.write_config(None, api_key=None)
        proxy, env = self.watch()
        line = self.assert_one_line_error(self.run_bantam("-p", "hi", env=env), *self.FIXES)
        self.assertIn("no API key for https://api.openai.com/v1", line)
        self.assertIn("/cfg api_key KEY", line)
        self.assertNotIn("--init", line)
        self.assertEqual(proxy.connections, 0)

    def test_repl_sends_no_prompt_until_an_endpoint_is_set(self):
        """In the REPL a prompt with no key for the default endpoint is refused in one line,
        nothing is connected to or saved; after /endpoint the next prompt goes there."""
        proxy, env = self.watch()
        term = self.repl(cols=80, env=env)
        out = " ".join(self.typed(term, "hi there", "nothing is sent").split())   # (wrapped)
        self.assertIn("no API key for https://api.openai.com/v1", out)
        self.assertIn("/cfg api_key KEY", out)
        self.assertEqual(proxy.connections, 0)
        self.assertFalse(os.path.exists(os.path.join(self.ws.sessions_dir(), "autosave.json")))
        self.typed(term, "/endpoint " + self.server.url, "saved in")
        self.push(text_stream("hello from the local server"))
        self.typed(term, "hi again", "hello from the local server")
        chats = [r["body"] for r in self.server.posts if r["path"].endswith("/chat/completions")]
        self.assertEqual([m["content"] for m in chats[0]["messages"] if m["role"] == "user"],
                         ["hi again"])
        self.leave(term)


class ConfigTypoTests(FirstHourCase):
    """A mistyped key in model.cfg is named in a one-line warning, and the run goes on."""

    def test_typo_is_warned(self):
        """modle=... warns once, naming the file and line; the run goes on."""
        path = self.ws.write_config(self.server, modle="gpt-5")
        self.push(text_stream("ok"))
        result = self.run_bantam("-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        warned = [line for line in result.stderr.splitlines() if "'modle'" in line]
        self.assertEqual(len(warned), 1, result.stderr)
        self.assertIn("unknown config key 'modle' (ignored)", warned[0])
        self.assertIn(path, warned[0])


class ModelCommandTests(FirstHourCase):
    """/model NAME with a name the server does not list: this session only, not saved."""

    def test_unlisted_model_is_used_but_not_saved(self):
        """gpt-5 (not listed) gets a warning and the next request; the config file keeps its
        model; /model still lists the server's models; a listed name is still saved."""
        self.server.models = {"data": [{"id": "test-model"}, {"id": "big-model"}]}
        path = self.ws.write_config(self.server)
        before = read_text(path)
        self.push(text_stream("from gpt-5"), text_stream("from big"))
        term = self.repl()
        out = self.typed(term, "/model gpt-5", "gpt-5 is not among the server's models")
        self.assertIn("not saved", out)
        self.typed(term, "hi", "from gpt-5")
        self.assertEqual(self.server.bodies[0]["model"], "gpt-5")
        self.assertEqual(read_text(path), before)
        out = self.typed(term, "/model", "/model <name>")
        self.assertIn("  test-model", out)
        self.assertIn("  big-model", out)
        self.typed(term, "/model big-model", "saved in")
        self.typed(term, "again", "from big")
        self.assertEqual(self.server.bodies[-1]["model"], "big-model")
        self.leave(term)
        self.assertIn("model=big-model\n", read_text(path))
        self.assertNotIn("gpt-5", read_text(path))

    def test_model_is_saved_where_it_counts_at_the_next_start(self):
        """Issue 30: a trusted folder's model.cfg sets model; /model gpt-5 (unlisted: this
        session only), then /model big-model: written to the folder's model.cfg, which the
        next start reads, not to ~/.bantam/model.cfg, which the folder's file overrides."""
        self.server.models = {"data": [{"id": "test-model"}, {"id": "big-model"}]}
        own = self.ws.write_config(self.server)
        before = read_text(own)
        folder = self.ws.write("model.cfg", "model=test-model\n")
        with open(os.path.join(self.ws.home, ".bantam", "folders.json"), "w") as f:
            json.dump({os.path.realpath(self.ws.work): {"trusted": True}}, f)
        term = self.repl()
        self.typed(term, "/model gpt-5", "not saved")
        self.typed(term, "/model big-model", "saved in")
        self.leave(term)
        self.assertEqual(read_text(own), before)
        self.assertTrue(read_text(folder).endswith("model=big-model\n"), read_text(folder))
        self.typed(self.repl(), "/cfg model", "big-model")


if __name__ == "__main__":
    unittest.main()
