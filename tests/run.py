"""Run bantam's test suite: python3 tests/run.py [-k PATTERN] [--failfast] [-j N] [--slowest N] [TEST ...].

Tests are discovered under tests/ (the project root is the top-level directory, so
`tests.support` imports work) and run at verbosity 2 on stderr. The last line on stdout is
`N passed, N failed` (plus `, N skipped` when some were skipped). The exit status is 0 only
when nothing failed and at least one test ran.

With -j N (N > 1; the default is 2 on a machine with more than one CPU) the tests are dealt
out one at a time to N worker processes forked after discovery: the tests mostly wait on
child processes, so two workers keep two cores busy. Each test's verbose line is printed when
it ends, the failures in full at the end, as unittest does. A test class with class
fixtures (or a module with module fixtures) goes to one worker whole.
"""

import argparse
import faulthandler
import io
import json
import os
import resource
import select
import signal
import sys
import time
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
    passed, failed, skipped = counts(result)
    return summary_line(passed, failed, skipped), failed


def counts(result):
    """Return (passed, failed, skipped) for a TestResult; a test failing several ways is not passed."""
    bad = result.failures + result.errors + [(t, "") for t in result.unexpectedSuccesses]
    failed = len(bad)
    skipped = len(result.skipped)
    # a test can fail several ways (subtests, tearDown errors): count each failing test once
    failing_tests = {id(getattr(t, "test_case", t)) for t, _ in bad if isinstance(t, unittest.TestCase)}
    passed = max(0, result.testsRun - skipped - len(failing_tests))
    return passed, failed, skipped


def summary_line(passed, failed, skipped):
    """Format the last line of a run."""
    line = "%d passed, %d failed" % (passed, failed)
    if skipped:
        line += ", %d skipped" % skipped
    return line


def cpu_seconds(who):
    """Return user+system CPU seconds of this process (RUSAGE_SELF) or its reaped children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def cpu_now():
    """Return the CPU seconds spent so far by this process and the children it reaped."""
    return cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)


class TimedResult(unittest.TextTestResult):
    """A TextTestResult that also records each test's wall and CPU seconds (with its children's)."""

    def __init__(self, *args, **kw):
        """Start with no timings."""
        super().__init__(*args, **kw)
        self.timings = []   # (test id, wall seconds, CPU seconds)
        self._started = None

    def startTest(self, test):
        """Note the clocks."""
        self._started = (time.monotonic(), cpu_now())
        super().startTest(test)

    def stopTest(self, test):
        """Record the test's time; cleanups (which reap its processes) have run by now."""
        super().stopTest(test)
        if self._started:
            wall, cpu = self._started
            self.timings.append((test.id(), time.monotonic() - wall, cpu_now() - cpu))
            self._started = None


def print_slowest(timings, n):
    """Print the n slowest tests (wall and CPU seconds) on stderr."""
    if n <= 0 or not timings:
        return
    sys.stderr.write("\nSlowest %d tests (wall s, CPU s incl. child processes):\n" % min(n, len(timings)))
    for name, wall, cpu in sorted(timings, key=lambda t: -t[1])[:n]:
        sys.stderr.write("%8.2f %8.2f  %s\n" % (wall, cpu, name))


