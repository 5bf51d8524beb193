#!/usr/bin/env python3
"""The README's "Running many" recipes, run as written against a fake server that fails on purpose.

    python3 bench/fleet.py                     # every runner that is installed
    python3 bench/fleet.py --only xargs -n 50  # one runner, 50 prompts

The recipes are taken from the fenced code blocks of README.md's "Running many" section, so
the README and what is measured cannot drift apart. Each runs in a folder of its own holding
prompts/0.txt ... prompts/N-1.txt, with `bantam` on PATH (bantam.py as pip installs it: a
launcher that imports the module, plus a few lines that record the run's CPU time and peak
memory outside that folder) and the endpoint in BANTAM_ENDPOINT; only what has to change is
substituted (Slurm's --array range and its 60-s sleep before a retry). xargs always runs,
GNU parallel when it is installed, Slurm when `scontrol ping` answers. Nothing is installed.

The fake server (bench/run.py's) answers each prompt with a checksum of its own text, after a
failure plan: about 10% of the requests get a 503 at random, prompts 1, 101, 201, ... always
get a 401, prompts 3, 103, 203, ... get a 503 six times in a row (all of one run's attempts),
prompts 7, 507, ... always get a 503 (so the Slurm scripts give up on them after three runs).
Every answer, trace, conversation file and exit status is checked against the README's rules;
any wrong answer, crosstalk between runs, stray file or exit status that breaks them makes the
script exit 1. It prints runs/s, CPU time and peak memory per run, and for Slurm the share of
a task's slot time that is not bantam's.

Standard library only, Python 3.8+, Linux. Loopback only. Temp dirs are removed.
"""

import argparse
import collections
import hashlib
import importlib.util
import json
import os
import py_compile
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable

RANDOM_503 = 0.10   # share of requests answered 503 at random
IN_A_ROW = 6        # 503s in a row for the prompts that get them: all attempts of one run
TAG = re.compile(r"\b(?:prompt |job-|task-)(\d+)\b")   # what names a prompt in any file
RETRY_LINE = re.compile(r"^\[.*; retry \d+/\d+ in [0-9.]+s\]$")
KINDS = ("xargs", "parallel", "slurm", "slices")


