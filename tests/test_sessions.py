"""Issue 10: every conversation kept, saved at every step, hang-ups, the API key only where
the user sent it, the folder's system.txt, and interrupted commands that keep their output.

Covered here, all through real processes (bantam.py as a subprocess or on a real pty) against
the scripted FakeServer on 127.0.0.1, with a throwaway HOME:

- ConversationFileTests: one file per conversation (~/.bantam/sessions/<id>.json) from its
  first turn, in the header-line + one-message-per-line format; autosave.json a link to the
  latest; a new REPL, /clear and a batch run never overwrite an earlier conversation.
- SaveLoadTests: /save [name] (a copy with a model-written summary; another conversation's
  name refused with a free name suggested; the same conversation re-saves), /load continuing
  in its own file, /continue and /cont, /list marking this folder's, batch -c and --session,
  bantam 1.0 files (and a 1.0 autosave.json) loading unchanged.
- StepSaveTests: the prompt saved before the request; a SIGKILL in the middle of a
  multi-step turn keeps the finished steps (<id>.json + <id>.steps journal), repaired on load.
- ContinuedFileTests: the file of a continued conversation holds all of it (a known bug).
- HangUpTests: SIGHUP (and a closed terminal) saves, stops the command's group, exits 129.
- KeyDestinationBatchTests / KeyDestinationReplTests: the user's key (or anything) goes to an
  endpoint named by the folder's model.cfg only when the folder is trusted (--trust,
  BANTAM_TRUST=1, or "y" to the REPL's question, remembered in ~/.bantam/folders.json);
  "n" runs on the user's own settings. (More in test_trust.py.)
- SystemPromptNoteTests: the folder's system.txt replaces the system prompt, said once a run.
- InterruptedCommandTests: Ctrl+C during shell_exec keeps what the command printed.
"""

import json
import os
import re
import signal
import stat
import time
import unittest

from tests.support import (
    BantamTestCase, completion, hang, read_text, strip_ansi, text_stream, tool_call_stream)

PROMPT = "> "
TIME_ID = re.compile(r"^\d{8}-\d{6}(?:-\d+)?$")
HEADER_KEYS = {"id", "uid", "cwd", "created_at", "saved_at", "summary", "count"}
USER_KEY = "sk-user-secret-0123456789"        # the user's own key, from the environment
FOLDER_KEY = "sk-folder-own-key-9876543210"   # a key written in the folder's model.cfg


# ---------------------------------------------------------------- helpers

