"""The heavy fault-injection runs of issue 3: 500 MB of tool output in bounded memory, twenty
concurrent batch runs sharing one HOME, and hundreds of SIGKILLs landing during autosave.

Each test is a stress run of the real bantam.py against the real FakeServer; together they
take well under a minute on a small machine.
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from tests.support import (
    BANTAM, BantamTestCase, bantam_argv, completion, json_reply, start_bantam, stop_process, text_stream,
    tool_call_stream)

MB = 1 << 20


def valid_session(path):
    """None when path holds a bantam session (JSON object with a list of chat messages),
    else the reason it does not."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return str(e)
    try:
        session = json.loads(data.decode("utf-8"))
    except ValueError as e:
        return "%s (%d bytes)" % (e, len(data))
    messages = session.get("messages") if isinstance(session, dict) else None
    if not isinstance(messages, list) or not messages:
        return "no messages list"
    if not all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool")
               for m in messages):
        return "a message without a valid role"
    return None


def leftovers(folder):
    """Names in folder that are not session files (temp files of interrupted writes)."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(".json") or n.startswith("."))


def start_quiet(ws, *args, env=None):
    """Start bantam.py *args in ws like start_bantam(), its output discarded (a pipe nobody
    reads would block it)."""
    return subprocess.Popen(bantam_argv(*args), cwd=ws.work,
                            env=ws.env(**(env or {})), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


class HugeOutputTests(BantamTestCase):
    """A tool that floods: the model gets a bounded excerpt, bantam stays small."""

    SIZE = 500 * 1000 * 1000

    def test_500_mb_of_output_in_bounded_memory(self):
        """`yes | head -c 500000000` in the REPL: the model gets the head, the tail and a note
        with the size and the line count; the request stays near max_tool_res; peak memory
        stays small.

        The memory number is bantam's own peak, VmHWM of /proc/<pid>/status read before it
        quits (ru_maxrss from wait4 would also count the test process it was forked from)."""
        self.push(tool_call_stream([("call_big", "shell_exec",
                                     {"command": "yes | head -c %d" % self.SIZE})]),
                  text_stream("that was a lot"))
        term = self.pty()
        term.expect("> ")
        term.sendline("flood")
        term.expect("that was a lot", timeout=120)
        term.expect("> ")
        with open("/proc/%d/status" % term.pid) as f:
            peak_mb = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024 / MB
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0)
        print("\n  500 MB of tool output: peak RSS %.1f MB" % peak_mb, file=sys.stderr)
        self.assertLess(peak_mb, 100, "bantam peaked at %.0f MB" % peak_mb)

        posts = self.server.posts
        self.assertEqual(len(posts), 2)
        result = posts[1]["body"]["messages"][-1]
        self.assertEqual(result["role"], "tool")
        text = result["content"]
        self.assertTrue(text.startswith("y\ny\ny\n"), text[:100])
        self.assertTrue(text.endswith("y\ny\n\n\nexit: 0"), text[-100:])
        self.assertIn("%d bytes" % self.SIZE, text)
        self.assertIn("%d lines" % (self.SIZE // 2), text)
        self.assertLess(len(posts[1]["raw"]), 2 * 65536 + 30000)   # near max_tool_res, not 500 MB


class ConcurrentRunTests(BantamTestCase):
    """Twenty batch runs at once, one HOME."""

    RUNS = 20

    def test_twenty_concurrent_runs_leave_valid_files(self):
        """All twenty exit 0 without a warning, and every file in the sessions folder is a
        valid session, with no temp files left behind."""
        answer = "concurrent answer " + "x" * MB   # big enough that the writes take a while
        reply = text_stream(answer, pieces=[answer])
        everyone = threading.Barrier(self.RUNS, timeout=30)

        def together(record):   # hold each reply until all twenty asked: the saves collide
            everyone.wait()
            return reply

        self.push(*[together] * self.RUNS)
        procs = []
        for i in range(self.RUNS):
            self.ws.write("prompt%d.txt" % i, "question %d" % i)
            procs.append(start_bantam(self.ws, "prompt%d.txt" % i))
            self.addCleanup(stop_process, procs[-1])
        errors = {}

        def collect(i, proc):   # all pipes read at once, or the runs would wait on each other
            errors[i] = proc.communicate(timeout=60)[1].decode("utf-8", "replace")

        readers = [threading.Thread(target=collect, args=pair) for pair in enumerate(procs)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(90)
        for i, proc in enumerate(procs):
            self.assertEqual(proc.returncode, 0, errors.get(i, "")[-2000:])
            self.assertNotIn("warning", errors[i])   # e.g. "autosave failed"
        self.assertEqual(len(self.server.posts), self.RUNS)
        folder = self.ws.sessions_dir()
        names = os.listdir(folder)
        self.assertIn("autosave.json", names)
        for name in names:
            self.assertIsNone(valid_session(os.path.join(folder, name)), name)
        self.assertEqual(leftovers(folder), [])
        with open(os.path.join(folder, "autosave.json"), encoding="utf-8") as f:
            saved = json.load(f)
        self.assertEqual(saved["messages"][-1]["content"], answer)   # one whole run, not a mix


class KillDuringAutosaveTests(BantamTestCase):
    """SIGKILL at random moments, hundreds of times: never a broken session file."""

    RUNS = 120
    WORKERS = 2        # each with its own HOME, so a worker knows whose autosave it reads
    PAYLOAD = 3 * MB   # a reply this big makes each autosave take a while

    def test_sigkill_at_random_moments_never_breaks_a_session_file(self):
        """Batch runs each SIGKILLed at a random moment between the model's (large) reply and
        their normal exit, which is mostly spent printing and autosaving: after every kill,
        every *.json in the sessions folder is a complete, valid session."""
        reply = json_reply(completion("k" * self.PAYLOAD))
        served = {}   # prompt -> Event set when the server answers that run

        def respond(record):
            served[record["body"]["messages"][-1]["content"]].set()
            return reply

        self.push(*[respond] * (self.RUNS + 1))
        window = self.time_after_reply(served)   # how long a run lives after its request
        seed = random.randrange(1 << 30)
        outcomes = []   # (exit status, whether autosave.json held this run's reply after it)

        config = self.ws.write_config(self.server)   # once: two threads writing it race

        def worker(number):
            rng = random.Random(seed + number)
            home = self.ws.path("home%d" % number)
            os.makedirs(os.path.join(home, ".bantam"))   # the user's config, in this HOME too
            shutil.copy(config, os.path.join(home, ".bantam", "model.cfg"))
            for i in range(number, self.RUNS, self.WORKERS):
                outcomes.append(self.run_and_kill(i, home, served, rng.uniform(0, window)))

        workers = [threading.Thread(target=worker, args=(n,)) for n in range(self.WORKERS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        problems = [o for o in outcomes if isinstance(o, str)]
        self.assertEqual(problems, [])
        statuses = [status for status, _ in outcomes]
        killed = [saved for status, saved in outcomes if status == -signal.SIGKILL]
        left = sum(len(leftovers(os.path.join(self.ws.path("home%d" % n), ".bantam", "sessions")))
                   for n in range(self.WORKERS))
        print("\n  %d runs (seed %d, kills within %.0f ms of the reply): %d killed (%d of them "
              "after their reply was saved), %d finished; %d temp files left by killed writes" % (
                  len(outcomes), seed, window * 1000, len(killed), sum(killed),
                  statuses.count(0), left), file=sys.stderr)
        self.assertEqual(len(outcomes), self.RUNS)
        self.assertEqual(set(statuses) - {0, -signal.SIGKILL}, set())
        self.assertGreaterEqual(len(killed), self.RUNS // 4, "too few runs were actually killed")
        self.assertIn(True, killed, "no kill landed after the reply was saved: the window missed it")
        self.assertIn(False, killed, "no kill landed before the reply was saved")

    def time_after_reply(self, served):
        """Seconds one unkilled run lives after the server answered it (the kill window)."""
        prompt = "calibration"
        served[prompt] = threading.Event()
        self.ws.write("calibration.txt", prompt)
        proc = start_quiet(self.ws, "calibration.txt")
        try:
            self.assertTrue(served[prompt].wait(15), "the calibration run sent no request")
            answered = time.monotonic()
            self.assertEqual(proc.wait(30), 0)
            return max(0.02, 1.3 * (time.monotonic() - answered))
        finally:
            stop_process(proc)

    def run_and_kill(self, i, home, served, delay):
        """Run batch prompt i with HOME=home, SIGKILL it delay seconds after its reply was
        sent, check the session files; (exit status, autosave holds run i) or what went wrong."""
        prompt = "run %d" % i
        served[prompt] = threading.Event()
        self.ws.write("prompt%d.txt" % i, prompt)
        proc = start_quiet(self.ws, "prompt%d.txt" % i, env={"HOME": home})
        try:
            if not served[prompt].wait(15):
                return "run %d sent no request" % i
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGKILL)   # not reaped yet, so this PID is still ours
            status = proc.wait(15)
        finally:
            stop_process(proc)
        folder = os.path.join(home, ".bantam", "sessions")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        for name in names:
            if name.endswith(".json"):
                why = valid_session(os.path.join(folder, name))
                if why:
                    return "run %d (status %s, killed after %.3f s): %s is broken: %s" % (
                        i, status, delay, name, why)
        if "autosave.json" not in names:
            return "run %d (status %s, killed after %.3f s): no conversation saved" % (i, status, delay)
        with open(os.path.join(folder, "autosave.json"), encoding="utf-8") as f:
            messages = json.load(f)["messages"]
        if messages[1]["content"] != prompt:   # saved before the request went out
            return "run %d (status %s): the saved conversation lacks its prompt" % (i, status)
        return status, len(messages) > 2 and messages[2]["role"] == "assistant"
