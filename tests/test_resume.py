"""Issue 20, "Resuming, and the record": a resume you can see, and sessions that do not pile up.

Covered here, through real processes (bantam.py on a real pty, or as a batch subprocess)
against the scripted FakeServer, with a throwaway HOME:

- ResumeTests: -c, --session ID and /load say `[continuing <id>: N messages, <when>]` and
  show the last prompt and its answer (as the model wrote it); a --session id with no file
  says it starts a new one.
- NoPileUpTests: a REPL that sent no prompt, or whose only prompt failed (it goes back to
  the input line), leaves no file and does not move autosave.json; a batch run that failed
  keeps its file and a retry with the same --session continues it.
- ListTests: /list shows the newest 20 (/list all: every one) with relative times, each line
  cut at a word to the terminal's width (40 and 100 columns); the title is the first
  prompt's first line, kept through /compact.
- DeleteTests: /delete ID (exact id or unique prefix) and --delete ID remove the file and its
  journal; the current conversation is refused.
"""

import json
import os
import re
import time
import unittest

from tests.support import PROMPT_LINE, completion, error, strip_ansi, text_stream
from tests.test_sessions import SessionCase, new_format

SYSTEM = {"role": "system", "content": "sys"}
ANSWER = ("# Where things are\n\nThe **config** lives in `model.cfg`, and a long sentence that has "
          "to wrap at forty columns goes on and on here.\n\n- first point\n- second point\n")
CONTINUING = re.compile(r"\[continuing (\S+): (\d+) messages, ([^\]]+)\]")


class ResumeCase(SessionCase):
    """Saved conversations of this folder, and REPLs on terminals of a given width."""

    def conversation(self, sid, talk, hours_ago=3.0, cwd=None, summary="a title"):
        """Write session sid holding the system prompt and talk (role, content) pairs, last
        changed hours_ago; return its messages."""
        messages = [SYSTEM] + [{"role": r, "content": c} for r, c in talk]
        stamp = time.time() - hours_ago * 3600 - 30   # half a minute more: no boundary near
        self.write_session(sid, new_format(sid, messages, cwd or self.here, summary), mtime=stamp)
        return messages

    def repl(self, *args, cols=100, rows=24, **keys):
        """Start the REPL on a cols x rows pty (keys go to the config); return (terminal,
        what it printed before its first prompt, without escape sequences)."""
        if keys:
            self.ws.write_config(self.server, **keys)
        term = self.pty(*args, cols=cols, rows=rows)
        term.expect(PROMPT_LINE)
        return term, strip_ansi(term.before)

    def exchange(self, out):
        """The lines after the [continuing ...] line (the last exchange shown)."""
        self.assertRegex(out, CONTINUING)
        return out.split("]\r\n", 1)[1].replace("\r\n", "\n").rstrip("\r\n").split("\n")


