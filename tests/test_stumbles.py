"""The first hour's stumbles of issue 31 at a terminal: a running command's newest lines, the
Run? question's help and /quit, a write's diff, the trust question's wrapping, a resumed
compacted session, --ask in the first line, /model <Tab>.

bantam.py runs on a real pseudo-terminal (or as a subprocess) against the scripted FakeServer;
the checks are what the screen shows, what the server got and what is on disk.
"""

import os
import re
import time
import unittest

from tests.support import PROMPT_LINE, completion, text_stream, tool_call_stream
from tests.test_terminal import TerminalCase, screen


class LiveWindowTests(TerminalCase):
    """While a command runs its newest lines are on screen; at its end head and tail."""

    def test_the_window_follows_the_output(self):
        """30 lines then a pause: while it runs, line 30 (not only 1-5) is on screen with the
        status under it; at the end, head, "... N more lines" and tail as before."""
        command = "seq 1 30; sleep 2; echo done"
        self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]),
                  text_stream("counted"))
        term = self.start(tool_lines=10)
        term.sendline("count")
        term.expect(re.compile(r"\n30\r\n"))
        term.expect("\u231b")
        self.assertEqual(len(self.server.posts), 1)   # still running
        live = screen(term.output)
        self.assertIn("\n21\n22\n", live)
        self.assertNotIn("\n20\n", live)
        term.expect("counted")
        term.expect(PROMPT_LINE)
        lines = screen(term.output).splitlines()
        at = lines.index("$ " + command)
        self.assertEqual(lines[at + 1:at + 12], ["1", "2", "3", "4", "5", "... 21 more lines",
                                                  "27", "28", "29", "30", "done"])
        self.assertRegex(lines[at + 12], r"^exit 0 \u00b7 \d+\.\d s$")
        self.quit(term)

    def test_ctrl_c_leaves_the_last_lines_on_screen(self):
        """Ctrl+C while a command waits: the lines it printed last stay on screen."""
        command = "seq 1 30; sleep 30"
        self.push(tool_call_stream([("c1", "shell_exec", {"command": command})]),
                  text_stream("next"))
        term = self.start(tool_lines=10)
        term.sendline("count")
        term.expect(re.compile(r"\n30\r\n"))
        term.send("\x03")
        term.expect("interrupted")
        term.expect(PROMPT_LINE)
        out = screen(term.output)
        self.assertRegex(out, r"\n5\n\.\.\. 20 more lines\n26\n27\n28\n29\n30\n")
        self.quit(term)


class RunQuestionTests(TerminalCase):
    """Run? [y/N/a/e]: ? explains the answers, /quit ends the turn, Ctrl+C clears the line."""

    def ask(self):
        """A turn whose model wants to run `echo ran`; the screen at its Run? question."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo ran"})]),
                  text_stream("finished"))
        term = self.start(approve="ask")
        term.sendline("go")
        term.expect("Run? [y/N/a/e] ")
        return term

    def test_question_mark_explains_and_asks_again(self):
        term = self.ask()
        term.send("?\r")
        term.expect("y run \u00b7 n/Enter skip \u00b7 a always this command \u00b7 e edit "
                    "\u00b7 or type a reason")
        term.expect("Run? [y/N/a/e] ")
        term.send("y\r")
        term.expect("finished")
        term.expect(PROMPT_LINE)
        results = [m["content"] for m in self.server.bodies[-1]["messages"] if m["role"] == "tool"]
        self.assertTrue(results[0].startswith("ran\n"), results)
        self.quit(term)

    def test_quit_ends_the_turn_with_a_refusal(self):
        term = self.ask()
        term.send("/quit\r")
        term.expect(PROMPT_LINE)
        self.assertEqual(len(self.server.posts), 1)   # no request after the refusal
        self.assertTrue(term.alive())
        self.turn(term, "next", "finished")   # (the reply the refused call would have had)
        tool = [m["content"] for m in self.server.bodies[-1]["messages"] if m["role"] == "tool"]
        self.assertEqual(len(tool), 1)
        self.assertIn("did not let this command run", tool[0])
        self.quit(term)

    def test_ctrl_c_clears_the_question(self):
        term = self.ask()
        time.sleep(0.3)   # (a Ctrl+C in the instant between readline printing the question and
        term.send("\x03")   # its wait for keys is seen only at the next key: CPython's loop)
        term.expect("interrupted")
        term.expect(PROMPT_LINE)
        lines = screen(term.output).splitlines()
        self.assertNotIn("]]", screen(term.output))
        self.assertFalse([line for line in lines if line.startswith("Run?")], lines)
        self.quit(term)


class WriteDiffTests(TerminalCase):
    """After a write the screen shows its short diff; an answer's ```diff block is colored."""

    def test_a_write_shows_its_diff_or_no_change(self):
        self.ws.write("calc.py", "a = 1\nb = 2\nc = 3\n")
        change = {"filePath": "calc.py", "content": "a = 1\nb = 20\nc = 3\n"}
        self.push(tool_call_stream([("c1", "write", change)]), text_stream("edited"),
                  tool_call_stream([("c2", "write", change)]), text_stream("again"))
        term = self.start(approve="auto", tools="shell_exec,write")
        out = self.turn(term, "edit it", "edited")
        self.assertIn("\n-b = 2\n+b = 20\n", out)
        out = self.turn(term, "once more", "again")
        self.assertIn("(no change)", out)
        self.assertNotIn("+b = 20", out)
        self.quit(term)

    def test_a_diff_block_is_red_and_green(self):
        self.push(text_stream("Here:\n\n```diff\n-old line\n+new line\n```\n"))
        term = self.start(color="always")
        start = len(term.output)
        self.type_line(term, "show", "new line")
        out = term.output[start:]
        self.assertIn("\033[31m-old line", out)
        self.assertIn("\033[32m+new line", out)
        self.quit(term)


