"""Run bantam's test suite: python3 tests/run.py [-k PATTERN] [--failfast] [TEST ...].

Tests are discovered under tests/ (the project root is the top-level directory, so
`tests.support` imports work) and run at verbosity 2 on stderr. The last line on stdout is
`N passed, N failed` (plus `, N skipped` when some were skipped). The exit status is 0 only
when nothing failed and at least one test ran.
"""

import argparse
import faulthandler
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_name(arg):
    """Accept a dotted test name or a path like tests/test_x.py; return the dotted name."""
    if arg.endswith(".py") or os.sep in arg:
        arg = os.path.relpath(os.path.abspath(arg), ROOT)
        arg = arg[:-3] if arg.endswith(".py") else arg
        arg = arg.replace(os.sep, ".")
    return arg


def load(names, patterns):
    """Return the suite: the named tests, or everything under tests/, filtered by -k patterns."""
    loader = unittest.TestLoader()
    if patterns:
        loader.testNamePatterns = [p if "*" in p else "*%s*" % p for p in patterns]
    if names:
        return loader.loadTestsFromNames([test_name(n) for n in names])
    return loader.discover(os.path.join(ROOT, "tests"), top_level_dir=ROOT)


def summary(result):
    """Return the `N passed, N failed[, N skipped]` line for a TestResult."""
    bad = result.failures + result.errors + [(t, "") for t in result.unexpectedSuccesses]
    failed = len(bad)
    skipped = len(result.skipped)
    # a test can fail several ways (subtests, tearDown errors): count each failing test once
    failing_tests = {id(getattr(t, "test_case", t)) for t, _ in bad if isinstance(t, unittest.TestCase)}
    passed = max(0, result.testsRun - skipped - len(failing_tests))
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % skipped
    return line, failed


def main(argv=None):
    """Parse the command line, run the tests, print the summary, return the exit status."""
    parser = argparse.ArgumentParser(description="Run bantam's tests.")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only run test methods/classes matching this substring or glob")
    parser.add_argument("-f", "--failfast", action="store_true", help="stop on the first failure")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="dump all stacks and exit if the run takes longer (seconds, default 1800)")
    parser.add_argument("names", nargs="*", help="tests to run, e.g. tests.test_support or tests/test_support.py")
    args = parser.parse_args(argv)

    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    if args.timeout > 0:
        faulthandler.dump_traceback_later(args.timeout, exit=True)
    suite = load(args.names, args.patterns)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, failfast=args.failfast)
    result = runner.run(suite)
    faulthandler.cancel_dump_traceback_later()
    line, failed = summary(result)
    sys.stderr.flush()
    print(line, flush=True)
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
