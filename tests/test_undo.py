"""A turn's changes seen and taken back: in a real git repository, a scripted model changes,
creates and deletes files through shell_exec; the change line names them, /diff shows them and
/undo puts them back without touching the user's index, HEAD or stash. Outside git a turn's
changes are not tracked: /diff and /undo say they need a git work tree."""

import json
import os
import subprocess

from tests.support import BantamTestCase, strip_ansi, text_stream, tool_call_stream

EDIT = "sed -i s/one/two/ calc.py && echo fresh > notes.md && rm old.txt"


def git(folder, *args):
    """git's output in folder (a failure fails the test)."""
    return subprocess.run(["git"] + list(args), cwd=folder, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True).stdout


class UndoCase(BantamTestCase):
    """A git repository with work in progress: a commit, a staged change, a stash."""

    def setUp(self):
        super().setUp()
        work = self.ws.work
        git(work, "init", "-q")
        git(work, "config", "user.email", "t@example.com")
        git(work, "config", "user.name", "T")
        for name, text in (("calc.py", "x = one\n"), ("old.txt", "old\n"), ("kept.txt", "a\n")):
            self.ws.write(name, text)
        git(work, "add", ".")
        git(work, "commit", "-q", "-m", "first")
        self.ws.write("kept.txt", "stashed\n")
        git(work, "stash", "-q")
        self.ws.write("kept.txt", "staged\n")
        git(work, "add", "kept.txt")
        self.state = self.user_state()

    def user_state(self):
        """What /undo must never touch: the index's entries, HEAD, the stash."""
        work = self.ws.work
        return (git(work, "ls-files", "-s"), git(work, "rev-parse", "HEAD"),
                git(work, "stash", "list"), git(work, "diff", "--cached"))

    def read(self, name):
        """A work file's text, or None."""
        path = os.path.join(self.ws.work, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()

    def edit_turn(self, command=EDIT, answer="done"):
        """Script one turn: the model runs command, then answers."""
        self.push(tool_call_stream([("c%d" % len(self.server.posts), "shell_exec",
                                     {"command": command})]), text_stream(answer))

    def start(self, *args):
        """The REPL on a terminal, at its first prompt."""
        term = self.pty(*args)
        term.expect("> ")
        return term


class ChangesTests(UndoCase):

    def test_change_line_diff_and_undo_restore_all_three(self):
        """The change line names the edited, the new and the deleted file; /diff shows them;
        /undo answered y restores all three and leaves index, HEAD and stash alone."""
        self.edit_turn()
        term = self.start()
        out = strip_ansi(self.type_line(term, "edit things", "done"))
        self.assertIn("changed: calc.py, notes.md (new), old.txt (deleted)", out)
        self.assertEqual(self.read("calc.py"), "x = two\n")
        out = strip_ansi(self.type_line(term, "/diff"))
        for text in ("-x = one", "+x = two", "+fresh", "-old"):
            self.assertIn(text, out)
        term.sendline("/undo")
        term.expect("[y/N]")
        out = strip_ansi(self.type_line(term, "y", "undone"))
        self.assertEqual(self.read("calc.py"), "x = one\n")
        self.assertEqual(self.read("old.txt"), "old\n")
        self.assertIsNone(self.read("notes.md"))
        self.assertEqual(self.user_state(), self.state)
        self.leave(term)
        saved = self.read_autosave()
        self.assertIn("[the user undid the changes of the last turn: calc.py, notes.md, old.txt]",
                      saved["messages"][-1]["content"])

    def test_second_undo_goes_one_more_turn_back(self):
        """Two turns, two /undo: the files are as before the first turn."""
        self.edit_turn("echo a > one.txt", "first")
        self.edit_turn("echo b > two.txt && echo c >> calc.py", "second")
        term = self.start()
        self.type_line(term, "one", "first")
        self.type_line(term, "two", "second")
        for _ in range(2):
            term.sendline("/undo")
            term.expect("[y/N]")
            self.type_line(term, "y", "undone")
        self.assertIsNone(self.read("one.txt"))
        self.assertIsNone(self.read("two.txt"))
        self.assertEqual(self.read("calc.py"), "x = one\n")
        out = strip_ansi(self.type_line(term, "/undo"))
        self.assertIn("nothing to undo", out)
        self.leave(term)

    def test_a_file_changed_after_the_turn_is_named_and_left_alone(self):
        """A file you changed since the turn ended is named and kept as you left it."""
        self.edit_turn()
        term = self.start()
        self.type_line(term, "edit things", "done")
        self.ws.write("calc.py", "x = mine\n")
        term.sendline("/undo")
        term.expect("[y/N]")
        self.assertIn("left alone", strip_ansi(term.output))
        self.assertIn("calc.py", strip_ansi(term.output).split("left alone")[1])
        self.type_line(term, "y", "undone")
        self.assertEqual(self.read("calc.py"), "x = mine\n")
        self.assertEqual(self.read("old.txt"), "old\n")
        self.leave(term)

    def test_no_undoes_nothing(self):
        """An answer other than y leaves every file as the turn left it."""
        self.edit_turn()
        term = self.start()
        self.type_line(term, "edit things", "done")
        term.sendline("/undo")
        term.expect("[y/N]")
        self.type_line(term, "", "nothing undone")
        self.assertEqual(self.read("calc.py"), "x = two\n")
        self.leave(term)

    def test_continue_then_undo(self):
        """The trees are in the session file: -c in a new process can still undo."""
        self.edit_turn()
        self.ws.write("p.txt", "edit things")
        result = self.run_bantam("p.txt")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("changed: calc.py, notes.md (new)", result.stderr)
        term = self.start("-c")
        term.sendline("/undo")
        term.expect("[y/N]")
        self.type_line(term, "y", "undone")
        self.assertEqual(self.read("calc.py"), "x = one\n")
        self.assertIsNone(self.read("notes.md"))
        self.leave(term)

    def test_changes_event_in_jsonl(self):
        """--jsonl carries the same list as a changes event."""
        self.edit_turn()
        self.ws.write("p.txt", "edit things")
        result = self.run_bantam("--jsonl", "p.txt")
        events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        changes = [e for e in events if e["type"] == "changes"]
        self.assertEqual(len(changes), 1, result.stdout[-2000:])
        self.assertEqual([(f["path"], f["status"]) for f in changes[0]["files"]],
                         [("calc.py", "changed"), ("notes.md", "new"), ("old.txt", "deleted")])

    def test_snapshots_off_says_nothing(self):
        """snapshots=false: no change line, and /undo has nothing."""
        self.ws.write_config(self.server, snapshots="false")
        self.edit_turn()
        self.ws.write("p.txt", "edit things")
        result = self.run_bantam("p.txt")
        self.assertNotIn("changed:", result.stderr)


class NoGitTests(BantamTestCase):
    """Outside a git work tree a turn's changes are not tracked."""

    def test_diff_and_undo_say_they_need_git(self):
        """A write tool's change: no change line; /diff and /undo each say so in one line, and
        the file stays as the turn left it."""
        self.ws.write_config(self.server, tools="shell_exec,write")
        self.ws.write("calc.py", "x = 1\n")
        self.push(tool_call_stream([("w1", "write", {"filePath": "calc.py",
                                                     "content": "x = 2\n"})]),
                  text_stream("written"))
        term = self.pty(env={"GIT_CEILING_DIRECTORIES": self.ws.root})
        term.expect("> ")
        out = strip_ansi(self.type_line(term, "change it", "written"))
        self.assertNotIn("changed:", out)
        for command in ("/diff", "/undo"):
            out = strip_ansi(self.type_line(term, command))
            self.assertIn("error: %s works in a git work tree (git init here to use it)" % command,
                          out)
        with open(os.path.join(self.ws.work, "calc.py"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "x = 2\n")
        self.leave(term)

    def test_an_earlier_bantams_turn_outside_git_is_left_out(self):
        """A session saved by an earlier bantam, with a write tool's turn outside git (no git
        trees): -c then /undo says /undo needs a git work tree, no traceback."""
        path = os.path.join(self.ws.work, "calc.py")
        head = {"id": "20250101-000000", "uid": "0123456789abcdef",
                "cwd": os.path.realpath(self.ws.work), "created_at": "2026-01-01T00:00:00+0000",
                "saved_at": "2026-01-01T00:00:00+0000", "summary": "s", "count": 3,
                "turns": [{"writes": {path: ["x = 1\n", "x = 2\n"]}}]}
        messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "change it"},
                    {"role": "assistant", "content": "written"}]
        os.makedirs(self.ws.sessions_dir(), exist_ok=True)
        with open(os.path.join(self.ws.sessions_dir(), "20250101-000000.json"), "w",
                  encoding="utf-8") as f:
            f.write(json.dumps(head)[:-1] + ', "messages": [\n' + ",\n".join(
                json.dumps(m) for m in messages) + "\n]}\n")
        term = self.pty("-c", env={"GIT_CEILING_DIRECTORIES": self.ws.root})
        term.expect("> ")
        out = strip_ansi(self.type_line(term, "/undo"))
        self.assertIn("error: /undo works in a git work tree (git init here to use it)", out)
        self.assertNotIn("Traceback", out)
        self.leave(term)
