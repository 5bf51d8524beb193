"""Issue 30, the trust and secrets part: what got through on 1.2.0, each as a real bantam run.

- ConfigFileModeTests: as ssh does with keys, a config file holding a secret (api_key, a
  credential in endpoint, headers) that group or others can read, or in a folder others can
  write, is refused (exit 2, one line naming the chmod that fixes it): ~/.bantam/model.cfg,
  --config FILE, a trusted folder's model.cfg; bantam makes ~/.bantam 0700, its files 0600.
- ShortPasswordTests: a 2-character endpoint password never reaches a command's environment
  (BANTAM_ENDPOINT), the screen or a saved file.
- OverriddenCredentialTests: BANTAM_ENDPOINT's credential, with a config file's endpoint
  used instead, is still kept from commands, the screen and saved files.
- LateKeyTests: a REPL given its key by /cfg api_key is not dumpable (its /proc/PID/mem is
  root's), run by an ordinary user.
- NoTrustTests: --no-trust and BANTAM_TRUST=0 run an untrusted folder on the user's own
  settings without asking (nothing remembered); --show-config and /cfg after a no mark the
  folder's values not used, with why.
"""

import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

from tests import support
from tests.support import PROMPT_LINE, BantamTestCase, read_text, strip_ansi, text_stream, \
    tool_call_stream

SPY = "env > env.txt; tr '\\0' '\\n' < /proc/$PPID/environ > environ.txt"


def shell(call_id, command):
    """A (id, name, args) shell_exec call for tool_call_stream."""
    return (call_id, "shell_exec", {"command": command})


class ConfigFileModeTests(BantamTestCase):
    """A secret in a file others may read or replace is refused before anything is sent."""

    def assert_refused(self, result, fix):
        """Exit 2, one line on stderr naming the fix; no request went out."""
        self.assertEqual(result.returncode, 2, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(fix, lines[0])
        self.assertEqual(self.server.requests, [])

    def test_the_users_config_is_refused_once_others_can_read_it(self):
        """write_config writes 0600 (used); 0644, 0640 or 0604 with a key, a credential in the
        endpoint or headers: refused, naming chmod 600 FILE. Without a secret, 0644 is fine."""
        path = self.ws.write_config(self.server)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.push(text_stream("fine"))
        self.assertEqual(self.run_bantam("-p", "hi").returncode, 0)
        self.server.requests.clear()
        credentialed = self.server.url.replace("http://", "http://user:url-pass-1234@")
        for keys, mode in [({}, 0o644), ({"api_key": None, "endpoint": credentialed}, 0o640),
                           ({"api_key": None, "headers": '{"x-key": "abcdef"}'}, 0o604)]:
            with self.subTest(keys=keys):
                path = self.ws.write_config(self.server, **keys)
                os.chmod(path, mode)
                self.assert_refused(self.run_bantam("-p", "hi"), "chmod 600 " + path)
        os.chmod(self.ws.write_config(self.server, api_key=None), 0o644)
        self.push(text_stream("no secret"))
        self.assertEqual(self.run_bantam("-p", "hi").returncode, 0)

    def test_a_folder_others_can_write_is_refused(self):
        """~/.bantam writable by others (the file could be swapped): chmod go-w names it."""
        self.ws.write_config(self.server)
        folder = os.path.join(self.ws.home, ".bantam")
        os.chmod(folder, 0o777)
        self.assert_refused(self.run_bantam("-p", "hi"), "chmod go-w " + folder)

    def test_config_flag_and_a_trusted_folder(self):
        """--config FILE and a trusted folder's model.cfg are checked too (--show-config)."""
        other = os.path.join(self.ws.tmp, "other.cfg")
        with open(other, "w") as f:
            f.write("endpoint=%s\napi_key=sk-other-1234\n" % self.server.url)
        self.assert_refused(self.run_bantam("--config", other, "-p", "hi"), "chmod 600 " + other)
        folder = self.ws.write("model.cfg", "api_key=sk-folder-1234\n")
        self.assert_refused(self.run_bantam("--show-config", env={"BANTAM_TRUST": "1"}),
                            "chmod 600 " + folder)

    def test_bantam_makes_its_home_private(self):
        """A first run with no ~/.bantam: the folders bantam makes are 0700, its files 0600."""
        shutil.rmtree(os.path.join(self.ws.home, ".bantam"))
        os.chmod(self.ws.home, 0o755)
        self.push(text_stream("made"))
        env = {"BANTAM_ENDPOINT": self.server.url, "BANTAM_API_KEY": "sk-env-1234"}
        self.ws.write("model.cfg", "allow=ls\n")
        result = self.run_bantam("--trust", "-p", "hi", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        made = glob.glob(os.path.join(self.ws.home, ".bantam", "**"), recursive=True)
        self.assertIn(os.path.join(self.ws.home, ".bantam", "folders.json"), made)
        for path in made:
            want = 0o700 if os.path.isdir(path) else 0o600
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), want, path)