class ResumeTests(ResumeCase):
    """Resuming says what goes on and shows where it left off."""

    def test_continue_flag_shows_the_last_exchange(self):
        """-c: the continuing line (id, messages, "3 h ago"), the last prompt behind "you:" (not
        the first exchange), its answer as the model wrote it."""
        self.conversation("20250101-000000", [("user", "an earlier question"), ("assistant", "an earlier answer"),
                                              ("user", "where is the config?"), ("assistant", ANSWER)])
        term, out = self.repl("-c")
        self.quit(term)
        self.assertEqual(CONTINUING.search(out).groups(), ("20250101-000000", "5", "3 h ago"), out)
        shown = self.exchange(out)
        self.assertEqual(shown[0], "you: where is the config?")
        self.assertEqual(shown[1:], ANSWER.rstrip("\n").split("\n"))

    def test_session_flag_existing_and_new(self):
        """--session of an existing conversation shows it; a new id says it starts a new
        conversation (a typo is seen at once) and shows no exchange."""
        self.conversation("proj-a", [("user", "set up proj-a"), ("assistant", "proj-a is set up")], hours_ago=26)
        term, out = self.repl("--session", "proj-a")
        self.quit(term)
        self.assertEqual(CONTINUING.search(out).groups(), ("proj-a", "3", "1 d ago"))
        self.assertEqual(self.exchange(out), ["you: set up proj-a", "proj-a is set up"])
        term, out = self.repl("--session", "brand-new")
        self.quit(term)
        self.assertNotIn("[continuing", out)
        self.assertIn("[new conversation brand-new: no saved session has that id]", out)
        self.assertNotIn("brand-new", self.conversation_ids())

    def test_load_says_continuing_and_shows_the_exchange(self):
        """/load and /continue in the REPL: the continuing line and the last exchange, then the
        prompt; the next turn goes on from there."""
        self.conversation("20250202-101010", [("user", "what is two plus two?"), ("assistant", "It is **4**.")],
                          hours_ago=0.5)
        self.push(text_stream("and five"))
        term, _ = self.repl()
        out = self.say(term, "/load 20250202", "[continuing 20250202-101010: 3 messages, 30 min ago]")
        self.assertIn("you: what is two plus two?\r\nIt is **4**.\r\n", out)
        out = self.say(term, "/continue", "[continuing 20250202-101010: 3 messages, ")
        self.assertIn("you: what is two plus two?", out)
        self.say(term, "plus one?", "and five")
        self.quit(term)
        self.assertEqual(self.last_messages()[-1], {"role": "user", "content": "plus one?"})

    def test_plain_when_not_rendering(self):
        """With render=never on a terminal, and with piped stdin and stdout, the answer is
        shown as the model wrote it (Markdown and all)."""
        self.conversation("20250101-000000", [("user", "where is the config?"), ("assistant", ANSWER)])
        term, out = self.repl("-c", render="never")
        self.quit(term)
        self.assertIn("# Where things are", out)
        self.assertIn("The **config** lives in `model.cfg`", out)
        self.ws.write_config(self.server)
        result = self.run_bantam("-c", input="/quit\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("[continuing 20250101-000000: 3 messages, 3 h ago]\nyou: where is the config?\n"
                      "# Where things are\n", result.stdout)


class NoPileUpTests(ResumeCase):
    """Only conversations that happened leave a file."""

    def test_repl_without_a_prompt_leaves_no_file(self):
        """After a batch run: a REPL that only ran /list leaves no file and autosave.json links
        where it did."""
        self.push(text_stream("batch answer"))
        self.batch("a batch question")
        [batch] = self.conversation_ids()
        term, _ = self.repl()
        self.say(term, "/list", "a batch question")
        self.quit(term)
        self.assertEqual(self.conversation_ids(), [batch])
        self.assertEqual(self.autosave_target(), batch)
        self.assertEqual(sorted(os.listdir(self.ws.sessions_dir())), sorted([batch + ".json", "autosave.json"]))

    def test_batch_run_keeps_its_file_when_it_fails(self):
        """A batch run whose request fails for good (exit 2) keeps its file with the prompt,
        and autosave.json links to it; a retry with the same --session continues it."""
        self.push(error(400, "refused"))
        result = self.run_bantam("-p", "the job's prompt", "--session", "job-7")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(self.session("job-7")["messages"], [self.session("job-7")["messages"][0],
                                                              {"role": "user", "content": "the job's prompt"}])
        self.assertEqual(self.autosave_target(), "job-7")
        self.push(text_stream("done at last"))
        self.batch("try again", "--session", "job-7")
        self.assertEqual(self.last_messages()[-1]["content"], "the job's prompt\n\ntry again")
        self.assertEqual(self.session("job-7")["messages"][-1], {"role": "assistant", "content": "done at last"})


