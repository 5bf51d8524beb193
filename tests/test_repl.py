"""The interactive REPL on a real pseudo-terminal: prompts, multi-line input, /commands, sessions.

bantam.py runs without arguments on a Pty against the scripted FakeServer; the tests type
like a user (Enter, Ctrl+J, Ctrl+D) and check what is printed, sent and saved under HOME.
"""

import json
import os
import re
import stat
import time
import unittest

from tests.support import (
    PROMPT_LINE, BantamTestCase, completion, error, strip_ansi, text_stream, tool_call_stream)

PROMPT = "> "
SESSION_ID = re.compile(r"\[saved session (\d{8}-\d{6}(?:-\d+)?)\]")


def session_file(sid, saved_at, summary, messages):
    """The JSON text of a saved session, as bantam writes it (its first line all but the messages)."""
    head = json.dumps({"id": sid, "saved_at": saved_at, "summary": summary, "count": len(messages)})
    return head[:-1] + ', "messages": [\n' + ",\n".join(json.dumps(m) for m in messages) + "\n]}\n"


class ReplCase(BantamTestCase):
    """Start the REPL on a terminal and talk to it."""

    def start(self, **env):
        """Start bantam on a Pty and wait for the first prompt."""
        term = self.pty(env=env)
        term.expect(PROMPT)
        return term

    def say(self, term, line, *expected):
        """Type line + Enter, wait for each expected text in order, then the next prompt; return the output of it."""
        return self.type_line(term, line, *expected).replace("\r", "")   # (readline ends a line with \r\n or \r)

    def quit(self, term, keys="/quit\r"):
        """Leave with keys (/quit or Ctrl+D) at the prompt and assert a clean exit."""
        self.leave(term, keys)

    def write_session(self, sid, saved_at, summary, messages):
        """Put a saved session file into ~/.bantam/sessions."""
        folder = self.ws.sessions_dir()
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, sid + ".json"), "w", encoding="utf-8") as f:
            f.write(session_file(sid, saved_at, summary, messages))

    def conversation(self, *pairs):
        """A message list: system, then (role, content) pairs."""
        return [{"role": "system", "content": "sys"}] + [{"role": r, "content": c} for r, c in pairs]

    def last_messages(self):
        """The messages of the last request the server got."""
        return self.server.bodies[-1]["messages"]


