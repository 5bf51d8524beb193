"""The spec-level cases of tests/spec_cases.json, run against bantam.py (one test a case),
and against its Part I alone: the file cut at the Part II banner is the whole algorithm.

The same cases run against any port with `python3 tests/spec.py -- ./my-bantam`; here they
run through the tests' launcher (bantam.py compiled once per test run).
"""

import os
import shutil
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


for _case in spec.load_cases():
    setattr(SpecCases, "test_" + _case["name"], case_test(_case, lambda self: support.bantam_argv()))
    setattr(PartOneCases, "test_" + _case["name"], case_test(
        _case, lambda self: [sys.executable, self.path]))


if __name__ == "__main__":
    unittest.main()