class ListTests(ResumeCase):
    """/list: short, readable, one line each."""

    def test_newest_twenty_with_relative_times_and_all(self):
        """25 conversations: /list shows the newest 20, newest first, with relative times, and
        says how many it left out; /list all shows every one."""
        for n in range(25):   # n hours old
            self.conversation("20250101-0000%02d" % n, [("user", "q"), ("assistant", "a")], hours_ago=n,
                              summary="topic %d" % n)
        term, _ = self.repl()
        out = self.say(term, "/list", "/list all")
        rows = [line for line in out.splitlines() if re.match(r"^\* 2025", line)]
        self.assertEqual([row.split()[1] for row in rows], ["20250101-0000%02d" % n for n in range(20)])
        self.assertRegex(rows[0], r"^\* 20250101-000000\s+just now\s+3 msgs  topic 0$")
        self.assertRegex(rows[3], r"^\* 20250101-000003\s+3 h ago\s+3 msgs  topic 3$")
        self.assertIn("5 older", out)
        out = self.say(term, "/list all", "topic 24")
        self.assertEqual(len([line for line in out.splitlines() if re.match(r"^\* 2025", line)]), 25)
        self.quit(term)

    def test_title_is_the_first_line_and_survives_compaction(self):
        """The title (the summary in the file and in /list) is the first prompt's first line,
        and stays after /compact (not "Summary of our conversation so far...")."""
        self.push(text_stream("looked at it"), completion("The user asked about the build."),
                  text_stream("after compaction"))
        term, _ = self.repl()
        self.say(term, "fix the failing build\nit fails in CI since Monday", "looked at it")
        sid = self.autosave_target()
        self.assertEqual(self.session(sid)["summary"], "fix the failing build")
        self.say(term, "/compact", "[compacted")
        self.say(term, "go on", "after compaction")
        self.assertEqual(self.session(sid)["summary"], "fix the failing build")
        out = self.say(term, "/list", "fix the failing build")
        self.assertNotIn("Summary of our conversation", out)
        self.quit(term)
        self.assertEqual(self.session(sid)["summary"], "fix the failing build")


class DeleteTests(ResumeCase):
    """/delete and --delete."""

    def test_delete_by_prefix_removes_file_and_link(self):
        """/delete PREFIX removes that conversation's file (and the autosave link to it); an
        ambiguous or unknown prefix is a clear error that deletes nothing; the current
        conversation is refused."""
        self.conversation("20250101-000000", [("user", "one"), ("assistant", "1")])
        self.conversation("20250102-000000", [("user", "two"), ("assistant", "2")], hours_ago=1)
        self.conversation("20250102-000001", [("user", "three"), ("assistant", "3")], hours_ago=2)
        os.symlink("20250101-000000.json", self.path("autosave"))
        term, _ = self.repl()
        self.say(term, "/delete 202501", "matches 3 sessions")
        self.say(term, "/delete 1999", "no session matches")
        self.say(term, "/delete", "usage: /delete")
        self.assertEqual(len(self.conversation_ids()), 3)
        self.say(term, "/delete 20250101", "[deleted session 20250101-000000]")
        self.assertFalse(os.path.exists(self.path("20250101-000000")))
        self.assertFalse(os.path.lexists(self.path("autosave")))
        self.say(term, "/load 20250102-000001", "[continuing 20250102-000001")
        out = self.say(term, "/delete 20250102-000001", "the conversation you are in")
        self.assertNotIn("[deleted", out)
        self.say(term, "/delete 20250102-000000", "[deleted session 20250102-000000]")
        self.quit(term)
        self.assertEqual(self.conversation_ids(), ["20250102-000001"])

    def test_delete_flag(self):
        """--delete ID deletes and exits 0 without asking the model; an unknown id exits 2
        with one line."""
        self.conversation("old-work", [("user", "q"), ("assistant", "a")])
        result = self.run_bantam("--delete", "old")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("[deleted session old-work]", result.stdout)
        self.assertEqual(self.conversation_ids(), [])
        result = self.run_bantam("--delete", "old-work")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(result.stderr.strip().splitlines(), ["error: no session matches 'old-work' (see /list)"])
        self.assertEqual(self.server.requests, [])


if __name__ == "__main__":
    unittest.main()