class TurnTests(ReplCase):
    """Prompts, turns and leaving."""

    def test_prompt_turn_and_ctrl_d(self):
        """A prompt sends one turn and prints the reply; Ctrl+D exits 0 and the conversation is autosaved."""
        self.push(text_stream("Hi, human."))
        term = self.start()
        self.say(term, "hello bantam", "Hi, human.")
        self.assertEqual(self.last_messages()[-1], {"role": "user", "content": "hello bantam"})
        self.quit(term, "\x04")
        saved = self.read_autosave()
        self.assertEqual([(m["role"], m["content"]) for m in saved["messages"][1:]],
                         [("user", "hello bantam"), ("assistant", "Hi, human.")])

    def test_conversation_continues(self):
        """A second prompt is sent with the whole conversation so far."""
        self.push(text_stream("first reply"), text_stream("second reply"))
        term = self.start()
        self.say(term, "one", "first reply")
        self.say(term, "two", "second reply")
        self.assertEqual([(m["role"], m["content"]) for m in self.last_messages()[1:]],
                         [("user", "one"), ("assistant", "first reply"), ("user", "two")])
        self.quit(term)

    def test_ctrl_j_makes_a_multi_line_prompt(self):
        """Ctrl+J inserts a newline; Enter sends the whole multi-line prompt as one user message."""
        self.push(text_stream("got both lines"))
        term = self.start()
        term.send("first line\x0asecond line\x0athird")
        term.sendline()
        term.expect("got both lines")
        term.expect(PROMPT_LINE)
        self.assertEqual(len(self.server.posts), 1)
        self.assertEqual(self.last_messages()[-1]["content"], "first line\nsecond line\nthird")
        self.quit(term)

    def test_a_line_typed_during_a_turn_is_sent_after_it(self):
        """A prompt typed with its Enter while a turn runs is sent once the turn ends: the
        terminal does not turn that Enter into Ctrl+J's line break."""
        self.push(text_stream("slow answer", head_delay=1.5), text_stream("second answer"))
        term = self.start()
        term.sendline("first")
        deadline = time.monotonic() + 10
        while not self.server.posts and time.monotonic() < deadline:   # the turn has begun
            time.sleep(0.05)
        term.sendline("second")
        term.expect("slow answer")
        term.expect("second answer")
        self.assertEqual(len(self.server.posts), 2)
        self.assertEqual(self.last_messages()[-1]["content"], "second")
        term.expect(PROMPT_LINE)
        self.quit(term)

    def test_quit_autosaves_and_writes_history(self):
        """/quit exits 0; autosave is written and the typed lines are in ~/.bantam_history (mode 0600)."""
        self.push(text_stream("noted"))
        term = self.start()
        self.say(term, "remember the history", "noted")
        self.quit(term)
        self.assertEqual(self.read_autosave()["messages"][1]["content"], "remember the history")
        history = os.path.join(self.ws.home, ".bantam_history")
        self.assertEqual(stat.S_IMODE(os.stat(history).st_mode), 0o600)
        with open(history, encoding="utf-8", errors="replace") as f:
            self.assertIn("remember the history", f.read())

    def read_history(self):
        """The entries of ~/.bantam_history (one a line)."""
        with open(os.path.join(self.ws.home, ".bantam_history"), encoding="utf-8") as f:
            return f.read().split("\n")[:-1]

    def test_history_keeps_the_newest_thousand_entries(self):
        """A history file of 1,200 entries: after one more line it holds the newest 1,000."""
        with open(os.path.join(self.ws.home, ".bantam_history"), "w", encoding="utf-8") as f:
            f.write("".join("old entry %d\n" % i for i in range(1200)))
        term = self.start()
        self.say(term, "!echo newest", "newest")
        self.quit(term)
        history = self.read_history()
        self.assertEqual(len(history), 1000)
        self.assertEqual(history[0], "old entry 202")
        self.assertEqual(history[-2:], ["!echo newest", "/quit"])

    def test_failed_turn_keeps_the_repl_alive(self):
        """A failed model call prints the error and the REPL goes on with the next prompt."""
        self.push(error(401, "bad key here"), text_stream("works now"))
        term = self.start()
        self.say(term, "first try", "bad key here")
        self.say(term, "second try", "works now")
        self.assertNotIn("assistant", [m["role"] for m in self.last_messages()])
        self.quit(term)

    def test_color_auto_on_a_terminal(self):
        """color=auto on a terminal uses the palette: with render=never (the spec's traces) a
        yellow tool-call trace and a green result header; rendered, a yellow "$ command"."""
        for render, call, result in (("never", "\033[33m[tool call: shell_exec(", "\033[32m[tool result: shell_exec]"),
                                     ("auto", "\033[33m$ echo painted", "\033[2mexit 0 \u00b7 ")):
            with self.subTest(render=render):
                self.ws.write_config(self.server, color="auto", render=render)
                self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo painted"})]),
                          text_stream("colored"))
                term = self.start()
                term.sendline("hi")
                term.expect(call)
                term.expect(result)
                term.expect("colored")
                term.expect(PROMPT_LINE)
                self.quit(term, "\x04")


