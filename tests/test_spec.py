"""The spec-level cases of tests/spec_cases.json, run against bantam.py (one test a case),
and against its Part I alone: the file cut at the Part II banner is the whole algorithm.

The same cases run against any port with `python3 tests/spec.py -- ./my-bantam`; here they
run through the tests' launcher (bantam.py compiled once per test run).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests import spec, support

BANNER = "# ==== Part II"


def case_test(case, argv):
    """A test method running one case against the command argv() gives."""
    def test(self):
        problems = spec.run_case(argv(self), case)
        self.assertFalse(problems, "\n".join(problems))
    test.__doc__ = case["about"]
    return test


class SpecCases(unittest.TestCase):
    """Every case of the spec, against the whole bantam.py."""


class PartOneCases(unittest.TestCase):
    """Every case of the spec, against bantam.py's Part I alone (the lines before the banner
    of Part II, as a file of their own): what Part II adds is needed by none of them."""

    @classmethod
    def setUpClass(cls):
        with open(support.BANTAM, encoding="utf-8") as f:
            text = f.read()
        if BANNER not in text:
            raise AssertionError("bantam.py has no line starting %r" % BANNER)
        cls.folder = tempfile.mkdtemp(prefix="bantam-part1-")
        cls.path = os.path.join(cls.folder, "bantam_part1.py")
        with open(cls.path, "w", encoding="utf-8") as f:
            f.write(text[:text.index(BANNER)] + "\n\nif __name__ == \"__main__\":\n"
                    "    sys.exit(main())\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def test_part_one_is_shorter_than_the_file(self):
        """Part I is a part: the cut leaves out Part II's code (a banner moved to the end of
        the file would run the cases against everything)."""
        with open(support.BANTAM, encoding="utf-8") as f:
            whole = f.read().count("\n")
        with open(self.path, encoding="utf-8") as f:
            self.assertLess(f.read().count("\n"), whole // 2)


class FileShapeTests(unittest.TestCase):
    """What a reader of bantam.py is promised about its lines."""

    def test_no_line_is_over_100_columns(self):
        """Every line of bantam.py fits in 100 columns (the file is read in an editor and a
        terminal side by side with the README)."""
        with open(support.BANTAM, encoding="utf-8") as f:
            wide = ["%d: %d columns" % (n, len(line.rstrip("\n")))
                    for n, line in enumerate(f, 1) if len(line.rstrip("\n")) > 100]
        self.assertEqual(wide, [])


class CopyTests(unittest.TestCase):
    """tests/ copied to another folder runs the cases given only the command after --."""

    def test_cases_run_from_a_copy_of_tests(self):
        """A copy of tests/ with no bantam.py beside it lists the cases and runs them against
        `python3 /path/to/bantam.py` (what a port's author does)."""
        folder = tempfile.mkdtemp(prefix="bantam-spec-copy-")
        self.addCleanup(shutil.rmtree, folder, True)
        here = os.path.dirname(os.path.abspath(__file__))
        shutil.copytree(here, os.path.join(folder, "tests"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        script = os.path.join(folder, "tests", "spec.py")
        listed = subprocess.run([sys.executable, script, "--list"], cwd=folder,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=60)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(len(listed.stdout.splitlines()), len(spec.load_cases()))
        ran = subprocess.run([sys.executable, script, "--", sys.executable, support.BANTAM],
                             cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=600)
        self.assertEqual(ran.returncode, 0, ran.stdout[-3000:] + ran.stderr[-2000:])
        self.assertRegex(ran.stdout.splitlines()[-1], r"^\d+ passed, 0 failed$")


for _case in spec.load_cases():
    setattr(SpecCases, "test_" + _case["name"], case_test(_case, lambda self: support.bantam_argv()))
    setattr(PartOneCases, "test_" + _case["name"], case_test(
        _case, lambda self: [sys.executable, self.path]))


if __name__ == "__main__":
    unittest.main()
