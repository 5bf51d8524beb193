"""The sandbox: sandbox=workspace|read-only and sandbox_network=false, enforced by Landlock (and
seccomp) in each command's process.

bantam runs as a real subprocess against the scripted FakeServer; the scripted model calls
shell_exec (or write, or a subagent) with commands that write here and elsewhere, open a TCP
connection to a port the test listens on, or read ~/.bantam. The tests check the files on
disk and the tool results the server received next. A kernel without Landlock is made real
for one bantam process by a seccomp filter (installed between fork and exec, as bantam does
its own) under which landlock_create_ruleset fails as it does there.
"""

import ctypes
import errno
import json
import os
import socket
import struct
import subprocess
import sys
import unittest

from tests.support import (
    BANTAM, BantamTestCase, bantam_argv, read_text, strip_ansi, text_stream, tool_call_stream)

SECCOMP_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
DENIED = "Permission denied|Read-only file system"   # Landlock's refusal, or the mounts'
LANDLOCK = sys.platform == "linux" and ctypes.CDLL(None, use_errno=True).syscall(
    ctypes.c_long(444), None, ctypes.c_long(0), ctypes.c_long(1)) >= 4


def shell(call_id, command):
    """A (id, name, args) shell_exec call for tool_call_stream."""
    return (call_id, "shell_exec", {"command": command})


def python(code):
    """A shell command that runs code with this Python."""
    return "%s -c %s" % (sys.executable, "'%s'" % code.replace("'", "'\\''"))


def no_landlock(error):
    """A preexec_fn under which landlock_create_ruleset fails with error, as on a kernel without
    Landlock (ENOSYS) or with it left out at boot (EOPNOTSUPP)."""
    return failing_syscall(444, error)


def failing_syscall(number, error):
    """A preexec_fn under which syscall number fails with error (this architecture's calls
    only). Built before the fork: the child only makes two calls."""
    libc = ctypes.CDLL(None, use_errno=True)
    steps = [(0x20, 0, 0, 4), (0x15, 0, 3, SECCOMP_ARCH[os.uname().machine]),   # our arch, else allow
             (0x20, 0, 0, 0), (0x15, 0, 1, number), (0x06, 0, 0, 0x50000 | error),  # errno
             (0x06, 0, 0, 0x7FFF0000)]
    code = b"".join(struct.pack("HBBI", *step) for step in steps)
    program = (ctypes.c_char * len(code)).from_buffer_copy(code)
    fprog = struct.pack("HP", len(steps), ctypes.addressof(program))
    prctl, u = libc.prctl, ctypes.c_ulong

    def install(program=program):
        """Install the filter in this (child) process."""
        if prctl(38, u(1), u(0), u(0), u(0)) or prctl(22, u(2), fprog, u(0), u(0)):
            os._exit(99)
    return install


@unittest.skipUnless(LANDLOCK and os.uname().machine in SECCOMP_ARCH,
                     "needs Linux with Landlock ABI 4 or later on x86_64 or aarch64")
