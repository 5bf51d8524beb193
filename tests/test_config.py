"""Config, system prompt, request shape and colors: what bantam reads and what it sends.

Every test runs bantam.py in batch mode as a real subprocess against the scripted FakeServer
and looks at what a user sees: the exit code, stdout and stderr, and the recorded requests.
"""

import importlib.util
import os
import re
import unittest

from tests.support import (
    BANTAM, BantamTestCase, completion, error, read_text, text_stream, tool_call_stream)

ROOT = os.path.dirname(BANTAM)
ESC = "\x1b"


def load_bantam_module():
    """Import bantam.py from the project root as a module (for its constants only)."""
    spec = importlib.util.spec_from_file_location("bantam_under_test", BANTAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ConfigCase(BantamTestCase):
    """Helpers to write config and prompt files in the workspace and home."""

    def write_home(self, name, text):
        """Write ~/.bantam/<name> in the workspace home; return its path."""
        folder = os.path.join(self.ws.home, ".bantam")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def remove_user_config(self):
        """Delete the user's ~/.bantam/model.cfg so only the environment can configure bantam."""
        os.remove(os.path.join(self.ws.home, ".bantam", "model.cfg"))

    def write_cfg_text(self, text):
        """Replace the user's ~/.bantam/model.cfg by text; return its path."""
        return self.write_home("model.cfg", text)

    def ok_turn(self, env=None, reply="fine"):
        """Run one batch turn answered by `reply`; assert exit 0; return the CompletedProcess."""
        self.push(text_stream(reply))
        result = self.run_batch("hello", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(reply, result.stdout)
        return result

    def first_body(self):
        """The JSON body of the first POST the server received."""
        return self.server.bodies[0]


class ConfigFileTests(ConfigCase):
    """model.cfg: where it is found, its syntax, and the BANTAM_<KEY> fallbacks."""

    def test_cwd_config_merges_over_home_config(self):
        """A trusted folder's model.cfg is merged over ~/.bantam/model.cfg key by key: its keys
        win, the home file fills in the rest."""
        home_server = self.make_server()
        self.write_home("model.cfg", "endpoint=%s\nmodel=home-model\ntemperature=0.1\n" % home_server.url)
        self.ws.write("model.cfg", "endpoint=%s\nmodel=cwd-model\ncolor=never\nbackoff=0.01\n" % self.server.url)
        self.ok_turn(env={"BANTAM_TRUST": "1"})
        self.assertEqual(self.first_body()["model"], "cwd-model")
        self.assertEqual(self.first_body()["temperature"], 0.1)   # the home file's
        self.assertEqual(home_server.posts, [])

    def test_home_config_used_without_cwd_config(self):
        """Without model.cfg in the current directory, ~/.bantam/model.cfg is read."""
        self.remove_user_config()
        self.write_home("model.cfg", "endpoint=%s\nmodel=home-model\ncolor=never\n" % self.server.url)
        self.ok_turn()
        self.assertEqual(self.first_body()["model"], "home-model")

    def test_byte_order_mark_and_trailing_comments(self):
        """A config saved with a UTF-8 byte-order mark (Notepad) and CRLF line ends reads the
        same; '# note' after a value (following a space) is a comment."""
        text = ("\ufeffendpoint=%s\r\nmodel=bom-model   # the model\r\ntimeout=30 # seconds\r\n"
                "stream=false\r\ncolor=never\r\n" % self.server.url)
        with open(os.path.join(self.ws.home, ".bantam", "model.cfg"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        self.push(completion("fine"))
        result = self.run_batch("hello")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stderr, r"^\[bom-model: ~\d+ prompt \+ ~\d+ completion [^\n]*\]\n$")  # no warning
        self.assertEqual(self.first_body()["model"], "bom-model")

    def test_comments_blank_lines_and_spaces(self):
        """'#' lines and blank lines are skipped; spaces around key, '=' and value are ignored."""
        self.write_cfg_text(
            "# bantam test config\n"
            "\n"
            "   # an indented comment\n"
            "# model=commented-out-model\n"
            "endpoint = %s\n"
            "  model =  spaced-model  \n"
            "\n"
            "temperature=0.25\n"
            "stream=false\n"
            "color=never\n" % self.server.url)
        self.push(completion("fine"))
        result = self.run_batch("hello")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stderr, r"^\[spaced-model: ~\d+ prompt \+ ~\d+ completion [^\n]*\]\n$")  # no warning
        body = self.first_body()
        self.assertEqual((body["model"], body["temperature"], body["stream"]),
                         ("spaced-model", 0.25, False))

    def test_defaults_without_any_config_file(self):
        """With no model.cfg anywhere, the spec's defaults are sent (model gpt-4o, temperature 0.7, stream on)."""
        self.remove_user_config()
        self.ok_turn(env={"BANTAM_ENDPOINT": self.server.url})
        body = self.first_body()
        self.assertEqual((body["model"], body["temperature"], body["stream"]), ("gpt-4o", 0.7, True))
        self.assertNotIn("authorization", self.server.posts[0]["headers"])

    def test_environment_fills_keys_missing_from_the_file(self):
        """A key missing from model.cfg comes from BANTAM_<KEY>; a key in the file beats the environment."""
        self.write_cfg_text("model=file-model\ncolor=never\n")   # the endpoint from the environment too:
        env = {"BANTAM_MODEL": "env-model", "BANTAM_TEMPERATURE": "0.3", "BANTAM_STREAM": "false",
               "BANTAM_API_KEY": "env-key", "BANTAM_ENDPOINT": self.server.url}   # the key may go there
        self.push(completion("fine"))
        result = self.run_batch("hello", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        body = self.first_body()
        self.assertEqual((body["model"], body["temperature"], body["stream"]), ("file-model", 0.3, False))
        self.assertEqual(self.server.posts[0]["headers"]["authorization"], "Bearer env-key")

    def test_blank_value_defers_to_the_environment(self):
        """'key=' (blank) in model.cfg behaves like a missing key: BANTAM_<KEY> is used."""
        self.write_cfg_text("endpoint=%s\nmodel=\ncolor=never\n" % self.server.url)
        self.ok_turn(env={"BANTAM_MODEL": "env-model"})
        self.assertEqual(self.first_body()["model"], "env-model")

    def test_max_al_iterations_from_environment(self):
        """BANTAM_MAX_AL_ITERATIONS limits the model calls of a turn when model.cfg does not set it."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo one"})]),
                  tool_call_stream([("c2", "shell_exec", {"command": "echo two"})]))
        result = self.run_batch("loop", env={"BANTAM_MAX_AL_ITERATIONS": "1", "BANTAM_MAX_REPAIR_CALLS": "0"})
        self.assertEqual(len(self.server.posts), 1, result.stderr)
        self.assertIn("max_al_iterations=1", result.stderr)

    def test_api_key_fallbacks(self):
        """api_key: model.cfg, else BANTAM_API_KEY, else OPENAI_API_KEY; no key means no Authorization header."""
        cases = [  # (api_key line in model.cfg or None, environment, expected Authorization or None)
            ("file-key", {"BANTAM_API_KEY": "bk", "OPENAI_API_KEY": "ok"}, "Bearer file-key"),
            (None, {"BANTAM_API_KEY": "bk", "OPENAI_API_KEY": "ok"}, "Bearer bk"),
            (None, {"OPENAI_API_KEY": "ok"}, "Bearer ok"),
            ("", {"OPENAI_API_KEY": "ok"}, "Bearer ok"),
            (None, {}, None),
        ]
        for file_key, env, expected in cases:
            with self.subTest(file_key=file_key, env=env):
                self.ws.write_config(None, api_key=file_key)   # the endpoint from the environment, so
                before = len(self.server.posts)                # a key from there may go to it
                self.ok_turn(env=dict(env, BANTAM_ENDPOINT=self.server.url))
                headers = self.server.posts[before]["headers"]
                self.assertEqual(headers.get("authorization"), expected)

    def test_bad_values_are_one_line_errors(self):
        """A wrong value or a line without '=' stops bantam with one line naming file, line and key; exit 2."""
        cases = [  # (bad line, what the message must name besides file and line)
            ("timeout=abc", "timeout"),
            ("stream=maybe", "stream"),
            ("color=purple", "color"),
            ("backoff=x", "backoff"),
            ("temperature=warm", "temperature"),
            ("shell_timeout=-1", "shell_timeout"),
            ("max_al_iterations=0", "max_al_iterations"),
            ("max_al_iterations=2.5", "max_al_iterations"),
            ("this line has no equals sign", "this line has no equals sign"),
        ]
        for line, named in cases:
            with self.subTest(line=line):
                path = self.write_cfg_text("# config\n\nendpoint=%s\ncolor=never\n%s\nmodel=m\n"
                                           % (self.server.url, line))
                result = self.run_batch("hello")
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(result.stdout, "")
                lines = result.stderr.splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn("%s:5" % path, lines[0])
                self.assertIn(named, lines[0])
                self.assertEqual(self.server.posts, [])

    def test_bad_environment_value_names_the_variable(self):
        """A wrong BANTAM_<KEY> value is a one-line error naming the variable; exit 2."""
        result = self.run_batch("hello", env={"BANTAM_SHELL_TIMEOUT": "soon"})
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn("BANTAM_SHELL_TIMEOUT", result.stderr)
        self.assertIn("soon", result.stderr)
        self.assertEqual(self.server.posts, [])

    def test_unknown_key_warns_and_runs(self):
        """An unknown key is reported with its file and line on stderr, and the turn still runs."""
        path = self.write_cfg_text("endpoint=%s\ncolor=never\ncolour=blue\n" % self.server.url)
        result = self.ok_turn()
        self.assertIn("%s:3" % path, result.stderr)
        self.assertIn("colour", result.stderr)

    def test_cfg_key_dash_clears_the_key(self):
        """Issue 31: /cfg KEY - removes the key from the file it came from (no literal "-"),
        and the next layer's value is used at once; a key in no file says so."""
        path = self.ws.write_config(self.server, tool_lines=12, temperature=0.5)
        proc = self.run_bantam(input="/cfg tool_lines -\n/cfg tool_lines\n/cfg temperature -\n"
                                     "/cfg max_cost -\n", env={"BANTAM_TEMPERATURE": "0.3"})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        text = read_text(path)
        self.assertNotIn("tool_lines", text)
        self.assertNotIn("temperature", text)
        self.assertNotIn("=-", text)
        shown = proc.stdout + proc.stderr
        self.assertIn("tool_lines = 10   (default)", shown)
        self.assertIn("[temperature cleared: 0.3 (BANTAM_TEMPERATURE)]", shown)
        self.assertIn("max_cost: set in no config file /cfg writes", shown)

    def test_cfg_key_dash_takes_the_value_by_the_trust_rules(self):
        """/cfg KEY - in your own file, the folder not trusted: its value that only tightens is
        used then, as at a start; one that needs trust is not."""
        path = self.ws.write_config(self.server, shell_timeout=3, tools="shell_exec,write")
        self.ws.write("model.cfg", "shell_timeout=5\ntools=shell_exec\n")
        proc = self.run_bantam(input="/cfg shell_timeout -\n/cfg tools -\n",
                               env={"BANTAM_TRUST": "0"})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("shell_timeout", read_text(path))
        shown = proc.stdout + proc.stderr
        self.assertIn("[shell_timeout cleared: 5.0 (%s:1)]" % os.path.join(self.ws.work, "model.cfg"),
                      shown)
        self.assertIn("[tools cleared: shell_exec,run_subagent (default)]", shown)


class SystemPromptTests(ConfigCase):
    """system.txt: current directory, else ~/.bantam, else the built-in default."""

    def system_sent(self):
        """The system message of the first request."""
        first = self.first_body()["messages"][0]
        self.assertEqual(first["role"], "system")
        return first["content"]

    def test_cwd_system_prompt_beats_home(self):
        """system.txt in the current directory is sent as the system message, over ~/.bantam/system.txt."""
        self.write_home("system.txt", "home prompt")
        self.ws.write("system.txt", "cwd prompt\nsecond line\n")
        self.ok_turn()
        self.assertEqual(self.system_sent(), "cwd prompt\nsecond line\n")

    def test_home_system_prompt(self):
        """Without a system.txt in the current directory, ~/.bantam/system.txt is used."""
        self.write_home("system.txt", "home prompt")
        self.ok_turn()
        self.assertEqual(self.system_sent(), "home prompt")

    def test_builtin_default_is_the_shipped_system_txt(self):
        """With no system.txt anywhere, the built-in prompt is sent, and it is the top-level system.txt."""
        with open(os.path.join(ROOT, "system.txt"), encoding="utf-8") as f:
            shipped = f.read()
        self.assertEqual(load_bantam_module().PROMPTS["system"], shipped)
        self.ok_turn()
        self.assertEqual(self.system_sent(), shipped)

    def test_cfg_tools_mid_conversation_updates_the_first_message(self):
        """Issue 30: /cfg tools during a conversation changes the system prompt's word on the
        tools in the conversation's first message, as the tools sent change."""
        self.push(text_stream("one"), text_stream("two"), text_stream("three"))
        proc = self.run_bantam(input="hi\n/cfg tools shell_exec,write\nagain\n"
                                     "/cfg tools run_subagent\nonce more\n")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        prompts = [body["messages"][0]["content"] for body in self.server.bodies]
        tools = [[t["function"]["name"] for t in body["tools"]] for body in self.server.bodies]
        self.assertEqual(tools[1:], [["shell_exec", "write"], ["run_subagent"]])
        self.assertNotIn("You also have write", prompts[0])
        self.assertIn("You also have write", prompts[1])
        self.assertIn("In this session run_subagent is not available.", prompts[1])
        self.assertNotIn("You also have write", prompts[2])
        self.assertIn("In this session shell_exec is not available.", prompts[2])
        self.assertNotIn("run_subagent is not available", prompts[2])


class RequestShapeTests(ConfigCase):
    """The POST bantam sends: path, headers and JSON body."""

    def test_request_path_headers_and_body(self):
        """POST {endpoint}/chat/completions with JSON, the exact User-Agent, a Bearer key, and the body fields."""
        self.ok_turn()
        request = self.server.posts[0]
        self.assertEqual((request["method"], request["path"]), ("POST", "/v1/chat/completions"))
        headers = request["headers"]
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(headers["user-agent"], "Mozilla/5.0 (compatible; Bantam/1.0)")
        self.assertEqual(headers["authorization"], "Bearer test-key")
        body = request["body"]
        self.assertEqual(body["model"], "test-model")
        self.assertEqual(body["temperature"], 0.7)
        self.assertIs(body["stream"], True)
        self.assertEqual([m["role"] for m in body["messages"]], ["system", "user"])
        self.assertEqual(body["messages"][1]["content"], "hello")

    def test_endpoint_with_trailing_slash(self):
        """An endpoint written with a trailing '/' still posts to .../v1/chat/completions."""
        self.ws.write_config(self.server, endpoint=self.server.url + "/")
        self.ok_turn()
        self.assertEqual(self.server.posts[0]["path"], "/v1/chat/completions")

    def test_no_authorization_header_without_a_key(self):
        """Without any api_key (file or environment) no Authorization header is sent."""
        self.ws.write_config(self.server, api_key=None)
        self.ok_turn()
        self.assertNotIn("authorization", self.server.posts[0]["headers"])

    def test_tool_definitions(self):
        """Both tools are declared as functions with a description a model can act on and a required parameter."""
        self.ok_turn()
        tools = self.first_body()["tools"]
        self.assertEqual([t["type"] for t in tools], ["function", "function"])
        by_name = {t["function"]["name"]: t["function"] for t in tools}
        for name, param in (("shell_exec", "command"), ("run_subagent", "prompt")):
            with self.subTest(tool=name):
                function = by_name[name]
                self.assertGreater(len(function["description"]), 30)
                schema = function["parameters"]
                self.assertEqual(schema["type"], "object")
                self.assertEqual(schema["required"], [param])
                self.assertEqual(schema["properties"][param]["type"], "string")
                self.assertTrue(schema["properties"][param]["description"])

    def test_one_connection_for_a_whole_turn(self):
        """Consecutive model calls of a turn reuse one keep-alive connection."""
        self.push(tool_call_stream([("c1", "shell_exec", {"command": "echo a"})]),
                  tool_call_stream([("c2", "shell_exec", {"command": "echo b"})]))
        self.ok_turn()
        self.assertEqual(len(self.server.posts), 3)
        self.assertEqual(self.server.connections, 1)


class ColorTests(ConfigCase):
    """The ANSI palette appears only when color is on."""

    def colorful_turn(self, color, env=None):
        """Run a turn with a retry, a tool call and reasoning under color=<color>; return the result."""
        self.ws.write_config(self.server, color=color)
        self.push(error(500, "overloaded"),
                  tool_call_stream([("c1", "shell_exec", {"command": "echo tool-output"})]),
                  text_stream("all done", reasoning="thinking hard"))
        result = self.run_batch("go", env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def test_no_escape_bytes_when_color_is_off(self):
        """color=never, color=auto without a terminal, NO_COLOR and BANTAM_NO_COLOR print not one ESC byte."""
        cases = [("never", None), ("auto", None), ("always", {"NO_COLOR": "1"}),
                 ("always", {"BANTAM_NO_COLOR": "1"})]
        for color, env in cases:
            with self.subTest(color=color, env=env):
                result = self.colorful_turn(color, env)
                self.assertIn("[tool call: shell_exec(", result.stdout)
                self.assertIn("--- reasoning start ---", result.stdout)
                self.assertIn("retry", result.stderr)
                self.assertNotIn(ESC, result.stdout)
                self.assertNotIn(ESC, result.stderr)

    def test_palette_when_color_is_always(self):
        """color=always: yellow tool calls, green result headers, cyan reasoning markers, red retries."""
        result = self.colorful_turn("always")
        out = result.stdout
        self.assertIn("\033[33m[tool call: shell_exec(", out)
        self.assertIn("\033[32m[tool result: shell_exec]", out)
        self.assertIn("\033[36m--- reasoning start ---", out)
        self.assertIn("\033[36m--- reasoning end ---", out)
        self.assertIn("\033[2mthin", out)    # reasoning text is dim
        self.assertRegex(result.stderr, re.escape("\033[31m") + r"\[HTTP 500: overloaded; retry")

    def test_tool_results_sent_to_the_model_are_never_colored(self):
        """Even with color=always, the tool message sent back to the model holds no escape byte."""
        self.colorful_turn("always")
        tool_message = self.server.bodies[2]["messages"][-1]
        self.assertEqual(tool_message["role"], "tool")
        self.assertEqual(tool_message["content"], "tool-output\n\n\nexit: 0")


if __name__ == "__main__":
    unittest.main()