def flatten(suite):
    """Yield the tests of a suite in order (nested suites opened)."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def has_class_fixture(cls):
    """Return True when a TestCase class has its own setUpClass or tearDownClass."""
    return any(getattr(cls, name).__func__ is not getattr(unittest.TestCase, name).__func__
               for name in ("setUpClass", "tearDownClass"))


def has_module_fixture(module_name):
    """Return True when a test module defines setUpModule or tearDownModule."""
    module = sys.modules.get(module_name)
    return any(hasattr(module, name) for name in ("setUpModule", "tearDownModule"))


def batches(suite):
    """Cut the suite into the units dealt to workers: single tests, except that a class with
    setUpClass/tearDownClass (or a module with setUpModule/tearDownModule) stays together so
    its fixtures run once."""
    groups = {}
    for test in flatten(suite):
        cls = type(test)
        if has_module_fixture(cls.__module__):
            key = ("module", cls.__module__)
        elif isinstance(test, unittest.TestCase) and has_class_fixture(cls):
            key = ("class", cls.__module__, cls.__qualname__)
        else:
            key = ("test", id(test))
        groups.setdefault(key, []).append(test)
    return [unittest.TestSuite(tests) for tests in groups.values()]


# ---------------------------------------------------------------- parallel run

def worker(batch_list, tasks, results, failfast, timeout):
    """In a forked worker: run the batches whose numbers arrive on tasks, report each on results."""
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout, exit=True)
    with os.fdopen(tasks, "r") as inbox, os.fdopen(results, "w") as outbox:
        for line in inbox:
            number = int(line)
            log = io.StringIO()
            result = TimedResult(unittest.runner._WritelnDecorator(log), True, 2)
            result.failfast = failfast
            batch_list[number](result)
            passed, failed, skipped = counts(result)
            errors = [("FAIL", result.getDescription(t), text) for t, text in result.failures]
            errors += [("ERROR", result.getDescription(t), text) for t, text in result.errors]
            report = {"batch": number, "log": log.getvalue(), "run": result.testsRun,
                      "passed": passed, "failed": failed, "skipped": skipped,
                      "errors": errors, "timings": result.timings,
                      "expected_failures": len(result.expectedFailures),
                      "unexpected_successes": len(result.unexpectedSuccesses)}
            outbox.write(json.dumps(report) + "\n")
            outbox.flush()


class Worker:
    """The parent's handle on one forked worker: its pid, its two pipes, the batch it runs."""

    parent_ends = []   # the parent's ends of every worker's pipes: a new worker must not hold them

    def __init__(self, batch_list, failfast, timeout):
        """Fork a worker process that runs batches of batch_list as told."""
        task_r, task_w = os.pipe()
        result_r, result_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the worker: run tests until the parent closes the task pipe
            status = 0
            try:
                for fd in [task_w, result_r] + Worker.parent_ends:
                    os.close(fd)   # else a worker would never see the end of another's tasks
                worker(batch_list, task_r, result_w, failfast, timeout)
            except BaseException:
                import traceback
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        os.close(task_r)
        os.close(result_w)
        Worker.parent_ends += [task_w, result_r]
        self.pid = pid
        self.tasks = os.fdopen(task_w, "w")
        self.results = os.fdopen(result_r, "r")
        self.batch = None

    def give(self, number):
        """Hand the worker batch number."""
        self.batch = number
        self.tasks.write("%d\n" % number)
        self.tasks.flush()

    def finish(self):
        """Tell the worker there is nothing more; return its exit status once it has gone."""
        for end in (self.tasks, self.results):
            if not end.closed:
                Worker.parent_ends.remove(end.fileno())
                end.close()
        return os.waitpid(self.pid, 0)[1]

    def kill(self):
        """Stop the worker at once (Ctrl+C, a timeout) and reap it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.finish()


def run_parallel(suite, jobs, failfast, timeout):
    """Run the suite in `jobs` workers; print as unittest does; return (passed, failed, skipped, run, timings)."""
    batch_list = batches(suite)
    started = time.monotonic()
    pending = list(range(len(batch_list)))
    pending.reverse()   # pop() from the end deals them out in discovery order
    workers = []
    totals = {"run": 0, "passed": 0, "failed": 0, "skipped": 0, "expected_failures": 0,
              "unexpected_successes": 0}
    errors, timings = [], []
    stop = False
    try:
        for _ in range(min(jobs, len(batch_list))):
            w = Worker(batch_list, failfast, timeout)
            workers.append(w)
            w.give(pending.pop())
        deadline = started + timeout + 60 if timeout > 0 else None   # the workers time out first
        while workers:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select([w.results for w in workers], [], [], wait)[0]
            if not ready and wait is not None and time.monotonic() >= deadline:
                raise SystemExit("the workers did not finish within %ss: stopped" % timeout)
            for w in [w for w in workers if w.results in ready]:
                line = w.results.readline()
                if not line:   # the worker died: blame the batch it held, carry on with a new one
                    status = w.finish()
                    workers.remove(w)
                    for test in flatten(batch_list[w.batch]) if w.batch is not None else ():
                        totals["run"] += 1
                        totals["failed"] += 1
                        sys.stderr.write("%s ... worker died\n" % test.id())
                        errors.append(("ERROR", test.id(), "the worker process running it died "
                                       "(wait status %d) before reporting it\n" % status))
                    if failfast and w.batch is not None:
                        stop = True
                    if pending and not stop:
                        w = Worker(batch_list, failfast, timeout)
                        workers.append(w)
                        w.give(pending.pop())
                    continue
                report = json.loads(line)
                w.batch = None
                sys.stderr.write(report["log"])
                sys.stderr.flush()
                for key in totals:
                    totals[key] += report[key]
                errors += report["errors"]
                timings += [tuple(t) for t in report["timings"]]
                if failfast and report["failed"]:
                    stop = True
                if pending and not stop:
                    w.give(pending.pop())
                else:
                    w.finish()
                    workers.remove(w)
    except BaseException:
        for w in workers:
            w.kill()
        raise
    print_errors(errors)
    finish_report(totals, errors, time.monotonic() - started)
    return totals["passed"], totals["failed"], totals["skipped"], totals["run"], timings


def print_errors(errors):
    """Print the failures at the end, in unittest's layout."""
    for flavour, description, text in errors:
        sys.stderr.write("\n" + unittest.TextTestResult.separator1 + "\n")
        sys.stderr.write("%s: %s\n" % (flavour, description))
        sys.stderr.write(unittest.TextTestResult.separator2 + "\n")
        sys.stderr.write("%s\n" % text)


