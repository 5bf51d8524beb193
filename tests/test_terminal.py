"""The terminal view and the REPL's input on a real pseudo-terminal (issue 12): a paste is one
prompt, multi-line history survives a restart, Tab
completes, live tool output with the on-screen cut, rendered Markdown; pipes keep the plain
traces.

bantam.py runs on a Pty against the scripted FakeServer; the tests type like a user and check
what the screen shows and what the server got.
"""

import os
import re
import unittest

import bantam
from tests.support import (
    PROMPT_LINE, BantamTestCase, chunk, sse, text_stream, tool_call_stream)

PROMPT = "> "
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"   # how a terminal frames a bracketed paste
UP = "\x1b[A"
# A command that prints a line, waits, prints another...: still running when its first lines show.
SLOW_COMMAND = "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.3; done"


TOKEN = re.compile(r"\x1b\[[0-9;?]*[@-~]|\x1b\][^\x07]*\x07|\x1b.?|[\r\n\b]|[^\x1b\r\n\b]+")


def screen(text):
    """Terminal output as the lines a person sees: a small terminal that knows the moves
    bantam and readline make (carriage return, erase to the end of the line, cursor up,
    backspace); colors and other sequences are dropped."""
    rows, row, col = [""], 0, 0
    for token in TOKEN.findall(text):
        if token == "\n":
            row, col = row + 1, 0
            if row == len(rows):
                rows.append("")
        elif token == "\r":
            col = 0
        elif token == "\b":
            col = max(0, col - 1)
        elif token == "\x1b[K":
            rows[row] = rows[row][:col]
        elif token == "\x1b[A":
            row = max(0, row - 1)
        elif not token.startswith("\x1b"):
            line = rows[row].ljust(col)
            rows[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return "\n".join(rows)


class TerminalCase(BantamTestCase):
    """Start the REPL on a terminal, rendered or plain."""

    def start(self, render="always", cols=100, **keys):
        """Write model.cfg with render (and keys), start bantam on a Pty cols wide, wait for
        the prompt."""
        self.ws.write_config(self.server, render=render, **keys)
        term = self.pty(cols=cols)
        term.expect(PROMPT)
        return term

    def turn(self, term, line, *expected):
        """Type line + Enter, wait for each expected text and the next prompt; return the screen of it."""
        return screen(self.type_line(term, line, *expected))

    def quit(self, term, keys="/quit\r"):
        """Leave with keys and assert a clean exit."""
        self.leave(term, keys)

    def user_messages(self, request=-1):
        """The contents of the user messages of a request the server got."""
        return [m["content"] for m in self.server.bodies[request]["messages"] if m["role"] == "user"]

    def tool_messages(self):
        """The tool messages of the last request."""
        return [m for m in self.server.bodies[-1]["messages"] if m["role"] == "tool"]


class InputTests(TerminalCase):
    """Paste, history, completion, commands, the start-up line."""

    def test_paste_is_one_prompt_sent_by_the_enter_after_it(self):
        """A pasted 3-line block (its line breaks arriving as Enter keys) stays on the input
        line; what is typed after it joins it, and only the Enter typed then sends: one request."""
        self.push(text_stream("got the paste"))
        term = self.start()
        term.send(PASTE_START + "first line\rsecond line\rthird line" + PASTE_END)
        term.send(" and more")
        term.sendline()
        term.expect("got the paste")
        term.expect(PROMPT_LINE)
        self.assertEqual(len(self.server.posts), 1)
        self.assertEqual(self.user_messages(), ["first line\nsecond line\nthird line and more"])
        self.quit(term)

    def test_multi_line_prompt_is_one_history_entry_after_a_restart(self):
        """A prompt with line breaks (Ctrl+J, and a trailing one from a paste) comes back whole
        with Up in the next run; the trailing line break is neither sent nor kept."""
        self.push(text_stream("first answer"), text_stream("again"))
        term = self.start()
        term.send("line one\nline two\n")
        term.sendline()
        term.expect("first answer")
        term.expect(PROMPT_LINE)
        self.assertEqual(self.user_messages(), ["line one\nline two"])
        self.quit(term)
        term = self.start()
        term.send(UP + UP)   # the last entry is /quit
        term.sendline(" and three")
        term.expect("again")
        term.expect(PROMPT_LINE)
        self.assertEqual(self.user_messages(), ["line one\nline two and three"])
        self.quit(term)

    def test_tab_completes_commands_and_session_ids(self):
        """Tab completes /comp to /compact, and a session id prefix after /load."""
        os.makedirs(self.ws.sessions_dir())
        with open(os.path.join(self.ws.sessions_dir(), "20240102-030405.json"), "w") as f:
            f.write('{"id": "20240102-030405", "summary": "old", "messages": ['
                    '{"role": "system", "content": "s"}, {"role": "user", "content": "old q"}]}')
        term = self.start()
        term.send("/comp\t")
        term.expect("/compact ")
        term.send("\x15")   # Ctrl+U: clear the line
        out = self.turn(term, "/load 2024\t", "[continuing 20240102-030405: 2 messages, ")
        self.assertIn("/load 20240102-030405", out)
        self.assertEqual(self.server.posts, [])
        self.quit(term)

    def test_mistyped_command_and_exit(self):
        """/hlep gets "unknown command" and sends nothing; /exit leaves like /quit."""
        term = self.start()
        out = self.turn(term, "/hlep", "(see /help)")
        self.assertIn("unknown command /hlep", out)
        self.assertEqual(self.server.posts, [])
        self.quit(term, "/exit\r")

    def test_startup_line(self):
        """The first line names the model, the endpoint's host, the context window when
        configured, and /help."""
        term = self.start(context_window=32000)
        first = screen(term.before).strip().splitlines()[0]
        self.assertRegex(first, r"^bantam \S+ \u00b7 test-model @ 127\.0\.0\.1:%d \u00b7 context 32000 "
                                r"\u00b7 /help for commands$" % self.server.port)
        self.quit(term)
        term = self.start(cols=70, context_window=32000)   # a narrow terminal: said shortly
        first = screen(term.before).strip().splitlines()[0]
        self.assertTrue(first.endswith("context 32000 \u00b7 /help"), first)
        self.assertLessEqual(len(first), 70)
        self.quit(term)


class ToolScreenTests(TerminalCase):
    """Tool calls and their output as the screen shows them."""

    def test_live_output_shows_before_the_command_ends(self):
        """The first lines of a command that takes a while are on screen while it still runs
        (the tool result has not reached the server yet), with an elapsed-time status."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": SLOW_COMMAND})]),
                  text_stream("all steps done"))
        term = self.start()
        term.sendline("run the steps")
        term.expect("step 2")
        self.assertEqual(len(self.server.posts), 1)   # the command is still running
        term.expect(re.compile("\u231b \\d+ s"))
        term.expect("step 6")
        term.expect(re.compile(r"exit 0 \u00b7 \d+\.\d s"))
        term.expect("all steps done")
        term.expect(PROMPT_LINE)
        self.assertIn("step 1\nstep 2\nstep 3\nstep 4\nstep 5\nstep 6\n", self.tool_messages()[0]["content"])
        self.quit(term)

    def test_long_output_is_cut_on_screen_only(self):
        """`seq 1 3000` shows its first and last lines around "... N more lines"; the model gets
        the same tool message as with render=never."""
        sent = {}
        for render in ("never", "always"):
            self.push(tool_call_stream([("c1", "shell_exec", {"command": "seq 1 3000"})]),
                      text_stream("counted"))
            term = self.start(render=render, tool_lines=10)
            out = self.turn(term, "count", "counted")
            sent[render] = self.tool_messages()
            self.quit(term)
        lines = out.splitlines()
        self.assertIn("$ seq 1 3000", lines)
        at = lines.index("$ seq 1 3000")
        self.assertEqual(lines[at + 1:at + 12],
                         ["1", "2", "3", "4", "5", "... 2990 more lines", "2996", "2997", "2998", "2999", "3000"])
        self.assertNotIn("1500", lines)
        self.assertEqual(sent["always"], sent["never"])
        self.assertEqual(len(sent["always"]), 1)

    def test_long_line_is_cut_to_the_width_on_screen_only(self):
        """A 500-character output line takes one row of the 100-column screen: its first third
        and its end around "…"; the model gets it whole."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "printf '%0500d\\n' 7; echo end"})]),
                  text_stream("printed"))
        term = self.start()
        out = self.turn(term, "print", "printed")
        self.assertIn("\n" + "0" * 33 + "\u2026" + "0" * 65 + "7\nend\n", out)
        self.assertIn("0" * 499 + "7\nend\n", self.tool_messages()[0]["content"])
        self.quit(term)

    def test_a_command_with_no_output_ends_with_its_exit_line(self):
        """`true` and `false` print nothing: the screen shows the exit line ("exit 0 · 0.0 s",
        "exit 1 · ..."), not the raw result the model reads ("\n\nexit: 0")."""
        for command, code in (("true", "0"), ("false", "1")):
            with self.subTest(command=command):
                self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]),
                          text_stream("ran it"))
                term = self.start(render="always")
                out = self.turn(term, "run", "ran it")
                self.assertRegex(out, "\\$ %s\n+exit %s \u00b7 \\d+\\.\\d s\n" % (command, code))
                self.assertNotIn("exit: ", out)
                self.assertEqual(self.tool_messages()[0]["content"], "\n\nexit: %s" % code)
                self.quit(term)

    def test_a_line_redrawn_after_a_carriage_return_is_its_last_state(self):
        """A progress line redrawn with \\r ("1%", "2%", "3%" in separate writes) shows as
        "3%", in the first lines and in the last ones, in both views; the model reads "3%"
        too, and a CRLF line keeps its text (bantam 1.2.0 showed and sent "1%2%3%")."""
        progress = 'for i in 1 2 3; do printf "\\r%d%%" $i; sleep 0.3; done; echo'
        command = progress + "; printf 'crlf\\r\\n'; seq 1 20; " + progress
        for render in ("never", "always"):
            with self.subTest(render=render):
                self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]),
                          text_stream("progressed"))
                term = self.start(render=render, tool_lines=10)
                out = self.turn(term, "show progress", "progressed")
                sent = self.tool_messages()[0]["content"]
                self.quit(term)
                self.assertTrue(sent.startswith("3%\ncrlf\n1\n2\n"), repr(sent))
                self.assertTrue(sent.endswith("\n20\n3%\n\n\nexit: 0"), repr(sent))
                self.assertNotIn("1%2%", out)
                self.assertIn("\n3%\ncrlf\n1\n2\n3\n", out)
                self.assertIn("\n19\n20\n3%\n", out)

    def test_subagent_shows_its_prompt_and_answer_once(self):
        """A run_subagent call shows its prompt with its line breaks; the subagent's work and
        answer appear behind a rail, and its answer is not repeated as the tool result."""
        self.push(tool_call_stream([("c1", "run_subagent", {"prompt": "Count the files\nhere"})]),
                  text_stream("There are 3 files."),
                  text_stream("The subagent counted."))
        term = self.start()
        out = self.turn(term, "delegate", "The subagent counted.")
        self.assertIn("\u00bb subagent: Count the files\nhere\n", out)
        self.assertIn("\n  \u2502 There are 3 files.\n\u00bb subagent done\nThe subagent counted.", out)
        self.assertEqual(out.count("There are 3 files."), 1)
        self.assertEqual(self.tool_messages()[0]["content"], "There are 3 files.")
        self.quit(term)

    def test_multi_line_command_shows_its_line_breaks(self):
        """A `cat > f <<'EOF'` call is shown as the command with real line breaks."""
        command = "cat > hello.py <<'PY'\nprint('hello')\nPY\npython3 hello.py"
        self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]),
                  text_stream("it ran"))
        term = self.start()
        out = self.turn(term, "write it", "it ran")
        self.assertIn("$ cat > hello.py <<'PY'\nprint('hello')\nPY\npython3 hello.py\nhello\n", out)
        self.assertNotIn("\\n", out)
        self.quit(term)