class SandboxTests(BantamTestCase):
    """What commands may do under each sandbox mode, seen from the files and the tool results."""

    def setUp(self):
        """The usual workspace, plus a file outside it that a test may try to make in /etc."""
        super().setUp()
        self.etc_file = "/etc/bantam-sandbox-test-%d" % os.getpid()
        self.addCleanup(lambda: os.path.exists(self.etc_file) and os.unlink(self.etc_file))

    def batch(self, *args, code=0, prompt="do the task", env=None):
        """Run `bantam -p prompt *args`; assert the exit status; the CompletedProcess."""
        result = self.run_bantam("-p", prompt, *args, env=env)
        self.assertEqual(result.returncode, code, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result

    def tool_results(self):
        """{tool_call_id: content} of every tool message the server received."""
        return {m["tool_call_id"]: m["content"] for body in self.server.bodies
                for m in body["messages"] if m["role"] == "tool"}

    def test_workspace_lets_commands_write_only_here_and_in_the_temporary_folder(self):
        """touch ./x and $TMPDIR/y work; ~/x, /etc/x and /tmp/x are refused, and the model reads
        bash's "Permission denied" or "Read-only file system" (root too)."""
        outside = "/tmp/bantam-sandbox-test-%d" % os.getpid()   # TMPDIR is elsewhere here
        self.addCleanup(lambda: os.path.exists(outside) and os.unlink(outside))
        self.push(tool_call_stream([shell("c1", "touch ./x"), shell("c2", "touch $TMPDIR/y"),
                                    shell("c3", "touch ~/x"), shell("c4", "touch " + self.etc_file),
                                    shell("c5", "touch " + outside)]), text_stream("done"))
        self.batch("--sandbox", "workspace")
        self.assertTrue(os.path.exists(os.path.join(self.ws.work, "x")))
        self.assertTrue(os.path.exists(os.path.join(self.ws.tmp, "y")))
        for path in (os.path.join(self.ws.home, "x"), self.etc_file, outside):
            self.assertFalse(os.path.exists(path), path)
        results = self.tool_results()
        self.assertEqual(results["c1"], "\n\nexit: 0")   # no note when the command worked
        self.assertEqual(results["c2"], "\n\nexit: 0")
        for call_id in ("c3", "c4", "c5"):
            self.assertRegex(results[call_id], DENIED)

    def test_read_only_lets_commands_write_only_in_the_temporary_folder(self):
        """sandbox=read-only: ./x is refused, $TMPDIR/y is made, and reading still works."""
        self.ws.write("notes.txt", "readable\n")
        self.push(tool_call_stream([shell("c1", "touch ./x"), shell("c2", "touch $TMPDIR/y"),
                                    shell("c3", "cat notes.txt /etc/hostname >/dev/null && echo read")]),
                  text_stream("done"))
        self.batch("--set", "sandbox=read-only")
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "x")))
        self.assertTrue(os.path.exists(os.path.join(self.ws.tmp, "y")))
        results = self.tool_results()
        self.assertRegex(results["c1"], DENIED)
        self.assertEqual(results["c3"], "read\n\n\nexit: 0")

    def test_subagents_commands_are_confined_too(self):
        """A subagent's shell_exec runs under the same sandbox."""
        self.push(tool_call_stream([("s1", "run_subagent", {"prompt": "make the file"})]),
                  tool_call_stream([shell("c1", "touch ~/from-child")]), text_stream("child done"),
                  text_stream("parent done"))
        self.batch("--sandbox", "workspace")
        self.assertFalse(os.path.exists(os.path.join(self.ws.home, "from-child")))
        self.assertRegex(self.tool_results()["c1"], DENIED)

    def test_bantams_own_files_are_hidden_from_commands(self):
        """~/.bantam (sessions, the user's model.cfg) and ~/.bantam_history cannot be read or
        written; the rest of the home can be read, and listed."""
        bantam_dir = os.path.join(self.ws.home, ".bantam")
        own = read_text(os.path.join(bantam_dir, "model.cfg")) + "# sk-home-secret\n"
        for path, text in ((os.path.join(bantam_dir, "model.cfg"), own),
                           (os.path.join(self.ws.home, ".bantam_history"), "secret prompt\n"),
                           (os.path.join(self.ws.home, "visible.txt"), "in the open\n")):
            with open(path, "w") as f:
                f.write(text)
        self.push(tool_call_stream([shell("c1", "cat ~/.bantam/model.cfg"),
                                    shell("c2", "cat ~/.bantam/sessions/*.json"),
                                    shell("c3", "cat ~/.bantam_history"),
                                    shell("c4", "echo approve=auto >> ~/.bantam/model.cfg"),
                                    shell("c5", "ln -s ~/.bantam link && cat link/model.cfg"),
                                    shell("c6", "cat ~/visible.txt && ls -a ~")]), text_stream("done"))
        self.batch("--sandbox", "workspace")
        results = self.tool_results()
        for call_id in ("c1", "c2", "c3", "c4", "c5"):
            self.assertRegex(results[call_id], DENIED)
        self.assertNotIn("sk-home-secret", json.dumps(self.server.bodies))
        self.assertNotIn("secret prompt", json.dumps(self.server.bodies))
        self.assertEqual(read_text(os.path.join(bantam_dir, "model.cfg")), own)
        self.assertIn("in the open\n", results["c6"])
        self.assertIn(".bantam\n", results["c6"])

    def test_in_the_home_folder_itself_bantams_files_stay_hidden(self):
        """Run in the home folder (HOME is the working folder): its folders and files can be
        changed, ~/.bantam cannot; a new file right in the home cannot be made (a Landlock
        rule on the home would cover ~/.bantam too)."""
        os.makedirs(os.path.join(self.ws.work, "src"))
        own = read_text(os.path.join(self.ws.home, ".bantam", "model.cfg"))
        path = self.ws.write(".bantam/model.cfg", own + "# sk-home-secret\n")   # the user's own
        os.chmod(path, 0o600)   # (a key others can read is refused)
        self.ws.write("existing.txt", "old\n")
        os.symlink(".bantam", os.path.join(self.ws.work, "link"))   # a rule through it would open ~/.bantam
        self.push(tool_call_stream([shell("c1", "touch src/new && echo changed >> existing.txt"),
                                    shell("c2", "touch .bantam/planted"), shell("c3", "touch fresh"),
                                    shell("c4", "cat link/model.cfg"), shell("c5", "touch link/planted")]),
                  text_stream("done"))
        self.batch("--sandbox", "workspace", env={"HOME": self.ws.work})
        self.assertTrue(os.path.exists(os.path.join(self.ws.work, "src", "new")))
        with open(os.path.join(self.ws.work, "existing.txt")) as f:
            self.assertEqual(f.read(), "old\nchanged\n")
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, ".bantam", "planted")))
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "fresh")))
        results = self.tool_results()
        self.assertIn("exit: 0", results["c1"])
        for call_id in ("c2", "c3", "c4", "c5"):
            self.assertRegex(results[call_id], DENIED)
        self.assertNotIn("sk-home-secret", json.dumps(self.server.bodies))

    def test_the_write_tool_follows_the_same_rule(self):
        """tools=write under workspace: a file here is written, ~/x and ~/.bantam/x are refused."""
        self.push(tool_call_stream([("w1", "write", {"filePath": "here.txt", "content": "ok"}),
                                    ("w2", "write", {"filePath": "~/x.txt", "content": "no"}),
                                    ("w3", "write", {"filePath": "~/.bantam/model.cfg", "content": "no"})]),
                  text_stream("done"))
        # the leash would refuse writes outside the folder first: allowed, so the sandbox decides
        self.batch("--sandbox", "workspace", "--set", "tools=shell_exec,write", "--set", "allow=write:~/*")
        self.assertTrue(os.path.exists(os.path.join(self.ws.work, "here.txt")))
        self.assertFalse(os.path.exists(os.path.join(self.ws.home, "x.txt")))
        self.assertNotIn("no", read_text(os.path.join(self.ws.home, ".bantam", "model.cfg")).split("\n"))
        results = self.tool_results()
        self.assertTrue(results["w1"].startswith("wrote 2 bytes"), results["w1"])
        for call_id in ("w2", "w3"):
            self.assertTrue(results[call_id].startswith("error: sandbox=workspace: writes outside "),
                            results[call_id])

    def listener(self):
        """A TCP socket listening on 127.0.0.1 (closed in cleanup); its port."""
        server = socket.socket()
        self.addCleanup(server.close)
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        server.settimeout(0.5)
        self.server_socket = server
        return server.getsockname()[1]

    def accepted(self):
        """Did a connection reach the listener?"""
        try:
            self.server_socket.accept()[0].close()
            return True
        except socket.timeout:
            return False

    def test_network_false_stops_tcp_udp_unix_and_listening(self):
        """sandbox_network=false: a TCP connection to a port this test listens on fails (and
        never arrives), as do a UDP send, a Unix socket and listening; with the default it works."""
        port = self.listener()
        connect = python('import socket; socket.create_connection(("127.0.0.1", %d), 5); '
                         'print("made", "contact")' % port)
        others = [python('import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
                         's.sendto(b"x", ("127.0.0.1", %d))' % port),
                  python('import socket; socket.socket(socket.AF_UNIX).connect("/run/nothing")'),
                  python('import socket; s = socket.socket(); s.listen(); print(s.getsockname())')]
        calls = [shell("c1", connect)] + [shell("c%d" % i, c) for i, c in enumerate(others, 2)]
        self.push(tool_call_stream(calls), text_stream("done"))
        self.batch("--set", "sandbox_network=false", "--sandbox", "workspace")
        self.assertFalse(self.accepted())
        results = self.tool_results()
        for call_id in ("c1", "c2", "c3", "c4"):
            self.assertIn("PermissionError", results[call_id])
        self.assertNotIn("made contact", results["c1"])
        self.push(tool_call_stream([shell("d1", connect)]), text_stream("done"))
        self.batch("--sandbox", "workspace")
        self.assertTrue(self.accepted())
        self.assertIn("made contact", self.tool_results()["d1"])

    def test_network_false_alone_leaves_the_files_open(self):
        """sandbox=off with sandbox_network=false: no TCP, but writes go anywhere as usual."""
        port = self.listener()
        self.push(tool_call_stream([shell("c1", "touch ~/x"),
                                    shell("c2", "exec 3<>/dev/tcp/127.0.0.1/%d" % port)]), text_stream("done"))
        self.batch("--set", "sandbox_network=false")
        self.assertTrue(os.path.exists(os.path.join(self.ws.home, "x")))
        self.assertFalse(self.accepted())
        self.assertTrue(self.tool_results()["c2"].endswith("\n\nexit: 1"))

    def test_the_users_own_bang_command_is_not_sandboxed(self):
        """`-p '!cmd'` is the user's own command, as typed at the REPL: it runs unconfined."""
        self.batch("--sandbox", "workspace", prompt="!touch ~/by-hand")
        self.assertTrue(os.path.exists(os.path.join(self.ws.home, "by-hand")))

    def test_the_sandbox_is_shown(self):
        """--show-config lists both keys with their sources; the REPL's first line names it."""
        result = self.batch("--sandbox", "read-only", "--set", "sandbox_network=false", "--show-config")
        self.assertRegex(result.stdout, r"\nsandbox +read-only +flag\n")
        self.assertRegex(result.stdout, r"\nsandbox_network +false +flag\n")
        term = self.pty("--sandbox", "workspace")
        term.expect("> ")
        self.assertIn("\u00b7 sandbox workspace \u00b7", strip_ansi(term.output))
        self.leave(term)

    def test_a_wrong_mode_is_a_usage_error(self):
        """--sandbox and sandbox= take off, workspace or read-only: anything else is exit 2."""
        result = self.batch("--sandbox", "strict", code=2)
        self.assertIn("invalid choice: 'strict'", result.stderr)
        result = self.batch("--set", "sandbox=strict", code=2)
        self.assertIn("sandbox: expected one of off, workspace, read-only, got 'strict'", result.stderr)
        self.assertEqual(self.server.bodies, [])