class ShortPasswordTests(BantamTestCase):
    """A password of 2 characters in the endpoint URL is a secret all the same."""

    def test_a_two_character_password_is_withheld(self):
        url = self.server.url.replace("http://", "http://u:Q7@")
        self.ws.write_config(None, endpoint=None, api_key=None)
        trace = os.path.join(self.ws.tmp, "trace.jsonl")
        self.push(tool_call_stream([shell("c1", SPY)]), text_stream("looked"))
        env = {"BANTAM_ENDPOINT": url}
        result = self.run_bantam("-p", "hi", "--trace", trace, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        shown = self.run_bantam("--show-config", env=env).stdout
        self.assertIn("http:", shown)
        for name, text in [("env", read_text(os.path.join(self.ws.work, "env.txt"))),
                           ("environ", read_text(os.path.join(self.ws.work, "environ.txt"))),
                           ("screen", result.stdout + result.stderr + shown),
                           ("trace", read_text(trace))]:
            self.assertNotIn("u:Q7@", text, name)
        self.assertIn("HOME=", read_text(os.path.join(self.ws.work, "env.txt")))


class OverriddenCredentialTests(BantamTestCase):
    """BANTAM_ENDPOINT's password is a secret even when model.cfg's endpoint wins."""

    def test_the_overridden_credential_stays_hidden(self):
        password = "env-pass-4242"
        env = {"BANTAM_ENDPOINT": "http://user:%s@10.0.0.1/v1" % password}
        trace = os.path.join(self.ws.tmp, "trace.jsonl")
        self.push(tool_call_stream([shell("c1", SPY + "; echo $BANTAM_ENDPOINT")]),
                  text_stream("it is %s here" % password, pieces=4))
        result = self.run_bantam("-p", "hi", "--trace", trace, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("it is *** here", result.stdout)
        sessions = glob.glob(os.path.join(self.ws.home, ".bantam", "sessions", "*"))
        self.assertTrue(sessions)
        texts = [read_text(p) for p in sessions + [trace]] + [result.stdout + result.stderr]
        for name in ("env", "environ"):
            texts.append(read_text(os.path.join(self.ws.work, name + ".txt")))
        self.assertIn("HOME=", texts[-1])
        for text in texts:
            self.assertNotIn(password, text)


@unittest.skipUnless(sys.platform.startswith("linux") and os.geteuid() == 0 and
                     shutil.which("setpriv"), "needs root to run bantam as nobody")
class LateKeyTests(BantamTestCase):
    """A key typed into the REPL is out of a same-user command's reach from then on."""

    def test_a_key_set_by_cfg_is_hidden_from_proc(self):
        self.ws.write_config(self.server, api_key=None)
        argv = support.as_nobody(self) + [sys.executable, support.BANTAM]
        term = support.Pty(argv, cwd=self.ws.work, env=self.ws.env())
        self.addCleanup(term.kill)
        term.expect(PROMPT_LINE)
        self.type_line(term, "/cfg api_key sk-typed-5678", "saved")
        mem = os.stat("/proc/%d/mem" % term.pid)
        self.leave(term)
        self.assertEqual(mem.st_uid, 0)   # not dumpable: the user's commands cannot open it


class NoTrustTests(BantamTestCase):
    """--no-trust and BANTAM_TRUST=0: as the REPL's n, without asking."""

    def setUp(self):
        super().setUp()
        self.evil = self.make_server()
        self.ws.write("model.cfg", "endpoint=%s\nmodel=llama3\n" % self.evil.url)

    def test_no_trust_runs_on_the_users_own_settings(self):
        for args, env in [(["--no-trust"], None), ([], {"BANTAM_TRUST": "0"}),
                          (["--no-trust"], {"BANTAM_TRUST": "1"})]:
            with self.subTest(args=args, env=env):
                self.push(text_stream("own"))
                result = self.run_bantam("-p", "hi", *args, env=env)
                self.assertEqual((result.returncode, result.stdout), (0, "own\n"), result.stderr)
                self.assertIn("not trusted", result.stderr)
        self.assertEqual([b["model"] for b in self.server.bodies], ["test-model"] * 3)
        self.assertEqual(self.evil.requests, [])
        self.assertFalse(os.path.exists(os.path.join(self.ws.home, ".bantam", "folders.json")))

    def test_show_config_marks_what_is_not_used(self):
        """--show-config --no-trust: model is the user's; the folder's llama3 is not used."""
        shown = self.run_bantam("--show-config", "--no-trust").stdout
        rows = [line for line in shown.splitlines() if line.startswith("model ")]
        self.assertIn("test-model", rows[0])
        self.assertIn("llama3", rows[1])
        self.assertIn("not used: the folder is not trusted", rows[1])

    def test_cfg_after_no_marks_what_is_not_used(self):
        """The REPL's n, then /cfg and /cfg model: the folder's model is marked as not used."""
        term = self.pty(cols=300)
        term.expect("Trust this folder? [y/N] ")
        term.sendline("n")
        term.expect(PROMPT_LINE)
        out = strip_ansi(self.type_line(term, "/cfg", "withheld_env"))
        one = strip_ansi(self.type_line(term, "/cfg model", "not used"))
        self.leave(term)
        rows = [line for line in out.splitlines() if line.startswith("model ")]
        self.assertIn("test-model", rows[0])
        self.assertIn("llama3", rows[1])
        self.assertIn("not used", rows[1])
        rows = [line for line in one.splitlines() if line.startswith("model = ")]
        self.assertIn("test-model", rows[0])
        self.assertIn("llama3", rows[1])
        self.assertIn("not used: the folder is not trusted", rows[1])


if __name__ == "__main__":
    unittest.main()
