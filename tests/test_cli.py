"""The command line (issue 11): every flag, where each setting comes from, and usage errors.

bantam.py runs as a real subprocess against the scripted FakeServer, in a throwaway
Workspace whose model.cfg points at that server. Flags are checked by what reaches the
server (the request body and headers), by what lands on stdout, stderr and disk, and by
--show-config, which says where each setting came from.
"""

import json
import os
import re
import unittest

import bantam
from tests.support import (
    BantamTestCase, error, text_stream, tool_call_stream)

# Every flag the issue asks for, as --help must list it.
FLAGS = ["-p", "--prompt", "-m", "--model", "-e", "--endpoint", "--set", "--config", "-c",
         "--continue", "--session", "-q", "--quiet", "--jsonl", "--trace",
         "--show-config", "--help", "--version"]

# A valid value of every config key, for --set (a new key needs a sample here).
SAMPLES = {
    "endpoint": "http://127.0.0.1:9/v9", "model": "sample-model", "temperature": "0.25",
    "api_key": "sk-sample-secret-1", "headers": '{"x-sample": "hdr-sample-secret"}',
    "stream": "false", "color": "always", "timeout": "7", "first_byte_timeout": "8",
    "shell_timeout": "9", "max_al_iterations": "3", "backoff": "0.5,1", "max_tool_res": "1000",
    "context_window": "4096", "reasoning_effort": "high", "max_reasoning": "5000",
    "trace_file": "sample.jsonl", "render": "never", "tool_lines": "12",
    "tools": "shell_exec,bash,write", "bantam_tools_dir": "/opt/helpers", "bantam_skills_dir": "/opt/skills",
    "project_instructions": "no", "usage": "off",
    "shell_env_exclude": "*KEY*,AWS_*", "shell_env_keep": "GITHUB_TOKEN",
    "approve": "ask", "allow": "git status", "deny": "rm *", "max_turn_tokens": "5000",
    "sandbox": "read-only", "sandbox_network": "no",
    "max_turn_seconds": "30", "max_cost": "0.5", "price_in": "2.5", "price_out": "10",
    "price_cached": "1.25", "max_identical_calls": "4",
    "max_repair_calls": "2",
    "final_answer_timeout": "20", "snapshots": "off",
}
# What --show-config prints for each sample (secrets hidden).
SHOWN = {
    "endpoint": "http://127.0.0.1:9/v9", "model": "sample-model", "temperature": "0.25",
    "api_key": "***", "headers": '{"x-sample": "***"}', "stream": "false", "color": "always",
    "timeout": "7.0", "first_byte_timeout": "8.0", "shell_timeout": "9.0",
    "max_al_iterations": "3", "backoff": "[0.5, 1.0]", "max_tool_res": "1000",
    "context_window": "4096", "reasoning_effort": "high", "max_reasoning": "5000",
    "trace_file": "sample.jsonl", "render": "never", "tool_lines": "12",
    "tools": "shell_exec,write", "bantam_tools_dir": "/opt/helpers", "bantam_skills_dir": "/opt/skills",
    "project_instructions": "false", "usage": "false",
    "shell_env_exclude": "*KEY*,AWS_*", "shell_env_keep": "GITHUB_TOKEN",
    "approve": "ask", "allow": "git status", "deny": "rm *", "max_turn_tokens": "5000",
    "sandbox": "read-only", "sandbox_network": "false",
    "max_turn_seconds": "30.0", "max_cost": "0.5", "price_in": "2.5", "price_out": "10.0",
    "price_cached": "1.25", "max_identical_calls": "4",
    "max_repair_calls": "2",
    "final_answer_timeout": "20.0", "snapshots": "false",
}


def shell_call(call_id, command):
    """A (id, name, args) tool call of shell_exec."""
    return (call_id, "shell_exec", {"command": command})


def parse_show_config(stdout):
    """--show-config's lines as {key: (value, source)} (the value may be blank)."""
    settings = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        key, rest = line.split(None, 1)
        parts = rest.rsplit(None, 1)
        value, source = ("", parts[0]) if len(parts) == 1 else (parts[0].strip(), parts[1])
        settings[key] = (value, source)
    return settings