@unittest.skipUnless(sys.platform == "linux" and os.uname().machine in SECCOMP_ARCH,
                     "the test filter is written for Linux on x86_64 and aarch64")
class NoLandlockTests(BantamTestCase):
    """A kernel without Landlock: any sandbox stops the run with exit 2 before any request."""

    def run_without_landlock(self, error, *args):
        """bantam -p ... *args with landlock_create_ruleset failing with error; the CompletedProcess."""
        return subprocess.run(bantam_argv("-p", "make a file", *args), cwd=self.ws.work, env=self.ws.env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, preexec_fn=no_landlock(error))

    def test_no_landlock_stops_before_any_request(self):
        """ENOSYS (an old kernel) and EOPNOTSUPP (Landlock left out at boot): exit 2, one line
        naming the setting and the reason, and not one request; with sandbox=off it runs."""
        for error, setting in ((errno.ENOSYS, ["--sandbox", "workspace"]),
                               (errno.EOPNOTSUPP, ["--set", "sandbox=read-only"]),
                               (errno.ENOSYS, ["--set", "sandbox_network=false"])):
            with self.subTest(error=errno.errorcode[error], setting=setting):
                result = self.run_without_landlock(error, *setting)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn("this kernel has no Landlock (%s)" % os.strerror(error), result.stderr)
                self.assertIn("sandbox=off runs without", result.stderr)
                self.assertEqual(self.server.bodies, [])
        self.push(tool_call_stream([shell("c1", "touch ~/x")]), text_stream("done"))
        result = self.run_without_landlock(errno.ENOSYS)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.ws.home, "x")))

    def test_a_sandbox_turned_on_later_refuses_the_command(self):
        """Setting cfg["sandbox"] during a run (as a library caller, /cfg or a trust answer
        does) where Landlock is missing: shell_exec says why, and the command does not run."""
        code = ("import bantam; cfg = bantam.load_config(); cfg['sandbox'] = 'workspace'; "
                "print(bantam.shell_exec(cfg, {'command': 'touch ~/x'}))")
        result = subprocess.run([sys.executable, "-c", code], cwd=self.ws.work,
                                env=self.ws.env(PYTHONPATH=os.path.dirname(BANTAM)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                timeout=60, preexec_fn=no_landlock(errno.ENOSYS))
        self.assertEqual(result.stdout, "error: cannot start the shell: sandbox=workspace: this kernel has no "
                         "Landlock (Function not implemented); sandbox=off runs without\n", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.ws.home, "x")))


if __name__ == "__main__":
    unittest.main()
