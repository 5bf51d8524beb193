"""Many bantam runs at once on one machine, with one HOME and one $TMPDIR (GNU parallel, Slurm
arrays, pods sharing a volume): no run loses or corrupts what another one saves.

- AutosaveLinkTests: the temporary name autosave.json's new link is made under is random, so
  two threads of one process, or a PID reused (containers number every job's processes from 1),
  never clash.
- TrustWriteTests: runs trusting their folders at once (--trust) each keep their folder in
  ~/.bantam/folders.json: none overwrites another's with what it read before.
"""

import json
import os
import subprocess
import sys
import unittest

from tests.support import BantamTestCase, bantam_argv, run_program, stop_process, text_stream

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


def wait_all(test, procs, timeout=60):
    """Wait for every process, each asserted to exit 0 (its stderr shown when not)."""
    for proc in procs:
        test.addCleanup(stop_process, proc)
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        test.assertEqual(proc.returncode, 0, (err or b"").decode("utf-8", "replace")[-2000:])


class TrustWriteTests(BantamTestCase):
    """~/.bantam/folders.json, read and rewritten by every run that remembers a folder."""

    RUNS = 12

    def test_folders_trusted_at_once_are_all_remembered(self):
        """12 batch runs at once, each in its own folder whose model.cfg needs trust, each
        with --trust: folders.json remembers all 12 as trusted (a run rewriting the file
        with what it read before would drop the others' folders)."""
        folders = []
        for n in range(self.RUNS):
            folders.append(os.path.realpath(self.ws.path("work", "job%d" % n)))
            os.makedirs(folders[-1])
            with open(os.path.join(folders[-1], "model.cfg"), "w", encoding="utf-8") as f:
                f.write("api_key=sk-folder-key-%d\n" % n)
            os.chmod(os.path.join(folders[-1], "model.cfg"), 0o600)   # (else refused: a key)
        self.push(*[text_stream("ok")] * self.RUNS)
        wait_all(self, [subprocess.Popen(
            bantam_argv("--trust", "-p", "hi"), cwd=folder, env=self.ws.env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True) for folder in folders])
        with open(os.path.join(self.ws.home, ".bantam", "folders.json"), encoding="utf-8") as f:
            memory = json.load(f)
        self.assertEqual({folder: (memory.get(folder) or {}).get("trusted") for folder in folders},
                         {folder: True for folder in folders})


if __name__ == "__main__":
    unittest.main()
