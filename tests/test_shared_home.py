"""Many bantam runs at once on one machine, with one HOME and one $TMPDIR (GNU parallel, Slurm
arrays, pods sharing a volume): no run loses or corrupts what another one saves.

- AutosaveLinkTests: the temporary name autosave.json's new link is made under is random, so
  two threads of one process, or a PID reused (containers number every job's processes from 1),
  never clash.
"""

import json
import os
import sys
import unittest

from tests.support import BantamTestCase, run_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Saves conversations the way a run does, autosave.json linked at each; the notes said.
SAVES = r"""
import json, os, sys, threading
import bantam

notes = []
cfg = {"run": {"emit": lambda e: e["type"] == "note" and notes.append(e["text"]), "json": {}}}

def save(name, times):
    for n in range(times):
        session = bantam.new_session("%s-%d" % (name, n))
        bantam.save_session(cfg, session, [{"role": "user", "content": name}])

if sys.argv[1] == "stale":   # a run killed mid-save, its PID now ours (a container's pid 1)
    folder = bantam.bantam_home("sessions")
    os.makedirs(folder)
    os.symlink("gone.json", os.path.join(folder, ".autosave.%d.tmp" % os.getpid()))
    save("after-stale", 1)
else:                        # two AL runs in threads of one process
    threads = [threading.Thread(target=save, args=(name, 200)) for name in ("a", "b")]
    [t.start() for t in threads]
    [t.join() for t in threads]
link = bantam.session_path("autosave")
with open(sys.argv[2], "w") as f:
    json.dump({"notes": notes, "link": os.readlink(link) if os.path.islink(link) else None}, f)
"""


class AutosaveLinkTests(BantamTestCase):
    """autosave.json is relinked through a temporary link of a random name."""

    def saves(self, how):
        """Run SAVES in the workspace ("stale" or "threads"); what it wrote."""
        out = self.ws.path("tmp", "out.json")
        result = run_program(self.ws, [sys.executable, "-c", SAVES, how, out],
                             env={"PYTHONPATH": ROOT})
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, encoding="utf-8") as f:
            return json.load(f)

    def test_a_stale_temp_link_of_the_same_pid_is_no_obstacle(self):
        """A temp link left by a killed run whose PID this run now has: the save links
        autosave.json all the same, with no warning."""
        said = self.saves("stale")
        self.assertEqual(said, {"notes": [], "link": "after-stale-0.json"})

    def test_two_threads_saving_at_once_never_clash(self):
        """Two threads of one process saving 200 conversations each: no save fails."""
        said = self.saves("threads")
        self.assertEqual(said["notes"], [])
        self.assertIn(said["link"], ("a-199.json", "b-199.json"))


if __name__ == "__main__":
    unittest.main()