class CliCase(BantamTestCase):
    """Helpers: a successful run, a usage error, the parsed --show-config."""

    def run_ok(self, *args, **kw):
        """Run bantam with args; assert exit 0; return the CompletedProcess."""
        result = self.run_bantam(*args, **kw)
        self.assertEqual(result.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result

    def settings(self, *args, env=None):
        """--show-config with args as {key: (value, source)}; asserts it ran cleanly without a request."""
        result = self.run_ok("--show-config", *args, env=env)
        self.assertEqual(result.stderr, "")
        self.assertEqual(self.server.requests, [])
        return parse_show_config(result.stdout)

    def assert_usage_error(self, args, *expected, input=None):
        """args fail with exit 2, one line on stderr holding every expected text, nothing on
        stdout, no request to the server; returns the line."""
        result = self.run_bantam(*args, input=input)
        self.assertEqual(result.returncode, 2, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        self.assertEqual(result.stdout, "")
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, "exactly one line on stderr:\n" + result.stderr)
        for text in expected:
            self.assertIn(text, lines[0])
        self.assertNotIn("usage:", result.stderr)
        self.assertEqual(self.server.requests, [], "no request may be sent")
        return lines[0]

    def user_text(self, request_index=-1):
        """The content of the last user message of a recorded request."""
        messages = self.server.bodies[request_index]["messages"]
        return [m for m in messages if m["role"] == "user"][-1]["content"]

    def session_file(self, sid):
        """The parsed ~/.bantam/sessions/<sid>.json."""
        with open(os.path.join(self.ws.sessions_dir(), sid + ".json"), encoding="utf-8") as f:
            return json.load(f)

    def session_names(self):
        """The .json files in the sessions folder, sorted."""
        return sorted(n for n in os.listdir(self.ws.sessions_dir()) if n.endswith(".json"))


class PromptFlagTests(CliCase):
    """-p/--prompt: the prompt as an argument, piped stdin as context."""

    def test_prompt_flag_short_and_long(self):
        """-p TEXT and --prompt TEXT send TEXT as the user message and print the answer."""
        for flag in ("-p", "--prompt"):
            with self.subTest(flag=flag):
                self.push(text_stream("answer via %s" % flag))
                result = self.run_ok(flag, "what is two and two?")
                self.assertIn("answer via %s" % flag, result.stdout)
                self.assertEqual(self.user_text(), "what is two and two?")

    def test_piped_stdin_is_added_as_context(self):
        """`printf 'diff text' | bantam -p "review this"` sends the prompt then stdin inside <stdin>...</stdin>."""
        self.push(text_stream("reviewed"))
        result = self.run_ok("-p", "review this", input="diff text")
        self.assertIn("reviewed", result.stdout)
        self.assertEqual(self.user_text(), "review this\n\n<stdin>\ndiff text\n</stdin>")

    def test_multi_line_pipe_keeps_its_lines(self):
        """A multi-line pipe arrives whole inside <stdin>, its final newline dropped."""
        self.push(text_stream("ok"))
        self.run_ok("-p", "review", input="--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n")
        self.assertEqual(self.user_text(), "review\n\n<stdin>\n--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n</stdin>")

    def test_no_stdin_adds_nothing(self):
        """With stdin /dev/null or an empty pipe, -p sends exactly its text."""
        for stdin in (None, ""):
            with self.subTest(stdin=stdin):
                self.push(text_stream("plain"))
                self.run_ok("-p", "just this", input=stdin)
                self.assertEqual(self.user_text(), "just this")

    def test_terminal_stdin_is_not_read(self):
        """With stdin a terminal (not a pipe), -p does not wait for input and adds nothing."""
        self.push(text_stream("pty answer"))
        term = self.pty("-p", "hi there")
        self.assertEqual(term.wait(15), 0, term.output)
        self.assertIn("pty answer", term.output)
        self.assertEqual(self.user_text(), "hi there")


class SettingFlagTests(CliCase):
    """-m, -e, --set and --config: settings from the command line."""

    def test_model_flag(self):
        """-m MODEL and --model MODEL choose the model sent in the request."""
        for flag in ("-m", "--model"):
            with self.subTest(flag=flag):
                self.push(text_stream("ok"))
                self.run_ok(flag, "other-model-%s" % flag.strip("-"), "-p", "hi")
                self.assertEqual(self.server.bodies[-1]["model"], "other-model-%s" % flag.strip("-"))

    def test_endpoint_flag(self):
        """-e URL and --endpoint URL send the request to URL instead of model.cfg's endpoint."""
        for flag in ("-e", "--endpoint"):
            with self.subTest(flag=flag):
                other = self.make_server([text_stream("from the other server")])
                result = self.run_ok(flag, other.url, "-p", "hi")
                self.assertIn("from the other server", result.stdout)
                self.assertEqual(len(other.posts), 1)
                self.assertEqual(self.server.requests, [])

    def test_set_values_are_parsed_by_type(self):
        """--set is repeatable and parses by the key's type: float, bool, string, JSON object."""
        self.push(text_stream("ok"))
        self.run_ok("-e", self.server.url,   # a header from a flag may go only to an endpoint the user chose
                    "--set", "temperature=0.25", "--set", "stream=false", "--set", "reasoning_effort=low",
                    "--set", 'headers={"X-Extra": "extra-value"}', "-p", "hi")
        body = self.server.bodies[0]
        self.assertEqual(body["temperature"], 0.25)
        self.assertIs(body["stream"], False)
        self.assertEqual(body["reasoning_effort"], "low")
        self.assertEqual(self.server.posts[0]["headers"].get("x-extra"), "extra-value")

    def test_set_integer_key(self):
        """--set max_al_iterations=1 (an int) stops the loop after one model call (then one
        call without tools for the final answer: exit 3)."""
        self.push(tool_call_stream([shell_call("call_1", "echo once")]), text_stream("final"))
        result = self.run_bantam("--set", "max_al_iterations=1", "-p", "loop")
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertEqual(len(self.server.posts), 2)
        self.assertNotIn("tools", self.server.bodies[1])
        self.assertIn("max_al_iterations=1", result.stderr)

    def test_set_list_key(self):
        """--set backoff=0,0 (a list of seconds) allows exactly two retries."""
        self.push(error(500, "down"), error(500, "down"), error(500, "down"), text_stream("late"))
        result = self.run_bantam("--set", "backoff=0,0", "-p", "go")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(len(self.server.posts), 3)
        self.assertIn("retry 2/2", result.stderr)

    def test_set_accepts_every_key(self):
        """--set works for every config key, shows as source "flag", secrets as ***."""
        args = []
        for key in bantam.DEFAULTS:
            self.assertIn(key, SAMPLES, "add a sample value for the new key %r" % key)
            args += ["--set", "%s=%s" % (key, SAMPLES[key])]
        result = self.run_ok("--show-config", *args)
        settings = parse_show_config(result.stdout)
        for key in bantam.DEFAULTS:
            with self.subTest(key=key):
                self.assertEqual(settings[key], (SHOWN[key], "flag"))
        self.assertNotIn("sk-sample-secret-1", result.stdout)
        self.assertNotIn("hdr-sample-secret", result.stdout)

    def test_config_file_flag(self):
        """--config FILE is read instead of ./model.cfg (its endpoint and model are used)."""
        other = self.make_server([text_stream("from the config file's server")])
        path = self.ws.path("tmp", "other.cfg")
        with open(path, "w", encoding="utf-8") as f:
            f.write("endpoint=%s\nmodel=file-model\ncolor=never\n" % other.url)
        result = self.run_ok("--config", path, "-p", "hi")
        self.assertIn("from the config file's server", result.stdout)
        self.assertEqual(self.server.requests, [])
        self.assertEqual(other.bodies[0]["model"], "file-model")
        settings = self.settings("--config", path)
        self.assertEqual(settings["endpoint"], (other.url, path + ":1"))
        self.assertEqual(settings["model"], ("file-model", path + ":2"))
        self.assertEqual(settings["api_key"], ("", "default"))   # ./model.cfg's key is not read


class ConversationFlagTests(CliCase):
    """-c/--continue and --session ID: which conversation a batch run works on."""

    def test_continue_this_folders_latest(self):
        """-c continues this folder's latest conversation in its own file."""
        self.push(text_stream("first answer"), text_stream("second answer"))
        self.run_ok("-p", "first prompt")
        files = self.session_names()
        self.run_ok("-c", "-p", "second prompt")
        sent = [(m["role"], m["content"]) for m in self.server.bodies[1]["messages"][1:]]
        self.assertEqual(sent, [("user", "first prompt"), ("assistant", "first answer"),
                                ("user", "second prompt")])
        self.assertEqual(self.session_names(), files, "no new conversation file")
        self.assertEqual(self.read_autosave()["count"], 5)

    def test_long_continue_flag(self):
        """--continue is the long form of -c."""
        self.push(text_stream("one"), text_stream("two"))
        self.run_ok("-p", "alpha")
        self.run_ok("--continue", "-p", "beta")
        self.assertIn("alpha", [m["content"] for m in self.server.bodies[1]["messages"]])

    def test_session_starts_then_continues(self):
        """--session ID starts conversation ID in ID.json, and a later --session ID continues it."""
        self.push(text_stream("answer one"), text_stream("other"), text_stream("answer two"))
        self.run_ok("--session", "my-run.1", "-p", "prompt one")
        self.assertEqual(self.session_file("my-run.1")["id"], "my-run.1")
        self.run_ok("--session", "other-run", "-p", "unrelated")
        self.run_ok("--session", "my-run.1", "-p", "prompt two")
        sent = [m["content"] for m in self.server.bodies[2]["messages"][1:]]
        self.assertEqual(sent, ["prompt one", "answer one", "prompt two"])
        self.assertEqual(self.session_file("my-run.1")["count"], 5)
        self.assertEqual([m["content"] for m in self.session_file("other-run")["messages"][1:]],
                         ["unrelated", "other"])

    def test_continued_conversation_file_keeps_every_message(self):
        """After two runs of --session ID, ID.json holds the system prompt and both turns, in order."""
        self.push(text_stream("answer one"), text_stream("answer two"), text_stream("answer three"))
        self.run_ok("--session", "kept", "-p", "prompt one")
        self.run_ok("--session", "kept", "-p", "prompt two")
        messages = self.session_file("kept")["messages"]
        self.assertEqual([(m["role"], m["content"]) for m in messages[1:]],
                         [("user", "prompt one"), ("assistant", "answer one"),
                          ("user", "prompt two"), ("assistant", "answer two")])
        self.assertEqual(messages[0]["role"], "system")
        self.run_ok("--session", "kept", "-p", "prompt three")
        sent = self.server.bodies[2]["messages"]
        self.assertEqual([m["role"] for m in sent], ["system", "user", "assistant", "user", "assistant", "user"])
        self.assertEqual([m["content"] for m in sent[1:]],
                         ["prompt one", "answer one", "prompt two", "answer two", "prompt three"])


class OutputFlagTests(CliCase):
    """-q/--quiet: where the answer goes."""

    def test_quiet_stdout_is_only_the_answer(self):
        """-q: stdout holds only the final answer; stderr only problems: no tool traces, no
        tool output, no token line (tests/test_first_hour.py has the problems that do show)."""
        for flag in ("-q", "--quiet"):
            with self.subTest(flag=flag):
                self.push(tool_call_stream([shell_call("call_1", "echo tool-output-marker")]),
                          text_stream("The final answer."))
                result = self.run_ok(flag, "-p", "do it")
                self.assertEqual(result.stdout, "The final answer.\n")
                self.assertEqual(result.stderr, "")


class InfoFlagTests(CliCase):
    """--show-config, --help and --version."""

    def test_show_config_lists_every_key(self):
        """--show-config prints every config key (and the system prompt) with its value and source."""
        cfg = self.ws.write_config(self.server)
        settings = self.settings()
        self.assertEqual(set(settings), set(bantam.DEFAULTS) | {"system_prompt", "withheld_env"})
        self.assertEqual(settings["endpoint"], (self.server.url, cfg + ":1"))
        self.assertEqual(settings["model"], ("test-model", cfg + ":2"))
        self.assertEqual(settings["temperature"], ("0.7", "default"))
        self.assertEqual(settings["stream"], ("true", cfg + ":4"))
        self.assertEqual(settings["backoff"], ("[0.01, 0.01, 0.01]", cfg + ":6"))
        self.assertEqual(settings["reasoning_effort"], ("", "default"))
        self.assertEqual(settings["system_prompt"][1], "built-in")

    def test_show_config_sources(self):
        """Sources are "flag", the file's path:line, the BANTAM_<KEY> variable's name, or "default"."""
        cfg = self.ws.write_config(self.server)
        settings = self.settings("-m", "flag-model", env={"BANTAM_SHELL_TIMEOUT": "33"})
        self.assertEqual(settings["model"], ("flag-model", "flag"))
        self.assertEqual(settings["color"], ("never", cfg + ":5"))
        self.assertEqual(settings["shell_timeout"], ("33.0", "BANTAM_SHELL_TIMEOUT"))
        self.assertEqual(settings["max_tool_res"], ("65536", "default"))

    def test_show_config_hides_secrets(self):
        """api_key and the headers' values show as ***, whatever their source; the secrets never print."""
        self.ws.write_config(self.server, api_key="sk-file-secret-123", headers='{"api-key": "hdr-secret-456"}')
        result = self.run_ok("--show-config")
        settings = parse_show_config(result.stdout)
        self.assertEqual(settings["api_key"][0], "***")
        self.assertEqual(settings["headers"][0], '{"api-key": "***"}')
        for secret in ("sk-file-secret-123", "hdr-secret-456"):
            self.assertNotIn(secret, result.stdout + result.stderr)
        self.ws.write_config(self.server, api_key=None)
        result = self.run_ok("--show-config", env={"BANTAM_API_KEY": "sk-env-secret-789"})
        self.assertEqual(parse_show_config(result.stdout)["api_key"], ("***", "BANTAM_API_KEY"))
        self.assertNotIn("sk-env-secret-789", result.stdout)

    def test_help(self):
        """--help lists every flag, exits 0, sends nothing, and never points at model.cfg.example."""
        result = self.run_ok("--help")
        for flag in FLAGS:
            self.assertRegex(result.stdout, r"(?<![\w-])%s(?![\w-])" % re.escape(flag))
        self.assertNotIn("model.cfg.example", result.stdout + result.stderr)
        self.assertIn("model.cfg", result.stdout)
        self.assertEqual(self.server.requests, [])
        wide = [line for line in result.stdout.splitlines() if len(line) > 100]
        self.assertEqual(wide, [])   # the paragraphs under the options are wrapped too
        for key in bantam.DEFAULTS:   # every key is named, none cut at a line break
            self.assertRegex(result.stdout, r"(?<![\w-])%s[,.]" % key)

    def test_version(self):
        """--version prints `bantam VERSION` and exits 0 without a request."""
        result = self.run_ok("--version")
        self.assertEqual(result.stdout, "bantam %s\n" % bantam.VERSION)
        self.assertEqual(self.server.requests, [])


class PrecedenceTests(CliCase):
    """Flags > model.cfg > BANTAM_<KEY> > defaults, one pair at a time."""

    def test_flag_beats_file(self):
        """-m beats model.cfg's model, in --show-config and in the request."""
        self.assertEqual(self.settings("-m", "flag-model")["model"], ("flag-model", "flag"))
        self.push(text_stream("ok"))
        self.run_ok("-m", "flag-model", "-p", "hi")
        self.assertEqual(self.server.bodies[0]["model"], "flag-model")

    def test_file_beats_environment(self):
        """model.cfg's model beats BANTAM_MODEL."""
        env, cfg = {"BANTAM_MODEL": "env-model"}, self.ws.write_config(self.server)
        self.assertEqual(self.settings(env=env)["model"], ("test-model", cfg + ":2"))
        self.push(text_stream("ok"))
        self.run_ok("-p", "hi", env=env)
        self.assertEqual(self.server.bodies[0]["model"], "test-model")

    def test_environment_beats_default(self):
        """BANTAM_MODEL beats the default when model.cfg leaves the key out."""
        self.ws.write_config(self.server, model=None)
        env = {"BANTAM_MODEL": "env-model"}
        self.assertEqual(self.settings(env=env)["model"], ("env-model", "BANTAM_MODEL"))
        self.assertEqual(self.settings()["model"], (bantam.DEFAULTS["model"], "default"))
        self.push(text_stream("ok"))
        self.run_ok("-p", "hi", env=env)
        self.assertEqual(self.server.bodies[0]["model"], "env-model")

    def test_flag_beats_environment(self):
        """--set beats BANTAM_<KEY> for a key model.cfg leaves out."""
        env = {"BANTAM_TEMPERATURE": "0.9"}
        self.assertEqual(self.settings("--set", "temperature=0.1", env=env)["temperature"], ("0.1", "flag"))
        self.push(text_stream("ok"))
        self.run_ok("--set", "temperature=0.1", "-p", "hi", env=env)
        self.assertEqual(self.server.bodies[0]["temperature"], 0.1)

    def test_flag_beats_file_and_environment_for_set(self):
        """--set stream=false beats stream=true in model.cfg and BANTAM_STREAM=true."""
        env = {"BANTAM_STREAM": "true"}
        self.assertEqual(self.settings("--set", "stream=false", env=env)["stream"], ("false", "flag"))


class UsageErrorTests(CliCase):
    """Bad command lines: exit 2, one line naming the option and what was expected, no request."""

    def test_bad_option(self):
        """An unknown option is named."""
        for flag in ("--frobnicate", "-x"):
            with self.subTest(flag=flag):
                self.assert_usage_error([flag, "-p", "hi"], flag)

    def test_missing_value(self):
        """An option without its value names the option and says a value was expected."""
        for args, name in ((["-p", "hi", "-m"], "-m/--model"), (["-p", "hi", "--endpoint"], "-e/--endpoint"),
                           (["-p", "hi", "--set"], "--set"), (["-p"], "-p/--prompt"),
                           (["-p", "hi", "--session"], "--session")):
            with self.subTest(args=args):
                self.assert_usage_error(args, name, "expected one argument")

    def test_unknown_key_in_set(self):
        """--set with an unknown key, or without '=', names --set and asks for KEY=VALUE."""
        for item in ("nokey=1", "temperature", "=1"):
            with self.subTest(item=item):
                self.assert_usage_error(["--set", item, "-p", "hi"], "--set", "expected KEY=VALUE")

    def test_wrong_type(self):
        """A value of the wrong type names --set, the key and the type expected."""
        cases = [("temperature=hot", "expected a number"), ("stream=maybe", "expected true or false"),
                 ("max_al_iterations=0", "expected a whole number above 0"),
                 ("temperature=-1", "expected a number of 0 or more"),
                 ("timeout=0", "expected a number above 0, got '0'"),   # (0 failed every request)
                 ("backoff=1,-1", "expected a comma-separated list of seconds, got '1,-1'"),
                 ("shell_timeout=inf", "expected a number above 0"),   # (inf: a traceback)
                 ("backoff=a,b", "expected a comma-separated list of seconds"),
                 ("headers=[1]", "expected a JSON object of strings"),
                 ("color=purple", "expected one of auto, always, never")]
        for item, expected in cases:
            with self.subTest(item=item):
                key = item.split("=")[0]
                self.assert_usage_error(["--set", item, "-p", "hi"], "--set", key, expected)

    def test_bad_endpoint_flag_names_the_option(self):
        """-e with a URL that is not http(s) names the option -e/--endpoint."""
        line = self.assert_usage_error(["-e", "ftp://example.com", "-p", "hi"], "expected an http:// or https:// URL")
        self.assertRegex(line, r"-e\b|--endpoint")

    def test_bad_endpoint_flag_is_a_usage_error(self):
        """-e with a URL that is not http(s): exit 2, one line, no request."""
        self.assert_usage_error(["-e", "ftp://example.com", "-p", "hi"], "ftp://example.com", "http://")

    def test_missing_file_name_gets_no_hint(self):
        """A missing prompt file that looks like a file name is named, without the -p hint."""
        line = self.assert_usage_error(["missing.txt"], "missing.txt")
        self.assertNotIn("-p", line)

    def test_prompt_file_and_prompt_flag(self):
        """A prompt file and -p together are refused."""
        self.ws.write("prompt.txt", "from the file")
        self.assert_usage_error(["prompt.txt", "-p", "from the flag"], "-p")

    def test_empty_prompt_flag(self):
        """-p "" is an empty prompt."""
        self.assert_usage_error(["-p", "  "], "empty")

    def test_bad_session_id(self):
        """--session with a path or autosave is refused."""
        for sid in ("../escape", "a/b", "autosave"):
            with self.subTest(sid=sid):
                self.assert_usage_error(["--session", sid, "-p", "hi"], "--session")

    def test_continue_without_a_conversation(self):
        """-c in a folder with no conversation says so."""
        self.assert_usage_error(["-c", "-p", "hi"], "no conversation")

    def test_missing_config_file(self):
        """--config with a file that does not exist names it."""
        self.assert_usage_error(["--config", "nope.cfg", "-p", "hi"], "nope.cfg")


class ReadmeTests(unittest.TestCase):
    """The README documents what bantam is now: every flag, config key, command, event type and
    tool definition, the server tables of the tests; and it never points at a file pip does
    not install."""

    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    README = os.path.join(ROOT, "README.md")

    def readme(self):
        """The README's text."""
        with open(self.README, encoding="utf-8") as f:
            return f.read()

    def table_rows(self, text):
        """The rows of the Markdown tables in text (lines starting with '| ')."""
        return [line for line in text.splitlines() if line.startswith("| ")]

    def row_of(self, text, name):
        """The table row of text whose first cell starts with `name`."""
        rows = [r for r in self.table_rows(text) if r.startswith("| `%s`" % name)]
        self.assertTrue(rows, "README.md has no table row for `%s`" % name)
        return rows[0]

    def test_readme_never_mentions_model_cfg_example(self):
        """README.md does not point at model.cfg.example (pip installs only bantam.py)."""
        self.assertFalse("model.cfg.example" in self.readme(), "README.md mentions model.cfg.example")

    def test_readme_documents_every_flag(self):
        """README.md names every flag of the command line: the issue's list and every option --help shows."""
        import subprocess
        import sys
        from tests.support import BANTAM
        shown = subprocess.run([sys.executable, BANTAM, "--help"], stdout=subprocess.PIPE,
                               universal_newlines=True, timeout=60).stdout
        options = {flag for line in shown.splitlines() if re.match(r"  -", line)
                   for flag in re.findall(r"(?<![\w-])--?[a-z][\w-]*", line.split("  ")[1])}
        self.assertIn("--trust", options)
        text = self.readme()
        missing = [f for f in sorted(set(FLAGS) | options)
                   if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(f), text)]
        self.assertEqual(missing, [])

    def test_readme_documents_every_config_key(self):
        """Every key of DEFAULTS has a row in the config table, with its default."""
        text = self.readme()
        for key, default in bantam.DEFAULTS.items():
            with self.subTest(key=key):
                row = self.row_of(text, key)
                cell = row.split("|")[2]
                if default in ("", {}):
                    self.assertRegex(cell, r"\(empty\)|`\{\}`")
                elif isinstance(default, list):
                    self.assertIn(",".join("%g" % v for v in default), cell)
                else:
                    self.assertIn(("%g" % default if isinstance(default, float) else str(default).lower()
                                   if isinstance(default, bool) else str(default)), cell)

    def test_readme_documents_every_command(self):
        """Every REPL command and alias is in the README's command table."""
        text = self.readme()
        for name in filter(str.isprintable, bantam.COMMANDS):   # ("\x03": Ctrl+C, a key)
            with self.subTest(command=name):
                self.assertTrue(any(re.search(r"`%s[` ]" % re.escape(name), row) for row in self.table_rows(text)),
                                "%s is in no table of README.md" % name)

    def test_readme_documents_every_event_type_and_field(self):
        """The event schema table has a row for each event type of bantam.EVENTS naming each
        of its fields, and no row for another type."""
        text = self.readme().split("\n## Events", 1)[1]   # (the config key usage has a row too)
        for kind, fields in bantam.EVENTS.items():
            with self.subTest(type=kind):
                row = self.row_of(text, kind)
                cell = row.split("|")[2]
                self.assertEqual({f for f in fields.split() if "`%s`" % f not in cell}, set())
        table = text.split("\n| type | fields | when |", 1)[1].split("\n\n", 1)[0]
        types = re.findall(r"^\| `(\w+)` \|", table, re.M)
        self.assertEqual(sorted(types), sorted(bantam.EVENTS))

    def test_readme_lists_every_hook_of_part_one(self):
        """The hook table of "The algorithm" has one row for each hook of bantam.HOOKS, with
        the arguments its contract (the comment at HOOKS) names, and no other row."""
        text = self.readme().split("\n## The algorithm", 1)[1]
        table = text.split("\n| hook | called |", 1)[1].split("\n\n", 1)[0]
        self.assertEqual(re.findall(r"^\| `(\w+)` \|", table, re.M), list(bantam.HOOKS))
        with open(bantam.__file__, encoding="utf-8") as f:
            source = f.read()
        for name in bantam.HOOKS:
            with self.subTest(hook=name):
                contract = re.search(r'"%s": \[\],\s*# %s\((.*?)\)' % (name, name), source)
                self.assertTrue(contract, "HOOKS has no contract comment for %s" % name)
                row = self.row_of(table, name)
                self.assertIn("`(%s)`" % ", ".join(a.split("=")[0] for a in contract.group(1).split(", ")
                                                   if not a.endswith("=None")), row)

    def test_readme_shows_the_exact_tool_definitions(self):
        """The JSON after "`TOOLS` is exactly:" is what bantam sends as tools."""
        text = self.readme()
        block = re.search(r"`TOOLS`: the names.*?```json\n(.*?)```", text, re.S)
        self.assertIsNotNone(block, "README.md shows no TOOLS block")
        def sent(tools):   # the tools of a request, as the request hook leaves them
            body = {"tools": [{"type": "function", "function": dict(schema, name=name)}
                              for name, (schema, _) in bantam.TOOLS.items()]}
            return bantam.offered_tools({"tools": tools}, [], body)["tools"]
        self.assertEqual(json.loads(block.group(1)), sent("shell_exec,run_subagent"))
        files = re.search(r"\*\*The write tool\*\*.*?```json\n(.*?)```", text, re.S)
        self.assertIsNotNone(files, "README.md shows no write block")
        self.assertEqual(json.loads(files.group(1)), sent("write"))

    def test_readme_mirrors_the_server_tables_of_the_tests(self):
        """Every row of the shape table (tests/test_wire.py) and the overflow table
        (tests/test_context.py) is in the README as it is in the tests."""
        import tests.test_context
        import tests.test_learned
        import tests.test_wire
        text = self.readme()
        for module in (tests.test_wire, tests.test_context, tests.test_learned):
            rows = self.table_rows(module.__doc__)
            self.assertGreater(len(rows), 5)
            with self.subTest(module=module.__name__):
                self.assertEqual([r for r in rows if r not in text], [])


if __name__ == "__main__":
    unittest.main()