def wait_until(condition, timeout=10, step=0.02):
    """Poll condition() until it is true or timeout passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def read_bytes(path):
    """The bytes of path."""
    with open(path, "rb") as f:
        return f.read()


def signal_pending(pid, signum):
    """True when signum waits to be delivered to pid (/proc/PID/status SigPnd or ShdPnd)."""
    bit = 1 << (signum - 1)
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & bit:
                return True
    return False


def process_state(pid):
    """The state letter of pid from /proc (None when gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def group_members(pgid):
    """The live (not zombie) processes whose process group is pgid."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def kill_group_later(test, pid_file):
    """In cleanup, SIGKILL the process group led by the PID in pid_file (a command bantam
    started in its own session, which a kill of bantam's group does not reach)."""
    def kill():
        text = read_text(pid_file).strip()
        if text.isdigit():
            try:
                os.killpg(int(text), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    test.addCleanup(kill)


def tool_outputs(trace_path):
    """The text of the tool_output events in a --trace file so far."""
    text = ""
    for line in read_text(trace_path).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "tool_output":
            text += event.get("text", "")
    return text


def roles(messages):
    """The roles of messages, in order."""
    return [m.get("role") for m in messages]


def talk(messages):
    """(role, content) of every message after the system prompt."""
    return [(m.get("role"), m.get("content")) for m in messages[1:]]


def call_problems(messages):
    """Tool calls without exactly one tool message (and tool messages without a call)."""
    problems, open_calls = [], {}
    for i, m in enumerate(messages + [{"role": "end"}]):
        if m.get("role") == "tool":
            cid = m.get("tool_call_id")
            if open_calls.get(cid) != 0:
                problems.append("message %d: unexpected tool message for %r" % (i, cid))
            else:
                open_calls[cid] = 1
            continue
        problems += ["call %r unanswered before message %d" % (c, i) for c, n in open_calls.items() if not n]
        open_calls = {c["id"]: 0 for c in m.get("tool_calls") or ()}
    return problems


def new_format(sid, messages, cwd, summary="", uid="0123456789abcdef", saved_at="2026-01-01T00:00:00+0000"):
    """The text of a session file as bantam 1.1 writes it: the header line, one message a line."""
    head = {"id": sid, "uid": uid, "cwd": cwd, "created_at": saved_at, "saved_at": saved_at,
            "summary": summary, "count": len(messages)}
    return (json.dumps(head, ensure_ascii=False)[:-1] + ', "messages": [\n'
            + ",\n".join(json.dumps(m, ensure_ascii=False) for m in messages) + "\n]}\n")


def old_format(sid, messages, summary, saved_at="2025-03-04T05:06:07"):
    """The text of a session file as bantam 1.0 wrote it (json.dumps with indent=1)."""
    return json.dumps({"id": sid, "saved_at": saved_at, "summary": summary, "messages": messages}, indent=1)


OLD_MESSAGES = [   # a bantam 1.0 conversation with everything a message may hold
    {"role": "system", "content": "old system prompt"},
    {"role": "user", "content": "list the files,\nplease \u2014 all of them \U0001f600"},
    {"role": "assistant", "content": None, "reasoning_content": "ls will do",
     "tool_calls": [{"id": "call_old1", "type": "function",
                     "function": {"name": "shell_exec", "arguments": "{\"command\": \"ls\"}"}}]},
    {"role": "tool", "tool_call_id": "call_old1", "content": "a.txt\nb.txt\n\n\nexit: 0"},
    {"role": "assistant", "content": "There are two files: a.txt and b.txt."},
]


class SessionCase(BantamTestCase):
    """A REPL on a pty, batch runs, and the session files under the workspace's HOME."""

    def setUp(self):
        """The workspace, plus its real path (what bantam records as "cwd")."""
        super().setUp()
        self.here = os.path.realpath(self.ws.work)

    def start_repl(self, *args, env=None):
        """Start the REPL on a pty and wait for its first prompt."""
        term = self.pty(*args, env=env)
        term.expect(PROMPT)
        return term

    def say(self, term, line, *expected):
        """Type line + Enter, wait for each expected text, then the next prompt; return the output."""
        return strip_ansi(self.type_line(term, line, *expected))

    def quit(self, term):
        """Leave with /quit and check the exit status is 0."""
        self.leave(term)

    def path(self, sid, ext=".json"):
        """The file of session sid (or its journal with ext='.steps')."""
        return os.path.join(self.ws.sessions_dir(), sid + ext)

    def conversation_ids(self):
        """The ids of every session file (autosave.json not among them), sorted."""
        try:
            names = os.listdir(self.ws.sessions_dir())
        except FileNotFoundError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and n != "autosave.json"
                      and not n.startswith("."))

    def session(self, sid):
        """Session sid's file, parsed."""
        with open(self.path(sid), encoding="utf-8") as f:
            return json.load(f)

    def autosave_target(self):
        """The id autosave.json links to (it must be a symbolic link)."""
        link = self.path("autosave")
        self.assertTrue(os.path.islink(link), "autosave.json is not a link")
        target = os.readlink(link)
        self.assertEqual(os.path.dirname(target), "", target)   # relative, in the same folder
        return target[:-5]

    def write_session(self, sid, text, mtime=None):
        """Put a session file into ~/.bantam/sessions (with mtime, when given)."""
        os.makedirs(self.ws.sessions_dir(), exist_ok=True)
        with open(self.path(sid), "w", encoding="utf-8") as f:
            f.write(text)
        if mtime is not None:
            os.utime(self.path(sid), (mtime, mtime))

    def batch(self, prompt, *args, env=None):
        """A batch run with prompt (-p); asserts exit status 0 and returns the result."""
        result = self.run_bantam("-p", prompt, *args, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def last_messages(self):
        """The messages of the last request the server got."""
        return self.server.bodies[-1]["messages"]


# ---------------------------------------------------------------- one file per conversation

class ConversationFileTests(SessionCase):
    """Every conversation has its own file from its first turn; nothing overwrites another."""

    def test_two_repl_runs_and_a_clear_leave_three_files(self):
        """Two REPL runs and a /clear in a row leave three conversation files, each with its own
        prompt; the first is not touched by the later runs; autosave.json links to the last."""
        self.push(text_stream("reply one"), text_stream("reply two"), text_stream("reply three"))
        term = self.start_repl()
        self.say(term, "first conversation", "reply one")
        self.quit(term)
        [first] = self.conversation_ids()
        first_bytes = read_bytes(self.path(first))
        term = self.start_repl()
        self.say(term, "second conversation", "reply two")
        self.say(term, "/clear", "[conversation cleared]")
        self.say(term, "third conversation", "reply three")
        self.assertEqual(talk(self.last_messages()), [("user", "third conversation")])
        self.quit(term)
        ids = self.conversation_ids()
        self.assertEqual(len(ids), 3, ids)
        for sid in ids:
            self.assertRegex(sid, TIME_ID)
        by_prompt = {self.session(sid)["messages"][1]["content"]: sid for sid in ids}
        self.assertEqual(sorted(by_prompt), ["first conversation", "second conversation", "third conversation"])
        for n, word in enumerate(("first", "second", "third")):
            saved = self.session(by_prompt[word + " conversation"])
            self.assertEqual(talk(saved["messages"]), [("user", word + " conversation"),
                                                        ("assistant", "reply " + ("one", "two", "three")[n])])
            self.assertEqual(saved["id"], by_prompt[word + " conversation"])
        self.assertEqual(by_prompt["first conversation"], first)
        self.assertEqual(read_bytes(self.path(first)), first_bytes)
        self.assertEqual(self.autosave_target(), by_prompt["third conversation"])
        self.assertEqual(len({self.session(sid)["uid"] for sid in ids}), 3)

    def test_a_first_prompt_titles_the_file_whole_up_to_60_characters(self):
        """Up to 60 characters the first prompt's line is the summary as typed; longer, its
        first 57 and "..."."""
        for prompt, summary in (("x" * 59, "x" * 59), ("y" * 60, "y" * 60),
                                ("z" * 61, "z" * 57 + "...")):
            self.push(text_stream("ok"))
            self.batch(prompt)
            summaries = [self.session(sid)["summary"] for sid in self.conversation_ids()]
            self.assertIn(summary, summaries)

    def test_file_format(self):
        """A session file is a header line (id, uid, cwd, created_at, saved_at, summary, count and
        "messages": [), then one message per line, then ]}; mode 0600; no journal left."""
        self.push(tool_call_stream([("call_1", "shell_exec", {"command": "printf 'two\\nlines'"})]),
                  text_stream("done\nwith a newline"))
        self.batch("look around")
        [sid] = self.conversation_ids()
        self.assertEqual(stat.S_IMODE(os.stat(self.path(sid)).st_mode), 0o600)
        self.assertFalse(os.path.exists(self.path(sid, ".steps")))
        lines = read_text(self.path(sid)).split("\n")
        self.assertEqual(lines[-2:], ["]}", ""])
        self.assertTrue(lines[0].endswith(', "messages": ['), lines[0][-80:])
        head = json.loads(lines[0][:-len(', "messages": [')] + "}")
        self.assertEqual(set(head), HEADER_KEYS)
        whole = self.session(sid)
        messages = [json.loads(line[:-1] if line.endswith(",") else line) for line in lines[1:-2]]
        self.assertEqual(messages, whole["messages"])
        self.assertEqual(roles(messages), ["system", "user", "assistant", "tool", "assistant"])
        self.assertEqual(messages[3]["content"], "two\nlines\n\nexit: 0")
        self.assertEqual((head["id"], head["cwd"], head["count"]), (sid, self.here, 5))
        self.assertRegex(head["uid"], r"^[0-9a-f]{8,}$")
        for key in ("created_at", "saved_at"):
            self.assertRegex(head[key], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
        self.assertEqual(head["summary"], "look around")   # no summary yet: the first prompt
        self.assertEqual(self.autosave_target(), sid)

    def test_batch_runs_never_overwrite(self):
        """Each batch run is a new conversation with a file of its own; autosave.json links to the latest."""
        self.push(text_stream("answer A"), text_stream("answer B"))
        self.batch("question A")
        self.batch("question B")
        ids = self.conversation_ids()
        self.assertEqual(len(ids), 2, ids)
        prompts = sorted(self.session(sid)["messages"][1]["content"] for sid in ids)
        self.assertEqual(prompts, ["question A", "question B"])
        self.assertEqual(talk(self.session(self.autosave_target())["messages"]),
                         [("user", "question B"), ("assistant", "answer B")])
        self.assertEqual(talk(self.last_messages()), [("user", "question B")])


# ---------------------------------------------------------------- /save, /load, /continue, /list

class SaveLoadTests(SessionCase):
    """Named saves, loading, resuming this folder's conversation, old files."""

    def test_load_continues_in_its_own_file(self):
        """/load <id> continues that conversation: the next request holds its messages and the
        turn is written to its file; the conversation left stays as it was; no new file."""
        self.push(text_stream("old answer"))
        self.batch("old question")
        [old] = self.conversation_ids()
        self.push(text_stream("current answer"), text_stream("continued answer"))
        term = self.start_repl()
        self.say(term, "current question", "current answer")
        current = self.autosave_target()
        current_bytes = read_bytes(self.path(current))
        self.say(term, "/load " + old, "[continuing %s: 3 messages, " % old)
        self.assertEqual(self.autosave_target(), old)
        self.say(term, "follow-up", "continued answer")
        self.assertEqual(talk(self.last_messages()),
                         [("user", "old question"), ("assistant", "old answer"), ("user", "follow-up")])
        self.quit(term)
        self.assertEqual(sorted(self.conversation_ids()), sorted([old, current]))
        self.assertEqual(talk(self.session(old)["messages"])[-2:],
                         [("user", "follow-up"), ("assistant", "continued answer")])
        self.assertEqual(self.session(old)["id"], old)
        self.assertEqual(read_bytes(self.path(current)), current_bytes)
        self.assertEqual(self.autosave_target(), old)

    def folder_history(self):
        """Two conversations of this folder (the newer one B) and a newer one of another folder;
        returns B's id."""
        system = {"role": "system", "content": "sys"}
        now = time.time()
        for sid, cwd, age, word in (("20250101-000000", self.here, 300, "A"),
                                    ("20250102-000000", self.here, 200, "B"),
                                    ("20250103-000000", "/somewhere/else", 100, "C")):
            messages = [system, {"role": "user", "content": "question " + word},
                        {"role": "assistant", "content": "answer " + word}]
            self.write_session(sid, new_format(sid, messages, cwd, "talk " + word), mtime=now - age)
        return "20250102-000000"

    def test_continue_and_cont_resume_this_folders_newest(self):
        """/continue and /cont load the newest conversation whose cwd is this folder (not a newer
        one of another folder), and the next turn goes on in its file."""
        for command in ("/continue", "/cont"):
            with self.subTest(command=command):
                newest_here = self.folder_history()   # afresh: the first subtest added a turn
                self.push(text_stream("resumed " + command))
                term = self.start_repl()
                self.say(term, command, "[continuing %s: 3 messages, " % newest_here)
                self.say(term, "go on", "resumed " + command)
                self.assertEqual([c for _, c in talk(self.last_messages())][:2], ["question B", "answer B"])
                self.assertEqual(self.last_messages()[-1], {"role": "user", "content": "go on"})
                self.quit(term)
                self.assertEqual(talk(self.session(newest_here)["messages"])[-1], ("assistant", "resumed " + command))
        self.assertEqual(len(self.conversation_ids()), 3)

    def test_continue_without_a_conversation_here(self):
        """/continue in a folder with no conversation says so; batch -c exits 2 and sends nothing."""
        self.write_session("20250103-000000", new_format("20250103-000000", [
            {"role": "system", "content": "sys"}, {"role": "user", "content": "elsewhere"}], "/somewhere/else"))
        term = self.start_repl()
        self.say(term, "/continue", "no conversation of this folder")
        self.quit(term)
        result = self.run_bantam("-c", "-p", "more")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("no conversation of this folder", result.stderr)
        self.assertEqual(self.server.requests, [])

    def test_list_marks_this_folders_conversations(self):
        """/list shows every session, with '*' before this folder's and ' ' before the others'."""
        self.folder_history()
        self.write_session("legacy", new_format("legacy", OLD_MESSAGES, "/elsewhere", "an old one"))
        term = self.start_repl()
        out = self.say(term, "/list", "an old one")
        self.quit(term)
        rows = {line.split()[1] if line.startswith("*") else line.split()[0]: line
                for line in out.splitlines() if re.match(r"^[* ] \S", line)}
        for sid in ("20250101-000000", "20250102-000000"):
            self.assertTrue(rows[sid].startswith("* " + sid), rows[sid])
        for sid in ("20250103-000000", "legacy"):
            self.assertTrue(rows[sid].startswith("  " + sid), rows[sid])
        self.assertRegex(rows["legacy"], r"\b5 msgs\s+an old one$")
        self.assertRegex(rows["20250102-000000"], r"\b3 msgs\s+talk B$")

    def test_bantam_1_0_files_load_unchanged(self):
        """A session file of bantam 1.0 (indent=1, no header line) loads with its messages
        exactly as they were, by /load and by batch --session."""
        for how in ("/load", "--session"):
            with self.subTest(how=how):
                sid = "20250304-050607" if how == "/load" else "20250304-050608"
                self.write_session(sid, old_format(sid, OLD_MESSAGES, "old files"))
                self.push(text_stream("continued " + how))
                if how == "/load":
                    term = self.start_repl()
                    self.say(term, "/load " + sid, "[continuing %s: 5 messages, " % sid)
                    self.say(term, "one more", "continued " + how)
                    self.quit(term)
                else:
                    self.batch("one more", "--session", sid)
                self.assertEqual(self.last_messages(), OLD_MESSAGES + [{"role": "user", "content": "one more"}])
                saved = self.session(sid)   # the whole file: see ContinuedFileTests
                self.assertEqual(saved["messages"][-2:], [{"role": "user", "content": "one more"},
                                                          {"role": "assistant", "content": "continued " + how}])
                self.assertEqual((saved["id"], saved["count"]), (sid, 7))

    def test_batch_continue_flag(self):
        """Batch -c continues the newest conversation of this folder in its file."""
        newest_here = self.folder_history()
        self.push(text_stream("continued in batch"))
        self.batch("next step", "-c")
        self.assertEqual(talk(self.last_messages()),
                         [("user", "question B"), ("assistant", "answer B"), ("user", "next step")])
        self.assertEqual(talk(self.session(newest_here)["messages"])[-1], ("assistant", "continued in batch"))
        self.assertEqual(len(self.conversation_ids()), 3)

    def test_batch_session_flag_starts_then_continues(self):
        """--session ID starts conversation ID when there is none, and continues it the next time."""
        self.push(text_stream("started"), text_stream("continued"))
        self.batch("first", "--session", "my-task")
        self.assertEqual(self.conversation_ids(), ["my-task"])
        self.assertEqual(self.session("my-task")["id"], "my-task")
        self.batch("second", "--session", "my-task")
        self.assertEqual(talk(self.last_messages()), [("user", "first"), ("assistant", "started"), ("user", "second")])
        self.assertEqual(self.conversation_ids(), ["my-task"])
        self.assertEqual(talk(self.session("my-task")["messages"])[-2:],   # the whole file: see ContinuedFileTests
                         [("user", "second"), ("assistant", "continued")])
        self.assertEqual(self.autosave_target(), "my-task")


# ---------------------------------------------------------------- saved at every step

class StepSaveTests(SessionCase):
    """A kill loses at most the step in flight."""

    def test_prompt_is_saved_before_the_request(self):
        """While the first request waits, the prompt is in the conversation's file already; after
        a SIGKILL it is still there and --session continues from it."""
        self.push(hang(30))
        proc = self.start_bantam("-p", "the first prompt")
        self.server.wait_requests(1)
        [sid] = self.conversation_ids()
        self.assertEqual(talk(self.session(sid)["messages"]), [("user", "the first prompt")])
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        self.push(text_stream("answered at last"))
        self.batch("again", "--session", sid)
        self.assertEqual(roles(self.last_messages()), ["system", "user"])
        self.assertIn("the first prompt", self.last_messages()[-1]["content"])
        self.assertIn("again", self.last_messages()[-1]["content"])

    def test_sigkill_mid_turn_keeps_the_finished_steps(self):
        """SIGKILL while the second tool call of a multi-step turn runs: <id>.json holds the prompt
        and the finished steps; loaded with --session, the next request holds them all with one
        tool message per call (repair answers for the step in flight)."""
        pid_file = os.path.join(self.ws.work, "cmd.pid")
        kill_group_later(self, pid_file)
        self.push(tool_call_stream([("call_1", "shell_exec", {"command": "echo step-one-output"})]),
                  tool_call_stream([("call_2", "shell_exec", {"command": "echo $$ >cmd.pid; touch marker; sleep 30"}),
                                    ("call_3", "shell_exec", {"command": "echo ran >never.txt"})]))
        proc = self.start_bantam("-p", "do the steps")
        self.assertTrue(wait_until(lambda: os.path.exists(os.path.join(self.ws.work, "marker"))),
                        "the second tool call never ran")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        [sid] = self.conversation_ids()
        steps = self.session(sid)["messages"][2:]
        self.assertEqual([m["role"] for m in steps], ["assistant", "tool", "assistant"])
        self.assertEqual(steps[1]["tool_call_id"], "call_1")
        self.assertIn("step-one-output", steps[1]["content"])
        self.assertEqual([c["id"] for c in steps[2]["tool_calls"]], ["call_2", "call_3"])

        self.push(text_stream("all done"))
        self.batch("carry on", "--session", sid)
        sent = self.last_messages()
        self.assertEqual(roles(sent), ["system", "user", "assistant", "tool", "assistant", "tool", "tool", "user"])
        self.assertEqual(call_problems(sent), [])
        self.assertEqual([m["tool_call_id"] for m in sent[5:7]], ["call_2", "call_3"])
        for m in sent[5:7]:
            self.assertIn("interrupted", m["content"])
        self.assertEqual(sent[-1]["content"], "carry on")
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "never.txt")))
        saved = self.session(sid)["messages"]   # the whole file: see ContinuedFileTests
        self.assertEqual(len(saved), len(sent) + 1)
        self.assertEqual(saved[-1], {"role": "assistant", "content": "all done"})
        self.assertEqual(self.conversation_ids(), [sid])


def call(cid, command="true"):
    """A shell_exec tool call with id cid, as a stored assistant message holds it."""
    return {"id": cid, "type": "function",
            "function": {"name": "shell_exec", "arguments": json.dumps({"command": command})}}


class LoadRepairTests(SessionCase):
    """A session file whose tool messages are out of order (a crash, a hand edit) loads as a
    conversation the API accepts."""

    def test_tool_results_are_put_right_after_their_calls(self):
        """Stored: a stray tool message with no call, a result that came after the next prompt,
        one with no call among the results, a call that was never answered. Sent: each call's
        result right after the assistant message that made it (in the calls' order), the
        strays dropped (and the late result), the unanswered calls answered as interrupted;
        the file is saved so."""
        stored = [
            {"role": "system", "content": "sys"},
            {"role": "tool", "tool_call_id": "c9", "content": "stray before any call"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "", "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "tool_call_id": "c2", "content": "result two"},
            {"role": "user", "content": "second"},
            {"role": "tool", "tool_call_id": "c1", "content": "result one"},
            {"role": "tool", "tool_call_id": "ghost", "content": "stray among results"},
            {"role": "tool", "tool_call_id": "c2", "content": "a second result for c2"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": "third"},
            {"role": "assistant", "content": "", "tool_calls": [call("c3")]}]
        self.write_session("crafted", json.dumps({"id": "crafted", "messages": stored}))
        self.push(text_stream("all done"))
        self.batch("carry on", "--session", "crafted")
        sent = self.last_messages()
        self.assertEqual(call_problems(sent), [])
        self.assertEqual([(m["role"], m.get("tool_call_id")) for m in sent], [
            ("system", None), ("user", None), ("assistant", None), ("tool", "c1"),
            ("tool", "c2"), ("user", None), ("assistant", None), ("user", None),
            ("assistant", None), ("tool", "c3"), ("user", None)])
        self.assertIn("interrupted", sent[3]["content"])
        self.assertEqual(sent[4]["content"], "result two")
        self.assertIn("interrupted", sent[9]["content"])
        self.assertEqual(self.session("crafted")["messages"][:-1], sent)

    def test_a_reused_call_id_keeps_each_result_with_its_own_call(self):
        """Servers that number calls anew each turn (call_0 every time): a result goes with
        the latest call of its id before it, so each turn keeps its own result."""
        stored = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_0")]},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "", "tool_calls": [call("call_0")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "second turn's result"}]
        self.write_session("reused", json.dumps({"id": "reused", "messages": stored}))
        self.push(text_stream("all done"))
        self.batch("carry on", "--session", "reused")
        sent = self.last_messages()
        self.assertEqual(call_problems(sent), [])
        self.assertEqual(roles(sent), ["system", "user", "assistant", "tool", "user",
                                       "assistant", "tool", "user"])
        self.assertIn("interrupted", sent[3]["content"])
        self.assertEqual(sent[6]["content"], "second turn's result")


class ContinuedFileTests(SessionCase):
    """The file of a conversation that is continued holds the whole conversation."""

    def test_batch_session_file_holds_the_whole_conversation(self):
        """After two turns with --session ID, ID.json holds system, both prompts and both answers,
        and a third turn sends them all."""
        self.push(text_stream("answer one"), text_stream("answer two"), text_stream("answer three"))
        self.batch("prompt one", "--session", "whole")
        self.batch("prompt two", "--session", "whole")
        saved = self.session("whole")["messages"]
        self.assertEqual(roles(saved), ["system", "user", "assistant", "user", "assistant"])
        self.assertEqual([c for _, c in talk(saved)], ["prompt one", "answer one", "prompt two", "answer two"])
        self.batch("prompt three", "--session", "whole")
        self.assertEqual([c for _, c in talk(self.last_messages())],
                         ["prompt one", "answer one", "prompt two", "answer two", "prompt three"])

    def test_loaded_conversation_file_holds_the_whole_conversation(self):
        """After /load of a bantam 1.0 file and one turn, the file holds the old messages exactly,
        then the new prompt and answer."""
        self.write_session("oldone", old_format("oldone", OLD_MESSAGES, "old"))
        self.push(text_stream("new answer"))
        term = self.start_repl()
        self.say(term, "/load oldone", "[continuing oldone: 5 messages, ")
        self.say(term, "new prompt", "new answer")
        self.quit(term)
        self.assertEqual(self.session("oldone")["messages"],
                         OLD_MESSAGES + [{"role": "user", "content": "new prompt"},
                                         {"role": "assistant", "content": "new answer"}])


# ---------------------------------------------------------------- hang-ups

class HangUpTests(SessionCase):
    """SIGHUP is an exit like SIGTERM: save, stop the command's group, exit 129."""

    def test_sighup_saves_stops_the_command_and_exits_129(self):
        """SIGHUP while a tool's command runs: exit 129, the tool message (saved) holds what the
        command printed, and the command's whole process group is gone."""
        trace = os.path.join(self.ws.tmp, "trace.jsonl")
        shell_pid = os.path.join(self.ws.work, "shell.pid")
        child_pid = os.path.join(self.ws.work, "child.pid")
        kill_group_later(self, shell_pid)
        self.push(tool_call_stream([("call_long", "shell_exec", {
            "command": "echo $$ >shell.pid; sleep 60 & echo $! >child.pid; echo printed-before-hup; wait"})]))
        proc = self.start_bantam("-p", "run the long thing", "--trace", trace)
        self.assertTrue(wait_until(lambda: "printed-before-hup" in tool_outputs(trace)),
                        "bantam never got the command's output")
        pgid, child = int(read_text(shell_pid)), int(read_text(child_pid))
        self.assertEqual(os.getpgid(child), pgid)
        os.kill(proc.pid, signal.SIGHUP)
        proc.communicate(timeout=15)
        self.assertEqual(proc.returncode, 129)
        self.assertEqual(wait_until(lambda: not group_members(pgid), timeout=5), True,
                         "the command's group still runs: %s" % group_members(pgid))
        saved = self.session(self.autosave_target())["messages"]
        self.assertEqual(roles(saved), ["system", "user", "assistant", "tool"])
        self.assertEqual(saved[3]["tool_call_id"], "call_long")
        self.assertIn("printed-before-hup", saved[3]["content"])
        self.assertFalse(os.path.exists(self.path(self.autosave_target(), ".steps")))

    def test_sighup_while_waiting_for_the_model(self):
        """SIGHUP while the request waits: exit 129 with the prompt saved."""
        self.push(hang(30))
        proc = self.start_bantam("-p", "hang-up question")
        self.server.wait_requests(1)
        os.kill(proc.pid, signal.SIGHUP)
        proc.communicate(timeout=15)
        self.assertEqual(proc.returncode, 129)
        self.assertEqual(talk(self.session(self.autosave_target())["messages"]), [("user", "hang-up question")])

    def test_closed_terminal_is_a_hang_up(self):
        """Closing the REPL's terminal while a command runs: bantam exits 129, the command's group
        is stopped, and the turn is saved with the command's output."""
        trace = os.path.join(self.ws.tmp, "trace.jsonl")
        shell_pid = os.path.join(self.ws.work, "shell.pid")
        kill_group_later(self, shell_pid)
        self.push(tool_call_stream([("call_t", "shell_exec", {
            "command": "echo $$ >shell.pid; echo terminal-output; sleep 60"})]))
        term = self.start_repl("--trace", trace)
        term.sendline("start it")
        self.assertTrue(wait_until(lambda: "terminal-output" in tool_outputs(trace)))
        pgid = int(read_text(shell_pid))
        os.close(term.fd)   # the terminal goes away: the kernel hangs up on its session
        term.fd = None
        self.assertTrue(wait_until(lambda: not term.alive(), timeout=15), "bantam still runs")
        self.assertEqual(term.status, 129)
        self.assertEqual(wait_until(lambda: not group_members(pgid), timeout=5), True)
        saved = self.session(self.autosave_target())["messages"]
        self.assertEqual(roles(saved), ["system", "user", "assistant", "tool"])
        self.assertIn("terminal-output", saved[3]["content"])


# ---------------------------------------------------------------- the API key's destination

class KeyCase(SessionCase):
    """A folder whose model.cfg names the fake server's endpoint but holds no key; the user's
    own ~/.bantam/model.cfg names another server (self.own) and no key either."""

    def setUp(self):
        """model.cfg of the folder: the fake server's endpoint, no api_key."""
        super().setUp()
        self.own = self.make_server()
        self.ws.write_config(self.own, api_key=None)
        self.ws.write("model.cfg", "endpoint=%s\n" % self.server.url)

    def assert_never_sent(self, secret):
        """No recorded request (any method) carries secret in a header or its body."""
        for n, r in enumerate(self.server.requests):
            self.assertNotIn(secret, json.dumps(r["headers"]), "request %d (%s)" % (n, r["path"]))
            at = r["raw"].find(secret.encode())
            self.assertEqual(at, -1, "request %d (%s) holds the key: ...%r..." % (
                n, r["path"], r["raw"][max(0, at - 40):at + len(secret) + 10]))

    def authorizations(self):
        """The Authorization header of every recorded request (None where there was none)."""
        return [r["headers"].get("authorization") for r in self.server.requests]


class KeyDestinationBatchTests(KeyCase):
    """Batch mode refuses an untrusted folder's endpoint: neither the key nor the prompt goes there."""

    def test_refuses_with_exit_2_and_sends_nothing(self):
        """A key (or secret headers) from the environment plus this folder's endpoint: exit 2, one
        line naming the endpoint and the ways out, and not a single request anywhere."""
        for variable, value in (("OPENAI_API_KEY", USER_KEY), ("BANTAM_API_KEY", USER_KEY),
                                ("BANTAM_HEADERS", json.dumps({"X-Api-Key": USER_KEY}))):
            with self.subTest(variable=variable):
                result = self.run_bantam("-p", "hello", env={variable: value})
                self.assertEqual(result.returncode, 2, result.stderr)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                for part in ("endpoint=" + self.server.url, "--trust", "BANTAM_TRUST=1"):
                    self.assertIn(part, lines[0])
                self.assertNotIn(USER_KEY, lines[0])
                self.assertEqual(result.stdout, "")
                self.assertEqual(self.server.requests + self.own.requests, [])

    def test_trust_flag_or_variable_sends_the_key(self):
        """--trust or BANTAM_TRUST=1 lets the user's key go to this folder's endpoint."""
        for args, env in ((["--trust"], {}), ([], {"BANTAM_TRUST": "1"})):
            with self.subTest(args=args, env=env):
                self.server.requests.clear()
                self.push(text_stream("trusted answer"))
                result = self.batch("hello", *args, env=dict(env, OPENAI_API_KEY=USER_KEY))
                self.assertIn("trusted answer", result.stdout)
                self.assertTrue(self.server.posts)
                for post in self.server.posts:
                    self.assertEqual(post["headers"].get("authorization"), "Bearer " + USER_KEY)

    def test_folder_own_key_goes_to_its_endpoint_once_trusted(self):
        """A key written in the folder's model.cfg needs trust like its endpoint; trusted, it
        goes to the folder's endpoint and the user's key from the environment is not sent."""
        path = self.ws.write("model.cfg", "endpoint=%s\napi_key=%s\n" % (self.server.url, FOLDER_KEY))
        os.chmod(path, 0o600)   # (a key others can read is refused once trusted)
        result = self.run_bantam("-p", "hello", env={"OPENAI_API_KEY": USER_KEY})
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("api_key=***", result.stderr)
        self.assertNotIn(FOLDER_KEY, result.stderr)
        self.push(text_stream("folder key works"))
        result = self.batch("hello", env={"OPENAI_API_KEY": USER_KEY, "BANTAM_TRUST": "1"})
        self.assertIn("folder key works", result.stdout)
        self.assertEqual(set(self.authorizations()), {"Bearer " + FOLDER_KEY})
        self.assert_never_sent(USER_KEY)

    def test_users_own_endpoint_needs_no_trust(self):
        """When the user's own endpoint (BANTAM_ENDPOINT) is the folder's, there is nothing to ask."""
        self.ws.write_config(None, api_key=None)
        self.push(text_stream("same host"))
        self.batch("hello", env={"OPENAI_API_KEY": USER_KEY, "BANTAM_ENDPOINT": self.server.url})
        self.assertEqual(self.server.posts[0]["headers"].get("authorization"), "Bearer " + USER_KEY)

    def test_key_in_home_model_cfg_never_reaches_the_folders_endpoint(self):
        """A key in ~/.bantam/model.cfg is never sent to the endpoint this folder's model.cfg names."""
        self.ws.write_config(None, api_key=USER_KEY)
        self.push(text_stream("whatever"))
        self.run_bantam("-p", "hello")
        self.assert_never_sent(USER_KEY)
        self.assertEqual(set(self.authorizations()) - {None}, set())

    def test_same_host_other_port_is_another_destination(self):
        """The user's endpoint on this host at one port does not make another port (another
        server, perhaps another user's) a place the user chose."""
        self.ws.write_config(None, api_key=None)
        self.push(text_stream("should not run"))
        result = self.run_bantam("-p", "hello", env={"OPENAI_API_KEY": USER_KEY,
                                                     "BANTAM_ENDPOINT": "http://127.0.0.1:9/v1"})
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(self.server.requests, [])


class KeyDestinationReplTests(KeyCase):
    """The REPL asks once per folder and remembers; N runs on the user's own settings."""

    def question(self):
        """The trust question for this folder."""
        return ("This folder's model.cfg would change endpoint=%s (the model you talk to). "
                "Trust this folder? [y/N] " % self.server.url)

    def folders_json(self):
        """~/.bantam/folders.json, parsed, after checking it is mode 0600."""
        path = os.path.join(self.ws.home, ".bantam", "folders.json")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def answer(self, reply):
        """Start the REPL with the user's key in the environment and answer the question."""
        term = self.pty(env={"OPENAI_API_KEY": USER_KEY}, cols=200)
        term.expect(self.question())
        term.sendline(reply)
        term.expect(PROMPT)
        return term

    def test_no_runs_on_the_users_own_settings_and_is_remembered(self):
        """Enter (N) at the question: the run goes to the user's own endpoint, with the user's
        key, and never to the folder's (not even once, /models included); the answer is kept
        in folders.json (0600), so the next REPL does not ask, nor does batch mode."""
        self.own.push(*(text_stream(t) for t in ("answer from my server", "still mine", "batch")))
        term = self.answer("")
        self.assertIn("[this folder is not trusted: your own settings only", term.output)
        self.say(term, "hello", "answer from my server")
        self.quit(term)
        self.assertEqual(self.folders_json(), {self.here: {"trusted": False}})
        term = self.start_repl(env={"OPENAI_API_KEY": USER_KEY})
        self.say(term, "hello again", "still mine")
        self.quit(term)
        self.assertNotIn("Trust this folder?", term.output)
        result = self.run_bantam("-p", "batch now", env={"OPENAI_API_KEY": USER_KEY})
        self.assertEqual((result.returncode, result.stdout), (0, "batch\n"), result.stderr)
        self.assertEqual(len(self.own.posts), 3)
        self.assertEqual({p["headers"].get("authorization") for p in self.own.posts}, {"Bearer " + USER_KEY})
        self.assertEqual(self.server.requests, [])

    def test_yes_sends_the_key_and_is_remembered(self):
        """y at the question sends the key; the next REPL and batch runs do not ask and send it."""
        self.push(text_stream("with key"), text_stream("with key again"), text_stream("batch with key"))
        term = self.answer("y")
        self.say(term, "hello", "with key")
        self.quit(term)
        self.assertEqual(self.folders_json()[self.here]["trusted"], True)   # (and a fingerprint)
        term = self.start_repl(env={"OPENAI_API_KEY": USER_KEY})
        self.say(term, "hello again", "with key again")
        self.quit(term)
        self.assertNotIn("Trust this folder?", term.output)
        self.batch("from batch", env={"OPENAI_API_KEY": USER_KEY})
        self.assertEqual(len(self.server.posts), 3)
        for post in self.server.posts:
            self.assertEqual(post["headers"].get("authorization"), "Bearer " + USER_KEY)

    def test_folder_own_key_is_asked_about_and_never_shown(self):
        """A key in the folder's model.cfg is part of what the folder would change: the
        question names it as api_key=***, never its value."""
        self.ws.write("model.cfg", "endpoint=%s\napi_key=%s\n" % (self.server.url, FOLDER_KEY))
        term = self.pty(env={"OPENAI_API_KEY": USER_KEY}, cols=200)
        term.expect("Trust this folder?")
        self.assertIn("api_key=*** (the account your conversation goes to)", term.output)
        self.assertNotIn(FOLDER_KEY, term.output)
        term.sendline("n")
        term.expect(PROMPT)
        self.quit(term)

    def test_untrusted_endpoint_never_gets_the_environment_from_a_command(self):
        """After N, the folder's endpoint gets nothing, not even a tool result that prints the
        environment (a model debugging); the user's server gets no key from it either."""
        self.own.push(tool_call_stream([("call_env", "shell_exec", {"command": "env | sort"})]),
                      text_stream("seen the environment"))
        term = self.answer("n")
        self.say(term, "show me the environment", "seen the environment")
        self.quit(term)
        self.assertEqual(len(self.own.posts), 2)
        self.assertEqual(self.server.requests, [])
        tool = self.own.bodies[1]["messages"][-1]
        self.assertEqual(tool["role"], "tool")
        self.assertNotIn(USER_KEY, tool["content"])
        self.assertNotIn("OPENAI_API_KEY", tool["content"])


# ---------------------------------------------------------------- the folder's system.txt

class SystemPromptNoteTests(SessionCase):
    """system.txt in the folder replaces the system prompt; every run says so, once."""

    NOTE = "[this folder's system.txt replaces the system prompt]"

    def test_note_once_per_run(self):
        """A REPL in a folder with system.txt sends that text as the system prompt, run after
        run (the note that said so is dropped)."""
        self.ws.write("system.txt", "You are the folder's own agent.")
        self.push(text_stream("first"), text_stream("second"))
        for run, word in enumerate(("first", "second")):
            term = self.start_repl()
            self.say(term, "hi", word)
            self.quit(term)
            self.assertEqual(self.last_messages()[0], {"role": "system", "content": "You are the folder's own agent."})

    def test_no_note_for_home_system_txt(self):
        """~/.bantam/system.txt is the user's own: no note."""
        with open(os.path.join(self.ws.home, ".bantam", "system.txt"), "w") as f:
            f.write("home prompt")
        self.push(text_stream("ok"))
        term = self.start_repl()
        self.say(term, "hi", "ok")
        self.quit(term)
        self.assertEqual(self.last_messages()[0]["content"], "home prompt")
        self.assertNotIn("system.txt", term.output)


# ---------------------------------------------------------------- interrupted commands

class InterruptedCommandTests(SessionCase):
    """Ctrl+C while shell_exec runs keeps what the command printed."""

    NOTE = re.compile(r"interrupted by the user after (\d+(?:\.\d+)?) s")

    def run_command(self, command):
        """Start the REPL with a --trace file (self.trace) and send a prompt whose tool call runs
        command (which writes its shell's PID to shell.pid); returns the terminal."""
        self.trace = os.path.join(self.ws.tmp, "trace.jsonl")
        kill_group_later(self, os.path.join(self.ws.work, "shell.pid"))
        self.push(tool_call_stream([("call_run", "shell_exec", {"command": command})]),
                  text_stream("noted the output"))
        term = self.start_repl("--trace", self.trace)
        term.sendline("run it")
        return term

    def interrupted_result(self, term):
        """After Ctrl+C: the tool message as sent in the next request and as saved (must agree)."""
        term.expect("[interrupted")
        term.expect("\n" + PROMPT)
        self.say(term, "what did it print?", "noted the output")
        sent = self.last_messages()
        self.assertEqual(roles(sent), ["system", "user", "assistant", "tool", "user"])
        self.assertEqual(sent[3]["tool_call_id"], "call_run")
        saved = self.session(self.autosave_target())["messages"]
        self.assertEqual(saved[3], sent[3])
        self.quit(term)
        return sent[3]["content"]

    def test_ctrl_c_keeps_the_printed_output(self):
        """Ctrl+C while a command that printed three lines sleeps: the tool message (sent and
        saved) holds the three lines and 'interrupted by the user after N s'."""
        started = time.monotonic()
        term = self.run_command("echo $$ >shell.pid; for i in 1 2 3; do echo line-$i; done; sleep 30")
        self.assertTrue(wait_until(lambda: "line-3" in tool_outputs(self.trace)), "no output came")
        term.send("\x03")
        content = self.interrupted_result(term)
        self.assertIn("line-1\nline-2\nline-3\n", content)
        seconds = float(self.NOTE.search(content).group(1))
        self.assertLessEqual(seconds, time.monotonic() - started)

    def test_output_printed_just_before_ctrl_c_is_kept(self):
        """Output the command printed before Ctrl+C but bantam had not read yet (a busy machine)
        is in the tool message too."""
        term = self.run_command("echo $$ >shell.pid; echo early; while [ ! -e go ]; do sleep 0.02; done; "
                                "echo late-line; touch printed; sleep 30")
        self.assertTrue(wait_until(lambda: "early" in tool_outputs(self.trace)), "no output came")
        os.kill(term.pid, signal.SIGSTOP)
        try:
            self.assertTrue(wait_until(lambda: process_state(term.pid) == "T"))
            self.ws.write("go", "")
            self.assertTrue(wait_until(lambda: os.path.exists(os.path.join(self.ws.work, "printed"))))
            term.send("\x03")   # the terminal's SIGINT waits until bantam continues
            self.assertTrue(wait_until(lambda: signal_pending(term.pid, signal.SIGINT)))
        finally:
            os.kill(term.pid, signal.SIGCONT)
        content = self.interrupted_result(term)
        self.assertIn("early", content)
        self.assertIn("late-line", content)


if __name__ == "__main__":
    unittest.main()
