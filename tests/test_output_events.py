"""One funnel for output (issue 21): a command's output is an "output" event, a diagnostic is a
"note" event (mid-run it reaches the run's view, --jsonl included), and bantam.py's table of
event types is what its emit calls send.

bantam.py runs as a real subprocess against the scripted FakeServer.
"""

import ast
import json
import os
import unittest

import bantam
from tests.support import BANTAM, BantamTestCase, text_stream


class EventTableTests(unittest.TestCase):
    """bantam.EVENTS lists every event type once, with its fields."""

    def emit_calls(self):
        """The emit(cfg, "kind", ...) calls of bantam.py, with a constant kind."""
        with open(BANTAM, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "emit" and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)]

    def test_every_emit_call_sends_the_fields_of_its_type(self):
        """Each emit call names a type of EVENTS and passes exactly that type's fields."""
        calls = self.emit_calls()
        self.assertGreater(len(calls), 20)
        for call in calls:
            kind = call.args[1].value
            with self.subTest(kind=kind, line=call.lineno):
                self.assertIn(kind, bantam.EVENTS)
                self.assertEqual({k.arg for k in call.keywords}, set(bantam.EVENTS[kind].split()))

    def pieces_queued(self):
        """The kinds of add_piece(reply, "kind", ...) calls: the pieces of a reply, emitted as
        events of that type (text, reasoning) when they are passed on."""
        with open(BANTAM, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        return {node.args[1].value for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "add_piece" and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)}

    def test_every_type_of_the_table_is_emitted(self):
        """No type in EVENTS that bantam.py never emits."""
        emitted = {call.args[1].value for call in self.emit_calls()} | self.pieces_queued()
        self.assertEqual(emitted, set(bantam.EVENTS))
        self.assertEqual(self.pieces_queued(), {"text", "reasoning"})


class OutputEventTests(BantamTestCase):
    """What commands print and what goes wrong mid-run pass through the event seam."""

    def jsonl_events(self, result):
        """The events of a --jsonl run's stdout, which must hold JSON lines only."""
        self.assertEqual(result.returncode, 0, result.stderr)
        return [json.loads(line) for line in result.stdout.splitlines()]

    def test_repl_command_output_is_an_output_event_with_jsonl(self):
        """--jsonl in the REPL: /help's lines are output events on stdout, not text on stderr."""
        result = self.run_bantam("--jsonl", input="/help\n")
        shown = "".join(e["text"] for e in self.jsonl_events(result) if e["type"] == "output")
        self.assertRegex(shown, r"(?m)^/help +show this help$")
        self.assertNotIn("show this help", result.stderr)

    def test_command_output_stays_on_stdout_without_jsonl(self):
        """Without --jsonl, /help prints the same lines on stdout, nothing of them on stderr."""
        result = self.run_bantam(input="/help\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"(?m)^/help +show this help$")
        self.assertNotIn("show this help", result.stderr)

    def test_quiet_answer_with_jsonl_is_an_output_event(self):
        """-q with --jsonl: the final answer is the last event (an output event); stdout is JSON only."""
        self.push(text_stream("the answer"))
        events = self.jsonl_events(self.run_bantam("--jsonl", "-q", "-p", "hi"))
        self.assertEqual((events[-1]["type"], events[-1]["text"]), ("output", "the answer\n"))

    def test_save_failure_mid_run_is_a_note_event(self):
        """A conversation that cannot be saved (the sessions folder is a file): with --jsonl the
        warning is a note event on stdout; the plain view prints the same line on stderr."""
        open(self.ws.sessions_dir(), "w").close()
        self.push(text_stream("ok"), text_stream("ok"))
        events = self.jsonl_events(self.run_bantam("--jsonl", "-p", "hi"))
        notes = [e for e in events if e["type"] == "note" and "cannot save" in e["text"]]
        self.assertTrue(notes, events)
        self.assertEqual(notes[0]["level"], "warning")
        self.assertRegex(notes[0]["text"], r"^warning: cannot save the conversation: ")
        result = self.run_bantam("-p", "hi")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(notes[0]["text"] + "\n", result.stderr)
        self.assertNotIn("cannot save", result.stdout)


if __name__ == "__main__":
    unittest.main()