class TrustQuestionTests(TerminalCase):
    """At 40 columns the trust question is wrapped at spaces, never mid-word."""

    def test_the_question_wraps_at_spaces(self):
        other = self.make_server()
        self.ws.write("model.cfg", "endpoint=%s\n" % other.url)
        term = self.pty(cols=40)
        term.expect("[y/N] ")
        lines = [line.rstrip() for line in screen(term.output).splitlines() if line.strip()]
        self.assertTrue(all(len(line) <= 40 for line in lines), lines)
        self.assertEqual(" ".join(lines), "This folder's model.cfg would change endpoint=%s "
                         "(the model you talk to). Trust this folder? [y/N]" % other.url)
        term.sendline("n")
        term.expect(PROMPT_LINE)
        self.quit(term)


class NarrowHelpTests(TerminalCase):
    """At 40 columns /help (like every command's output) wraps at spaces, never mid-word."""

    def narrow_screen(self, line, shown):
        """The screen's lines after typing line at a 40-column REPL (each checked to fit)."""
        term = self.pty(cols=40)
        term.expect(PROMPT_LINE)
        start = len(term.output)
        term.sendline(line)
        term.expect(shown)
        term.expect(PROMPT_LINE)
        lines = [line.rstrip() for line in screen(term.output[start:]).splitlines()]
        self.assertTrue(all(len(line) <= 40 for line in lines), lines)
        self.quit(term)
        return lines

    def test_help_wraps_at_spaces(self):
        words = " ".join(self.narrow_screen("/help", "Enter sends")).split()
        for word in ("conversation", "endpoint's", "/undo", "(Enter", "sends)"):
            self.assertIn(word, words)

    def test_the_token_line_wraps_at_spaces(self):
        """The notes on stderr (here the token line after a turn) wrap at spaces as well."""
        self.push(text_stream("ok"))
        self.assertIn("completion | context:", " ".join(self.narrow_screen("hi", "(0.")))


class ResumedCompactionTests(TerminalCase):
    """-c after /compact shows the last prompt typed, not the summary as `you:`."""

    def test_resume_after_compact_shows_the_typed_prompt(self):
        self.push(text_stream("A1"), completion("SUMMARY-TEXT of it"))
        result = self.run_bantam(input="first question\n/compact\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        shown = self.run_bantam("-c", input="")
        self.assertIn("you: first question\n", shown.stdout)
        self.assertNotIn("SUMMARY-TEXT", shown.stdout)
        self.push(text_stream("A2"))
        self.run_bantam("-c", input="second question\n")
        shown = self.run_bantam("-c", input="")
        self.assertIn("you: second question\nA2\n", shown.stdout)
        self.assertNotIn("SUMMARY-TEXT", shown.stdout)


class FirstLineAndModelTests(TerminalCase):
    """--ask is in the REPL's first line; /model <Tab> completes the server's model names."""

    def test_ask_is_in_the_first_line(self):
        self.ws.write_config(self.server, render="always")
        term = self.pty("--ask")
        term.expect("> ")
        first = screen(term.output).strip().splitlines()[0]
        self.assertIn("approve ask", first)
        self.quit(term)

    def test_model_tab_completes_the_servers_models(self):
        self.server.models = {"object": "list", "data": [{"id": "test-model"},
                                                         {"id": "other-model-7b"}]}
        term = self.start()
        term.send("/model oth\t")
        term.expect("other-model-7b ")
        self.quit(term, "\x15/quit\r")


if __name__ == "__main__":
    unittest.main()