def finish_report(totals, errors, seconds):
    """Print unittest's closing lines: the count, the time, OK or FAILED with the details."""
    sys.stderr.write(unittest.TextTestResult.separator2 + "\n")
    run = totals["run"]
    sys.stderr.write("Ran %d test%s in %.3fs\n\n" % (run, "" if run == 1 else "s", seconds))
    flavours = [flavour for flavour, _, _ in errors]
    details = [("failures", flavours.count("FAIL")), ("errors", flavours.count("ERROR")),
               ("skipped", totals["skipped"]),
               ("expected failures", totals["expected_failures"]),
               ("unexpected successes", totals["unexpected_successes"])]
    details = ", ".join("%s=%d" % (k, v) for k, v in details if v)
    verdict = "FAILED" if totals["failed"] or errors else "OK"
    sys.stderr.write("%s%s\n" % (verdict, " (%s)" % details if details else ""))


def default_jobs():
    """Two workers on a machine with more than one CPU, else one (run in this process)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return 2 if cpus > 1 else 1


def main(argv=None):
    """Parse the command line, run the tests, print the summary, return the exit status."""
    parser = argparse.ArgumentParser(description="Run bantam's tests.")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only run test methods/classes matching this substring or glob")
    parser.add_argument("-f", "--failfast", action="store_true", help="stop on the first failure")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="worker processes (default: 2 with more than one CPU, else 1; "
                             "1 runs the tests in this process)")
    parser.add_argument("--slowest", type=int, default=0, metavar="N",
                        help="after the run, list the N slowest tests with their wall and CPU seconds")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="dump all stacks and exit if the run takes longer (seconds, default 1800)")
    parser.add_argument("names", nargs="*", help="tests to run, e.g. tests.test_support or tests/test_support.py")
    args = parser.parse_args(argv)

    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    jobs = default_jobs() if args.jobs is None else max(1, args.jobs)
    suite = load(args.names, args.patterns)
    started_cpu = cpu_now()
    if jobs > 1 and suite.countTestCases() > 1:
        # no faulthandler timer here: a worker forked while its thread waits would deadlock
        passed, failed, skipped, run, timings = run_parallel(suite, jobs, args.failfast, args.timeout)
    else:
        if args.timeout > 0:
            faulthandler.dump_traceback_later(args.timeout, exit=True)
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, failfast=args.failfast,
                                         resultclass=TimedResult)
        result = runner.run(suite)
        passed, failed, skipped = counts(result)
        run, timings = result.testsRun, result.timings
    faulthandler.cancel_dump_traceback_later()
    print_slowest(timings, args.slowest)
    sys.stderr.write("CPU %.1fs (this process and its children, %d worker%s)\n"
                     % (cpu_now() - started_cpu, jobs, "" if jobs == 1 else "s"))
    sys.stderr.flush()
    print(summary_line(passed, failed, skipped), flush=True)
    return 0 if failed == 0 and run > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
