"""Unit tests of the C++ port's extras inside bantam.py: the write tool and set_config_line
(the /cfg file editor).

The same features are tested end to end (a real bantam process, the FakeServer, a pty) in
tests/test_extras_cli.py."""
import os
import re
import shutil
import tempfile
import unittest
import unittest.mock

import bantam

tools = cfgfile = bantam   # the parts' tests call them by their old module names

CFG = {"max_tool_res": 65536}


class Workspace(unittest.TestCase):
    """A fresh temporary folder per test."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bantam-extras-")
        self.addCleanup(shutil.rmtree, self.dir)

    def path(self, *names):
        return os.path.join(self.dir, *names)

    def make(self, name, data):
        """Create a file with bytes or text; its path."""
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path

    def content(self, path):
        with open(path, "rb") as f:
            return f.read()


# ---- write ------------------------------------------------------------------------------

class WriteTest(Workspace):

    def setUp(self):
        super().setUp()
        self.file = self.make("f.txt", "a\nb\nc\nd\n")

    def write(self, **args):
        return tools.write_tool(CFG, args)

    def test_whole_file_creates_parents(self):
        path = self.path("new", "deep", "x.txt")
        self.assertEqual(self.write(filePath=path, content="one\ntwo\n"),
                         "wrote 8 bytes to %s (2 lines, new file)" % path)
        self.assertEqual(self.content(path), b"one\ntwo\n")

    def test_whole_file_overwrite_keeps_mode_and_leaves_no_temp_file(self):
        os.chmod(self.file, 0o640)
        self.assertEqual(self.write(filePath=self.file, content=""),
                         "wrote 0 bytes to %s (0 lines)" % self.file)
        self.assertEqual(self.content(self.file), b"")
        self.assertEqual(os.stat(self.file).st_mode & 0o777, 0o640)
        self.assertEqual(os.listdir(self.dir), ["f.txt"])

    def test_a_write_that_fails_midway_leaves_the_old_file_whole(self):
        """A file-size limit (as a full disk) stops the write after 64 KB: the old file stays
        as it was, no temporary file is left, and the model reads the error."""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))   # (SIGXFSZ: ignored)
        try:
            result = self.write(filePath=self.file, content="x" * (1 << 18))
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        self.assertTrue(result.startswith("error: cannot write "), result)
        self.assertEqual(self.content(self.file), b"a\nb\nc\nd\n")
        self.assertEqual(os.listdir(self.dir), ["f.txt"])

    @unittest.skipUnless(os.getuid() == 0, "root only")
    def test_root_writing_another_users_file_leaves_it_theirs(self):
        os.chown(self.file, 1234, 1235)
        self.write(filePath=self.file, content="new\n")
        self.assertEqual((os.stat(self.file).st_uid, os.stat(self.file).st_gid), (1234, 1235))

    def test_a_new_file_gets_the_usual_mode(self):
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)
        self.write(filePath=self.path("new.txt"), content="x")
        self.assertEqual(os.stat(self.path("new.txt")).st_mode & 0o777, 0o644)

    def test_write_through_a_symlink_keeps_the_link(self):
        link = self.path("link.txt")
        os.symlink(self.file, link)
        self.write(filePath=link, content="new\n")
        self.assertTrue(os.path.islink(link))
        self.assertEqual(self.content(self.file), b"new\n")

    def test_bad_arguments_are_error_text(self):
        bad = ({"content": "x"}, {"filePath": "", "content": "x"}, {"filePath": self.file},
               {"filePath": self.file, "content": 5},
               {"filePath": self.dir, "content": "x"},
               {"filePath": self.file, "content": "x", "lineOffset": 2},   # a splice: refused,
               {"filePath": self.file, "content": "x", "delBytes": 1})     # the file kept whole
        for args in bad:
            result = self.write(**args)
            self.assertTrue(result.startswith("error: "), (args, result))
        self.assertEqual(self.content(self.file), b"a\nb\nc\nd\n")


# ---- cfgfile ----------------------------------------------------------------------------

CONFIG = """\
# bantam settings
endpoint=https://api.example.com/v1

# model = old-model   (commented out: not the key)
model = gpt-4o
timeout=60   # seconds
Temperature=0.7
api_key=
temperature = 0.2\t# this later line wins
"""


def read_back(text):
    """{key: value} as bantam's read_key_values parses text (later lines win)."""
    values = {}
    for line in text.lstrip("\ufeff").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip().lower()] = re.sub(r"\s+#.*$", "", value).strip()
    return values


class ConfigTest(unittest.TestCase):

    def assertChanged(self, before, after, changed):
        """Every line of before is in after unchanged, except line index changed (None: none)."""
        old, new = before.splitlines(True), after.splitlines(True)
        for number, line in enumerate(old):
            if number != changed:
                self.assertEqual(new[number], line, "line %d" % (number + 1))
        return new

    def test_existing_key_is_appended_and_wins(self):
        text = cfgfile.set_config_line(CONFIG, "model", "o3")
        self.assertEqual(text, CONFIG + "model=o3\n")
        self.assertEqual(read_back(text)["model"], "o3")

    def test_missing_key_is_appended(self):
        text = cfgfile.set_config_line(CONFIG, "stream", "false")
        self.assertEqual(text, CONFIG + "stream=false\n")
        no_final_newline = CONFIG.rstrip("\n")
        self.assertEqual(cfgfile.set_config_line(no_final_newline, "stream", "false"),
                         CONFIG + "stream=false\n")
        self.assertEqual(cfgfile.set_config_line("", "model", "m"), "model=m\n")

    def test_empty_value_and_filling_one(self):
        text = cfgfile.set_config_line(CONFIG, "api_key", "sk-1")
        self.assertEqual(read_back(text)["api_key"], "sk-1")
        self.assertEqual(read_back(cfgfile.set_config_line(text, "api_key", ""))["api_key"], "")

    def test_values_with_hash_read_back_or_are_refused(self):
        text = cfgfile.set_config_line(CONFIG, "api_key", "a#b")
        self.assertEqual(read_back(text)["api_key"], "a#b")
        text = cfgfile.set_config_line(CONFIG, "model", "#x")   # "model = #x" would be a comment
        self.assertEqual(read_back(text)["model"], "#x")
        for value in ("a #b", " padded", "two\nlines"):
            with self.assertRaises(bantam.ConfigError):
                cfgfile.set_config_line(CONFIG, "model", value)


if __name__ == "__main__":
    unittest.main()