MARKDOWN = "# Plan\n\n- Note: listed, **bold** here\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nDone.\n"


class RenderTests(TerminalCase):
    """Rendered Markdown in the REPL; the plain traces for pipes."""

    def test_answer_is_rendered(self):
        """render=always: a list item has a bullet, a table and bold marks as written, a heading
        no #; the conversation keeps the raw text."""
        self.push(text_stream(MARKDOWN, pieces=3), text_stream("next"))
        term = self.start()
        out = self.turn(term, "plan?", "Done.")
        self.assertIn("\u2022 Note: listed, **bold** here\n", out)
        self.assertIn("\n| a | b |\n|---|---|\n| 1 | 2 |\n", out)
        self.assertIn("Plan\n\n\u2022 Note", out)
        answer = out[out.index("Plan"):]
        self.assertNotRegex(answer, r"(?m)^(- Note|#)")
        self.turn(term, "more", "next")
        self.assertEqual(self.server.bodies[-1]["messages"][-2], {"role": "assistant", "content": MARKDOWN})
        self.quit(term)

    def test_a_cut_reply_is_said_below_its_last_line(self):
        """A reply cut at the token limit in the middle of a line: the screen shows the whole
        answer, its unfinished last line included, and the note that it was cut below it."""
        self.push(sse([chunk({"role": "assistant", "content": ""}),
                       chunk({"content": "First line.\nAnd the last one, unfini"}),
                       chunk({}, finish_reason="length")]))
        term = self.start()
        out = self.turn(term, "talk", "output token limit")
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if "output token limit" in line)
        self.assertIn("And the last one, unfini", lines[at - 1])
        self.assertIn("First line.", lines[at - 2])
        self.quit(term)

    def test_long_line_preview_leaves_only_the_rendered_paragraph(self):
        """A long line streamed in small pieces is previewed wrapped over several rows while
        it comes; when it ends, the screen holds the rendered paragraph once, nothing more."""
        para = "Every word of this long line arrives in small pieces, " * 6 + "and **ends** here."
        self.push(text_stream(para, pieces=5, delay=0.005))
        term = self.start()
        start = len(term.output)
        term.sendline("talk")
        term.expect("here.")
        term.expect(PROMPT_LINE)
        raw = term.output[start:]
        self.assertIn("\x1b[A\x1b[K", raw)   # a preview of several rows was erased
        out = screen(raw)
        answer = out[out.index("Every"):out.index("\n[test-model")]
        self.assertEqual(answer, "\n".join(bantam.wrap_words(para, 100)))
        self.quit(term)

    def test_interrupted_answer_shows_what_came(self):
        """Ctrl+C while a table streams: the rows that came are shown (the conversation keeps
        the raw text, marked as interrupted)."""
        events = [chunk({"role": "assistant", "content": ""}),
                  chunk({"content": "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4"})]
        events += [chunk({"content": " more"}) for _ in range(20)]
        self.push(sse(events, delay=0.5), text_stream("next"))
        term = self.start()
        term.sendline("table")
        term.expect("| 3 | 4")   # the line in progress, previewed
        term.send("\x03")
        term.expect("interrupted")
        term.expect(PROMPT_LINE)
        self.assertIn("| 1 | 2 |\n| 3 | 4", screen(term.output))
        self.assertEqual(self.user_messages(), ["table"])
        term.sendline("go on")
        term.expect("next")
        kept = self.server.bodies[-1]["messages"][-2]
        self.assertTrue(kept["content"].startswith("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4"), kept)
        term.expect(PROMPT_LINE)
        self.quit(term, "\x04")

    def test_color_styles_are_present(self):
        """With color the heading carries its style; bold marks are shown as written."""
        self.push(text_stream(MARKDOWN))
        term = self.start(color="always")
        start = len(term.output)
        term.sendline("plan?")
        term.expect("Done.")
        term.expect(PROMPT_LINE)
        out = term.output[start:]
        self.assertIn("\033[1mPlan\033[0m", out)
        self.assertIn("listed, **bold** here", out)
        self.quit(term)

    def test_pipes_keep_the_plain_traces(self):
        """render=auto with stdout a pipe prints byte for byte what render=never prints: raw
        Markdown, the spec's tool traces, no escape sequences."""
        outputs = []
        for render in ("auto", "never"):
            self.push(tool_call_stream([("c1", "shell_exec", {"command": "printf 'a\\nb\\n'"})]),
                      text_stream(MARKDOWN))
            self.ws.write_config(self.server, render=render, color="auto")
            result = self.run_bantam("-p", "plan?")
            self.assertEqual(result.returncode, 0, result.stderr)
            outputs.append(result.stdout)
        self.assertEqual(outputs[0], outputs[1])
        self.assertIn(MARKDOWN, outputs[0])
        self.assertIn("[tool call: shell_exec(", outputs[0])
        self.assertNotIn("\033", outputs[0])


if __name__ == "__main__":
    unittest.main()
