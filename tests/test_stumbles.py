"""The first hour's stumbles of issue 31 at a terminal: a running command's newest lines, the
Run? question's help and /quit, a write's diff, the trust question's wrapping, --init, a
resumed compacted session, --ask in the first line, /model <Tab>.

bantam.py runs on a real pseudo-terminal (or as a subprocess) against the scripted FakeServer;
the checks are what the screen shows, what the server got and what is on disk.
"""

import re
import unittest

from tests.support import PROMPT_LINE, text_stream, tool_call_stream
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


if __name__ == "__main__":
    unittest.main()