class CommandTests(ReplCase):
    """The slash commands."""

    def test_help_lists_every_command(self):
        """/help lists every command with a line of help, and Ctrl+J."""
        term = self.start()
        out = strip_ansi(self.say(term, "/help", "/quit"))
        for command in ("/save", "/list", "/load", "/compact", "/clear", "/help", "/quit", "Ctrl+J"):
            with self.subTest(command=command):
                self.assertRegex(out, r"(?m)^%s\s+\S" % re.escape(command))
        self.assertEqual(self.server.posts, [])
        self.quit(term)

    def test_unknown_command(self):
        """An unknown /command says so, sends nothing, and the REPL goes on."""
        term = self.start()
        self.say(term, "/frobnicate", "unknown command /frobnicate")
        self.say(term, "/lod 2026", "unknown command /lod")   # a typo with an argument too
        self.assertEqual(self.server.posts, [])
        self.push(text_stream("a hosts file"))
        self.say(term, "/etc/hosts is what?", "a hosts file")   # a path is a prompt
        self.assertEqual(self.server.posts[-1]["body"]["messages"][-1]["content"], "/etc/hosts is what?")
        self.quit(term)

    def test_clear(self):
        """/clear starts a new conversation: the next request holds only the system prompt and
        the new prompt; the old conversation stays in its own file."""
        self.push(text_stream("old reply"), text_stream("new reply"))
        term = self.start()
        self.say(term, "old topic", "old reply")
        old = self.read_autosave()["id"]
        self.say(term, "/clear", "[conversation cleared]")
        self.say(term, "new topic", "new reply")
        self.assertEqual([(m["role"], m["content"]) for m in self.last_messages()[1:]],
                         [("user", "new topic")])
        new = self.read_autosave()
        self.assertNotEqual(new["id"], old)
        self.assertEqual([m["content"] for m in new["messages"][1:]], ["new topic", "new reply"])
        with open(os.path.join(self.ws.sessions_dir(), old + ".json"), encoding="utf-8") as f:
            self.assertEqual([m["content"] for m in json.load(f)["messages"][1:]], ["old topic", "old reply"])
        self.quit(term)

    def test_save_asks_the_model_for_a_summary(self):
        """/save writes sessions/<YYYYmmdd-HHMMSS>.json (mode 0600) with a summary from a no-tools,
        non-streamed request."""
        self.push(text_stream("reply one"), completion("Talking about parrots"))
        term = self.start()
        self.say(term, "tell me about parrots", "reply one")
        out = self.say(term, "/save", "[saved session")
        sid = SESSION_ID.search(out).group(1)
        self.assertRegex(sid, r"^\d{8}-\d{6}(-\d+)?$")
        summary_request = self.server.bodies[-1]
        self.assertIs(summary_request["stream"], False)
        self.assertNotIn("tools", summary_request)
        self.assertEqual(summary_request["messages"][1]["content"], "tell me about parrots")
        path = os.path.join(self.ws.sessions_dir(), sid + ".json")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path, encoding="utf-8") as f:
            session = json.load(f)
        self.assertEqual(session["id"], sid)
        self.assertRegex(session["saved_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
        self.assertEqual(session["summary"], "Talking about parrots")
        live = self.read_autosave()["id"]   # the conversation goes on in its own file
        self.assertNotEqual(live, sid)
        self.assertEqual(sorted(os.listdir(self.ws.sessions_dir())),   # no temp file left behind
                         sorted(["autosave.json", sid + ".json", live + ".json"]))
        self.assertEqual([(m["role"], m["content"]) for m in session["messages"][1:]],
                         [("user", "tell me about parrots"), ("assistant", "reply one")])
        self.quit(term)

    def test_save_before_any_prompt_saves_nothing(self):
        """/save at once: one line says there is nothing to save; no request, no file (a title
        was once made up by the model for an empty conversation)."""
        term = self.start()
        out = self.say(term, "/save", "nothing to save yet")
        self.assertIn("error: nothing to save yet: the conversation has no prompt", out)
        self.quit(term)
        self.assertEqual(self.server.requests, [])
        sessions = self.ws.sessions_dir()
        self.assertEqual(os.listdir(sessions) if os.path.isdir(sessions) else [], [])

    def test_save_never_overwrites(self):
        """Saves in the same second get distinct ids; an existing session file is never replaced."""
        self.push(text_stream("reply"), completion("first summary"), completion("second summary"))
        term = self.start()
        self.say(term, "something to save", "reply")
        now, live = time.time(), self.read_autosave()["id"]   # the conversation's own file is its own
        taken = [time.strftime("%Y%m%d-%H%M%S", time.localtime(now + s)) for s in range(-1, 30)]
        taken = [sid for sid in taken if sid != live]
        for sid in taken:   # every plain id of the next half minute is taken already
            self.write_session(sid, "2000-01-01T00:00:00", "do not touch", self.conversation())
        ids = []
        for _ in range(2):
            ids.append(SESSION_ID.search(self.say(term, "/save", "[saved session")).group(1))
        self.assertNotEqual(ids[0], ids[1])
        for sid in ids:
            self.assertRegex(sid, r"^\d{8}-\d{6}-\d+$")
            self.assertIn(sid.rsplit("-", 1)[0], taken + [live])
        for sid in taken:
            with open(os.path.join(self.ws.sessions_dir(), sid + ".json"), encoding="utf-8") as f:
                self.assertEqual(json.load(f)["summary"], "do not touch")
        self.quit(term)

    def test_save_summary_falls_back_to_first_prompt(self):
        """When the summary request fails, /save still saves, with the first prompt shortened as summary."""
        first = "please look into the flaky integration tests of the payment service and report back"
        self.push(text_stream("on it"), error(401, "summary refused"))
        term = self.start()
        self.say(term, first, "on it")
        sid = SESSION_ID.search(self.say(term, "/save", "[saved session")).group(1)
        with open(os.path.join(self.ws.sessions_dir(), sid + ".json"), encoding="utf-8") as f:
            summary = json.load(f)["summary"]
        self.assertTrue(summary.startswith("please look into the flaky"), summary)
        self.assertLess(len(summary), len(first))
        self.quit(term)

    def test_list_newest_first(self):
        """/list shows id, time, message count and summary of each session, newest first."""
        self.write_session("20240101-000000", "2024-01-01T00:00:00+0000", "the older one",
                           self.conversation(("user", "a")))
        self.write_session("20250505-120000", "2025-05-05T12:00:00+0000", "the newer one",
                           self.conversation(("user", "b"), ("assistant", "c"), ("user", "d")))
        term = self.start()
        out = strip_ansi(self.say(term, "/list", "the older one"))
        rows = [l for l in out.splitlines() if l[2:6] in ("2024", "2025")]
        self.assertEqual(len(rows), 2, out)
        self.assertRegex(rows[0], r"^  20250505-120000\s+just now\s+4 msgs\s+the newer one$")
        self.assertRegex(rows[1], r"^  20240101-000000\s+just now\s+2 msgs\s+the older one$")
        self.quit(term)

    def test_load_by_id_and_prefix(self):
        """/load takes an exact id or a unique prefix; ambiguous and unknown ones are clear errors."""
        self.write_session("20240101-000000", "2024-01-01T00:00:00", "older",
                           self.conversation(("user", "old question"), ("assistant", "old answer")))
        self.write_session("20240101-000000-2", "2024-01-01T00:00:00", "twin",
                           self.conversation(("user", "twin question"), ("assistant", "twin answer")))
        self.write_session("20250505-120000", "2025-05-05T12:00:00", "newer",
                           self.conversation(("user", "new question"), ("assistant", "new answer")))
        self.push(text_stream("continuing old"), text_stream("continuing new"))
        term = self.start()
        self.say(term, "/load 2024", "matches 2 sessions")
        self.say(term, "/load 1999", "no session matches")
        self.say(term, "/load", "usage")
        self.say(term, "/load 20240101-000000", "[continuing 20240101-000000: 3 messages, ")
        self.assertEqual(self.read_autosave()["messages"][1]["content"], "old question")
        self.say(term, "and then?", "continuing old")
        self.assertEqual([m["content"] for m in self.last_messages()],
                         ["sys", "old question", "old answer", "and then?"])
        self.say(term, "/load 2025", "[continuing 20250505-120000: 3 messages, ")
        self.say(term, "more", "continuing new")
        self.assertEqual([m["content"] for m in self.last_messages()],
                         ["sys", "new question", "new answer", "more"])
        self.quit(term)

    def test_compact(self):
        """/compact asks for a summary without tools, and the conversation becomes [system, user: summary]."""
        self.push(text_stream("long answer"), completion("SUMMARY: user asked, bantam answered"),
                  text_stream("after compaction"))
        term = self.start()
        self.say(term, "a long question", "long answer")
        self.say(term, "/compact", "[compacted 3 messages")
        compact_request = self.server.bodies[1]
        self.assertNotIn("tools", compact_request)
        self.assertIs(compact_request["stream"], False)
        saved = self.read_autosave()["messages"]
        self.assertEqual([m["role"] for m in saved], ["system", "user"])
        self.assertIn("SUMMARY: user asked, bantam answered", saved[1]["content"])
        self.say(term, "next", "after compaction")   # joins the summary: no two user messages in a row
        self.assertEqual(self.last_messages(), [saved[0], dict(saved[1], content=saved[1]["content"] + "\n\nnext")])
        self.quit(term)

    def test_failed_compact_keeps_the_conversation(self):
        """When the summary request of /compact fails, an error is shown and the conversation is unchanged."""
        self.push(text_stream("answer kept"), error(401, "no summaries today"), text_stream("still here"))
        term = self.start()
        self.say(term, "question kept", "answer kept")
        self.say(term, "/compact", "no summaries today")
        self.say(term, "next", "still here")
        self.assertEqual([m["content"] for m in self.last_messages()[1:]],
                         ["question kept", "answer kept", "next"])
        self.quit(term)


if __name__ == "__main__":
    unittest.main()
