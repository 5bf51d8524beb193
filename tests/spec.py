"""The Bantam spec as data: run tests/spec_cases.json against any implementation.

    python3 tests/spec.py                       # against this repository's bantam.py
    python3 tests/spec.py -- ./my-bantam        # against your port (any command line)
    python3 tests/spec.py -k tool -v -- node my-bantam.js

Each case is plain data: the model.cfg keys and files to set up, the command-line arguments
and stdin (or the keys typed at a terminal), the replies a scripted OpenAI-compatible server
gives (SSE chunks or JSON bodies, exactly as they travel), and what must come out: the exit
status, the text on stdout and stderr, the requests the server got, the files left behind.
The format is described in the README's Tests section; the cases only use what the Bantam
spec (seeds/bantam-spec.txt) and the README's algorithm section prescribe (each case's "spec"
quotes the sentence it checks: `--list -v` shows them), so a port written from them can pass.

The command runs in a fresh folder (its cwd) with HOME, TMPDIR and a model.cfg pointing at the
server; BANTAM_TRUST=1 is set, which a port may ignore. The last line printed is
`N passed, N failed`; the exit status is 0 only when every case passed.
"""

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from tests import support  # noqa: E402  (the fake server and the pseudo-terminal)

CASES = os.path.join(HERE, "spec_cases.json")
# the REPL's input prompt "> ", at a line start or after cursor-movement / erase / mode
# sequences (Node's readline writes "\r\x1b[K" before it, GNU readline "\x1b[?2004h", others
# save and restore the cursor with "\x1b7" / "\x1b8" or switch the keypad with "\x1b=")
CONTROL = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[78=>]|\r"
PROMPT = re.compile(r"(?:^|\n|%s)(?:%s)*> " % (CONTROL, CONTROL))
BASE_CONFIG = {"model": "test-model", "stream": "true", "color": "never",
               "backoff": "0.01,0.01,0.01,0.01,0.01", "timeout": "10"}


def load_cases(path=CASES):
    """The list of cases in the JSON file (each with a name, what it checks and the sentence
    of the spec it checks)."""
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    for case in cases:
        missing = [k for k in ("name", "about", "spec", "expect") if k not in case]
        if missing:
            raise ValueError("%s: case %s has no %s" % (path, case.get("name"), ", ".join(missing)))
    return cases


# ---------------------------------------------------------------- the server's replies

def server_item(reply):
    """A tests.support response item for one scripted reply of a case:
    {"sse": [chunk, ...]}  an event stream (objects as `data: {...}` events, strings raw,
                           then `data: [DONE]` unless "done": false);
    {"json": {...}}         a JSON body; with "status" for an error;
    {"drop": true}          the connection closed with no answer;
    {"answer": "text"}      that text, streamed or not as the request asked.
An "sse" reply may say "delay": seconds between its pieces (a reply still streaming); "sse"
and "json" replies may add "headers": {name: value}."""
    if reply.get("drop"):
        return support.drop()
    if "answer" in reply:
        text = reply["answer"]
        return lambda request: (support.text_stream(text) if (request["body"] or {}).get("stream")
                                else support.json_reply(support.completion(text)))
    if "sse" in reply:
        return support.sse(reply["sse"], done=reply.get("done", True), delay=reply.get("delay", 0),
                           framing=reply.get("framing", "chunked"), headers=reply.get("headers"))
    return support.json_reply(reply.get("json"), status=reply.get("status", 200),
                              framing=reply.get("framing", "length"), headers=reply.get("headers"))


class Server(support.FakeServer):
    """The scripted server; each request also records when it came (for the backoff delays)."""

    def _record(self, record):
        record["time"] = time.monotonic()
        super()._record(record)


# ---------------------------------------------------------------- matching

def matches(expected, actual, where="$"):
    """None when actual matches expected, else the first difference in words. Objects
    match when every expected key matches (others may be present); {"$absent": true}
    means the key must be missing; lists match element by element with the same length;
    {"$has": "text"} matches a string containing text, {"$re": "..."} one matching it."""
    if isinstance(expected, dict) and "$has" in expected:
        ok = isinstance(actual, str) and expected["$has"] in actual
        return None if ok else "%s: %r does not contain %r" % (where, actual, expected["$has"])
    if isinstance(expected, dict) and "$re" in expected:
        ok = isinstance(actual, str) and re.search(expected["$re"], actual)
        return None if ok else "%s: %r does not match /%s/" % (where, actual, expected["$re"])
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return "%s: expected an object, got %r" % (where, actual)
        for key, value in expected.items():
            if isinstance(value, dict) and value.get("$absent"):
                if key in actual:
                    return "%s.%s: should be absent, got %r" % (where, key, actual[key])
                continue
            if key not in actual:
                return "%s.%s: missing" % (where, key)
            problem = matches(value, actual[key], "%s.%s" % (where, key))
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return "%s: expected %d items, got %r" % (where, len(expected), actual)
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = matches(e, a, "%s[%d]" % (where, i))
            if problem:
                return problem
        return None
    return None if expected == actual else "%s: expected %r, got %r" % (where, expected, actual)


