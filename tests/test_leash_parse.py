"""Approvals that parse the command: the shell-command splitter (a table of (command, simple
commands, beyond analysis?) cases a port can reuse), and the attacks on deny and allow run
for real: bantam as a subprocess, the scripted model making the call, the file checked after.
"""

import contextlib
import io
import os
import shlex
import unittest

import bantam
from tests.support import (PROMPT_LINE, BantamTestCase, strip_ansi, text_stream,
                           tool_call_stream)

# (command, the simple commands it runs as word lists, is something in it beyond analysis?)
# A wrapper is a simple command of its own, and so is what it runs.
SPLITS = [
    ("ls -la", [["ls", "-la"]], False),
    ("/bin/rm x", [["rm", "x"]], False),
    ("cd . && rm x", [["cd", "."], ["rm", "x"]], False),
    ("a; b || c | d & e\nf |& g", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]], False),
    ("r\\m x", [["rm", "x"]], False),
    ("\\rm x", [["rm", "x"]], False),
    ("'r'\"m\" 'a b' \"c\\\"d\"", [["rm", "a b", 'c"d']], False),
    ("rm \\\nx", [["rm", "x"]], False),
    ("FOO=1 BAR=\"a b\" rm x", [["rm", "x"]], False),
    ("X=rm; $X x", [["$X", "x"]], True),
    ("$(echo rm) x", [["echo", "rm"], ["$(echo rm)", "x"]], True),
    ("`echo rm` x", [["echo", "rm"], ["`echo rm`", "x"]], True),
    ("\"$X\" x", [["$X", "x"]], True),
    ("$'\\x72m' x", [["rm", "x"]], False),   # $'...' decoded, as bash does
    ("$'\\cAm' x", [["cAm", "x"]], True),   # an escape bantam does not decode
    ("/bin/r? x", [["r?", "x"]], True),
    ("{rm,x}", [["{rm,x}"]], True),
    ("git log $(touch PWNED)", [["touch", "PWNED"], ["git", "log", "$(touch PWNED)"]], False),
    ("echo \"$(rm x)\" '$(rm y)'", [["rm", "x"], ["echo", "$(rm x)", "$(rm y)"]], False),
    ("echo `rm x`", [["rm", "x"], ["echo", "`rm x`"]], False),
    ("cat <(rm x) >(wc)", [["rm", "x"], ["wc"], ["cat", "<(rm x)", ">(wc)"]], False),
    ("echo $((1 + 2)) ${HOME:-/}", [["echo", "$((1 + 2))", "${HOME:-/}"]], False),
    ("a=$(rm x) b", [["rm", "x"], ["b"]], False),
    ("(rm x)", [["rm", "x"]], False),
    ("{ rm x; }", [["rm", "x"]], False),
    ("if [ -f x ]; then rm x; else :; fi", [["[", "-f", "x", "]"], ["rm", "x"], [":"]], False),
    ("for f in a b; do rm $f; done", [["rm", "$f"]], False),
    ("while true; do ! rm x; done", [["true"], ["rm", "x"]], False),
    ("case $x in a) rm x;; esac", [["rm", "x"]], False),
    ("f() { rm x; }; f", [["f"], ["rm", "x"], ["f"]], False),
    ("echo hi > out.txt 2>&1", [["echo", "hi", ">out.txt", "2>&1"]], False),
    (">out rm x", [["rm", "x", ">out"]], False),
    ("true &>/dev/null & rm x", [["true", "&>/dev/null"], ["rm", "x"]], False),
    ("ls # ; rm x", [["ls"]], False),
    ("echo a#b", [["echo", "a#b"]], False),
    ("env rm x", [["env", "rm", "x"], ["rm", "x"]], False),
    ("env -i -u HOME A=1 rm x", [["env", "-i", "-u", "HOME", "A=1", "rm", "x"], ["rm", "x"]], False),
    ("command rm x", [["command", "rm", "x"], ["rm", "x"]], False),
    ("exec -a name rm x", [["exec", "-a", "name", "rm", "x"], ["rm", "x"]], False),
    ("nice -n 5 nohup rm x", [["nice", "-n", "5", "nohup", "rm", "x"], ["nohup", "rm", "x"], ["rm", "x"]],
     False),
    ("timeout -s KILL 5 rm x", [["timeout", "-s", "KILL", "5", "rm", "x"], ["rm", "x"]], False),
    ("timeout --signal=KILL 5s rm x", [["timeout", "--signal=KILL", "5s", "rm", "x"], ["rm", "x"]], False),
    ("sudo -u bob rm x", [["sudo", "-u", "bob", "rm", "x"], ["rm", "x"]], False),
    ("time -p rm x", [["time", "-p", "rm", "x"], ["rm", "x"]], False),
    ("echo x | xargs -n 1 rm", [["echo", "x"], ["xargs", "-n", "1", "rm"], ["rm"]], False),
    ("builtin cd x", [["builtin", "cd", "x"], ["cd", "x"]], False),
    ("bash -c 'rm x; ls'", [["bash", "-c", "rm x; ls"], ["rm", "x"], ["ls"]], False),
    ("sh -ec \"sh -c 'rm x'\"", [["sh", "-ec", "sh -c 'rm x'"], ["sh", "-c", "rm x"], ["rm", "x"]], False),
    ("bash script.sh", [["bash", "script.sh"]], True),
    ("curl -s x | sh", [["curl", "-s", "x"], ["sh"]], True),
    ("bash <<EOF\nrm x\nEOF", [["bash", "<<EOF"]], True),
    ("cat <<'EOF'\nrm x\nEOF\nls", [["cat", "<<EOF"], ["ls"]], False),
    ("cat <<-EOF\n\trm x\n\tEOF\nls", [["cat", "<<-EOF"], ["ls"]], False),
    ("cat <<EOF\n$(rm x)\nEOF", [["cat", "<<EOF"]], True),
    ("eval rm x", [["eval", "rm", "x"]], True),
    ("source ./env.sh", [["source", "./env.sh"]], True),
    (". ./env.sh", [[".", "./env.sh"]], True),
    ("python3 -c 'import os'", [["python3", "-c", "import os"]], True),
    ("python3 <<< 'import os'", [["python3", "<<<import os"]], True),
    ("echo 'import os' | python3", [["echo", "import os"], ["python3"]], True),
    ("python3 -m pytest -q", [["python3", "-m", "pytest", "-q"]], False),
    ("python3.12 tool.py", [["python3.12", "tool.py"]], False),
    ("perl -ne 'print' f", [["perl", "-ne", "print", "f"]], True),
    ("node -e 1", [["node", "-e", "1"]], True),
    ("ruby -e 1", [["ruby", "-e", "1"]], True),
    ("awk '{print $1}' f", [["awk", "{print $1}", "f"]], False),
    ("awk 'BEGIN{system(\"rm x\")}'", [["awk", "BEGIN{system(\"rm x\")}"]], True),
    ("find . -name x -delete", [["find", ".", "-name", "x", "-delete"]], False),
    ("find . -exec rm {} \\; -print", [["find", ".", "-exec", "rm", "{}", ";", "-print"], ["rm", "{}"]], False),
    ("[[ -f x ]] && rm x", [["[[", "-f", "x", "]]"], ["rm", "x"]], False),
    ("echo 'unclosed", [["echo", "unclosed"]], True),
    ("echo $(ls", [["ls"], ["echo", "$(ls"]], True),
    ("", [], False),
] + [   # the second red team's (each a way past deny=rm * before): see SPLIT_BYPASSES
    (command, commands, beyond) for _, command, commands, beyond in [
        ("function body", "function f { rm x; }; f", [["rm", "x"], ["f"]], False),
        ("coproc", "coproc rm x", [["rm", "x"]], False),
        ("named coproc", "coproc c { rm x; }", [["rm", "x"]], False),
        ("case in $()", "echo $(case a in a|b) rm x;; (c) ls;; esac) y",
         [["rm", "x"], ["ls"], ["echo", "$(case a in a|b) rm x;; (c) ls;; esac)", "y"]], False),
        ("case over lines", "case a in\n a) rm x\nesac; ls", [["rm", "x"], ["ls"]], False),
        ("$(( as a subshell", "echo $((echo 1); rm x)", [["echo", "1"], ["rm", "x"],
                                                         ["echo", "$((echo 1); rm x)"]], False),
        ("$(( with quoted ))", "echo $((echo \"))\"); rm x)",
         [["echo", "))"], ["rm", "x"], ["echo", "$((echo \"))\"); rm x)"]], False),
        ("(( << ))", "(( x = 1 << 2 ))\nrm x", [["rm", "x"]], False),
        ("for (( << ))", "for (( i = 1 << 2; i < 0; i++ )); do :; done\nrm x", [[":"], ["rm", "x"]],
         False),
        ("(( that is a subshell", "((echo a); rm x)", [["echo", "a"], ["rm", "x"]], False),
        ("${ with <<", "echo ${x:-<<2}\nrm x", [["echo", "${x:-<<2}"], ["rm", "x"]], False),
        ("$[ with <<", "echo $[1<<2]\nrm x", [["echo", "$[1<<2]"], ["rm", "x"]], False),
        ("${ with ;", "echo ${x:-;rm y}", [["echo", "${x:-;rm y}"]], False),
        ("${ and {", "echo ${x:-{a}; rm x}", [["echo", "${x:-{a}"], ["rm", "x}"]], False),
        ("${ with quotes", "echo \"${x:-'}'}\" ${y:-\"$(rm x)\"}",
         [["rm", "x"], ["echo", "${x:-'}'}", "${y:-\"$(rm x)\"}"]], False),
        ("a continuation is no word", "true; \\\n rm x", [["true"], ["rm", "x"]], False),
        ("a continuation in ${", "echo $\\\n{x:-<<2}\nrm x", [["echo", "${x:-", "<<2}"]], True),
        ("a continuation in \"$(\"", "echo \"$\\\n(rm x)\"", [["echo", "$(rm x)"]], True),
        ("a continuation in a heredoc", "cat <<EOF\nEO\\\nF\nrm x", [["cat", "<<EOF"], ["rm", "x"]],
         False),
        ("no continuation in a quoted heredoc", "cat <<'EOF'\nEO\\\nF\nrm x\nEOF", [["cat", "<<EOF"]],
         False),
        ("arithmetic", "echo $(( (1 + 2) * 3 )) ok", [["echo", "$(( (1 + 2) * 3 ))", "ok"]], False),
        ("trap", "trap 'rm x' EXIT", [["trap", "rm x", "EXIT"], ["rm", "x"]], False),
        ("alias", "alias r='rm -f' l=ls", [["alias", "r=rm -f", "l=ls"], ["rm", "-f"], ["ls"]], True),
        ("busybox", "busybox rm x", [["busybox", "rm", "x"], ["rm", "x"]], False),
        ("env -", "env - rm x", [["env", "-", "rm", "x"], ["rm", "x"]], False),
        ("env -a", "env -a name rm x", [["env", "-a", "name", "rm", "x"], ["rm", "x"]], False),
        ("env --chdir", "env --chdir / rm x", [["env", "--chdir", "/", "rm", "x"], ["rm", "x"]], False),
        ("env --unset", "env --unset HOME rm x",
         [["env", "--unset", "HOME", "rm", "x"], ["rm", "x"]], False),
        ("sudo --user", "sudo --user root rm x",
         [["sudo", "--user", "root", "rm", "x"], ["rm", "x"]], False),
        ("sudo -h", "sudo -h host rm x", [["sudo", "-h", "host", "rm", "x"], ["rm", "x"]], False),
        ("sudo -R", "sudo -R / rm x", [["sudo", "-R", "/", "rm", "x"], ["rm", "x"]], False),
        ("nice --adjustment", "nice --adj 5 rm x",
         [["nice", "--adj", "5", "rm", "x"], ["rm", "x"]], False),
        ("timeout --signal", "timeout --signal KILL 5 rm x",
         [["timeout", "--signal", "KILL", "5", "rm", "x"], ["rm", "x"]], False),
        ("xargs --max-procs", "xargs --max-procs 2 rm", [["xargs", "--max-procs", "2", "rm"], ["rm"]],
         False),
        ("time --output", "time --output f rm x", [["time", "--output", "f", "rm", "x"], ["rm", "x"]],
         False),
        ("stdbuf --output", "stdbuf --output L rm x",
         [["stdbuf", "--output", "L", "rm", "x"], ["rm", "x"]], False),
        ("ionice --class", "ionice --class 3 rm x",
         [["ionice", "--class", "3", "rm", "x"], ["rm", "x"]], False),
        ("rbash -c", "rbash -c 'rm x'", [["rbash", "-c", "rm x"], ["rm", "x"]], False),
        ("bash5.2 -c", "bash5.2 -c 'rm x'", [["bash5.2", "-c", "rm x"], ["rm", "x"]], False),
        ("python -W", "python3 -W ignore -c 1", [["python3", "-W", "ignore", "-c", "1"]], True),
        ("python -I -W", "python3 -I -W ignore -c 1", [["python3", "-I", "-W", "ignore", "-c", "1"]],
         True),
        ("ruby -I DIR", "ruby -I lib -e 1", [["ruby", "-I", "lib", "-e", "1"]], True),
        ("$'...' in an argument", "./run $'rm x'", [["run", "rm x"]], False),
        ("python /dev/stdin", "python3 /dev/stdin", [["python3", "/dev/stdin"]], True),
        ("python <()", "python3 <(echo 1)", [["echo", "1"], ["python3", "<(echo 1)"]], True),
        ("sed e", "sed -n '1e rm x' f", [["sed", "-n", "1e rm x", "f"]], True),
        ("sed s///e", "sed 's/a/rm x/e' f", [["sed", "s/a/rm x/e", "f"]], True),
        ("sed plain", "sed -e 's/e/E/g;s/x/y/' -e '/^e/d' f",
         [["sed", "-e", "s/e/E/g;s/x/y/", "-e", "/^e/d", "f"]], False),
        ("readarray -C", "readarray -C 'rm x' -c 1 <<< a", [["readarray", "-C", "rm x", "-c", "1",
                                                            "<<<a"]], True),
        ("nawk", "nawk 'BEGIN{system(\"rm x\")}'", [["nawk", "BEGIN{system(\"rm x\")}"]], True),
        ("BASH_ENV", "BASH_ENV=./x bash -c true", [["bash", "-c", "true"], ["true"]], True),
        ("export ENV", "export ENV=./x; sh -c true", [["export", "ENV=./x"], ["sh", "-c", "true"],
                                                     ["true"]], True),
    ]]


