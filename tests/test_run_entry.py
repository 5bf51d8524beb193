"""Issue 21's clean-up of the config, the REPL and the command line, seen from a library caller:
cfg holds the schema's keys, sources and system_prompt only; what a run needs from its caller
(who answers approve=ask) is the one entry cfg["run"].

Each test runs a small program that imports bantam, in a subprocess, against the FakeServer."""

import json
import os
import sys
import unittest

from tests.support import BantamTestCase, run_program, text_stream, tool_call_stream

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CFG_KEYS = r"""
import json, sys
import bantam
cfg = bantam.load_config()
print(json.dumps(sorted(set(cfg) - set(bantam.DEFAULTS))))
"""

APPROVER = r"""
import json, sys
import bantam
cfg = bantam.load_config(overrides={"endpoint": sys.argv[1], "model": "m", "approve": "ask"})
asked = []
cfg["run"] = {"approver": lambda question, text: asked.append(question) or "y"}
messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "run it"}]
bantam.AL(cfg, messages, on_event=lambda event: None)
print(json.dumps({"asked": asked, "messages": messages}))
"""

class RunEntryTests(BantamTestCase):
    """load_config and AL as a library caller uses them."""

    def run_python(self, code, *args):
        """Run `python -c code *args` in the workspace with bantam importable: its stdout."""
        result = run_program(self.ws, [sys.executable, "-c", code] + list(args),
                             env={"PYTHONPATH": ROOT})
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout

    def test_cfg_holds_only_the_schema_sources_and_system_prompt(self):
        """Every other fact of the config (the files read, what an untrusted folder would
        change, the withheld secrets, the base prompt) is under cfg["sources"]."""
        self.ws.write("model.cfg", "model=folder-model\n")   # a folder file: folder_config is set
        self.assertEqual(json.loads(self.run_python(CFG_KEYS)), ["sources", "system_prompt"])

    def test_approver_given_in_cfg_run_answers_approve_ask(self):
        """cfg["run"] = {"approver": f}: f is asked before the command runs, and its "y" runs it."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo approved-ran"})]),
                  text_stream("done"))
        out = json.loads(self.run_python(APPROVER, self.server.url))
        self.assertEqual(len(out["asked"]), 1, out)
        results = [m for m in out["messages"] if m["role"] == "tool"]
        self.assertIn("approved-ran", results[0]["content"])
        self.assertEqual(out["messages"][-1], {"role": "assistant", "content": "done"})



if __name__ == "__main__":
    unittest.main()