def in_order(texts, output, what):
    """None when every text occurs in output in this order, else what is missing."""
    at = 0
    for text in texts:
        found = output.find(text, at)
        if found < 0:
            shown = output if len(output) < 1500 else output[:700] + " ... " + output[-700:]
            return "%s lacks %r (in order) in:\n%s" % (what, text, shown)
        at = found + len(text)
    return None


# ---------------------------------------------------------------- one case

class Folder:
    """A case's temporary folder: home/ (HOME), work/ (the cwd), tmp/ (TMPDIR)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="bantam-spec-")
        for name in ("home", "work", "tmp"):
            os.mkdir(os.path.join(self.root, name))
        self.home, self.work = os.path.join(self.root, "home"), os.path.join(self.root, "work")

    def env(self, extra):
        """The environment of the command: this folder's HOME and TMPDIR, nothing of ours."""
        env = {k: v for k, v in os.environ.items() if not (
            k.startswith(("BANTAM_", "OPENAI_", "PYTHON")) or k.lower().endswith("_proxy")
            or k in ("NO_COLOR", "COLUMNS", "LINES"))}
        env.update(HOME=self.home, TMPDIR=os.path.join(self.root, "tmp"), TERM="xterm",
                   BANTAM_TRUST="1")
        env.update(extra or {})
        return env

    def write(self, relpath, text, mode=None):
        """Write a file under the root (home/... or work/...)."""
        path = os.path.join(self.root, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


def set_up(case, folder, server):
    """Write model.cfg (in work/, or in ~/.bantam/ for "config_in": "home"; a value's
    {endpoint} is the server's URL, a null value leaves the key out) and the files."""
    keys = dict(BASE_CONFIG, endpoint=server.url, api_key="test-key")
    keys.update(case.get("config", {}))
    keys = {k: v.replace("{endpoint}", server.url) if isinstance(v, str) else v
            for k, v in keys.items()}
    text = "".join("%s=%s\n" % (k, v) for k, v in keys.items() if v is not None)
    os.chmod(folder.write("home/.bantam/model.cfg" if case.get("config_in") == "home" else
                          "work/model.cfg", text), 0o600)   # a key others can read is refused
    for relpath, content in case.get("files", {}).items():
        folder.write("work/" + relpath, content)


def run_batch(command, case, folder):
    """Run the command with the case's arguments and stdin; (status, stdout, stderr)."""
    stdin = case.get("stdin")
    proc = subprocess.Popen(command + case.get("args", []), cwd=folder.work,
                            env=folder.env(case.get("env")), start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(stdin.encode() if stdin is not None else None,
                                    timeout=case.get("max_seconds", 60))
    except subprocess.TimeoutExpired:
        support._killpg(proc.pid)
        out, err = proc.communicate()
        raise AssertionError("did not finish within %s s" % case.get("max_seconds", 60))
    finally:
        support._killpg(proc.pid)
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def run_terminal(command, case, folder):
    """Drive the REPL on a pseudo-terminal with the case's keys; (status, screen text, "").
    Each step is {"type": text} (sent as typed; \\r is Enter, \\n is Ctrl+J, \\u0004 is
    Ctrl+D, \u0003 Ctrl+C; {name} is replaced by a captured text), {"expect": text},
    {"prompt": true} (wait for the next "> "), {"capture": regex, "as": name} (wait for regex,
    keep its group 1), {"prefix": text, "as": name} (a unique prefix of the id of a session
    file in ~/.bantam/sessions holding text), {"autosave": {...}} (the autosave matches it
    now, or within 5 s) or {"sleep": seconds}."""
    term = support.Pty(command + case.get("args", []), cwd=folder.work,
                       env=folder.env(case.get("env")), rows=40, cols=100)
    captured = {}
    try:
        term.expect(PROMPT, timeout=20)
        for step in case["keys"]:
            if "type" in step:
                term.send(re.sub(r"\{(\w+)\}", lambda m: captured.get(m.group(1), m.group()),
                                 step["type"]))
            elif "expect" in step:
                term.expect(step["expect"], timeout=20)
            elif "capture" in step:
                captured[step["as"]] = term.expect(re.compile(step["capture"]), timeout=20).group(1)
            elif step.get("prompt"):
                term.expect(PROMPT, timeout=20)
            elif "prefix" in step:
                captured[step["as"]] = unique_prefix(step["prefix"], folder)
            elif "autosave" in step:
                wait_autosave(step["autosave"], folder)
            elif "sleep" in step:
                time.sleep(step["sleep"])
        status = term.wait(case.get("max_seconds", 30))
        return status, support.strip_ansi(term.output).replace("\r", ""), ""
    finally:
        term.kill()


def unique_prefix(text, folder):
    """A prefix of a session id that no other session file's name starts with: of the files
    holding text, the one whose prefix is shortest, a proper prefix first (else a whole id)."""
    best = None
    for name, path in session_files(folder).items():
        sid = name[:-len(".json")]
        skip = name == "autosave.json" or not name.endswith(".json")
        if skip or text not in support.read_text(path):
            continue
        others = [n for n in session_files(folder) if n != name]
        size = next((n for n in range(1, len(sid)) if not any(
            o.startswith(sid[:n]) for o in others)), len(sid))
        rank = (size == len(sid), size)
        if best is None or rank < best[0]:
            best = rank, sid[:size]
    if best is None:
        raise AssertionError("no session file holds %r" % text)
    return best[1]


def wait_autosave(expected, folder, seconds=5):
    """Wait until the autosave matches expected (AssertionError naming the difference)."""
    deadline = time.monotonic() + seconds
    while True:
        problem = autosave_problem(expected, folder)
        if not problem:
            return
        if time.monotonic() > deadline:
            raise AssertionError("while typing: " + problem)
        time.sleep(0.1)


def read_autosave(folder):
    """The autosave's JSON document, or the text saying why there is none."""
    path = session_files(folder).get("autosave.json")
    if not path:
        return None, "no ~/.bantam/sessions/autosave.json"
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except ValueError as e:
        return None, "autosave.json is not valid JSON: %s" % e


def autosave_problem(expected, folder):
    """None when the autosave matches expected, else the difference."""
    saved, problem = read_autosave(folder)
    return problem or matches(expected, saved, "autosave.json")


def session_files(folder):
    """{name: path} of the files in ~/.bantam/sessions."""
    sessions = os.path.join(folder.home, ".bantam", "sessions")
    names = os.listdir(sessions) if os.path.isdir(sessions) else []
    return {n: os.path.join(sessions, n) for n in names if not n.startswith(".")}


def check(case, result, server, folder):
    """The list of what differs from the case's expectations (empty: the case passed)."""
    status, out, err = result
    want, problems = case["expect"], []
    if "exit" in want and status != want["exit"]:
        problems.append("exit status %s, expected %s" % (status, want["exit"]))
    if want.get("exit_nonzero") and status == 0:
        problems.append("exit status 0, expected a failure")
    problems.append(in_order(want.get("stdout", []), out, "stdout"))
    problems.append(in_order(want.get("stderr", []), err, "stderr"))
    problems += ["stdout has %r" % t for t in want.get("stdout_lacks", []) if t in out]
    problems += ["stderr has %r" % t for t in want.get("stderr_lacks", []) if t in err]
    posts = server.posts
    if "requests" in want and len(posts) != want["requests"]:
        problems.append("the server got %d requests, expected %d" % (len(posts), want["requests"]))
    for i, body in enumerate(want.get("bodies", [])):
        if body is not None:
            problems.append("request %d: only %d requests" % (i + 1, len(posts)) if i >= len(posts)
                            else matches(body, posts[i]["body"], "request %d" % (i + 1)))
    for i, headers in enumerate(want.get("headers", [])):
        if i < len(posts):
            problems.append(matches(headers, posts[i]["headers"], "request %d headers" % (i + 1)))
    for i, texts in enumerate(want.get("messages_have", [])):
        if i < len(posts):
            sent = json.dumps(posts[i]["body"]["messages"], ensure_ascii=False)
            problems += ["request %d lacks %r" % (i + 1, t) for t in texts if t not in sent]
    for i, texts in enumerate(want.get("messages_lack", [])):
        if i < len(posts):
            sent = json.dumps(posts[i]["body"]["messages"], ensure_ascii=False)
            problems += ["request %d has %r" % (i + 1, t) for t in texts if t in sent]
    for i, line in enumerate(want.get("paths", [])):
        if i < len(posts) and "%s %s" % (posts[i]["method"], posts[i]["path"]) != line:
            problems.append("request %d is %s %s, expected %s" % (
                i + 1, posts[i]["method"], posts[i]["path"], line))
    problems += check_gaps(want.get("gaps", []), posts)
    problems += check_files(want, folder)
    if "autosave_as_sent" in want:
        problems.append(check_as_sent(want["autosave_as_sent"], posts, folder))
    return [p for p in problems if p]


def check_gaps(gaps, posts):
    """The seconds between request i and i+1 against {"min": s, "max": s} (the retries' waits)."""
    problems = []
    for i, gap in enumerate(gaps):
        if i + 1 >= len(posts):
            return problems + ["no request %d to time the wait before it" % (i + 2)]
        seconds = posts[i + 1]["time"] - posts[i]["time"]
        if seconds < gap.get("min", 0) or seconds > gap.get("max", float("inf")):
            problems.append("%.2f s between requests %d and %d, expected %s" % (
                seconds, i + 1, i + 2, gap))
    return problems


def check_as_sent(extra, posts, folder):
    """The autosave's messages are the last request's, exactly, then `extra` more (matched)."""
    saved, problem = read_autosave(folder)
    if problem or not posts:
        return problem or "no request"
    sent = posts[-1]["body"]["messages"]
    messages = saved.get("messages") if isinstance(saved, dict) else None
    if not isinstance(messages, list) or messages[:len(sent)] != sent:
        return "autosave.json's messages do not begin with those of the last request:\n%s\n%s" % (
            json.dumps(messages)[:1500], json.dumps(sent)[:1500])
    return matches(extra, messages[len(sent):], "autosave.json's messages after those sent")


def check_files(want, folder):
    """The differences in the files left behind: work/ files, the autosave, the history."""
    problems = []
    for relpath, content in want.get("files", {}).items():
        path = os.path.join(folder.work, relpath)
        if content is None and os.path.exists(path):
            problems.append("%s exists, expected it absent" % relpath)
        elif content is not None and support.read_text(path) != content:
            problems.append("%s holds %r, expected %r" % (relpath, support.read_text(path),
                                                         content))
    if want.get("autosave") is not None:
        problems.append(autosave_problem(want["autosave"], folder))
    if want.get("sessions_private"):
        files = session_files(folder)
        if not files:
            problems.append("no session files")
        for name, path in files.items():
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode & 0o077:
                problems.append("%s has mode %o, expected 0600" % (name, mode))
    for text in want.get("history", []):
        if text not in support.read_text(os.path.join(folder.home, ".bantam_history")):
            problems.append("~/.bantam_history lacks %r" % text)
    return problems


def run_case(command, case):
    """Run one case against command (a list); the list of problems (empty when it passed)."""
    folder = Folder()
    server = Server([server_item(r) for r in case.get("replies", [])]).start()
    try:
        set_up(case, folder, server)
        result = (run_terminal if "keys" in case else run_batch)(command, case, folder)
        if case.get("settle"):   # let what a killed command would do later have its chance
            time.sleep(case["settle"])
        return check(case, result, server, folder)
    except AssertionError as e:
        return [str(e)]
    finally:
        server.stop()
        shutil.rmtree(folder.root, ignore_errors=True)


def main(argv=None):
    """Run the cases (all, or those whose name contains -k) against the command after --."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else [
        sys.executable, os.path.join(os.path.dirname(HERE), "bantam.py")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", action="append", default=[], help="run the cases whose name has this")
    parser.add_argument("-v", action="store_true", help="print every case, not just failures")
    parser.add_argument("--list", action="store_true",
                        help="list the cases and what each checks (-v: and the spec's sentence)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    cases = [c for c in load_cases() if not args.k or any(k in c["name"] for k in args.k)]
    if args.list:
        for case in cases:
            print("%-34s %s" % (case["name"], case["about"]))
            if args.v:
                print("%-34s (%s)" % ("", case["spec"]))
        return 0
    passed = failed = 0
    for case in cases:
        problems = run_case(command, case)
        if problems:
            failed += 1
            print("FAIL %s: %s\n  (%s)\n  %s" % (case["name"], case["about"], case["spec"],
                                                "\n  ".join(problems)))
        else:
            passed += 1
            if args.v:
                print("ok   %s" % case["name"])
    print("%d passed, %d failed" % (passed, failed))
    return 0 if passed and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