class SplitterTests(unittest.TestCase):
    """shell_commands(): a pure function; each case is (input, expected)."""

    def test_the_table(self):
        for command, expected, beyond in SPLITS:
            with self.subTest(command=command):
                commands, unknown = bantam.shell_commands(command)
                self.assertEqual(commands, expected)
                self.assertEqual(bool(unknown), beyond, unknown)

    def test_reasons_name_what_is_beyond_analysis(self):
        for command, words in (("X=rm; $X x", "$X"), ("eval rm x", "eval"), ("python3 -c 1", "python3 -c"),
                               ("bash <<EOF\nx\nEOF", "bash"), (". ./env.sh", ".")):
            with self.subTest(command=command):
                self.assertIn(words, bantam.shell_commands(command)[1][0])

    def test_nesting_has_a_limit(self):
        """Shells in shells and substitutions in substitutions: 40 deep is beyond analysis."""
        self.assertTrue(bantam.shell_commands("echo $(" * 40 + "rm x" + ")" * 40)[1])
        command = "rm x"
        for _ in range(6):
            command = "sh -c " + shlex.quote(command)
        self.assertIn(["rm", "x"], bantam.shell_commands(command)[0])


class DecideTests(unittest.TestCase):
    """decide() called as approval() does, without a terminal."""

    def test_a_line_too_big_to_check_is_refused_quickly(self):
        """2000 nested `$((echo` (it took 12 s to check): what it may run is more than the
        checking budget allows, so under a deny pattern it is refused as unchecked, saying
        why (the budget bounds the time; bench/ measures speed, not this test)."""
        cfg = dict(bantam.DEFAULTS, deny="rm -rf *", run={})
        for command in ("echo $((" * 2000, "git $((" * 2000, "xx " + "'a b' " * 30000):
            decision, rule, reason = bantam.decide(cfg, command)
            self.assertEqual((decision, rule), ("refuse", "unchecked"), reason)
            self.assertRegex(reason, "too (long|deep|many)")

    def test_the_words_given_to_programs_that_run_none_are_data(self):
        """deny=rm *: grep, echo, cat and the like run no word they are given, so `grep rm`,
        `echo rm x` run (an agent greps for rm all day); a runner bantam does not know
        (`chrt 1 rm x`, `flock echo rm x`: echo is its lock file) or a command line inside
        their words (`echo $(rm x)`) does not."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("grep -rn rm .", "echo rm x", "cat notes | grep 'rm -rf'",
                        "sudo echo rm x", "/bin/echo rm x", "pytest -k rm",
                        "nice -n 5 grep rm f"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)
        for command in ("chrt 1 rm x", "echo $(rm x)", "grep x <(rm y)", "git rm x",
                        "flock echo rm x", "ssh echo rm x",   # (a lock file, a host: named echo)
                        "echo x | xargs rm"):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)


    def test_find_and_git_messages_are_data(self):
        """deny=rm *: find's words are data (what its -exec runs is a command of its own), and
        so are those given to git subcommands that run none (`git commit -m 'rm x'`,
        `git log --grep rm`); an agent's daily work runs. git rm, git rebase -x, an -exec
        and what a -c alias runs are still checked."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("find . -name rm", "find . -name '*.py' -newer rm -print",
                        "git commit --allow-empty -qm 'rm the old helper'",
                        "git commit -m 'rm x' --author 'rm <a@b>'", "git log --grep rm",
                        "git -C . log --grep=rm --oneline", "git tag -a v1 -m 'rm x'",
                        "git stash push -m 'rm x'", "git show rm", "git diff -- rm"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)
        for command in ("git rm x", "git rebase -x 'rm x' HEAD~2", "find . -exec rm {} +",
                        "find . -exec chrt 1 rm {} +", "chrt 1 find . -exec rm {} +",
                        "git -c alias.log='!rm x' log", "git -c core.pager='rm x' log",
                        "find . -name x -delete", "git commit -m \"$(rm x)\""):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)

    def test_what_may_run_is_said_with_its_quotes(self):
        """The reason keeps the words apart as the shell does: `-m 'rm the old helper'`, not
        `-m rm the old helper`, so the question reads as the command does."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        reason = bantam.decide(cfg, "./say -v 'rm the old helper'")[2]
        self.assertIn("say -v 'rm the old helper' may run", reason)


    def test_git_grep_given_a_pager_is_beyond_analysis(self):
        """git grep -O<pager> runs the pager on the files that match (`git grep -Orm foo`
        deleted them under deny=rm *): it is beyond analysis, while git grep rm runs."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("git grep -Orm foo", "git grep -nOrm foo", "git grep -O'rm' foo",
                        "git grep --open-files-in-pager=rm foo", "git -C . grep --open rm x",
                        "/usr/bin/git grep -Orm x"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("refuse", "unchecked"), command)
        self.assertEqual(bantam.decide(cfg, "git grep -n rm")[:2], ("run", "approve=auto"))

    def test_after_a_git_option_bantam_does_not_know_nothing_is_data(self):
        """deny=rm *: such an option may take the next word as its value, `log` too:
        `git --attr-source log rm x` is `git rm x`; sudo -a and doas -a take one. A git alias
        may be grep given a pager (-O), made by -c, git config or a variable."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("git --attr-source log rm x", "git --super-prefix log rm x",
                        "git --some-new-option log rm x", "doas -a echo rm x",
                        "sudo -a echo rm x", "git config alias.g 'grep -O rm'",
                        "git config alias.g 'grep --open-files-in-pager=rm'",
                        "git -c alias.g='!git grep -Orm' g x",
                        "git -c alias.g=grep -c alias.h='g -Orm' h x",
                        "git --config-env=alias.g=V g x",
                        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.g GIT_CONFIG_VALUE_0='grep -Orm' "
                        "git g x"):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)
        for command in ("git -C . --no-pager -c a.b=c --git-dir=.git log --grep rm",
                        "git -P log --oneline --grep rm", "git rebase --onto main x",
                        "CFLAGS=-O2 make", "git diff -Oorder.txt", "sudo -u root echo rm x"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)

    def test_builtins_that_evaluate_an_index_or_rename_a_program_are_beyond_analysis(self):
        """deny=rm *: test -v and printf -v evaluate an array index (`a[$(rm x)]` runs rm),
        hash -p and enable -f give a program a new name, a debugger runs the Python its input
        gives; allow does not run printf -v (it sets a variable, PATH too)."""
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("test -v \"$i\"", "enable -f ./rm.so echo", "PYTEST_ADDOPTS=--pdb pytest",
                        "python3 -m pdb x.py", "python3 -m pytest --trace"):
            self.assertEqual(bantam.decide(cfg, command)[0], "refuse", command)
        for command in ("test -v HOME", "printf '%s\\n' rm", "pytest -k rm -x", "hash -r"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)
        cfg = dict(bantam.DEFAULTS, allow="printf *, ls *", approve="deny", run={})
        self.assertEqual(bantam.decide(cfg, "printf -v PATH %s .; ls")[0], "refuse")

    def test_what_xargs_and_find_give_a_plain_command_runs(self):
        """deny=rm *: the daily forms of xargs and find -exec run (their input named in no
        program's place nor in a shell's command line); an -exec in what -exec runs is its
        word, seen once (each -exec was split again at every level: 20 took 30 s)."""
        import time
        cfg = dict(bantam.DEFAULTS, deny="rm *", run={})
        for command in ("find . -name '*.py' -exec grep -l rm {} +", "echo a b | xargs",
                        "find . -name '*.txt' | xargs -I{} mv {} {}.bak",
                        "find . | xargs -I{} sh -c 'wc -l \"$1\"' _ {}",
                        "find . -exec sh -c 'wc -l \"$1\"' _ {} \\;",
                        "find . -exec echo -exec rm x \\;", "find . -name \"$x\" -print",
                        "ls | xargs -I{} git add {}", "xargs -I{} find {} -newer x"):
            self.assertEqual(bantam.decide(cfg, command)[:2], ("run", "approve=auto"), command)
        self.assertEqual(bantam.decide(cfg, "echo rm | xargs -I X git X f")[0], "refuse")
        began = time.monotonic()
        bantam.decide(cfg, "find -exec " * 22 + "ls")
        self.assertLess(time.monotonic() - began, 2)

    def test_why_allow_does_not_run_a_redirection_says_where_it_writes(self):
        """allow=git * with approve=deny: the reason names what is wrong with the target, a
        .git/ folder inside the working folder is not called outside it."""
        cfg = dict(bantam.DEFAULTS, allow="git *", approve="deny", run={})
        for command, why in (("git log > .git/x", ">.git/x writes into a .git folder"),
                             ("git log > ../x", ">../x writes outside the working folder"),
                             ("git log >$HOME/x", ">$HOME/x writes to a computed path")):
            self.assertIn(why, bantam.decide(cfg, command)[2], command)

    def test_allow_does_not_let_git_write_outside_the_folder_by_its_options(self):
        """allow=git * with approve=deny: git's --output (log, diff, show) and -o (archive,
        format-patch) write files as a redirection does, so they are held to the same rule;
        inside the working folder, and git commit -o (--only), they run."""
        cfg = dict(bantam.DEFAULTS, allow="git *", approve="deny", run={})
        for command in ("git log -p --output=" + os.path.expanduser("~/.bashrc"),
                        "git diff --output ../x", "git archive -o ~/x HEAD",
                        "git format-patch -o .git/hooks HEAD~1"):
            decision, rule, reason = bantam.decide(cfg, command)
            self.assertEqual(decision, "refuse", command)
            self.assertRegex(reason or "", "writes (outside|into|to)", command)
        for command in ("git log --output=log.txt", "git commit -o notes.txt -m x",
                        "git format-patch -o patches HEAD~1"):
            self.assertEqual(bantam.decide(cfg, command)[0], "run", command)


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


# Twenty ways to run rm past `deny=rm *` (each deleted its file on bantam 1.1.0).
DENY_VARIANTS = [
    "/bin/rm {f}", "cd . && rm {f}", "$(echo rm) {f}", "r\\m {f}", "env rm {f}", "\\rm {f}",
    "\"rm\" {f}", "command rm {f}", "X=rm; $X {f}", "true\nrm {f}", "true; rm {f}", "`echo rm` {f}",
    "bash -c 'rm {f}'", "unlink {f}", "find . -name {f} -delete",
    "python3 -c \"import os; os.remove('{f}')\"", "echo {f} | xargs rm", "timeout 5 nice -n 1 rm {f}",
    "{{ rm {f}; }}", "cat <(rm {f})",
]


# The second red team's ways past `deny=rm *`, run for real (each deleted its file before the
# fix): (what it uses, the command). ./run is a program bantam does not know that runs its
# arguments, as chrt, flock, ssh or watch do.
DENY_BYPASSES = [
    ("a function's body", "function g { rm {f}; }; g"),
    ("coproc", "coproc rm {f}; wait"),
    ("a case in $(...)", "echo $(case a in a) rm {f};; esac)"),
    ("$(( that is a subshell", "echo $((echo 1); rm {f})"),
    ("(( with <<", "(( x = 1 << 2 ))\nrm {f}"),
    ("a continuation as a word", "true; \\\n rm {f}"),
    ("a continuation in ${", "echo $\\\n{x:-<<2}\nrm {f}"),
    ("a continuation in \"$(\"", "echo \"$\\\n(rm {f})\""),
    ("a continuation in a heredoc", "cat <<EOF\nEO\\\nF\nrm {f}"),
    ("${ with <<", "echo ${x:-<<2}\nrm {f}"),
    ("$[ with <<", "echo $[1<<2]\nrm {f}"),
    ("trap", "trap 'rm {f}' EXIT"),
    ("a runner's argument named like a program that runs none", "flock echo rm {f}"),
    ("an alias", "shopt -s expand_aliases\nalias r=rm\nr {f}"),
    ("env -", "env - rm {f}"),
    ("env --chdir DIR", "env --chdir / rm \"$PWD/{f}\""),
    ("env --unset NAME", "env --unset HOME rm {f}"),
    ("nice --adjustment N", "nice --adjustment 1 rm {f}"),
    ("timeout --signal SIG", "timeout --signal KILL 5 rm {f}"),
    ("xargs --max-procs N", "echo {f} | xargs --max-procs 1 rm"),
    ("stdbuf --output MODE", "stdbuf --output L rm {f}"),
    ("ionice --class N", "ionice --class 3 rm {f}"),
    ("python3 -W VALUE -c", "python3 -W ignore -c \"import os; os.remove('{f}')\""),
    ("python3 <(...)", "python3 <(echo \"import os; os.remove('{f}')\")"),
    ("python3 /dev/stdin", "echo \"import os; os.remove('{f}')\" | python3 /dev/stdin"),
    ("sed's e command", "echo a | sed -n '1e rm {f}'"),
    ("sed's s///e", "echo a | sed 's/a/rm {f}/e'"),
    ("readarray -C", "readarray -C 'rm {f} #' -c 1 <<< a"),
    ("rbash -c", "rbash -c 'rm {f}'"),
    ("an unknown wrapper", "./run rm {f}"),
    ("an unknown wrapper of a shell", "./run sh -c 'rm {f}'"),
    ("a command in an argument", "./run-string 'true; rm {f}'"),
    ("a $'...' command in an argument", "./run-string $'rm {f}'"),
    ("a command in a variable", "GIT_SSH_COMMAND='rm {f}' git ls-remote ssh://example.invalid/r"),
    ("a command in an exported variable",
     "export GIT_SSH_COMMAND='rm {f}'; git ls-remote ssh://example.invalid/r"),
    ("a command in an option's value", "git -c core.sshCommand='rm {f}' ls-remote ssh://x.invalid/r"),
    ("git's ! alias", "git -c alias.zap='!rm {f}' zap"),
    ("BASH_ENV", "printf '\\162m {f}' > e.sh; BASH_ENV=./e.sh bash -c true"),
    # git grep -O through an alias (git ignores only those named like a git command)
    ("git grep -O through an alias", "git -c alias.g=grep g --no-index -Orm precious -- {f}"),
    ("an alias for git grep -O", "git -c alias.g='grep -Orm' g --no-index precious -- {f}"),
    # words given to programs that run none, run: a bash builtin evaluating an array index,
    # a program given a new name, pytest's debugger reading its input
    ("test -v evaluating an index", "test -v 'a[$(rm {f})]'"),
    ("[ -v evaluating an index", "[ -v 'a[$(rm {f})]' ]"),
    ("printf -v evaluating an index", "printf -v 'a[$(rm {f})]' x"),
    ("hash -p a glob", "hash -p /bin/r[m] cat; cat {f}"),
    ("pytest --trace reading stdin", "printf 'def test_a(): pass\\n' > test_p.py; "
     "printf 'import os; os.system(\"rm {f}\")\\nc\\n' | pytest --trace -q test_p.py"),
    # find's words after what its -exec runs, and echo's made a command by what reads them:
    # xargs appending them to a wrapper or putting them in a shell's command line, find
    # putting a file name touch made in one
    ("find -exec's + not after {}", "find . -maxdepth 0 -exec env -u + rm {f} \\;"),
    ("xargs env", "echo rm {f} | xargs env"),
    ("xargs -I into sh -c", "echo 'y; rm {f}' | xargs -I{} sh -c 'echo {}'"),
    ("xargs -I as the program", "echo rm | xargs -I X env X {f}"),
    ("find -exec sh -c with {}",
     "touch 'a;rm {f}'; find . -name 'a;rm {f}' -exec sh -c 'echo {}' \\;"),
    ("find given a computed -exec", "x=-exec; find . -maxdepth 0 $x rm {f} \\;"),
    ("xargs -I as find's -exec", "echo -exec | xargs -I X find . -maxdepth 0 X rm {f} \\;"),
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
        the model reads why (the pattern, or that bantam cannot check the command)."""
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
                self.assertTrue("'rm *'" in text or "cannot check" in text, text)

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
                self.assertTrue("'rm *'" in text or "cannot check" in text, text)

    def test_computed_arguments_may_spell_a_denied_command(self):
        """deny='rm -rf *': `rm $o x` (o=-rf) and `rm "$@" x` may be `rm -rf x`: refused in
        batch mode, saying the arguments are computed."""
        self.ws.write("x1", "precious")
        self.ws.write("x2", "precious")
        self.push(tool_call_stream([shell("c1", "o=-rf; rm $o x1"),
                                    shell("c2", "set -- -rf; rm \"$@\" x2")]), text_stream("done"))
        self.run_bantam("-p", "clean up", "--set", "deny=rm -rf *")
        results = self.tool_results()
        self.assertTrue(self.exists("x1") and self.exists("x2"), results)
        self.assertIn("computed arguments", results["c1"])
        self.assertIn("'rm -rf *'", results["c2"])

    def test_daily_git_and_find_run_under_deny_rm(self):
        """deny='rm *' in batch mode: a commit whose message says rm, git log --grep rm and
        find -name rm run (they were refused as unchecked); git rm is still refused."""
        import subprocess
        for argv in (["init", "-q"], ["config", "user.email", "a@b"], ["config", "user.name", "a"]):
            subprocess.run(["git"] + argv, cwd=self.ws.work, check=True)
        self.ws.write("old.py", "x = 1\n")
        calls = [shell("c1", "git add old.py && git commit -qm 'rm the old helper'"),
                 shell("c2", "git log --grep rm --oneline"), shell("c3", "find . -name rm"),
                 shell("c4", "git rm -q old.py")]
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_bantam("-p", "commit it", "--set", "deny=rm *")
        self.assertEqual(result.returncode, 0, result.stderr)
        results = self.tool_results()
        for call_id in ("c1", "c2", "c3"):
            self.assertFalse(results[call_id].startswith("[not run"), results[call_id])
        self.assertIn("rm the old helper", results["c2"])
        self.assertIn("cannot check", results["c4"])
        self.assertTrue(self.exists("old.py"))

    def test_what_may_run_a_denied_command_is_asked_about_not_refused(self):
        """An argument that may be run (`./say rm x`, `git rm x`) is only possibly rm: in the
        REPL the user is asked, and the question says what matched; y runs it."""
        self.ws.write("x", "precious")
        self.ws.write("say", "#!/bin/sh\necho \"$@\"\n")   # a program bantam does not know
        os.chmod(os.path.join(self.ws.work, "say"), 0o755)
        self.ws.write_config(self.server, deny="rm *")
        self.push(tool_call_stream([shell("c1", "./say rm x")]), text_stream("fine"))
        term = self.pty()
        term.expect("> ")
        term.sendline("say it")
        term.expect("Run? [y/N/a/e] ")
        term.send("y\r")
        term.expect("fine")
        term.expect(PROMPT_LINE)
        self.assertIn("may run", term.output)
        self.assertIn("rm x", self.tool_results()["c1"])
        self.assertTrue(self.exists("x"))
        self.leave(term)

    def test_a_long_reason_at_the_question_is_cut_to_a_line(self):
        """A 3,000-character command that may run rm: the question's reason is cut short (it
        filled the screen and scrolled the bounded command away); the model reads it whole."""
        self.ws.write_config(self.server, deny="rm *")
        command = "./say --config=%s rm" % ("abcdefghij" * 300)
        self.push(tool_call_stream([shell("c1", command)]), text_stream("fine"))
        term = self.pty(rows=30, cols=100)
        term.expect("> ")
        term.sendline("say it")
        term.expect("Run? [y/N/a/e] ")
        term.send("n\r")
        term.expect(PROMPT_LINE)
        shown = strip_ansi(term.output)
        reason = shown[shown.index("[bantam cannot check"):shown.index("Run? [y/N/a/e]")]
        self.assertLess(len(reason), 400, reason)
        self.assertIn("more characters", reason)
        self.assertIn("which deny", reason)   # what matched, still said
        self.leave(term)

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

    def test_beyond_analysis_asks_at_the_terminal_showing_why(self):
        """In the REPL, with deny='rm *': `$(echo rm) x` is asked about, with the reason shown;
        N keeps the file. A plain `rm x` is refused without a question."""
        self.ws.write("x", "precious")
        self.ws.write_config(self.server, deny="rm *")
        self.push(tool_call_stream([shell("c1", "rm x"), shell("c2", "$(echo rm) x")]), text_stream("fine"))
        term = self.pty()
        term.expect("> ")
        term.sendline("clean")
        term.expect("Run? [y/N/a/e] ")
        term.send("\r")
        term.expect("fine")
        term.expect(PROMPT_LINE)
        self.assertIn("$(echo rm)", term.output)
        self.assertIn("cannot check", term.output)
        self.assertEqual(term.output.count("Run?"), 1, term.output)
        self.assertTrue(self.exists("x"))
        results = self.tool_results()
        self.assertIn("'rm *'", results["c1"])
        self.assertEqual(results["c2"], "[the user did not let this command run]")
        self.leave(term)


if __name__ == "__main__":
    unittest.main()
