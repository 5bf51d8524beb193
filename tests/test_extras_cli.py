"""The C++ port's extras end to end: `!cmd`, /cfg (and /model, /endpoint), skills and the tools
folder, AGENTS.md, the write tool and the tools key.

A real bantam.py runs as a subprocess or on a pseudo-terminal against the scripted FakeServer.
"""

import json
import os
import re
import unittest

from tests.support import (
    BantamTestCase, read_text, strip_ansi, text_stream, tool_call_stream)


class ExtrasCase(BantamTestCase):
    """Helpers: the REPL on a pty, the messages of a request, the tool results sent back."""

    def start(self, *args, **env):
        term = self.pty(*args, env=env)
        term.expect("> ")
        return term

    def say(self, term, line, *expected):
        """Type line + Enter, wait for each expected text and the next prompt; the output of it."""
        return strip_ansi(self.type_line(term, line, *expected).replace("\r", ""))

    def quit(self, term):
        self.leave(term)

    def tool_results(self, body):
        """{tool_call_id: content} of the tool messages of a request body."""
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


class BangTests(ExtrasCase):
    """!cmd: the user's own shell command, outside the conversation."""

    def test_bang_in_the_repl_runs_outside_the_conversation(self):
        """The output shows live, a failing status is noted, and the model never sees any of it."""
        self.push(text_stream("answered"))
        term = self.start()
        out = self.say(term, "!echo bang-output-$((6*7)); exit 3", "bang-output-42", "[exit 3]")
        self.assertNotIn("tool call", out)
        self.say(term, "hello", "answered")
        sent = json.dumps(self.server.bodies[0]["messages"])
        self.assertNotIn("bang-output", sent)
        self.assertNotIn("exit 3", sent)
        self.assertEqual(len(self.server.bodies), 1)
        self.quit(term)

    def test_ctrl_c_stops_a_bang_command_and_the_repl_goes_on(self):
        """Ctrl+C goes to the command (here its trap answers it), bantam waits for it to end,
        also when the key comes at once, while the command may still be starting."""
        term = self.start()
        term.sendline("!trap 'echo got-int; exit 7' INT; echo go-$((2+3)); while :; do sleep 0.05; done")
        term.expect("go-5")   # (not the typed line: the command runs, its trap is set)
        term.send("\x03")
        term.expect("got-int")
        term.expect("[exit 7]", timeout=30)
        term.expect("> ")
        self.quit(term)

    def test_bang_in_a_piped_repl_leaves_the_next_prompts_alone(self):
        """`!cat` reads /dev/null, not the prompts piped after it."""
        self.push(text_stream("answered"))
        result = self.run_bantam(input="!cat; echo cat-done\nhello\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("cat-done", result.stdout)
        self.assertEqual(self.server.bodies[0]["messages"][-1], {"role": "user", "content": "hello"})

    def test_a_prompt_file_starting_with_bang_is_a_prompt(self):
        """A file named like a word (`bantam review`) whose text starts with ! is sent to the
        model as a prompt: nothing runs, with or without a folder model.cfg (issue 30)."""
        self.ws.write("review", "!touch PWNED; env\n")
        self.ws.write("model.cfg", "temperature=0.5\n")
        for args in (("review",), ("--sandbox", "workspace", "review"), ("-",)):
            with self.subTest(args=args):
                self.push(text_stream("a prompt, not a command"))
                result = self.run_bantam(*args, input="!touch PWNED; env\n")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertFalse(os.path.exists(os.path.join(self.ws.work, "PWNED")))
                self.assertEqual(self.server.bodies[-1]["messages"][-1]["content"],
                                 "!touch PWNED; env")

    def test_bang_dash_p_leaves_stdin_to_the_command(self):
        result = self.run_bantam("-p", "!tr a-z A-Z", input="piped text\n")
        self.assertEqual((result.returncode, result.stdout), (0, "PIPED TEXT\n"), result.stderr)
        self.assertEqual(self.server.requests, [])


COMMENTED_CFG = (
    "# my settings\n"
    "endpoint=%s\n"
    "\n"
    "model = test-model   # the default one\n"
    "api_key=sk-secret-value-123\n"
    "# temperature=0.9 (commented out, not the key)\n"
    "temperature=0.7\n"
    "headers={\"X-Team\": \"team-secret-456\"}\n"
    "stream=true\n"
    "color=never\n"
    "backoff=0.01\n"
)


class CfgTests(ExtrasCase):
    """/cfg, /model, /endpoint."""

    def write_commented_config(self):
        """The user's ~/.bantam/model.cfg as COMMENTED_CFG; its path."""
        path = self.ws.write_config(self.server)
        with open(path, "w", encoding="utf-8") as f:
            f.write(COMMENTED_CFG % self.server.url)
        return path

    def test_cfg_round_trips_a_commented_file_and_applies_live(self):
        path = self.write_commented_config()
        self.push(text_stream("ok"))
        term = self.start()
        out = self.say(term, "/cfg temperature 0.2", "saved in")
        self.assertIn("[temperature = 0.2, saved in %s:12]" % path, out)
        expected = COMMENTED_CFG % self.server.url + "temperature=0.2\n"   # appended: the last wins
        self.assertEqual(read_text(path), expected)
        out = self.say(term, "/cfg model other-model", "saved in")
        expected += "model=other-model\n"
        self.assertEqual(read_text(path), expected)
        out = self.say(term, "/cfg temperature", "temperature")
        self.assertIn("temperature = 0.2   (%s:12)" % path, out)
        self.say(term, "hi", "ok")
        body = self.server.bodies[0]
        self.assertEqual((body["temperature"], body["model"]), (0.2, "other-model"))
        self.quit(term)

    def test_cfg_writes_to_the_config_file_named_even_when_it_sets_nothing(self):
        """--config FILE holding only comments: /cfg writes to FILE, not ~/.bantam/model.cfg
        (the file was once guessed from the first key read, and one with no keys lost)."""
        mine = self.ws.path("tmp", "mine.cfg")
        with open(mine, "w", encoding="utf-8") as f:
            f.write("# my settings\n")
        home_cfg = os.path.join(self.ws.home, ".bantam", "model.cfg")
        before = read_text(home_cfg) if os.path.exists(home_cfg) else None
        term = self.start("--config", mine, BANTAM_ENDPOINT=self.server.url, BANTAM_COLOR="never")
        out = self.say(term, "/cfg temperature 0.2", "saved in")
        self.assertIn("saved in %s:2]" % mine, out)
        self.quit(term)
        self.assertEqual(read_text(mine), "# my settings\ntemperature=0.2\n")
        self.assertEqual(read_text(home_cfg) if os.path.exists(home_cfg) else None, before)

    def test_cfg_rejects_bad_values_and_keys_and_changes_nothing(self):
        path = self.write_commented_config()
        term = self.start()
        out = self.say(term, "/cfg timeout soon", "error:")
        self.assertRegex(out, r"error: /cfg: timeout: expected a number, got 'soon'")
        out = self.say(term, "/cfg colour never", "error:")
        self.assertIn("unknown config key 'colour'", out)
        out = self.say(term, "/cfg tools shell_exec,grep", "error:")
        self.assertIn("unknown tool 'grep'", out)
        out = self.say(term, "/cfg model a # b", "error:")
        self.assertIn("cannot store", out)
        self.assertEqual(read_text(path), COMMENTED_CFG % self.server.url)
        self.quit(term)

    def test_cfg_never_shows_secrets(self):
        self.write_commented_config()
        term = self.start()
        out = self.say(term, "/cfg", "project_instructions")
        self.assertRegex(out, r"api_key\s+(= )?\*\*\*")   # (a table, or key = value when narrow)
        self.assertIn('{"X-Team": "***"}', out)
        out += self.say(term, "/cfg api_key", "api_key")
        out += self.say(term, "/cfg headers", "headers")
        out += self.say(term, "/cfg api_key sk-new-secret-789", "saved in")
        self.assertNotIn("secret-value", out)
        self.assertNotIn("team-secret", out)
        self.assertNotIn("sk-new-secret", out.split("/cfg api_key sk-new-secret-789", 1)[1])
        self.quit(term)
        with open(os.path.join(self.ws.home, ".bantam_history"), encoding="utf-8") as f:
            history = f.read()
        self.assertIn("/cfg headers\n", history)
        self.assertNotIn("sk-new-secret", history)   # the typed key is not kept in the history

    def test_an_endpoint_with_a_password_stays_out_of_the_history(self):
        """/endpoint URL with a password or a key in its query is typed like a key: the
        history keeps the command that was typed before it, not the URL."""
        self.write_commented_config()
        term = self.start()
        self.say(term, "/cfg model", "model")
        host = self.server.url.split("//", 1)[1]
        for url in ("http://me:pw-secret-5511@%s" % host, "http://%s?api-key=qk-secret-7722" % host):
            out = self.say(term, "/endpoint " + url, "saved in")
            self.assertNotIn("secret-", out.split(url, 1)[1])   # shown as ***
        self.quit(term)
        with open(os.path.join(self.ws.home, ".bantam_history"), encoding="utf-8") as f:
            history = f.read()
        self.assertIn("/cfg model\n", history)
        self.assertNotIn("secret-", history)

    def test_a_key_set_live_is_hidden_from_the_screen_and_the_trace(self):
        self.ws.write_config(self.server, trace_file="trace.jsonl")
        self.push(text_stream("your key is sk-live-typed-4242, right?"))
        term = self.start()
        self.say(term, "/cfg api_key sk-live-typed-4242", "saved in")
        out = self.say(term, "what is my key?", "right?")
        self.assertIn("your key is ***, right?", out)
        self.assertEqual(self.server.posts[0]["headers"]["authorization"], "Bearer sk-live-typed-4242")
        self.quit(term)
        with open(os.path.join(self.ws.work, "trace.jsonl"), encoding="utf-8") as f:
            trace = f.read()
        self.assertIn("your key is ***", trace)
        self.assertNotIn("sk-live-typed", trace)

    def test_cfg_without_a_config_file_writes_home_model_cfg(self):
        os.unlink(self.ws.write_config(self.server))
        term = self.start(BANTAM_ENDPOINT=self.server.url, BANTAM_API_KEY="k")
        home_cfg = os.path.join(self.ws.home, ".bantam", "model.cfg")
        out = self.say(term, "/cfg reasoning_effort low", "saved in")
        self.assertIn("saved in %s:1" % home_cfg, out)
        self.assertEqual(read_text(home_cfg), "reasoning_effort=low\n")
        self.assertEqual(os.stat(home_cfg).st_mode & 0o777, 0o600)
        self.quit(term)

    def test_model_lists_then_switches(self):
        path = self.ws.write_config(self.server)
        self.server.models = {"data": [{"id": "test-model"}, {"id": "big-model"}]}
        self.push(text_stream("from big"))
        term = self.start()
        out = self.say(term, "/model", "/model <name>")
        self.assertIn("* test-model", out)
        self.assertIn("  big-model", out)
        self.say(term, "/model big-model", "saved in")
        self.say(term, "hi", "from big")
        self.assertEqual(self.server.bodies[0]["model"], "big-model")
        self.assertIn("model=big-model\n", read_text(path))
        self.quit(term)

    def test_endpoint_switches_server_and_the_key_goes_where_the_user_said(self):
        path = self.ws.write_config(self.server)
        other = self.make_server([text_stream("from the other server")])
        self.push(text_stream("first"))
        term = self.start()
        out = self.say(term, "/endpoint", "endpoint")
        self.assertIn("endpoint = %s" % self.server.url, out)
        self.say(term, "one", "first")
        self.say(term, "/endpoint %s/" % other.url, "saved in")
        self.say(term, "two", "from the other server")
        self.assertEqual(other.posts[0]["headers"].get("authorization"), "Bearer test-key")
        self.assertEqual(len(self.server.posts), 1)
        self.assertIn("endpoint=%s/\n" % other.url, read_text(path))
        self.quit(term)

    def test_untrusted_folder_endpoint_typed_by_the_user_is_the_users_own(self):
        """A folder model.cfg naming an endpoint, not trusted (n): /endpoint typed by the user is
        the user's own choice: saved in ~/.bantam/model.cfg, never the folder's file, and the
        user's key goes there."""
        other = self.make_server([text_stream("chosen by the user")])
        home = self.ws.write_config(self.server, api_key=None)
        folder = self.ws.write("model.cfg", "endpoint=http://10.1.2.3/v1\n")
        term = self.pty(env={"BANTAM_API_KEY": "sk-users-own-key"})
        term.expect("this folder? [y/N] ")   # (wrapped at spaces to the terminal's width)
        term.sendline("n")
        term.expect("> ")
        out = self.say(term, "/endpoint " + other.url, "saved in %s" % home)
        self.say(term, "hi", "chosen by the user")
        self.assertEqual(other.posts[0]["headers"]["authorization"], "Bearer sk-users-own-key")
        self.assertEqual(read_text(folder), "endpoint=http://10.1.2.3/v1\n")
        self.assertNotIn("sk-users-own-key", out)
        self.quit(term)

    def test_tab_completes_new_commands_and_keys(self):
        term = self.start()
        term.send("/endp\t")
        term.expect("/endpoint ")
        term.send("\x15/cfg project_i\t")
        term.expect("project_instructions ")
        term.send("\x15")
        self.quit(term)

    def test_help_lists_the_new_commands(self):
        term = self.start()
        out = self.say(term, "/help", "/quit")
        for command in ("/cfg", "/model", "/endpoint"):
            self.assertRegex(out, r"\n%s +/" % command)
        self.quit(term)


class SkillTests(ExtrasCase):
    """bantam_tools_dir, bantam_skills_dir; AGENTS.md."""

    def make_skills(self):
        root = os.path.join(self.ws.root, "skills")
        os.makedirs(os.path.join(root, "deploy"))
        os.makedirs(os.path.join(root, "plain"))
        os.makedirs(os.path.join(root, "not-a-skill"))
        with open(os.path.join(root, "deploy", "SKILL.md"), "w") as f:
            f.write("---\nname: deploy\ndescription: Ship the app to staging\n---\nRun make deploy.\n")
        with open(os.path.join(root, "plain", "SKILL.md"), "w") as f:
            f.write("Just do the plain thing.\n")
        return root

    def test_system_prompt_names_the_folders(self):
        skills = self.make_skills()
        self.ws.write_config(self.server, bantam_skills_dir=skills)
        self.push(text_stream("ok"))
        result = self.run_batch("hi", env={"BANTAM_TOOLS_DIR": "/opt/helpers"})
        self.assertEqual(result.returncode, 0, result.stderr)
        system = self.server.bodies[0]["messages"][0]["content"]
        self.assertIn("\nExtra shell tools can be found at /opt/helpers", system)
        self.assertIn("\nSkills may be discovered and invoked from %s" % skills, system)
        self.assertNotIn("bantam_skills_dir", self.server.bodies[0])

    def test_skills_folder_set_live_updates_the_system_prompt(self):
        skills = self.make_skills()
        self.push(text_stream("ok"))
        term = self.start()
        self.say(term, "/cfg bantam_skills_dir " + skills, "saved in")
        self.say(term, "hi", "ok")
        self.assertIn("Skills may be discovered and invoked from " + skills,
                      self.server.bodies[0]["messages"][0]["content"])
        self.quit(term)

    def test_agents_md_is_added_and_can_be_turned_off(self):
        self.ws.write("AGENTS.md", "Always run the tests with make check.\n")
        self.push(text_stream("ok"), text_stream("ok"))
        self.assertEqual(self.run_batch("hi").returncode, 0)
        system = self.server.bodies[0]["messages"][0]["content"]
        self.assertIn("You are Bantam", system)
        self.assertIn("Always run the tests with make check.", system)
        shown = self.run_bantam("--show-config").stdout
        self.assertRegex(shown, r"\+ project instructions\s+%s" % re.escape(os.path.join(self.ws.work, "AGENTS.md")))
        result = self.run_batch("hi", "--set", "project_instructions=false")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("make check", self.server.bodies[1]["messages"][0]["content"])


class ToolsKeyTests(ExtrasCase):
    """The tools key, write through a real run, legacy names, the views."""

    def run_calls(self, calls, *args, env=None, tools="shell_exec,run_subagent,write"):
        """One batch turn in which the model makes calls, then answers; the second request."""
        self.push(tool_call_stream(calls), text_stream("done"))
        result = self.run_batch("go", "--set", "tools=" + tools, *args, env=env)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result, self.server.bodies[1]

    def test_tools_key_offers_write(self):
        self.push(text_stream("a"), text_stream("b"))
        self.run_batch("hi")
        self.run_batch("hi", "--set", "tools=shell_exec,write")
        names = [[t["function"]["name"] for t in body["tools"]] for body in self.server.bodies]
        self.assertEqual(names, [["shell_exec", "run_subagent"], ["shell_exec", "write"]])
        self.assertEqual(self.server.bodies[1]["tools"][1]["function"]["parameters"]["required"],
                         ["filePath", "content"])
        self.assertIn("You also have write", self.server.bodies[1]["messages"][0]["content"])
        self.assertIn("In this session run_subagent is not available.", self.server.bodies[1]["messages"][0]["content"])
        self.assertNotIn("not available", self.server.bodies[0]["messages"][0]["content"])

    def test_unknown_tool_in_the_key_is_a_one_line_config_error(self):
        result = self.run_batch("hi", "--set", "tools=shell_exec,grep")
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr.strip().splitlines(), [
            "error: --set: tools: unknown tool 'grep' (the tools: shell_exec, run_subagent, write)"])
        self.assertEqual(self.server.requests, [])

    def test_write_whole_file(self):
        _, body = self.run_calls([("w1", "write", {"filePath": "new/dir/b.txt", "content": "fresh\n"})])
        self.assertEqual(read_text(os.path.join(self.ws.work, "new/dir/b.txt")), "fresh\n")
        self.assertEqual(self.tool_results(body)["w1"], "wrote 6 bytes to new/dir/b.txt (1 lines, new file)")

    def test_legacy_names_bash_and_write_file(self):
        """bash runs as shell_exec, write_file as write."""
        path = self.ws.write("legacy.txt", "hello there")
        _, body = self.run_calls([
            ("b1", "bash", {"command": "echo via-bash"}),
            ("b2", "write_file", {"filePath": "legacy.txt", "content": "HOWDY"})],
            tools="shell_exec,write")
        results = self.tool_results(body)
        self.assertEqual(results["b1"], "via-bash\n\n\nexit: 0")
        self.assertEqual(read_text(path), "HOWDY")
        self.assertEqual(results["b2"], "wrote 5 bytes to legacy.txt (1 lines)")

    def test_write_is_unknown_unless_listed(self):
        _, body = self.run_calls([("w1", "write", {"filePath": "x.txt", "content": "x"})], tools="shell_exec,run_subagent")
        self.assertEqual(self.tool_results(body)["w1"], "error: unknown tool 'write'; the tools are shell_exec, run_subagent")
        self.assertFalse(os.path.exists(os.path.join(self.ws.work, "x.txt")))

    def test_plain_view_traces_a_long_write_whole(self):
        """The plain view traces a write as the spec traces any call: [tool call: name(args)]."""
        content = "x" * 500 + "\n" + "y\n"
        args = json.dumps({"filePath": "big.txt", "content": content})
        result, _ = self.run_calls([("w1", "write", args)])
        self.assertIn("[tool call: write(%s)]\n" % args, result.stdout)
        self.assertEqual(read_text(os.path.join(self.ws.work, "big.txt")), content)


if __name__ == "__main__":
    unittest.main()
