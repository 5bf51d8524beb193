"""The spec-level cases of tests/spec_cases.json, run against bantam.py (one test a case).

The same cases run against any port with `python3 tests/spec.py -- ./my-bantam`; here they
run through the tests' launcher (bantam.py compiled once per test run).
"""

import unittest

from tests import spec, support


def case_test(case):
    """A test method running one case."""
    def test(self):
        problems = spec.run_case(support.bantam_argv(), case)
        self.assertFalse(problems, "\n".join(problems))
    test.__doc__ = case["about"]
    return test


class SpecCases(unittest.TestCase):
    """Every case of the spec, against the whole bantam.py."""


for _case in spec.load_cases():
    setattr(SpecCases, "test_" + _case["name"], case_test(_case))


if __name__ == "__main__":
    unittest.main()
