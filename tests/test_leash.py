"""On a leash: approvals (approve, allow, deny, --ask, --yolo), budgets per turn, the cycle
guard and the final answer after a budget stop.

bantam runs as a real subprocess (batch mode) or on a real pseudo-terminal (the REPL's
"Run? [y/N/a/e]") against the scripted FakeServer; the tests check what ran (files made),
what the model was told (the tool messages it got), what was printed and the exit status.
"""

import json
import os

from tests.support import (
    PROMPT_LINE, BantamTestCase, hang, strip_ansi, text_stream, tool_call_stream, usage)

BUDGET_EXIT = 3


def shell(call_id, command):
    """A (id, name, args) shell_exec call for tool_call_stream."""
    return (call_id, "shell_exec", {"command": command})


class LeashCase(BantamTestCase):
    """Helpers: what the model got back for each call, what a batch run did."""

    def tool_results(self, body=None):
        """{tool_call_id: content} of the tool messages in a request body (default: the last)."""
        body = body or self.server.bodies[-1]
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}

    def batch(self, *args, code=0, prompt="do the task"):
        """Run `bantam -p prompt *args`; assert the exit status; the CompletedProcess."""
        result = self.run_bantam("-p", prompt, *args)
        self.assertEqual(result.returncode, code, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result

    def saved_messages(self):
        """The messages of the saved conversation (autosave.json)."""
        return self.read_autosave()["messages"]

    def exists(self, name):
        """Is there a file of that name in bantam's working folder?"""
        return os.path.exists(os.path.join(self.ws.work, name))


class ApprovalTests(LeashCase):
    """approve=auto|ask|deny with the allow and deny patterns, in batch mode."""

    def test_auto_runs_commands_as_the_spec_does(self):
        """The default (approve=auto) runs the command and shows no decision in the trace."""
        self.push(tool_call_stream([shell("c1", "touch made.txt")]), text_stream("done"))
        result = self.batch()
        self.assertTrue(self.exists("made.txt"))
        self.assertNotIn("[command", result.stderr)

    def test_approve_deny_refuses_every_command(self):
        """approve=deny: nothing runs; the model reads why; the trace says so."""
        self.push(tool_call_stream([shell("c1", "touch made.txt")]), text_stream("ok, I won't"))
        result = self.batch("--set", "approve=deny")
        self.assertFalse(self.exists("made.txt"))
        self.assertIn("approve=deny", self.tool_results()["c1"])
        self.assertIn("[command refused (approve=deny)]", result.stderr)
        self.assertIn("ok, I won't", result.stdout)

    def test_deny_pattern_wins_over_allow(self):
        """allow=* and deny='rm *': the rm is refused (naming the pattern), the other command runs."""
        self.ws.write("keep.txt", "precious")
        self.push(tool_call_stream([shell("c1", "rm -f keep.txt"), shell("c2", "touch made.txt")]),
                  text_stream("done"))
        result = self.batch("--set", "allow=*", "--set", "deny=rm *, shred *")
        self.assertTrue(self.exists("keep.txt"))
        self.assertTrue(self.exists("made.txt"))
        results = self.tool_results()
        self.assertIn("'rm *'", results["c1"])
        self.assertIn("exit: 0", results["c2"])
        self.assertIn("[command refused (deny rm *)]", result.stderr)
        self.assertIn("[command run (allow *)]", result.stderr)

    def test_allow_pattern_runs_under_approve_deny(self):
        """approve=deny with allow='echo *': echo runs, anything else does not."""
        self.push(tool_call_stream([shell("c1", "echo hi > echoed.txt"), shell("c2", "touch made.txt")]),
                  text_stream("done"))
        self.batch("--set", "approve=deny", "--set", "allow=echo *")
        self.assertTrue(self.exists("echoed.txt"))
        self.assertFalse(self.exists("made.txt"))

    def test_pattern_matches_each_simple_command(self):
        """deny='rm *' catches 'cd . && rm x': patterns match each simple command."""
        self.ws.write("x", "")
        self.push(tool_call_stream([shell("c1", "cd . && rm x")]), text_stream("done"))
        self.batch("--set", "deny=rm *")
        self.assertTrue(self.exists("x"))

    def test_ask_without_a_terminal_refuses_and_says_so_once(self):
        """--ask in a batch run with no terminal: every command is refused, with one note."""
        self.push(tool_call_stream([shell("c1", "touch one.txt"), shell("c2", "touch two.txt")]),
                  text_stream("done"))
        result = self.batch("--ask")
        self.assertFalse(self.exists("one.txt") or self.exists("two.txt"))
        self.assertEqual(result.stderr.count("there is no terminal to ask"), 1, result.stderr)
        self.assertIn("no one is there to ask", self.tool_results()["c1"])

    def test_yolo_overrides_the_config(self):
        """--yolo sets approve=auto for this run, over approve=deny in model.cfg."""
        self.ws.write_config(self.server, approve="deny")
        self.push(tool_call_stream([shell("c1", "touch made.txt")]), text_stream("done"))
        self.batch("--yolo")
        self.assertTrue(self.exists("made.txt"))

    def test_ask_and_yolo_together_is_a_usage_error(self):
        """--ask with --yolo: exit 2 with one line naming both."""
        result = self.run_bantam("--ask", "--yolo", "-p", "x")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--yolo", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)

    def test_bad_approve_value(self):
        """approve=maybe is a config error naming the choices."""
        result = self.run_bantam("--set", "approve=maybe", "-p", "x")
        self.assertEqual(result.returncode, 2)
        self.assertIn("auto, ask, deny", result.stderr)

    def test_subagent_commands_are_approved_too(self):
        """A subagent's shell commands go through the same rules."""
        self.push(tool_call_stream([("s1", "run_subagent", {"prompt": "make a file"})]),
                  tool_call_stream([shell("c1", "touch child.txt")]),
                  text_stream("child could not"), text_stream("parent done"))
        self.batch("--set", "approve=deny")
        self.assertFalse(self.exists("child.txt"))
        self.assertIn("approve=deny", self.tool_results(self.server.bodies[2])["c1"])


class AskTests(LeashCase):
    """approve=ask in the REPL: Run? [y/N/a/e], on a real terminal."""

    def start(self):
        self.ws.write_config(self.server, approve="ask")
        term = self.pty()
        term.expect("> ")
        return term

    def answer(self, term, keys):
        """Wait for the question, type the answer and Enter."""
        term.expect("Run? [y/N/a/e] ")
        term.send(keys + "\r")

    def turn_end(self, term):
        term.expect(PROMPT_LINE)

    def test_yes_runs_the_command(self):
        """y: the command (shown first) runs; the model gets its output."""
        self.push(tool_call_stream([shell("c1", "echo ran > yes.txt; echo fine")]), text_stream("all done"))
        term = self.start()
        term.sendline("make a file")
        term.expect("echo ran > yes.txt")
        self.answer(term, "y")
        term.expect("all done")
        self.turn_end(term)
        self.assertTrue(self.exists("yes.txt"))
        self.assertIn("fine", self.tool_results()["c1"])
        self.assertNotIn("[command run by the user]", term.output, "the user's own answer is not repeated")

    def test_no_with_a_reason_reaches_the_model(self):
        """Typing a reason refuses the command; the model reads the reason."""
        self.push(tool_call_stream([shell("c1", "touch no.txt")]), text_stream("understood"))
        term = self.start()
        term.sendline("make a file")
        self.answer(term, "n not in this folder, use /tmp")
        term.expect("understood")
        self.turn_end(term)
        self.assertFalse(self.exists("no.txt"))
        self.assertEqual(self.tool_results()["c1"],
                         "[the user did not let this command run: not in this folder, use /tmp]")

    def test_enter_refuses(self):
        """Enter alone is No (the default): refused without a reason."""
        self.push(tool_call_stream([shell("c1", "touch no.txt")]), text_stream("understood"))
        term = self.start()
        term.sendline("make a file")
        self.answer(term, "")
        term.expect("understood")
        self.turn_end(term)
        self.assertFalse(self.exists("no.txt"))
        self.assertEqual(self.tool_results()["c1"], "[the user did not let this command run]")

    def test_always_stops_asking_for_that_command(self):
        """a: runs it, and the same command later in the session runs without a question (also
        one sent with a trailing newline, as models often do: the approval once missed it);
        another command is still asked about."""
        for command in ("echo x >> log.txt", "echo x >> log.txt\n"):
            with self.subTest(command=command):
                for name in ("log.txt", "other.txt"):
                    if self.exists(name):
                        os.remove(os.path.join(self.ws.work, name))
                self.push(tool_call_stream([shell("c1", command)]), text_stream("first"),
                          tool_call_stream([shell("c2", command), shell("c3", "touch other.txt")]),
                          text_stream("second"))
                term = self.start()
                term.sendline("one")
                self.answer(term, "a")
                term.expect("first")
                self.turn_end(term)
                start = len(term.output)
                term.sendline("two")
                self.answer(term, "n")
                term.expect("second")
                self.turn_end(term)
                self.assertEqual(term.output[start:].count("Run?"), 1, term.output[start:])
                with open(os.path.join(self.ws.work, "log.txt")) as f:
                    self.assertEqual(f.read(), "x\nx\n")
                self.assertFalse(self.exists("other.txt"))
                self.leave(term)

    def test_edit_changes_the_command_before_it_runs(self):
        """e: the command comes back for editing; the edited one runs and the model is told."""
        self.push(tool_call_stream([shell("c1", "touch wrong.txt")]), text_stream("noted"))
        term = self.start()
        term.sendline("make a file")
        self.answer(term, "e")
        term.expect("Command: ")
        term.expect("touch wrong.txt")   # ready to edit
        term.send("\x15touch right.txt\r")   # Ctrl+U clears the line
        term.expect("noted")
        self.turn_end(term)
        self.assertTrue(self.exists("right.txt"))
        self.assertFalse(self.exists("wrong.txt"))
        result = self.tool_results()["c1"]
        self.assertTrue(result.startswith("[the user changed the command before it ran, to:\ntouch right.txt]"), result)
        self.assertIn("exit: 0", result)
        saved = [m for m in self.server.bodies[-1]["messages"] if m.get("tool_calls")]
        self.assertEqual(json.loads(saved[0]["tool_calls"][0]["function"]["arguments"]),
                         {"command": "touch wrong.txt"}, "the model's call is stored as it made it")

    def test_batch_run_on_a_terminal_asks_too(self):
        """`bantam --ask -p ...` typed at a terminal asks there (the REPL is not needed)."""
        self.push(tool_call_stream([shell("c1", "touch batch.txt")]), text_stream("batch done"))
        term = self.pty("--ask", "-p", "make a file")
        self.answer(term, "y")
        term.expect("batch done")
        self.assertEqual(term.wait(), 0, term.output)
        self.assertTrue(self.exists("batch.txt"))

    def test_answers_stay_out_of_the_history(self):
        """The answers typed at Run? are not prompts: Up at the prompt brings the last prompt."""
        self.push(tool_call_stream([shell("c1", "true")]), text_stream("done"))
        term = self.start()
        term.sendline("the prompt")
        self.answer(term, "y")
        term.expect("done")
        self.turn_end(term)
        start = len(term.output)
        term.send("\x1b[A")
        term.expect("the prompt")
        self.assertNotIn("y", strip_ansi(term.output[start:]).replace("the prompt", ""))


class BudgetTests(LeashCase):
    """Budgets per turn; each stop asks once, without tools, for the final answer (exit 3)."""

    FINAL = "my best answer"

    def assert_final_request(self, reason_words):
        """The last request had no tools and asked for the final answer, naming the limit."""
        body = self.server.bodies[-1]
        self.assertNotIn("tools", body)
        last = body["messages"][-1]
        self.assertEqual(last["role"], "user")
        self.assertIn("cannot call tools any more", last["content"])
        self.assertIn(reason_words, last["content"])

    def test_cycle_guard_stops_the_same_call(self):
        """The same call three times in a row (max_identical_calls=3) stops the loop; the final
        answer is the answer on stdout; exit 3; the stop is an event and a line on stderr."""
        loop = [tool_call_stream([shell("c%d" % i, "ls")]) for i in range(5)]
        self.push(*loop[:3], text_stream(self.FINAL))
        result = self.batch("-q", code=BUDGET_EXIT)
        self.assertEqual(len(self.server.posts), 4)
        self.assert_final_request("the same tool call 3 times in a row")
        self.assertEqual(result.stdout, self.FINAL + "\n")
        self.assertIn("[stopped: the same tool call 3 times in a row (max_identical_calls=3); "
                      "asking for a final answer]", result.stderr)
        self.assertEqual(self.saved_messages()[-1], {"role": "assistant", "content": self.FINAL})

    def test_cycle_guard_counts_only_identical_calls_in_a_row(self):
        """ls, ls, pwd, ls, ls: never three in a row, so the loop goes on to the model's answer."""
        commands = ["ls", "ls", "pwd", "ls", "ls"]
        self.push(*[tool_call_stream([shell("c%d" % i, c)]) for i, c in enumerate(commands)],
                  text_stream("natural end"))
        result = self.batch()
        self.assertEqual(len(self.server.posts), 6)
        self.assertIn("natural end", result.stdout)

    def test_cycle_guard_off(self):
        """max_identical_calls=0 turns the guard off."""
        self.push(*[tool_call_stream([shell("c%d" % i, "ls")]) for i in range(4)], text_stream("end"))
        self.batch("--set", "max_identical_calls=0")
        self.assertEqual(len(self.server.posts), 5)

    def test_model_that_never_stops_calling_tools(self):
        """max_al_iterations=3: three model calls, then the final answer; exit 3."""
        self.push(*[tool_call_stream([shell("c%d" % i, "echo %d" % i)]) for i in range(3)],
                  text_stream(self.FINAL))
        result = self.batch("--set", "max_al_iterations=3", code=BUDGET_EXIT)
        self.assertEqual(len(self.server.posts), 4)
        self.assert_final_request("3 model calls")
        self.assertIn(self.FINAL, result.stdout)

    def test_max_turn_tokens_counts_subagents(self):
        """The subagent's tokens count against the parent turn's max_turn_tokens."""
        self.push(tool_call_stream([("s1", "run_subagent", {"prompt": "count"})], usage=usage(10, 5)),
                  text_stream("child answer", usage=usage(500, 100)),
                  text_stream(self.FINAL))
        result = self.batch("--set", "max_turn_tokens=600", code=BUDGET_EXIT)
        self.assertEqual(len(self.server.posts), 3, "stopped right after the subagent")
        self.assert_final_request("615 tokens this turn")
        self.assertIn(self.FINAL, result.stdout)

    def test_max_turn_seconds_against_a_slow_model(self):
        """Each reply takes 0.6 s; max_turn_seconds=1 stops the loop after a step or two,
        well before the model's ten calls, and the final answer still comes."""
        def slow(request):   # a tool call while tools are offered, else the final answer
            if "tools" in request["body"]:
                return tool_call_stream([shell("c%d" % len(self.server.posts), "true")], head_delay=0.6)
            return text_stream(self.FINAL)
        self.push(*[slow] * 10)
        result = self.batch("--set", "max_turn_seconds=1", code=BUDGET_EXIT)
        self.assertLess(len(self.server.posts), 6)
        self.assert_final_request("s this turn")
        self.assertIn("(max_turn_seconds=1.0)", result.stderr)
        self.assertIn(self.FINAL, result.stdout)

    def test_max_cost_crossed_mid_turn(self):
        """Each call costs $0.0011 at the prices set; max_cost=0.002 stops after the second; the
        token line shows the turn's cost (the final call included) and the session's."""
        priced = usage(100, 10)
        def priced_reply(request):   # a tool call while tools are offered, else the final answer
            if "tools" in request["body"]:
                return tool_call_stream([shell("c%d" % len(self.server.posts), "true")], usage=priced)
            return text_stream(self.FINAL, usage=priced)
        self.push(*[priced_reply] * 5)
        result = self.run_bantam("-p", "go", "--set", "price_in=10", "--set", "price_out=10",
                                 "--set", "max_cost=0.002")   # (not -q: it leaves the token line out)
        self.assertEqual(result.returncode, BUDGET_EXIT, result.stderr)
        self.assertEqual(len(self.server.posts), 3)
        self.assert_final_request("$0.0022 this turn")
        self.assertIn(self.FINAL, result.stdout)
        self.assertIn("| $0.0033 (session $0.0033)]", result.stderr)
        self.assertIn("[stopped: $0.0022 this turn (max_cost=0.002)", result.stderr)

    def test_final_answer_has_its_own_short_timeout(self):
        """A final-answer call that does not answer within final_answer_timeout is given up
        (not retried): a note, the exit status of a budget stop."""
        self.push(tool_call_stream([shell("c1", "ls")]), hang(5))
        result = self.batch("--set", "max_al_iterations=1", "--set", "final_answer_timeout=0.5",
                            code=BUDGET_EXIT)
        self.assertEqual(len(self.server.posts), 2)
        self.assertIn("[no final answer:", result.stderr)

    def test_cost_in_the_repl_adds_up_over_the_session(self):
        """With prices set the REPL's token line shows the turn's cost and the session's."""
        self.ws.write_config(self.server, price_in=1, price_out=1)
        self.push(text_stream("one", usage=usage(1000, 0)), text_stream("two", usage=usage(2000, 0)))
        term = self.pty()
        term.expect("> ")
        term.sendline("first")
        term.expect("| $0.0010 (session $0.0010)")
        term.expect(PROMPT_LINE)
        term.sendline("second")
        term.expect("| $0.0020 (session $0.0030)")
        term.expect(PROMPT_LINE)


class RepairTests(LeashCase):
    """The repair budget: the final-answer call."""

    def test_no_repair_budget_left_for_the_final_answer(self):
        """max_repair_calls=0: a budget stop asks for no final answer, and says so."""
        self.push(tool_call_stream([shell("c1", "ls")]), text_stream("never asked"))
        result = self.batch("--set", "max_al_iterations=1", "--set", "max_repair_calls=0", code=BUDGET_EXIT)
        self.assertEqual(len(self.server.posts), 1)
        self.assertIn("[stopped: 1 model call (max_al_iterations=1)]", result.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