def load_bench_run():
    """bench/run.py as a module: its fake server serves the fleet too."""
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(HERE, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def progress(msg):
    sys.stderr.write("fleet: %s\n" % msg)
    sys.stderr.flush()


# --------------------------------------------------------------------------
# The recipes, from the README
# --------------------------------------------------------------------------

def readme_recipes(path):
    """{kind: the text of its fenced code block} from the README's "Running many" section."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Running many\n(.*?)(?=^## )", text, re.M | re.S)
    if not m:
        raise SystemExit("fleet: %s has no '## Running many' section" % path)
    found = collections.defaultdict(list)
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", m.group(1), re.M | re.S):
        if "| xargs " in block:
            found["xargs"].append(block)
        elif re.search(r"^parallel ", block, re.M):
            found["parallel"].append(block)
        elif "#SBATCH --array" in block:
            found["slices" if re.search(r"^per=", block, re.M) else "slurm"].append(block)
    for kind in KINDS:
        if len(found[kind]) != 1:
            raise SystemExit("fleet: %s, Running many: %d %s recipe(s), expected 1"
                             % (path, len(found[kind]), kind))
    return dict((k, v[0]) for k, v in found.items())


def substitute(text, old, new, kind):
    """text with the one occurrence of the regex old replaced (the recipe must hold it once)."""
    if len(re.findall(old, text)) != 1:
        raise SystemExit("fleet: the README's %s recipe does not hold %r once" % (kind, old))
    return re.sub(old, new, text)


def slurm_script(kind, text, n, sleep):
    """The Slurm recipe for n prompts: its --array range and retry sleep filled in."""
    per = 1
    if kind == "slices":
        per = int(re.search(r"^per=(\d+)", text, re.M).group(1))
    text = substitute(text, r"--array=0-\d+", "--array=0-%d" % ((n + per - 1) // per - 1), kind)
    return substitute(text, r"\bsleep 60\b", "sleep %g" % sleep, kind), per


# --------------------------------------------------------------------------
# The failure plan, served by bench/run.py's fake server
# --------------------------------------------------------------------------

def prompt_text(kind, i):
    return "Fleet prompt %d (%s): reply with the checksum of this prompt.\n" % (i, kind)


def answer_to(text):
    """The one right answer to a prompt: derived from its text."""
    i = int(TAG.search(text).group(1))
    return "Answer to prompt %d: %s." % (i, hashlib.sha256(text.strip().encode()).hexdigest()[:16])


class Plan(object):
    """What the server answers, per runner and prompt, and what it saw."""

    def __init__(self, bench, seed):
        self.bench, self.seed = bench, seed
        self.lock = threading.Lock()
        self.log = collections.defaultdict(lambda: collections.defaultdict(list))
        self.problems = collections.defaultdict(list)

    def status(self, kind, i, k):
        """The status of the k-th request (from 0) for prompt i."""
        if kind == "alone":
            return 200
        if i % 100 == 1:
            return 401
        if i % 100 == 3 and k < IN_A_ROW or i % 500 == 7:
            return 503
        rng = random.Random("%s %s %d %d" % (self.seed, kind, i, k))
        return 503 if rng.random() < RANDOM_503 else 200

    def answer(self, handler, mode, req):
        """Answer one chat request of runner mode's fleet (called by the server's handler)."""
        kind = mode.partition("-")[2]
        users = [m.get("content") for m in req.get("messages") or []
                 if isinstance(m, dict) and m.get("role") == "user"]
        ids = set(TAG.findall(json.dumps(users)))
        if len(ids) != 1 or not all(isinstance(u, str) for u in users):
            with self.lock:
                self.problems[kind].append("a request names prompts %s: %r" % (
                    sorted(ids), json.dumps(users)[:200]))
            handler.send("400 Bad Request", "application/json", b'{"error":{"message":"?"}}')
            return
        i = int(ids.pop())
        with self.lock:
            status = self.status(kind, i, len(self.log[kind][i]))
            self.log[kind][i].append(status)
        b = self.bench
        if status == 401:
            handler.send("401 Unauthorized", "application/json", json.dumps({"error": {
                "message": "Incorrect API key provided (planned)", "type": "invalid_request_error",
                "code": "invalid_api_key"}}).encode())
        elif status == 503:
            handler.send("503 Service Unavailable", "application/json", json.dumps({"error": {
                "message": "The server is overloaded (planned)", "type": "server_error",
                "code": None}}).encode())
        elif req.get("stream"):
            text = answer_to(users[-1])
            cut = [0, len(text) // 3, 2 * len(text) // 3, len(text)]
            events = [b.sse(b.chunk_obj({"role": "assistant", "content": ""}))]
            events += [b.sse(b.chunk_obj({"content": text[x:y]})) for x, y in zip(cut, cut[1:])]
            events.append(b.sse(b.chunk_obj({}, "stop")))
            handler.send_events(events)
        else:
            handler.send("200 OK", "application/json",
                         json.dumps(b.nonstream_reply(answer_to(users[-1]))).encode())


# --------------------------------------------------------------------------
# bantam on PATH, recording each run's figures
# --------------------------------------------------------------------------

SHIM = r'''#!@PY@
# bantam as pip installs it (from bantam import main), plus a record of this run's figures
import os, resource, sys, time
sys.path.insert(0, @LIB@)


def started():
    """When this process started (the fork), by the wall clock."""
    try:
        with open("/proc/self/stat") as f:
            ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


t0, rc = started(), None
try:
    from bantam import main
    rc = main()
finally:
    import json
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    args = sys.argv[1:]
    record = {"session": args[args.index("--session") + 1] if "--session" in args[:-1] else None,
              "rc": rc, "start": t0, "end": time.time(), "maxrss_kb": me.ru_maxrss,
              "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}
    name = "%d-%d.json" % (os.getpid(), time.time() * 1e6)
    with open(os.path.join(os.environ["FLEET_RUSAGE"], name), "w") as f:
        json.dump(record, f)
sys.exit(rc)
'''


def install_shim(tmp, bantam_py):
    """tmp/bin/bantam: bantam.py (copied to tmp/lib and compiled once, as pip would)."""
    lib, bindir = os.path.join(tmp, "lib"), os.path.join(tmp, "bin")
    os.makedirs(lib)
    os.makedirs(bindir)
    shutil.copy(bantam_py, os.path.join(lib, "bantam.py"))
    py_compile.compile(os.path.join(lib, "bantam.py"), doraise=True)   # the cached .pyc
    shim = os.path.join(bindir, "bantam")
    with open(shim, "w") as f:
        f.write(SHIM.replace("@PY@", PY).replace("@LIB@", repr(lib)))
    os.chmod(shim, 0o755)
    return bindir


def read_records(folder):
    """The figures the shim recorded, one dict per bantam run."""
    out = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            out.append(json.load(f))
    return out


# --------------------------------------------------------------------------
# Running a recipe
# --------------------------------------------------------------------------

def exit_code(status):
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run_shell(argv, cwd, env, out, err, timeout):
    """Run argv in its own session; (wall s, exit status, CPU s of it and all it reaped)."""
    with open(out, "wb") as o, open(err, "wb") as e:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                             start_new_session=True)
    dog = threading.Timer(timeout, killpg, [p.pid])
    dog.daemon = True
    dog.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        dog.cancel()
    wall = time.perf_counter() - t0
    p.returncode = exit_code(status)
    killpg(p.pid)   # anything it left running
    if wall >= timeout:
        raise RuntimeError("%s timed out after %d s" % (argv[0], timeout))
    return wall, p.returncode, ru.ru_utime + ru.ru_stime


def slurm_answers():
    """True when a Slurm controller answers here."""
    if not shutil.which("sbatch") or not shutil.which("scontrol"):
        return False
    try:
        p = subprocess.run(["scontrol", "ping"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and b"UP" in p.stdout


def gnu_parallel():
    """True when `parallel` is GNU parallel (moreutils has another program of that name)."""
    if not shutil.which("parallel"):
        return False
    try:
        p = subprocess.run(["parallel", "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"GNU parallel" in p.stdout


def slurm_exit_codes(job):
    """{array task id: exit status} of job, from scontrol and the job-completion log."""
    codes = {}
    lines = []
    try:
        conf = subprocess.run(["scontrol", "show", "config"], stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=30).stdout
        comp = re.search(r"^JobCompType\s*=\s*jobcomp/filetxt$", conf, re.M)
        loc = re.search(r"^JobCompLoc\s*=\s*(\S+)", conf, re.M)
        if comp and loc:
            with open(loc.group(1), encoding="utf-8", errors="replace") as f:
                lines += f.read().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        pass
    lines += subprocess.run(["scontrol", "show", "job", "-o", str(job)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, universal_newlines=True,
                            timeout=60).stdout.splitlines()
    for line in lines:
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if f.get("ArrayJobId") == str(job) and f.get("ArrayTaskId", "").isdigit():
            codes[int(f["ArrayTaskId"])] = int(f.get("ExitCode", "-1:0").split(":")[0])
    return codes


def slurm_slots(script):
    """Tasks that can run at once: the partition's CPUs, or the array's %limit if lower."""
    try:
        cpus = subprocess.run(["sinfo", "-h", "-o", "%C"], stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=30).stdout.split()
        total = sum(int(c.split("/")[3]) for c in cpus)
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        total = 1
    limit = re.search(r"--array=\S*%(\d+)", script)
    return max(1, min(total, int(limit.group(1)) if limit else total))


class Fleet(object):
    """One runner's fleet: its folders, environment, run and checks."""

    def __init__(self, kind, n, args, tmp, bindir, server, plan):
        self.kind, self.n, self.args, self.plan = kind, n, args, plan
        self.dir = os.path.join(tmp, kind)
        self.work, self.home = os.path.join(self.dir, "work"), os.path.join(self.dir, "home")
        self.tmpdir, self.rusage = os.path.join(self.dir, "tmp"), os.path.join(self.dir, "rusage")
        for d in (self.home, self.tmpdir, self.rusage, os.path.join(self.work, "prompts")):
            os.makedirs(d)
        self.prompts = [prompt_text(kind, i) for i in range(n)]
        for i, text in enumerate(self.prompts):
            with open(os.path.join(self.work, "prompts", "%d.txt" % i), "w") as f:
                f.write(text)
        env = dict((k, v) for k, v in os.environ.items()
                   if not k.startswith(("PYTHON", "OPENAI", "BANTAM")))
        env.update({"HOME": self.home, "TMPDIR": self.tmpdir, "FLEET_RUSAGE": self.rusage,
                    "PATH": bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
                    "BANTAM_ENDPOINT": server.endpoint("fleet-" + kind), "BANTAM_MODEL": "bench",
                    "BANTAM_API_KEY": "fleet-key", "LC_ALL": "C.UTF-8", "NO_COLOR": "1"})
        if args.backoff is not None:
            env["BANTAM_BACKOFF"] = ",".join(["%g" % args.backoff] * (args.attempts - 1))
        self.env = env
        self.problems = []
        self.figures = {"kind": kind, "prompts": n}

    def run(self, recipe):
        """Run the recipe (a shell block, or a Slurm script submitted with sbatch --wait)."""
        load0 = os.getloadavg()
        out, err = os.path.join(self.dir, "stdout"), os.path.join(self.dir, "stderr")
        self.per, self.job = 1, None
        if self.kind in ("slurm", "slices"):
            script, self.per = slurm_script(self.kind, recipe, self.n, self.args.sleep)
            self.script = os.path.join(self.dir, "job.sh")
            with open(self.script, "w") as f:
                f.write(script)
            self.slots = slurm_slots(script)
            argv = ["sbatch", "--wait", "--parsable", self.script]
        else:
            self.script = os.path.join(self.dir, "recipe.sh")
            with open(self.script, "w") as f:
                f.write(recipe)
            argv = ["sh", self.script]
        submitted = time.time()
        try:
            wall, rc, cpu = run_shell(argv, self.work, self.env, out, err, self.args.timeout)
        finally:
            if self.kind in ("slurm", "slices"):
                with open(out) as f:
                    first = f.read().split("\n")[0].split(";")[0].strip()
                self.job = int(first) if first.isdigit() else None
                if self.job is not None:
                    subprocess.run(["scancel", str(self.job)], stderr=subprocess.DEVNULL)
        with open(out, "rb") as f:
            self.stdout = f.read().decode("utf-8", "replace")
        with open(err, "rb") as f:
            self.stderr = f.read().decode("utf-8", "replace")
        recs = read_records(self.rusage)
        if self.job is not None and recs:   # sbatch --wait polls every 2, 8, then 32 s
            self.figures["sbatch_wait_s"] = wall
            wall = max(r["end"] for r in recs) - submitted
        self.figures.update(wall_s=wall, rc=rc, cpu_s=cpu, load_before=load0,
                            load_after=os.getloadavg())

    # ---------------------------------------------------------------- checks

    def problem(self, text):
        self.problems.append(text)

    def check(self):
        """Check everything the fleet left against the README's rules; self.problems."""
        attempts = self.args.attempts
        retried = self.kind in ("slurm", "slices")   # their scripts try an exit 1 again
        log = self.plan.log[self.kind]
        self.problems += self.plan.problems[self.kind]
        self.finals, self.runs = {}, {}
        for i in range(self.n):
            runs = split_runs(log.get(i, []), attempts)
            self.runs[i] = runs
            rcs = [run_status(r, attempts) for r in runs]
            if not runs:
                self.problem("prompt %d: never sent" % i)
                continue
            if None in rcs:
                self.problem("prompt %d: a run stopped before its retries were spent: %s"
                             % (i, runs))
                continue
            if not retried and len(runs) != 1:
                self.problem("prompt %d: %d runs, expected 1: %s" % (i, len(runs), runs))
            if retried and (any(c != 1 for c in rcs[:-1]) or len(runs) > 3
                            or rcs[-1] == 1 and len(runs) != 3):
                self.problem("prompt %d: runs ended %s: the script must try an exit 1 again, "
                             "3 times in all, and nothing else" % (i, rcs))
            self.finals[i] = rcs[-1]
        observed = self.observed_statuses()
        for i, rc in sorted(self.finals.items()):
            if observed.get(i) != rc:
                self.problem("prompt %d: exit status %s, the rules say %d (requests answered %s)"
                             % (i, observed.get(i), rc, self.runs[i]))
        self.check_runner_status()
        for i in range(self.n):
            if i in self.finals:
                self.check_prompt(i)
        self.check_stdout()
        self.check_files()
        recs = read_records(self.rusage)
        total = sum(len(r) for r in self.runs.values())
        if len(recs) != total:
            self.problem("%d bantam runs recorded, the server saw %d" % (len(recs), total))
        statuses = dict(collections.Counter(self.finals.values()))
        self.figures.update(runs=len(recs), statuses=statuses, records=recs,
                            problems=len(self.problems))

    def sessions_of(self, i):
        """The --session ids of prompt i's runs, as the recipe names them."""
        if self.kind in ("slurm", "slices"):
            return ["task-%d-%d" % (i, k + 1) for k in range(len(self.runs[i]))]
        return ["job-%d" % i]

    def observed_statuses(self):
        """{prompt: its final exit status} as the runner kept it."""
        out = os.path.join(self.work, "out")
        seen = {}
        if self.kind == "parallel":
            try:
                with open(os.path.join(out, "joblog")) as f:
                    rows = [line.rstrip("\n").split("\t") for line in f][1:]
            except OSError as e:
                self.problem("joblog: %s" % e)
                rows = []
            for row in rows:
                named = set(re.findall(r"\bprompts/(\d+)\.txt\b", row[-1])) if len(row) >= 9 else ()
                if len(named) != 1:
                    self.problem("joblog: a row does not name one prompt: %r" % row)
                elif int(min(named)) in seen:
                    self.problem("joblog: prompt %s ran twice" % min(named))
                else:
                    seen[int(min(named))] = int(row[6])
        elif self.kind == "slurm":
            seen = slurm_exit_codes(self.job) if self.job is not None else {}
        else:
            for i in range(self.n):
                try:
                    with open(os.path.join(out, "%d.rc" % i)) as f:
                        seen[i] = int(f.read().strip())
                except (OSError, ValueError):
                    pass
        return seen

    def check_runner_status(self):
        """The runner's own exit status: what the README says it is."""
        rc, finals = self.figures["rc"], list(self.finals.values())
        failed = sum(1 for c in finals if c)
        if self.kind == "xargs":
            want = 0
        elif self.kind == "parallel":
            want = min(failed, 101)   # GNU parallel: the number of failed jobs, 101 for more
        else:   # sbatch --wait: the highest exit status of the array's tasks
            want = max(finals) if finals else 0
            if self.kind == "slices":
                tasks = slurm_exit_codes(self.job) if self.job is not None else {}
                for t in range((self.n + self.per - 1) // self.per):
                    worst = max([self.finals.get(i, 0) for i in self.slice(t)] or [0])
                    if tasks.get(t) != worst:
                        self.problem("slice task %d exited %s, the worst of its prompts is %d"
                                     % (t, tasks.get(t), worst))
        if rc != want:
            self.problem("the runner exited %s, expected %d" % (rc, want))

    def slice(self, t):
        return range(t * self.per, min(self.n, (t + 1) * self.per))

    def check_prompt(self, i):
        """Prompt i's answer file, error file, trace and conversation files."""
        out = os.path.join(self.work, "out", "%d" % i)
        runs, rc, prompt = self.runs[i], self.finals[i], self.prompts[i]
        answer = answer_to(prompt)
        text = read(out + ".txt")
        if text != (answer + "\n" if rc == 0 else ""):
            self.problem("prompt %d: out/%d.txt holds %r (exit %d)" % (i, i, text, rc))
        retries = sum(r.count(503) for r in runs) - sum(1 for r in runs if r[-1] == 503)
        if self.kind != "slurm":   # the Slurm script leaves stderr in Slurm's output file
            self.check_stderr(i, read(out + ".err"), runs, retries, "out/%d.err" % i)
        trace = read(out + ".jsonl")
        self.check_tags(i, trace, "out/%d.jsonl" % i)
        self.check_trace(i, trace, runs, answer)
        for sid, run in zip(self.sessions_of(i), runs):
            self.check_session(i, sid, run, prompt, answer)

    def check_stderr(self, i, err, runs, retries, name):
        """With -q, stderr holds the problems only: one line per retry, one per failed run."""
        if answer_to(self.prompts[i]) in err:
            self.problem("prompt %d: the answer is in %s too (-q)" % (i, name))
        lines = [x for x in err.splitlines() if not x.startswith("Answer to prompt")]
        n_retry = sum(1 for x in lines if RETRY_LINE.match(x))
        n_error = sum(1 for x in lines if x.startswith("error: "))
        failed = sum(1 for r in runs if r[-1] != 200)
        if n_retry != retries or n_error != failed or n_retry + n_error != len(lines):
            self.problem("prompt %d: %s has %d lines (%d retries, %d errors), expected %d "
                         "retries and %d errors: %r" % (i, name, len(lines), n_retry, n_error,
                                                        retries, failed, err[:300]))

    def check_tags(self, i, text, name, allowed=None):
        """Crosstalk: a file of prompt i's may name no other prompt."""
        others = set(int(x) for x in TAG.findall(text)) - set(allowed or [i])
        if others:
            self.problem("crosstalk: %s names prompt(s) %s" % (name, sorted(others)[:5]))

    def check_trace(self, i, trace, runs, answer):
        """One run per `start` event, each with its own session, retries, error and answer."""
        events = []
        for n, line in enumerate(trace.splitlines(), 1):
            try:
                events.append(json.loads(line))
            except ValueError:
                self.problem("prompt %d: out/%d.jsonl line %d is not JSON" % (i, i, n))
                return
        recorded = []
        for e in events:
            if e.get("type") == "start" or not recorded:
                recorded.append([])
            recorded[-1].append(e)
        if len(recorded) != len(runs):
            self.problem("prompt %d: the trace holds %d runs, the server saw %d"
                         % (i, len(recorded), len(runs)))
            return
        for sid, run, evs in zip(self.sessions_of(i), runs, recorded):
            kinds = collections.Counter(e.get("type") for e in evs)
            start, ends = evs[0], [e for e in evs if e.get("type") == "turn_end"]
            texts = "".join(e.get("text", "") for e in evs if e.get("type") == "text")
            prompts = [e.get("text", "").strip() for e in evs if e.get("type") == "prompt"]
            retries = run.count(503) - (1 if run[-1] == 503 else 0)
            want = "done" if run[-1] == 200 else "failed"
            wrong = []
            if start.get("type") != "start" or start.get("session") != sid:
                wrong.append("starts %r" % {k: start.get(k) for k in ("type", "session")})
            if prompts != [self.prompts[i].strip()]:
                wrong.append("prompts %r" % prompts)
            if kinds["retry"] != retries:
                wrong.append("%d retry events for %d" % (kinds["retry"], retries))
            if [e.get("status") for e in ends] != [want]:
                wrong.append("turn_end %r, not %s" % ([e.get("status") for e in ends], want))
            if (texts == answer) != (run[-1] == 200) or kinds["error"] != (run[-1] != 200):
                wrong.append("answer %r, %d error events" % (texts, kinds["error"]))
            if wrong:
                self.problem("prompt %d: trace of %s (%s): %s" % (i, sid, run, "; ".join(wrong)))

    def check_session(self, i, sid, run, prompt, answer):
        """The run's conversation file: its own prompt, its answer if it got one."""
        path = os.path.join(self.home, ".bantam", "sessions", sid + ".json")
        text = read(path)
        self.check_tags(i, text, "the conversation %s" % sid)
        try:
            msgs = json.loads(text)["messages"]
        except (ValueError, KeyError, TypeError) as e:
            self.problem("prompt %d: conversation %s: %s" % (i, sid, e or "missing"))
            return
        roles = [m.get("role") for m in msgs]
        want = ["system", "user"] + (["assistant"] if run[-1] == 200 else [])
        users = [m.get("content", "").strip() for m in msgs if m.get("role") == "user"]
        if roles != want or users != [prompt.strip()] or (
                run[-1] == 200 and msgs[-1].get("content") != answer):
            self.problem("prompt %d: conversation %s holds %r" % (i, sid, msgs[1:]))

    def check_stdout(self):
        """No answer on stdout (or in a Slurm output file): -q > out/N.txt put each in its file."""
        if self.stderr:
            self.problem("the runner wrote on stderr: %r" % self.stderr[:300])
        if self.kind in ("xargs", "parallel"):
            if self.stdout:
                self.problem("the runner wrote on stdout: %r" % self.stdout[:300])
            return
        for t in range((self.n + self.per - 1) // self.per):
            name = "slurm-%s_%d.out" % (self.job, t)
            text = read(os.path.join(self.work, name))
            mine = list(self.slice(t))
            self.check_tags(mine[0], text, name, mine)
            got = [x for x in text.splitlines() if x.startswith("Answer to prompt")]
            if got:
                self.problem("%s holds the answers %r" % (name, got[:3]))
            if self.kind == "slurm" and mine[0] in self.finals:
                runs = self.runs[mine[0]]
                self.check_stderr(mine[0], text, runs, sum(r.count(503) for r in runs) - sum(
                    1 for r in runs if r[-1] == 503), name)

    def check_files(self):
        """No stray file: the folder, HOME and TMPDIR hold what the recipe says, nothing else."""
        want = set("prompts/%d.txt" % i for i in range(self.n))
        ends = {"xargs": ("txt", "jsonl", "err", "rc"), "parallel": ("txt", "jsonl", "err"),
                "slurm": ("txt", "jsonl"), "slices": ("txt", "jsonl", "err", "rc")}[self.kind]
        for i in self.finals:
            want.update("out/%d.%s" % (i, e) for e in ends)
        if self.kind == "parallel":
            want.add("out/joblog")
        if self.kind in ("slurm", "slices"):
            want.update("slurm-%s_%d.out" % (self.job, t)
                        for t in range((self.n + self.per - 1) // self.per))
        sids = set("%s.json" % s for i in self.finals for s in self.sessions_of(i))
        home = set(".bantam/sessions/" + s for s in sids) | {".bantam/sessions/autosave.json"}
        for base, allowed, name in ((self.work, want, "the run's folder"),
                                    (self.home, home, "HOME"), (self.tmpdir, set(), "TMPDIR")):
            have = set(files_under(base))
            if self.kind == "parallel" and base == self.home:
                have = set(x for x in have if not x.startswith(".parallel/"))   # its own
            for path in sorted(have - allowed)[:10]:
                self.problem("stray file in %s: %s" % (name, path))
            for path in sorted(allowed - have)[:10]:
                self.problem("missing in %s: %s" % (name, path))
        for i in range(self.n):
            if read(os.path.join(self.work, "prompts", "%d.txt" % i)) != self.prompts[i]:
                self.problem("prompts/%d.txt was changed" % i)
        link = os.path.join(self.home, ".bantam", "sessions", "autosave.json")
        target = os.path.basename(os.readlink(link)) if os.path.islink(link) else None
        if target not in sids:
            self.problem("autosave.json is not a link to one of the fleet's conversations: %r"
                         % target)


def split_runs(statuses, attempts):
    """A prompt's requests cut into bantam runs: a run ends at an answer, at a final error,
    or after `attempts` 503s in a row (its retries spent)."""
    runs, cur = [], []
    for s in statuses:
        cur.append(s)
        if s != 503 or len(cur) == attempts:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


def run_status(run, attempts):
    """The exit status the README's table gives a run whose requests got these statuses."""
    if run[-1] == 200:
        return 0
    if run[-1] == 401:
        return 2
    return 1 if len(run) == attempts else None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def files_under(base):
    """Every file (and link, and empty folder) under base, relative to it."""
    for top, dirs, files in os.walk(base):
        rel = os.path.relpath(top, base)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            yield os.path.normpath(os.path.join(rel, name))
        if not dirs and not files and top != base:
            yield rel + "/"


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------

def one_alone(tmp, bindir, server, plan, args, reps=5):
    """reps runs of one prompt alone, no failures: wall, CPU and peak RSS of a single run."""
    f = Fleet("alone", 1, args, tmp, bindir, server, plan)
    walls = []
    for k in range(reps):
        t0 = time.perf_counter()
        # through sh, as the runners do: a child of this process would count its peak RSS
        p = subprocess.run(["sh", "-c", 'bantam --session "alone-$1" -q prompts/0.txt; exit $?',
                            "sh", str(k)],
                           cwd=f.work, env=f.env, stdout=subprocess.PIPE, timeout=120)
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0 or p.stdout.decode().strip() != answer_to(f.prompts[0]):
            raise SystemExit("fleet: a run alone exited %d: %r" % (p.returncode, p.stdout[:200]))
    recs = read_records(f.rusage)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(r["cpu"] for r in recs),
            "maxrss_mb": statistics.median(r["maxrss_kb"] for r in recs) / 1024.0}


def label(f):
    return {"xargs": "xargs -P 8", "parallel": "GNU parallel -j 8",
            "slurm": "Slurm, a task per prompt", "slices": "Slurm, %d prompts per task" % f.per}[
        f.kind]


def report(fleets, alone, args, load0, load1):
    """The table (Markdown, as the README shows it) and the notes."""
    print("| runner | prompts (runs) | wall | runs/s | CPU per run, runner included | bantam's "
          "CPU per run | peak RSS per run (median / max) | exit statuses 0 / 1 / 2 | problems "
          "| load before / after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    if alone:
        print("| one run alone | 1 | %.3f s | — | — | %.3f s | %.1f MB | — | — | — |" % (
            alone["wall_s"], alone["cpu_s"], alone["maxrss_mb"]))
    for f in fleets:
        g, recs = f.figures, f.figures["records"]
        rss = [r["maxrss_kb"] / 1024.0 for r in recs] or [0]
        st = g["statuses"]
        runner_cpu = "%.3f s" % (g["cpu_s"] / len(recs)) if f.kind in ("xargs", "parallel") \
            and recs else "—"
        print("| %s | %d (%d) | %.1f s | %.1f | %s | %.3f s | %.1f / %.1f MB | %d / %d / %d | %d "
              "| %.1f / %.1f |" % (
                  label(f), g["prompts"], g["runs"], g["wall_s"], g["runs"] / g["wall_s"],
                  runner_cpu, statistics.mean(r["cpu"] for r in recs) if recs else 0,
                  statistics.median(rss), max(rss), st.get(0, 0), st.get(1, 0), st.get(2, 0),
                  len(f.problems), g.get("load_before", (0,))[0], g.get("load_after", (0,))[0]))
    print()
    for f in fleets:
        if f.kind not in ("slurm", "slices") or not f.figures["records"]:
            continue
        g, recs = f.figures, f.figures["records"]
        tasks = (f.n + f.per - 1) // f.per
        slot = g["wall_s"] * f.slots / tasks
        mine = sum(r["end"] - r["start"] for r in recs) / tasks
        sleeps = sum(len(r) - 1 for r in f.runs.values()) * args.sleep / tasks
        g.update(task_slot_s=slot, task_bantam_s=mine, task_sleep_s=sleeps)
        print("%s: %d tasks on %d slots in %.1f s: a task's slot time %.3f s, bantam's runs "
              "(retry waits included) %.3f s of it, the script's sleeps %.3f s; the rest (%.0f%%) "
              "is Slurm's (scheduling, launching the task, bash) and slots left idle." % (
                  label(f), tasks, f.slots, g["wall_s"], slot, mine, sleeps,
                  100.0 * max(0.0, 1 - (mine + sleeps) / slot)))
    print("Load average (1, 5, 15 min) before: %.2f %.2f %.2f, after: %.2f %.2f %.2f; %d cores."
          % (load0 + load1 + (os.cpu_count() or 0,)))
    for f in fleets:
        shown = f.problems[:args.problems or None]
        for p in shown:
            print("%s: %s" % (f.kind, p))
        if len(f.problems) > len(shown):
            print("%s: ... and %d more problems" % (f.kind, len(f.problems) - len(shown)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="prompts for xargs and parallel (1000)")
    ap.add_argument("--slurm-n", type=int, default=200, help="prompts for a task per prompt (200)")
    ap.add_argument("--slices-n", type=int, default=1000, help="prompts for the slices (1000)")
    ap.add_argument("--only", default=",".join(KINDS), help="some of " + ",".join(KINDS))
    ap.add_argument("--no-alone", action="store_true", help="skip the runs alone")
    ap.add_argument("--backoff", type=float, help="seconds before each of bantam's retries "
                    "(default: bantam's own ladder)")
    ap.add_argument("--sleep", type=float, default=1.0,
                    help="seconds the Slurm scripts sleep before a retry (README: 60)")
    ap.add_argument("--seed", default="1", help="of the random 503s")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per runner")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--bantam", default=os.path.join(ROOT, "bantam.py"))
    ap.add_argument("--problems", type=int, default=20, help="problems printed per runner (0: all)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (printed)")
    args = ap.parse_args()
    only = [k for k in args.only.split(",") if k]
    if set(only) - set(KINDS):
        ap.error("--only: expected some of " + ",".join(KINDS))
    recipes = readme_recipes(args.readme)
    bench = load_bench_run()
    spec = importlib.util.spec_from_file_location("bantam_for_fleet", args.bantam)
    bantam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bantam)
    args.attempts = len(bantam.DEFAULTS["backoff"]) + 1
    plan = Plan(bench, args.seed)
    server = bench.FakeServer()
    server.plans["fleet"] = plan.answer
    server.start()
    tmp = tempfile.mkdtemp(prefix="bantam-fleet-")
    fleets, status = [], 0
    load0 = os.getloadavg()
    try:
        bindir = install_shim(tmp, args.bantam)
        alone = None if args.no_alone else one_alone(tmp, bindir, server, plan, args)
        for kind in only:
            if kind == "parallel" and not gnu_parallel():
                progress("parallel: skipped, GNU parallel is not installed")
                continue
            if kind in ("slurm", "slices") and not slurm_answers():
                progress("%s: skipped, no Slurm controller answers (scontrol ping)" % kind)
                continue
            n = {"slurm": args.slurm_n, "slices": args.slices_n}.get(kind, args.n)
            progress("%s: %d prompts ..." % (kind, n))
            f = Fleet(kind, n, args, tmp, bindir, server, plan)
            try:
                f.run(recipes[kind])
            except RuntimeError as e:
                f.problem(str(e))
                fleets.append(f)
                f.figures.update(records=[], runs=0, statuses={}, wall_s=1, cpu_s=0)
                continue
            f.check()
            fleets.append(f)
            progress("%s: done in %.1f s, %d problem(s)" % (kind, f.figures["wall_s"],
                                                           len(f.problems)))
        report(fleets, alone, args, load0, os.getloadavg())
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"alone": alone, "fleets": [dict(f.figures, records=len(
                    f.figures["records"])) for f in fleets]}, out, indent=2, sort_keys=True)
        status = 1 if any(f.problems for f in fleets) else 0
    finally:
        server.stop()
        if args.keep:
            progress("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
