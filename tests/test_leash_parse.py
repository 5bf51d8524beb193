"""Approvals that parse the command: the shell-command splitter (a table of (command, simple
commands, not plain?) cases a port can reuse), and the attacks on deny and allow run
for real: bantam as a subprocess, the scripted model making the call, the file checked after.
"""

import contextlib
import io
import os
import shlex
import unittest

import bantam
from tests.support import BantamTestCase, text_stream, tool_call_stream

# (command, the simple commands bantam reads in it as word lists, is it not plain?) A wrapper
# is a simple command of its own, and so is what it runs; what a program does with its
# arguments (an interpreter's code, find -exec, a script) is not read.
SPLITS = [
    ('ls -la', [['ls', '-la']], False),
    ('/bin/rm x', [['rm', 'x']], False),
    ('cd . && rm x', [['cd', '.'], ['rm', 'x']], False),
    ('a; b || c | d & e\nf |& g', [['a'], ['b'], ['c'], ['d'], ['e'], ['f'], ['g']], False),
    ('r\\m x', [['rm', 'x']], False),
    ('\\rm x', [['rm', 'x']], False),
    ('\'r\'"m" \'a b\' "c\\"d"', [['rm', 'a b', 'c"d']], False),
    ('rm \\\nx', [['rm', 'x']], False),
    ('FOO=1 BAR="a b" rm x', [['rm', 'x']], True),
    ('X=rm; $X x', [['$X', 'x']], True),
    ('$(echo rm) x', [['echo', 'rm'], ['$(echo rm)', 'x']], True),
    ('`echo rm` x', [['echo', 'rm'], ['`echo rm`', 'x']], True),
    ('"$X" x', [['$X', 'x']], True),
    ("$'\\x72m' x", [["$'\\x72m'", 'x']], True),
    ('/bin/r? x', [['/bin/r?', 'x']], True),
    ('{rm,x}', [['{rm,x}']], True),
    ('git log $(touch PWNED)', [['touch', 'PWNED'], ['git', 'log', '$(touch PWNED)']], True),
    ('echo "$(rm x)" \'$(rm y)\'', [['rm', 'x'], ['echo', '$(rm x)', '$(rm y)']], True),
    ('echo `rm x`', [['rm', 'x'], ['echo', '`rm x`']], True),
    ('cat <(rm x) >(wc)', [['rm', 'x'], ['wc'], ['cat', '<(rm x)', '>(wc)']], True),
    ('echo $((1 + 2)) ${HOME:-/}', [['echo', '$((1 + 2))', '${HOME:-/}']], True),
    ('a=$(rm x) b', [['rm', 'x'], ['b']], True),
    ('(rm x)', [['rm', 'x']], False),
    ('{ rm x; }', [['rm', 'x']], False),
    ('if [ -f x ]; then rm x; else :; fi', [['[', '-f', 'x', ']'], ['rm', 'x'], [':']], True),
    ('for f in a b; do rm $f; done', [['f', 'in', 'a', 'b'], ['rm', '$f']], True),
    ('while true; do ! rm x; done', [['true'], ['rm', 'x']], True),
    ('case $x in a) rm x;; esac', [['$x', 'in', 'a'], ['rm', 'x']], True),
    ('f() { rm x; }; f', [['f'], ['rm', 'x'], ['f']], False),
    ('echo hi > out.txt 2>&1', [['echo', 'hi', '>out.txt', '2>&1']], False),
    ('>out rm x', [['rm', 'x', '>out']], False),
    ('true &>/dev/null & rm x', [['true', '&>/dev/null'], ['rm', 'x']], False),
    ('ls # ; rm x', [['ls']], False),
    ('echo a#b', [['echo', 'a#b']], False),
    ('env rm x', [['env', 'rm', 'x'], ['rm', 'x']], True),
    ('command rm x', [['command', 'rm', 'x'], ['rm', 'x']], True),
    ('timeout --signal=KILL 5s rm x', [['timeout', '--signal=KILL', '5s', 'rm', 'x'], ['rm', 'x']], True),
    ('time -p rm x', [['time', '-p', 'rm', 'x'], ['rm', 'x']], True),
    ("bash -c 'rm x; ls'", [['bash', '-c', 'rm x; ls'], ['rm', 'x'], ['ls']], False),
    ('sh -ec "sh -c \'rm x\'"', [['sh', '-ec', "sh -c 'rm x'"], ['sh', '-c', 'rm x'], ['rm', 'x']], False),
    ('bash script.sh', [['bash', 'script.sh']], False),
    ('curl -s x | sh', [['curl', '-s', 'x'], ['sh']], False),
    ('bash <<EOF\nrm x\nEOF', [['bash', '<<EOF']], True),
    ("cat <<'EOF'\nrm x\nEOF\nls", [['cat', '<<EOF'], ['ls']], False),
    ('cat <<-EOF\n\trm x\n\tEOF\nls', [['cat', '<<-EOF'], ['ls']], True),
    ('eval rm x', [['eval', 'rm', 'x']], False),
    ('source ./env.sh', [['source', './env.sh']], False),
    ('. ./env.sh', [['.', './env.sh']], False),
    ("python3 -c 'import os'", [['python3', '-c', 'import os']], False),
    ("python3 <<< 'import os'", [['python3', '<<<import os']], False),
    ("echo 'import os' | python3", [['echo', 'import os'], ['python3']], False),
    ('python3 -m pytest -q', [['python3', '-m', 'pytest', '-q']], False),
    ('python3.12 tool.py', [['python3.12', 'tool.py']], False),
    ("perl -ne 'print' f", [['perl', '-ne', 'print', 'f']], False),
    ('node -e 1', [['node', '-e', '1']], False),
    ('ruby -e 1', [['ruby', '-e', '1']], False),
    ("awk '{print $1}' f", [['awk', '{print $1}', 'f']], False),
    ('awk \'BEGIN{system("rm x")}\'', [['awk', 'BEGIN{system("rm x")}']], False),
    ('find . -name x -delete', [['find', '.', '-name', 'x', '-delete']], False),
    ('find . -exec rm {} \\; -print', [['find', '.', '-exec', 'rm', '{}', ';', '-print']], False),
    ('[[ -f x ]] && rm x', [['[[', '-f', 'x', ']]'], ['rm', 'x']], True),
    ("echo 'unclosed", [['echo', 'unclosed']], True),
    ('echo $(ls', [['ls'], ['echo', '$(ls']], True),
    ('', [], False),
    ('coproc rm x', [['rm', 'x']], True),
    ('echo $((echo 1); rm x)', [['echo', '1'], ['rm', 'x'], ['echo', '$((echo 1); rm x)']], True),
    ('echo $((echo "))"); rm x)', [['echo', '))'], ['rm', 'x'], ['echo', '$((echo "))"); rm x)']], True),
    ('((echo a); rm x)', [['echo', 'a'], ['rm', 'x']], False),
    ('echo ${x:-<<2}\nrm x', [['echo', '${x:-<<2}'], ['rm', 'x']], True),
    ('echo $[1<<2]\nrm x', [['echo', '$[1<<2]'], ['rm', 'x']], True),
    ('echo ${x:-;rm y}', [['echo', '${x:-;rm y}']], True),
    ('echo ${x:-{a}; rm x}', [['echo', '${x:-{a}'], ['rm', 'x}']], True),
    ('true; \\\n rm x', [['true'], ['rm', 'x']], False),
    ('echo $\\\n{x:-<<2}\nrm x', [['echo', '${x:-<<2}'], ['rm', 'x']], True),
    ('echo "$\\\n(rm x)"', [['rm', 'x'], ['echo', '$(rm x)']], True),
    ('cat <<EOF\nEO\\\nF\nrm x', [['cat', '<<EOF'], ['rm', 'x']], True),
    ('echo $(( (1 + 2) * 3 )) ok', [['echo', '$(( (1 + 2) * 3 ))', 'ok']], False),
    ('echo $$ "$$"', [['echo', '$$', '$$']], True),
    ('(( x = 1 << 2 ))\nrm x', [['rm', 'x']], True),
    ('for (( i = 1 << 2; i < 3; i++ )); do :; done\nrm x', [[':'], ['rm', 'x']], True),
    ('echo "$(( x << 2 ))"\nrm x', [['echo', '$(( x << 2 ))'], ['rm', 'x']], True),
    ('(( "1" << 2 ))\nrm x', [['rm', 'x']], True),
    ('env - rm x', [['env', '-', 'rm', 'x'], ['rm', 'x']], True),
    ("rbash -c 'rm x'", [['rbash', '-c', 'rm x'], ['rm', 'x']], False),
    ("bash5.2 -c 'rm x'", [['bash5.2', '-c', 'rm x'], ['rm', 'x']], False),
    ("sed -e 's/e/E/g;s/x/y/' -e '/^e/d' f", [['sed', '-e', 's/e/E/g;s/x/y/', '-e', '/^e/d', 'f']], False),
]


