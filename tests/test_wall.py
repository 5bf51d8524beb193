"""The sandbox covers what Landlock alone does not: metadata outside the folder (modes, owners,
times, extended attributes), device nodes, datagrams and signals out of the sandbox. Each test
is an attack a command made with bantam 1.2.0's sandbox=workspace, made again through the
scripted model, as root and (where it differs) as an unprivileged user."""

import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import unittest

from tests import support
from tests.support import BantamTestCase, text_stream, tool_call_stream
from tests.test_sandbox import LANDLOCK, SECCOMP_ARCH, failing_syscall, python, shell

ROOT = os.geteuid() == 0


@unittest.skipUnless(LANDLOCK and os.uname().machine in SECCOMP_ARCH,
                     "needs Linux with Landlock ABI 4 or later on x86_64 or aarch64")
class WallTests(BantamTestCase):
    """What a sandboxed command can no longer do outside the working and temporary folders."""

    def setUp(self):
        super().setUp()
        self.cfg_path = os.path.join(self.ws.home, ".bantam", "model.cfg")
        os.chmod(self.cfg_path, 0o600)
        os.chmod(os.path.dirname(self.cfg_path), 0o700)
        self.outside = os.path.join(self.ws.home, "notes.txt")
        with open(self.outside, "w") as f:
            f.write("mine\n")
        os.chmod(self.outside, 0o644)

    def results(self):
        """{tool_call_id: content} of the tool messages the server received."""
        return {m["tool_call_id"]: m["content"] for body in self.server.bodies
                for m in body["messages"] if m["role"] == "tool"}

    def batch(self, *args):
        result = self.run_bantam("-p", "do it", *args)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def test_metadata_outside_the_folder_stays_as_it_was(self):
        """chmod of ~/.bantam and its model.cfg, chmod, touch -d and an extended attribute on a
        file of the home fail; chmod +x ./build.sh here still works."""
        self.ws.write("build.sh", "echo built\n")
        before = os.stat(self.outside)
        commands = ["chmod 0644 %s" % self.cfg_path, "chmod 0777 %s" % os.path.dirname(
            self.cfg_path), "chmod 0666 %s" % self.outside, "touch -d 2001-01-01 %s" % self.outside,
            python("import os; os.setxattr(%r, 'user.x', b'1')" % self.outside),
            "chmod +x ./build.sh && ./build.sh"]
        self.push(tool_call_stream([shell("c%d" % i, c) for i, c in enumerate(commands)]),
                  text_stream("done"))
        self.batch("--sandbox", "workspace")
        self.assertEqual(stat.S_IMODE(os.stat(self.cfg_path).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(self.cfg_path)).st_mode), 0o700)
        after = os.stat(self.outside)
        self.assertEqual((after.st_mode, after.st_mtime), (before.st_mode, before.st_mtime))
        try:
            self.assertEqual(os.listxattr(self.outside), [])
        except OSError:   # (a file system without them: nothing was set either)
            pass
        self.assertIn("built", self.results()["c5"])
        self.assertTrue(os.stat(os.path.join(self.ws.work, "build.sh")).st_mode & stat.S_IXUSR)

    @unittest.skipUnless(ROOT, "making a device node needs root")
    def test_no_device_node_even_as_root(self):
        """mknod inside the folder fails: no path to /dev/kmsg or a raw disk."""
        self.push(tool_call_stream([shell("c1", "mknod kmsg c 1 11; ls -l kmsg")]),
                  text_stream("done"))
        self.batch("--sandbox", "workspace")
        self.assertFalse(os.path.lexists(os.path.join(self.ws.work, "kmsg")), self.results())

    def test_bantam_cannot_be_stopped_by_a_signal_from_its_command(self):
        """kill -STOP $PPID (bantam) fails; the turn ends as usual."""
        self.push(tool_call_stream([shell("c1", "kill -STOP $PPID; echo status $?")]),
                  text_stream("still here"))
        result = support.run_bantam(self.ws, "-p", "do it", "--sandbox", "workspace", timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("still here", result.stdout)
        self.assertIn("status 1", self.results()["c1"])

    def test_no_datagram_leaves_with_the_network_off(self):
        """socketpair(AF_UNIX, SOCK_DGRAM) then sendto a socket outside: nothing arrives; a
        stream socketpair (asyncio's) still works."""
        name = "\0bantam-wall-%d" % os.getpid()
        path = os.path.join(tempfile.mkdtemp(prefix="bantam-wall-"), "s")
        self.addCleanup(shutil.rmtree, os.path.dirname(path), True)
        sockets = []
        for address in (name, path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind(address)
            s.settimeout(0.5)
            self.addCleanup(s.close)
            sockets.append(s)
        send = "import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); " \
               "a.sendto(b'out', %r)"
        commands = [python(send % name), python(send % path), python(
            "import asyncio; print(asyncio.run(asyncio.sleep(0, 'loop ok')))")]
        self.push(tool_call_stream([shell("c%d" % i, c) for i, c in enumerate(commands)]),
                  text_stream("done"))
        self.batch("--sandbox", "workspace", "--set", "sandbox_network=false")
        for s in sockets:
            with self.assertRaises(socket.timeout):
                s.recv(10)
        self.assertIn("loop ok", self.results()["c2"])

    def test_an_abstract_socket_outside_is_out_of_reach(self):
        """With the network on, a command still cannot reach an abstract Unix socket of a
        process outside the sandbox."""
        name = "\0bantam-wall-open-%d" % os.getpid()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(name)
        s.settimeout(0.5)
        self.addCleanup(s.close)
        send = python("import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)"
                      ".sendto(b'out', %r)" % name)
        self.push(tool_call_stream([shell("c1", send)]), text_stream("done"))
        self.batch("--sandbox", "workspace")
        with self.assertRaises(socket.timeout):
            s.recv(10)


UNSHARE = {"x86_64": 272, "aarch64": 97}


@unittest.skipUnless(LANDLOCK and os.uname().machine in UNSHARE, "needs Landlock on x86_64/aarch64")
class NoNamespaceTests(BantamTestCase):
    """Where no mount namespace can be had, Landlock alone, said in one line at start."""

    def test_landlock_alone_is_said_and_still_holds(self):
        self.push(tool_call_stream([shell("c1", "touch ~/x; touch ./y")]), text_stream("done"))
        result = subprocess.run(support.bantam_argv("-p", "go", "--sandbox", "workspace"),
                                cwd=self.ws.work, env=self.ws.env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=60, preexec_fn=failing_syscall(
                                    UNSHARE[os.uname().machine], errno.EPERM))
        self.assertEqual(result.returncode, 0, result.stderr)
        said = [line for line in result.stderr.splitlines() if "Landlock alone" in line]
        self.assertEqual(len(said), 1, result.stderr)
        self.assertIn("no mount namespace here", said[0])
        self.assertIn("modes, owners, times and extended attributes", said[0])
        self.assertFalse(os.path.exists(os.path.join(self.ws.home, "x")))
        self.assertTrue(os.path.exists(os.path.join(self.ws.work, "y")))


@unittest.skipUnless(LANDLOCK and ROOT and shutil.which("setpriv"),
                     "needs root (to become another user), setpriv and Landlock")
class UnprivilegedWallTests(BantamTestCase):
    """The same wall for an ordinary user: bantam run as `nobody` in a home of its own."""

    def test_metadata_outside_the_folder_stays_as_it_was(self):
        outside = os.path.join(self.ws.home, "notes.txt")
        with open(outside, "w") as f:
            f.write("mine\n")
        nobody = support.as_nobody(self)
        os.chmod(outside, 0o644)
        self.push(tool_call_stream([shell("c1", "chmod 0666 %s; touch ok-here" % outside)]),
                  text_stream("done"))
        argv = nobody + [sys.executable, support.BANTAM, "-p", "do it", "--sandbox", "workspace"]
        result = support.run_program(self.ws, argv)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(outside).st_mode), 0o644, result.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.ws.work, "ok-here")))


if __name__ == "__main__":
    unittest.main()
