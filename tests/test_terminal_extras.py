"""What a new user trips on at the terminal (issue 20), on a real pseudo-terminal 40 rows high,
40 and 100 columns wide where the width matters: long output keeps its command on the screen
and a wide line its end; Ctrl+C quits only twice on an empty prompt; the cycle guard lets a model poll;
/help names !cmd.

bantam.py runs on a Pty against the scripted FakeServer; the tests type like a user and check
the screen, what the server got and what was saved.
"""

import json
import os
import re
import time
import unicodedata
import unittest

import bantam
from tests.support import (
    BANTAM, PROMPT_LINE, BantamTestCase, chunk, error, sse, strip_ansi, text_stream,
    tool_call_stream)

PROMPT = "> "
WIDTHS = (40, 100)
TOKEN = re.compile(r"\x1b\[[0-9;?]*[@-~]|\x1b\][^\x07]*\x07|\x1b.?|[\r\n\b]|[^\x1b\r\n\b]+")


def screen(text):
    """Terminal output as the lines a person sees: a small terminal that knows the moves
    bantam and readline make (carriage return, erase to the end of the line, cursor up and
    right, backspace); colors and other sequences are dropped; no line wraps."""
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
        elif re.match(r"\x1b\[\d*C$", token):
            col += int(token[2:-1] or 1)
        elif not token.startswith("\x1b"):
            line = rows[row].ljust(col)
            rows[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return "\n".join(rows)


def bantam_version():
    """bantam.py's VERSION."""
    with open(BANTAM, encoding="utf-8") as f:
        return re.search(r'VERSION = "([^"]+)"', f.read()).group(1)


def slow_stream(first="streaming "):
    """A reply that streams for about ten seconds: still running when the test acts."""
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": first})]
    return sse(events + [chunk({"content": "more "}) for _ in range(40)], delay=0.25)


def shell(call_id, command):
    """A (id, name, args) shell_exec call."""
    return (call_id, "shell_exec", {"command": command})


class ExtrasCase(BantamTestCase):
    """The REPL on a 40-row terminal, rendered."""

    def start(self, cols=100, rows=40, **keys):
        """Write model.cfg (render=always and keys), start bantam on a rows x cols Pty, wait
        for the prompt."""
        self.ws.write_config(self.server, render="always", **keys)
        term = self.pty(rows=rows, cols=cols)
        term.expect(PROMPT)
        return term

    def user_messages(self, request=-1):
        """The contents of the user messages of a request the server got."""
        return [m["content"] for m in self.server.bodies[request]["messages"] if m["role"] == "user"]

    def tool_messages(self):
        """The contents of the tool messages of the last request."""
        return [m["content"] for m in self.server.bodies[-1]["messages"] if m["role"] == "tool"]

    def ctrl_c_at_prompt(self, term):
        """Ctrl+C at the readline prompt, after a pause (a SIGINT that lands while readline
        handles a key is noticed only at the next key; a person is never that fast)."""
        time.sleep(0.5)
        term.send("\x03")


class ToolOutputTests(ExtrasCase):
    """A command's output on the screen: ten lines by default, wide lines keep their end."""

    def test_long_output_shows_ten_lines_and_keeps_the_command_on_screen(self):
        """`seq 1 3000` with no tool_lines set: 5 lines, "... 2990 more lines", 5 lines, so
        `$ seq 1 3000` stays on a 40-row screen; the model gets all of it."""
        for cols in WIDTHS:
            with self.subTest(cols=cols):
                self.push(tool_call_stream([shell("c1", "seq 1 3000")]), text_stream("counted"))
                term = self.start(cols=cols)
                lines = screen(self.type_line(term, "count", "counted")).splitlines()
                at = lines.index("$ seq 1 3000")
                self.assertEqual(lines[at + 1:at + 12], ["1", "2", "3", "4", "5", "... 2990 more lines",
                                                         "2996", "2997", "2998", "2999", "3000"])
                self.assertRegex(lines[at + 12], r"^exit 0 \u00b7 ")
                self.assertIn("\n1500\n", self.tool_messages()[0])
                self.leave(term)

    def test_wide_lines_keep_their_start_and_end(self):
        """A line wider than the screen keeps a third of the row from its start and the rest
        from its end: `ls -la` keeps the file name at 40 columns; a 160-character line keeps
        "start-" and "-the-end" at both widths, and so does a last one with no newline (once
        written whole, and wrapped). The model gets the lines whole."""
        self.ws.write("notes-for-the-meeting.txt", "x")
        command = ("ls -la notes-for-the-meeting.txt; printf 'start-%0150d-the-end\\n' 0; "
                   "printf 'last-%0150d-the-end' 0")
        for cols in WIDTHS:
            with self.subTest(cols=cols):
                self.push(tool_call_stream([shell("c1", command)]), text_stream("listed"))
                term = self.start(cols=cols)
                rows = screen(self.type_line(term, "list", "listed")).splitlines()
                listing = next(r for r in rows if r.startswith("-rw"))
                self.assertTrue(listing.endswith(" notes-for-the-meeting.txt"), listing)
                self.assertLessEqual(len(listing), cols)
                for start in ("start-", "last-"):
                    wide = next(r for r in rows if r.startswith(start))
                    self.assertTrue(wide.endswith("0-the-end"), wide)
                    self.assertEqual(len(wide), cols)
                    self.assertEqual(wide.count("\u2026"), 1)
                    self.assertLessEqual(wide.index("\u2026"), cols // 3)
                self.assertIn("start-%s-the-end\n" % ("0" * 150), self.tool_messages()[0])
                self.leave(term)


class CtrlCTests(ExtrasCase):
    """Ctrl+C during a turn and at the prompt."""

    def test_double_ctrl_c_quits_only_at_an_empty_prompt(self):
        """Ctrl+C twice in quick succession during a stream interrupts it and the REPL goes on;
        Ctrl+C on a typed line clears it and does not count; twice on the empty line quits."""
        self.push(slow_stream(), text_stream("still here"))
        term = self.start()
        term.sendline("go")
        term.expect("streaming")
        term.send("\x03")
        time.sleep(0.3)
        term.send("\x03")   # the reflex: a second Ctrl+C at once
        term.expect("[interrupted]")
        term.expect(PROMPT_LINE)
        time.sleep(0.5)
        self.assertTrue(term.alive(), term.output[-500:])
        self.type_line(term, "next", "still here")
        self.assertEqual(self.user_messages()[-1], "next")
        term.send("a draft")
        term.expect("a draft")
        self.ctrl_c_at_prompt(term)   # clears the line
        term.expect(PROMPT_LINE)
        self.ctrl_c_at_prompt(term)   # the first on an empty line
        term.expect("[Ctrl+C again within 2 s quits]")
        self.assertTrue(term.alive(), term.output[-500:])
        self.ctrl_c_at_prompt(term)
        self.assertEqual(term.wait(10), 0)


class CycleGuardTests(ExtrasCase):
    """max_identical_calls counts a call only when its result is the same too."""

    def test_polling_with_new_output_goes_on_a_stuck_loop_stops(self):
        """The same command four times, its output new each time (a model polling a log):
        all four run and the model answers. The same command with the same output three
        times: stopped, and asked for a final answer."""
        poll = "echo tick >> poll.log; wc -l < poll.log"
        self.push(*[tool_call_stream([shell("c%d" % i, poll)]) for i in range(4)],
                  text_stream("the build finished"))
        term = self.start()
        out = screen(self.type_line(term, "wait for the build", "the build finished"))
        self.assertNotIn("[stopped", out)
        self.assertEqual(len(self.server.posts), 5)
        self.assertEqual([m.split("\n")[0] for m in self.tool_messages()], ["1", "2", "3", "4"])
        self.push(*[tool_call_stream([shell("s%d" % i, "echo unchanged")]) for i in range(3)],
                  text_stream("my best answer"))
        out = screen(self.type_line(term, "and now?", "my best answer"))
        self.assertIn("[stopped: the same tool call 3 times in a row (max_identical_calls=3)", out)
        self.assertEqual(len(self.server.posts), 9)
        self.assertNotIn("tools", self.server.bodies[-1])
        self.leave(term)


class StatusTests(ExtrasCase):
    """The first line and /help."""

    def test_the_first_line_fits_a_narrow_terminal(self):
        """At 40 columns the REPL's first line is cut to fit (no version, /help short), not
        wrapped; at 100 it is whole."""
        for cols, shown in ((40, "test-model @ 127.0.0.1:%d \u00b7 /help"),
                            (100, "bantam %s \u00b7 test-model @ 127.0.0.1:%d \u00b7 /help for commands")):
            with self.subTest(cols=cols):
                term = self.start(cols=cols)
                first = strip_ansi(term.output).replace("\r", "").split("\n")[0]
                port = self.server.port
                self.assertEqual(first, shown % ((port,) if cols == 40 else (bantam_version(), port)))
                self.leave(term)

    def test_help_names_bang_commands(self):
        """/help lists !cmd next to the commands."""
        term = self.start()
        out = strip_ansi(self.type_line(term, "/help", "Ctrl+J"))
        self.assertRegex(out, r"(?m)^!cmd\s+run cmd with bash")
        self.assertEqual(self.server.posts, [])
        self.leave(term)


def columns(text):
    """The terminal columns of text: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


class NarrowTests(ExtrasCase):
    """At 40 columns: reasoning wraps at spaces, /list lines up, /cfg reads."""

    def test_reasoning_wraps_at_spaces(self):
        """Reasoning streamed in 4-character pieces (two paragraphs), after a retry: every row
        of it fits the 40 columns, and every word is whole on one row."""
        reasoning = ("first I look at how the configuration file is read and where the "
                     "backoff delays come from\n\nthen I check whether the retries honour them")
        message = "the upstream server is overloaded at the moment, please try again shortly"
        self.push(error(503, message), text_stream("done", reasoning=reasoning))
        term = self.start(cols=40)
        rows = screen(self.type_line(term, "look", "done")).splitlines()
        start, end = rows.index("--- reasoning start ---"), rows.index("--- reasoning end ---")
        self.assertEqual([row for row in rows[start:end] if len(row) > 40], [])
        self.assertEqual(" ".join(rows[start + 1:end]).split(), reasoning.split())
        self.assertIn("", rows[start + 1:end])   # the paragraphs stay apart
        self.leave(term)

    def test_list_columns_line_up(self):
        """Sessions whose ids differ in length (a -2, a name) and a title of wide characters:
        the times start in one column; the wide title is whole."""
        wide = "\u6539\u8fdb\u89e3\u6790\u5668\u7684\u9519\u8bef\u4fe1\u606f\u548c\u6d4b\u8bd5"
        for sid, title in (("a", "short title"), ("20250101-000001-2", "fix the build"),
                           ("work-on-the-parser", wide)):
            self.push(text_stream("ok"))
            result = self.run_bantam("-p", title, "--session", sid)
            self.assertEqual(result.returncode, 0, result.stderr)
        term = self.start(cols=100)
        rows = [row for row in screen(self.type_line(term, "/list")).splitlines()
                if row.startswith("* ")]
        self.leave(term)
        self.assertEqual(len(rows), 3, rows)
        self.assertEqual(len({row.index("just now") for row in rows}), 1, rows)
        cjk = next(row for row in rows if "work-on-the-parser" in row)
        self.assertTrue(cjk.endswith("  " + wide), cjk)


if __name__ == "__main__":
    unittest.main()