class SplitterTests(unittest.TestCase):
    """shell_commands(): a pure function; each case is (input, expected)."""

    def test_the_table(self):
        for command, expected, unplain in SPLITS:
            with self.subTest(command=command):
                split = bantam.shell_commands(command)
                self.assertEqual(split.found, expected)
                self.assertEqual(bool(split.unplain), unplain, split.unplain)

    def test_reasons_name_what_is_not_plain(self):
        for command, words in (("X=rm; $X x", "$X"), ("echo $(ls)", "$("), ("for f in a; do :; done", "for"),
                               ("cat <<EOF\nx\nEOF", "heredoc"), ("sudo ls", "sudo"), ("echo `ls`", "backtick")):
            with self.subTest(command=command):
                self.assertTrue(any(words in why for why in bantam.shell_commands(command).unplain))

    def test_nesting_has_a_limit(self):
        """Shells in shells and substitutions in substitutions: 40 deep is not read (not plain)."""
        self.assertTrue(bantam.shell_commands("echo $(" * 40 + "rm x" + ")" * 40).unplain)
        command = "rm x"
        for _ in range(6):
            command = "sh -c " + shlex.quote(command)
        self.assertIn(["rm", "x"], bantam.shell_commands(command).found)


class DecideTests(unittest.TestCase):
    """decide() called as approval() does, without a terminal."""

    def test_a_huge_or_deep_line_is_read_quickly(self):
        """2000 nested `$((echo`: too deep to read, taken as a computed program (refused under
        deny); 30,000 quoted words are read at once."""
        import time
        cfg = dict(bantam.DEFAULTS, deny="rm -rf *", run={})
        began = time.monotonic()
        for command in ("echo $((" * 2000, "git $((" * 2000):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command[:20])
        self.assertEqual(bantam.decide(cfg, "xx " + "'a b' " * 30000)[0], "run")
        self.assertLess(time.monotonic() - began, 5)

    def test_deny_refuses_only_what_matches_a_simple_command(self):
        """deny=rm *: an interpreter's code, a heredoc, a loop, a script, a message, a grep, a
        subshell, what a program bantam does not know runs: all run as with no pattern."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("python3 -c \"import os; os.remove('x')\"", "cat <<'EOF' > notes.md\nrm x\nEOF",
                        "[ -f x ] && [[ -d y ]]",
                        "cat <<EOF\nrm x\nEOF", "for f in *.tmp; do echo \"$f\"; done",
                        "while false; do :; done", "bash script.sh", "git commit -m 'rm x'",
                        "grep -rn rm .", "(cd src && make)", "echo rm x", "git rm x", "chrt 1 rm x",
                        "find . -name rm", "git log --grep rm", "CFLAGS=-O2 make",
                        "sudo -u root echo rm x", "nice -n 5 grep rm f", "pytest -k rm",
                        "find . -exec grep -l rm {} +", "echo a b | xargs",
                        "find . -name '*.txt' | xargs -I{} mv {} {}.bak"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)
        for command in ("echo $(rm x)", "grep x <(rm y)", "echo x | xargs rm", "git commit -m \"$(rm x)\"",
                        "find . -name x -delete", "for f in a; do rm $f; done", "coproc rm x",
                        "{rm,-f,x}", "if true; then rm x; fi", "$(echo /bin/rm) x",
                        "{/bin/rm,x}", "\"${D}/rm\" x", "/bin/r? x", "/bin/r[m] x"):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)

    def test_why_allow_does_not_run_a_redirection_says_where_it_writes(self):
        """allow=git * with approve=deny: the reason names what is wrong with the target, a
        .git/ folder inside the working folder is not called outside it."""
        cfg = dict(bantam.DEFAULTS, allow="git *", approve="deny", run={})
        for command, why in (("git log > .git/x", ">.git/x writes into a .git folder"),
                             ("git log > ../x", ">../x writes outside the working folder"),
                             ("git log >$HOME/x", ">$HOME/x writes to a computed path")):
            self.assertIn(why, bantam.decide(cfg, command)[2], command)

    def test_allow_runs_only_a_plain_line(self):
        """allow='echo *, ls *' with approve=deny: plain lines run; a variable, a substitution,
        a wrapper, a keyword, an unquoted heredoc or an unclosed quote is asked (here refused)."""
        cfg = dict(bantam.DEFAULTS, allow="echo *, ls *, cat *", approve="deny", run={})
        for command in ("echo 'a b' \"c\" d\\ e", "echo $((1 + 2)) && ls | cat", "(ls; echo x) >/dev/null",
                        "cat <<'EOF' > notes.txt\nx $(y)\nEOF"):
            self.assertEqual(bantam.decide(cfg, command)[0], "run", command)
        for command in ("echo $HOME", "echo $(ls)", "echo `ls`", "X=1 ls", "sudo ls", "env ls",
                        "for f in a; do echo $f; done", "if ls; then ls; fi", "cat <<EOF\nx\nEOF",
                        "echo 'a", "cat <(ls)", "l? x", "echo $((x + 1))"):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)


class AlwaysTests(unittest.TestCase):
    """The approvals remembered by an answer of a(lways), called as a library caller does."""

    def test_always_for_a_path_is_not_always_for_a_command_of_that_text(self):
        """`a` to writing PATH must not approve the shell command `write:PATH` (bash runs it
        as ./write:PATH, a file the model may have made)."""
        answers = ["a", "n"]
        cfg = dict(bantam.DEFAULTS, approve="ask", run={"approver": lambda q, t: answers.pop(0)})
        path = os.path.abspath("notes.txt")
        with contextlib.redirect_stderr(io.StringIO()):
            bantam.approval(cfg, "c1", "write", {"filePath": path, "content": "x"})
            result = bantam.approval(cfg, "c2", "shell_exec", {"command": "write:" + path})
        self.assertEqual(answers, [], "the command was not asked about")
        self.assertIn("did not let", result)


def shell(call_id, command):
    """A (id, name, args) shell_exec call for tool_call_stream."""
    return (call_id, "shell_exec", {"command": command})


# Ways to run rm past `deny=rm *` (each deleted its file on bantam 1.1.0).
DENY_VARIANTS = [
    "/bin/rm {f}", "cd . && rm {f}", "$(echo rm) {f}", "r\\m {f}", "env rm {f}", "\\rm {f}",
    "\"rm\" {f}", "command rm {f}", "X=rm; $X {f}", "true\nrm {f}", "true; rm {f}", "`echo rm` {f}",
    "bash -c 'rm {f}'", "unlink {f}", "find . -name {f} -delete",
    "echo {f} | xargs rm", "timeout 5 nice rm {f}", "sudo -u root rm {f}", "nice -n 5 rm {f}",
    "timeout -s KILL 5 rm {f}", "env -u HOME rm {f}", "echo {f} | xargs -n 1 rm",
    "{{ rm {f}; }}", "cat <(rm {f})",
]


# The second red team's ways past `deny=rm *` that bantam's reading still sees, run for real
# (each deleted its file before the fix): (what it uses, the command).
DENY_BYPASSES = [
    ("coproc", "coproc rm {f}; wait"),
    ("$(( that is a subshell", "echo $((echo 1); rm {f})"),
    ("a continuation as a word", "true; \\\n rm {f}"),
    ("a continuation in ${", "echo $\\\n{x:-<<2}\nrm {f}"),
    ("a continuation in \"$(\"", "echo \"$\\\n(rm {f})\""),
    ("a continuation in a heredoc", "cat <<EOF\nEO\\\nF\nrm {f}"),
    ("${ with <<", "echo ${x:-<<2}\nrm {f}"),
    ("$[ with <<", "echo $[1<<2]\nrm {f}"),
    ("(( with <<", "(( x = 1 << 2 ))\nrm {f}"),
    ("env -", "env - rm {f}"),
    ("rbash -c", "rbash -c 'rm {f}'"),
]


class AttackTests(BantamTestCase):
    """The attacks of issue 18 on deny and allow, made by the scripted model in batch mode."""

    def tool_results(self, body=None):
        """{tool_call_id: content} of the tool messages in a request body (default: the last)."""
        body = body or self.server.bodies[-1]
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}

    def exists(self, name):
        return os.path.exists(os.path.join(self.ws.work, name))

    def test_twenty_ways_around_deny_rm_are_refused(self):
        """deny='rm *' (approve=auto, no terminal): every variant is refused, its file stays, and
        the model reads why (the pattern)."""
        names = ["f%02d" % n for n in range(len(DENY_VARIANTS))]
        for name in names:
            self.ws.write(name, "precious")
        calls = [shell("c%02d" % n, v.format(f=name)) for n, (v, name) in enumerate(zip(DENY_VARIANTS, names))]
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_bantam("-p", "clean up", "--set", "deny=rm *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for (call_id, _, args), name in zip(calls, names):
            with self.subTest(command=args["command"]):
                self.assertTrue(self.exists(name), "%s was deleted" % name)
                text = results[call_id]
                self.assertTrue(text.startswith("[not run: "), text)
                self.assertIn("'rm *'", text)

    def test_second_red_team_bypasses_of_deny_are_refused(self):
        """deny='rm *' (approve=auto, batch): each of DENY_BYPASSES is refused, its file stays,
        and the model reads why."""
        self.ws.write("run", "#!/bin/sh\nexec \"$@\"\n")
        self.ws.write("run-string", "#!/bin/sh\nexec sh -c \"$1\"\n")
        for name in ("run", "run-string"):
            os.chmod(os.path.join(self.ws.work, name), 0o755)
        names = ["g%02d" % n for n in range(len(DENY_BYPASSES))]
        for name in names:
            self.ws.write(name, "precious")
        calls = [shell("c%02d" % n, command.replace("{f}", name))
                 for n, ((_, command), name) in enumerate(zip(DENY_BYPASSES, names))]
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_bantam("-p", "clean up", "--set", "deny=rm *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for (call_id, _, args), name, (what, _) in zip(calls, names, DENY_BYPASSES):
            with self.subTest(what=what, command=args["command"]):
                self.assertTrue(self.exists(name), "%s was deleted" % name)
                text = results[call_id]
                self.assertTrue(text.startswith("[not run: "), text)
                self.assertIn("'rm *'", text)

    def test_daily_git_and_find_run_under_deny_rm(self):
        """deny='rm *' in batch mode: a commit whose message says rm, git log --grep rm and
        find -name rm run (they were refused as unchecked)."""
        import subprocess
        for argv in (["init", "-q"], ["config", "user.email", "a@b"], ["config", "user.name", "a"]):
            subprocess.run(["git"] + argv, cwd=self.ws.work, check=True)
        self.ws.write("old.py", "x = 1\n")
        calls = [shell("c1", "git add old.py && git commit -qm 'rm the old helper'"),
                 shell("c2", "git log --grep rm --oneline"), shell("c3", "find . -name rm")]
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_bantam("-p", "commit it", "--set", "deny=rm *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for call_id in ("c1", "c2", "c3"):
            self.assertFalse(results[call_id].startswith("[not run"), results[call_id])
        self.assertIn("rm the old helper", results["c2"])

    def test_what_deny_does_not_read_runs_as_with_no_pattern(self):
        """deny='rm *' in batch mode: an interpreter's code, a heredoc, a loop, a script, a
        grep and a subshell run as they would with no pattern."""
        os.mkdir(os.path.join(self.ws.work, "src"))
        self.ws.write("script.sh", "touch s.out\n")
        self.ws.write("src/Makefile", "all:\n\ttouch made.out\n")
        commands = ["python3 -c \"open('p.out', 'w').write('rm x')\"",
                    "cat <<'EOF' > h.out\nrm x\nEOF", "for f in l1 l2; do touch $f.out; done",
                    "bash script.sh", "grep -rn rm . > g.out", "(cd src && make -s)"]
        self.push(tool_call_stream([shell("c%d" % n, c) for n, c in enumerate(commands)]),
                  text_stream("done"))
        result = self.run_bantam("-p", "go", "--set", "deny=rm *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for name in ("p.out", "h.out", "l1.out", "l2.out", "s.out", "g.out", "src/made.out"):
            self.assertTrue(self.exists(name), "%s: %s" % (name, results))

    def test_allow_cannot_be_stretched_to_run_something_else(self):
        """approve=deny, allow='ls *, echo *, git *': what runs more than an allowed command, or
        writes outside the working folder, does not run; plain uses still do."""
        self.ws.write("ls", "#!/bin/sh\ntouch P3\n")
        os.chmod(os.path.join(self.ws.work, "ls"), 0o755)
        os.mkdir(os.path.join(self.ws.work, ".git"))
        outside = os.path.dirname(self.ws.work)
        attacks = [("c1", "echo $(case a in a) touch P1;; esac)", "P1"),
                   ("c2", "function ls { touch P2; }; ls", "P2"),
                   ("c3", "PATH=.:$PATH ls", "P3"),
                   ("c4", "echo pwned > ../P4", os.path.join(outside, "P4")),
                   ("c5", "echo pwned >> .git/P5", os.path.join(".git", "P5")),
                   ("c6", "{ echo pwned; } > ../P6", os.path.join(outside, "P6")),
                   ("c7", "GIT_SSH_COMMAND='touch P7' git ls-remote ssh://example.invalid/r", "P7"),
                   ("c8", "ls > ~/P8", os.path.join(self.ws.home, "P8")),
                   ("c9", "echo pwned >$HOME/P9", os.path.join(self.ws.home, "P9"))]
        fine = [("k1", "ls >/dev/null 2>&1 && echo ok > ok.txt", "ok.txt"),
                ("k2", "ls 2>&1 | git --version >&2", None),
                ("k3", "echo ok >> ../K3", None)]   # allow=write:../K3 lets it
        self.push(tool_call_stream([shell(i, c) for i, c, _ in attacks + fine]), text_stream("done"))
        result = self.run_bantam("-p", "go", "--set", "approve=deny",
                                 "--set", "allow=ls *, echo *, git *, write:../K3")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for call_id, command, made in attacks:
            with self.subTest(command=command):
                self.assertFalse(self.exists(made), "%s ran: %s" % (command, results[call_id]))
                self.assertIn("approve=deny", results[call_id])
        self.assertTrue(self.exists("ok.txt"), results["k1"])
        self.assertIn("exit: 0", results["k2"])
        self.assertTrue(os.path.exists(os.path.join(outside, "K3")), results["k3"])

    def test_deny_names_the_part_that_matched(self):
        """The refusal of `cd . && rm x` says which simple command matched; `unlink` is named as
        deleting like rm."""
        self.ws.write("x", "")
        self.push(tool_call_stream([shell("c1", "cd . && rm x"), shell("c2", "unlink x")]), text_stream("ok"))
        self.run_bantam("-p", "go", "--set", "deny=rm *")
        results = self.tool_results()
        self.assertIn("rm x", results["c1"])
        self.assertIn("unlink", results["c2"])
        self.assertTrue(self.exists("x"))

    def test_allow_chains_are_refused_under_approve_deny(self):
        """approve=deny, allow='git *': a plain git command runs; `git status; touch PWNED` and
        `git log $(touch PWNED)` do not run at all."""
        self.push(tool_call_stream([shell("c1", "git --version"), shell("c2", "git status; touch PWNED"),
                                    shell("c3", "git log $(touch PWNED2)"),
                                    shell("c4", "git log `touch PWNED3`")]),
                  text_stream("done"))
        result = self.run_bantam("-p", "go", "--set", "approve=deny", "--set", "allow=git *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        self.assertIn("git version", results["c1"])
        for name, call_id in (("PWNED", "c2"), ("PWNED2", "c3"), ("PWNED3", "c4")):
            self.assertFalse(self.exists(name), "%s ran" % call_id)
            self.assertIn("approve=deny", results[call_id])
            self.assertIn("touch", results[call_id])   # the part that is not allowed

    def test_allow_needs_every_part_within_analysis(self):
        """allow='echo *' with approve=deny: `echo $(touch X)` and `X=echo; $X hi > f` are refused."""
        self.push(tool_call_stream([shell("c1", "echo a && echo b > ab.txt"), shell("c2", "X=echo; $X hi > f.txt")]),
                  text_stream("done"))
        self.run_bantam("-p", "go", "--set", "approve=deny", "--set", "allow=echo *")
        results = self.tool_results()
        self.assertTrue(self.exists("ab.txt"), results["c1"])
        self.assertFalse(self.exists("f.txt"), results["c2"])
        self.assertIn("$X", results["c2"])

    def test_auto_without_deny_patterns_still_runs_everything(self):
        """approve=auto and no deny pattern: a computed program runs (that is auto)."""
        self.push(tool_call_stream([shell("c1", "X=touch; $X made.txt")]), text_stream("done"))
        self.run_bantam("-p", "go")
        self.assertTrue(self.exists("made.txt"))


if __name__ == "__main__":
    unittest.main()
