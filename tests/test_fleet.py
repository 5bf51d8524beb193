"""bench/fleet.py: the README's xargs recipe, taken from the README and run as written for 5
prompts against the failing fake server, passes its checks; a README whose recipe breaks the
rules (crosstalk between runs, exit statuses kept wrong) makes the script fail and say why.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEET = os.path.join(ROOT, "bench", "fleet.py")
XARGS_SESSION = '--session "job-$n"'
XARGS_STATUS = 'echo $? > "out/$n.rc"'


@unittest.skipUnless(shutil.which("xargs") and shutil.which("sh"), "xargs is not installed")
class FleetScriptTests(unittest.TestCase):
    """python3 bench/fleet.py --only xargs -n 5, on the README as it is and on broken copies."""

    def fleet(self, readme=None):
        """Run the script (xargs only, 5 prompts, short retry waits); (exit status, stdout)."""
        argv = [sys.executable, FLEET, "--only", "xargs", "-n", "5", "--backoff", "0.01",
                "--no-alone", "--problems", "0"]
        if readme is not None:
            folder = tempfile.mkdtemp(prefix="bantam-test-fleet-")
            self.addCleanup(shutil.rmtree, folder, True)
            argv += ["--readme", os.path.join(folder, "README.md")]
            with open(argv[-1], "w", encoding="utf-8") as f:
                f.write(readme)
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("BANTAM"))
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           stdin=subprocess.DEVNULL, timeout=120)
        return p.returncode, p.stdout.decode("utf-8", "replace")

    def readme_with(self, old, new):
        """The README with its xargs recipe changed (old must be in it once)."""
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(text.count(old), 1, old)
        return text.replace(old, new)

    def test_readme_recipe_passes_every_check(self):
        """5 prompts: 3 answered, prompt 3 exit 1 (six 503s), prompt 1 exit 2 (401); no problem."""
        rc, out = self.fleet()
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"\| xargs -P 8 \| 5 \(5\) \|.*\| 3 / 1 / 1 \| 0 \|")

    def test_runs_sharing_a_session_are_caught(self):
        """One --session for every run: the shared conversation file is reported, exit 1."""
        rc, out = self.fleet(self.readme_with(XARGS_SESSION, '--session "job"'))
        self.assertEqual(rc, 1, out)
        self.assertIn("stray file in HOME: .bantam/sessions/job.json", out)

    def test_a_wrong_exit_status_is_caught(self):
        """out/N.rc holding 0 for every run breaks the rules for the 401 and 503 prompts."""
        rc, out = self.fleet(self.readme_with(XARGS_STATUS, 'echo 0 > "out/$n.rc"'))
        self.assertEqual(rc, 1, out)
        self.assertIn("prompt 1: exit status 0, the rules say 2", out)
        self.assertIn("prompt 3: exit status 0, the rules say 1", out)


if __name__ == "__main__":
    unittest.main()
