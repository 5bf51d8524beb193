#!/usr/bin/env python3
"""bantam: a tiny command-line AI agent in one standard-library Python file.

The whole agent is the Bantam algorithm: keep a list of chat messages, send it to an
OpenAI-compatible /chat/completions endpoint, print the reply as it streams, run the tool
calls it asks for (shell_exec and run_subagent), append their results, and loop until the
model stops calling tools. Everything else serves that loop, AL(cfg, messages), which you
will find under "The agentic loop".

The sections, in reading order:
  constants and the config schema (DEFAULTS)
  events and views       everything a run reports is one event; views print them
  config                 model.cfg, BANTAM_<KEY>, flags; what a folder may set before it is trusted
  sessions               one file per conversation, saved at every step
  the HTTP client        one keep-alive connection (HTTP(S) or SOCKS5 proxy), retries, SSE
  the tools              shell_exec, run_subagent (and read, write); the TOOLS table
  the agentic loop       AL
  approvals and budgets  what may run (approve, allow, deny) and what a turn may spend
  usage and compaction   the context window, the token line, summaries
  settings               /cfg writes one key=value line back, keeping the rest of the file
  commands               /save, /load, /cfg, /skill ... : the COMMANDS table
  Markdown               the reply rendered line by line for a terminal
  the terminal view      rendered answers, readable tool calls, live tool output
  the REPL and main      interactive mode, !commands, batch mode, the command line

Usage:  bantam               interactive REPL (readline, history, /commands)
        bantam prompt.txt    batch mode: one turn from a file ('-' reads stdin)
        bantam --help        every option
"""
import _thread
import json
import os
import re
import stat
import sys
import time
import unicodedata

VERSION = "1.2.0"
USER_AGENT = "Mozilla/5.0 (compatible; Bantam/1.0)"

# The config schema: every key with its default. Values from model.cfg, BANTAM_<KEY> or
# --set are parsed by the default's type (bool, int, float, list of seconds, JSON object,
# string); CHOICES lists the allowed words of a few string keys.
DEFAULTS = {
    "endpoint": "https://api.openai.com/v1",  # base URL of an OpenAI-compatible API
    "model": "gpt-4o",
    "temperature": 0.7,
    "api_key": "",                 # Bearer token; else BANTAM_API_KEY, else OPENAI_API_KEY
    "headers": {},                 # extra request headers, a JSON object: {"api-key": "..."} (secret)
    "stream": True,                # stream the reply as it is generated (SSE)
    "color": "auto",               # auto (when a terminal) | always | never
    "timeout": 60.0,               # seconds to connect, and between reads once a reply flows
    "first_byte_timeout": 300.0,   # seconds to wait for a reply to begin (a model may think long)
    "shell_timeout": 120.0,        # seconds before a shell_exec command's group is killed
    "max_al_iterations": 1000,     # model calls per AL() before it stops
    "backoff": [1.0, 1.0, 2.0, 3.0, 5.0],  # seconds before each retry (Fibonacci)
    "max_tool_res": 65536,         # bytes of a tool result sent whole; more is offloaded
    "context_window": 262144,      # tokens, when the server does not say
    "reasoning_effort": "",        # forwarded when set (low | medium | high ...)
    "max_reasoning": 262144,       # characters of a reply's reasoning shown, kept and sent back
    "text_tool_calls": False,      # run a reply that is only a tool call written as text
    "trace_file": "",              # append every event as a JSON line to this file
    "render": "auto",              # Markdown and live tool output: auto (on a terminal) | always | never
    "tool_lines": 10,              # lines of a command's output shown on screen (0: a screenful)
    "tools": "shell_exec,run_subagent",  # the tools offered to the model (also: read, write)
    "bantam_tools_dir": "",        # a folder of helper scripts, named in the system prompt
    "bantam_skills_dir": "",       # a folder of skills (<name>/SKILL.md), named in the system prompt
    "shell_env_exclude": "*KEY*,*SECRET*,*TOKEN*,*PASSWORD*",  # variables kept from commands
                                   # (none: all pass but bantam's own secrets)
    "shell_env_keep": "",          # variables passed to commands all the same: GITHUB_TOKEN,...
    "project_instructions": True,  # add this folder's AGENTS.md to the system prompt
    "usage": True,                 # the token line on stderr after each turn
    # the leash (see "Approvals and budgets"): what may run, and what a turn may spend
    "approve": "auto",             # commands, writes: auto (run them) | ask (REPL asks) | deny
    "allow": "",                   # comma-separated patterns that run unasked: commands, write:PATH
    "deny": "",                    # ... that never run (deny wins over allow, allow over approve)
    "sandbox": "off",              # off | workspace (commands write here and in temp) | read-only
    "sandbox_network": True,       # false: commands get no sockets (Landlock ABI 4+)
    "max_turn_tokens": 0,          # prompt + completion tokens per turn, subagents included (0: no limit)
    "max_turn_seconds": 0.0,       # wall-clock seconds per turn (0: no limit)
    "max_cost": 0.0,               # dollars per turn, from the prices below (0: no limit)
    "price_in": 0.0,               # dollars per million prompt tokens
    "price_out": 0.0,              # dollars per million completion tokens
    "price_cached": 0.0,           # dollars per million cached prompt tokens (0: price_in)
    "max_identical_calls": 3,      # same call and result this many times in a row: stop (0: off)
    "max_calls_per_reply": 64,     # tool calls of a reply that run; the rest are answered "not run"
    "max_repair_calls": 3,         # per turn: nudges after an empty reply, and the final-answer call
    "final_answer_timeout": 60.0,  # seconds for the final-answer call after a budget stop
    "keep_sessions": 1000,         # conversations with ids bantam made up kept; older go (0: all)
}
CHOICES = {"color": ("auto", "always", "never"), "render": ("auto", "always", "never"),
           "approve": ("auto", "ask", "deny"), "sandbox": ("off", "workspace", "read-only")}
POSITIVE = {"max_al_iterations", "max_tool_res", "context_window", "max_calls_per_reply"}   # not 0

RETRY_STATUSES = {408, 409, 429}       # plus every 5xx
MAX_SERVER_WAIT = 60.0                 # a longer Retry-After fails the turn instead
DRAIN_SECONDS = 0.25                   # read output this long after the shell exits
DRAIN_REPLY = 2.0                      # seconds to read the rest of a reply after [DONE]
FLUSH_EVERY = 0.02                     # seconds between flushes of streamed text to a pipe
SPILL_LIMIT = 1 << 30                  # bytes of tool output kept on disk at most
MAX_ARGUMENTS = 1 << 20                # characters of tool-call arguments a reply keeps (then: cut)
COMPACT_AT = 0.60                      # offer /compact at this share of the context window
MAX_SUBAGENT_DEPTH = 4                 # subagents of subagents... at most this deep
CHILD_NOTE = "\n\nImportant: this is a child agent"
INTERRUPTED = "[interrupted by user]"
BUDGET_EXIT = 3                        # batch mode's exit status when a budget stopped the turn

DEFAULT_SYSTEM = """\
You are Bantam, a command-line AI agent working on the user's machine.

You have two tools:
- shell_exec runs a shell command (bash) and returns its output and exit code.
- run_subagent hands a self-contained sub-task to a fresh copy of yourself and returns its answer.

Work in small, verifiable steps: look before you change things, check the result of every
command, and fix what fails. Never start interactive programs (editors, pagers, prompts);
use non-interactive flags instead. Long outputs are cut: read big files in parts.
When you are done, say briefly what you did and what you found.
"""

# What servers say when the prompt does not fit the model's context window.
OVERFLOW_PATTERNS = re.compile(
    r"context[_ ]length[_ ]exceeded|exceed_context_size|maximum context length|context window"
    r"|exceeds the available context|greater than the context length|prompt is too long"
    r"|input token count.*exceeds|exceeds the maximum number of tokens|reduce the length of the"
    r"|longer than the maximum model length|context length is only|maximum prompt length"
    r"|too large for model with|input is too long|token limit exceeded|too many tokens", re.I)
# What servers say when the money, not the rate, has run out: retrying cannot help.
QUOTA_PATTERNS = re.compile(
    r"insufficient_quota|exceeded your current quota|check your plan and billing"
    r"|credit balance is too low|insufficient (?:credits|balance)", re.I)
# What strict servers say about an assistant message with neither content nor tool calls.
EMPTY_ASSISTANT_PATTERNS = re.compile(
    r"content or tool_calls must be set|either content or tool_calls|must have non-empty content"
    r"|text content blocks must|expected a string, got null|parts must not be empty", re.I)

# What this process has learned about the servers it talks to: context windows by (endpoint,
# model), fixes their errors taught ((endpoint, model, fix): see FIXES). Facts about a
# server hold for every run, so they are shared on purpose (a learned fix spares each later
# run a refused request); what a run has said once lives in the run (see note_once).
LEARNED = {"windows": {}, "fixes": set()}


class BantamError(Exception):
    """A failure to report in one line; exit_code is what batch mode exits with."""
    exit_code = 1


class ConfigError(BantamError):
    """A broken config file or value, a missing prompt file: the user must fix something."""
    exit_code = 2


class OutputClosed(BantamError):
    """stdout's reader went away (`bantam prompt.txt | head`): stop quietly, like SIGPIPE."""
    exit_code = 141


class ApiError(BantamError):
    """A failed model request. kind: retry|fatal|overflow|empty_assistant|bad_request|budget."""

    def __init__(self, message, kind="fatal", status=None, wait=None, body=""):
        BantamError.__init__(self, message)
        self.kind, self.status, self.wait, self.body = kind, status, wait, body

    @property
    def exit_code(self):
        """1 when retrying later may work (it failed after its retries), else 2 (a wrong key,
        endpoint or model, a rejected request, a full context: the same run fails again)."""
        return 1 if self.kind == "retry" else 2


# ----------------------------------------------------------------------------------------
# Events and views: everything a run reports is one event (a dict) passed to one function;
# a view turns events into output. The plain view prints the spec's traces; the JSONL view
# prints the events themselves; a library caller may pass its own function.
# ----------------------------------------------------------------------------------------

STARTED = time.monotonic()   # events carry "t": seconds since the process started
# The event types and their fields, besides type, t and depth (the README's table says more).
EVENTS = {
    "start": "version model mode session time", "prompt": "text session",
    "turn_start": "messages", "request": "model messages stream", "waiting": "seconds",
    "reasoning": "text", "text": "text", "reply_end": "finish", "reply": "message quiet",
    "usage": "model prompt_tokens cached_tokens completion_tokens estimated quiet seconds "
             "first_output cost",
    "message": "message", "tool_call": "id name arguments",
    "approval": "id tool command path decision rule reason edited",
    "tool_output": "text", "tool_progress": "seconds", "tool_result": "id name content ok",
    "retry": "error attempt of wait", "discarded": "error", "note": "text level",
    "error": "message", "output": "text", "compaction": "before after kept_prompt",
    "budget_stop": "reason limit used",
    "context": "model prompt_tokens cached_tokens completion_tokens estimated window share "
               "cost session_cost",
    "turn_end": "status error",
}


def emit(cfg, kind, **fields):
    """Pass one event to the run's sink: {"type": kind, "t": seconds, "depth": subagent
    level, ...fields}. Text in events is already safe to show (secrets replaced). Outside a
    run, and before cfg has a sink, a plain view of its own shows it."""
    run = cfg.get("run") or {}
    event = {"type": kind, "t": round(time.monotonic() - STARTED, 3), "depth": run.get("depth", 0)}
    event.update(fields)
    (run.get("emit") or plain_view(cfg))(event)


def note(cfg, text, level="error"):
    """A one-line diagnostic (an error, a retry, a warning, a hint) as a "note" event."""
    emit(cfg, "note", text=redact_all(cfg, text), level=level)


def show(cfg, text):
    """A command's output, made terminal-safe, as an "output" event (shown on stdout)."""
    emit(cfg, "output", text=terminal_safe(text))


# Control characters a terminal would act on (ESC, OSC, BEL, C1 CSI...): shown, never obeyed.
TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Invisible and format characters that can hide instructions from a human reader: tag
# characters, bidi overrides and isolates, zero-width and joiner characters, variation
# selectors, other non-printables. Removed from tool arguments and results (tab and newline kept).
INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")
ODD_SPACES = re.compile("[\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
SURROGATES = re.compile("[\ud800-\udfff]")


def visible(match):
    """How one unsafe control character is shown: ^[ for ESC, nothing for CR and BEL."""
    code = ord(match.group())
    if code in (0x0d, 0x07):
        return ""
    if code < 0x20:
        return "^" + chr(code + 64)
    return "^?" if code == 0x7f else "\\x%02x" % code


def terminal_safe(text):
    """Text with every control character except tab and newline made harmless."""
    return TERMINAL_UNSAFE.sub(visible, text)


def clean_for_model(text):
    """Text without invisible or format characters (prompt-injection filter)."""
    return ODD_SPACES.sub(" ", INVISIBLE.sub("", text))


def join_surrogates(text):
    """Text with UTF-16 surrogate halves joined into the characters they encode (JSON's
    "\\ud83d\\ude00" is one emoji); a lone half becomes U+FFFD, which UTF-8 can store."""
    if not SURROGATES.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def secrets_of(cfg):
    """The values never to print or save: the API key, the values of the extra headers, the
    credentials inside the endpoint URL, and the keys bantam found but does not send."""
    key, url = cfg.get("api_key") or "", cfg.get("endpoint") or ""
    withheld = cfg.get("sources", {}).get("withheld", [])
    if not cfg.get("headers") and not withheld and "@" not in url and "?" not in url:
        return [key] if len(key) >= 4 else []   # the usual case, made cheap
    values = [key] + [str(v) for v in cfg.get("headers", {}).values()] + withheld
    return sorted({v for v in values + url_secrets(url) if len(v) >= 4}, key=len, reverse=True)


def url_secrets(url):
    """The credentials inside a URL: the password of user:password@, and the values of query
    parameters named like key, token, secret, password, sig or auth (?key=...)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
    except ValueError:   # "http://[::1": not a URL a request could go to
        return []
    named = [pair.partition("=") for pair in parts.query.split("&")]
    return [parts.password or ""] + [value for name, _, value in named
                                     if re.search("key|token|secret|pass|sig|auth", name, re.I)]


def redact_all(cfg, text):
    """Text with every secret of cfg replaced by ***."""
    for secret in secrets_of(cfg):
        text = text.replace(secret, "***")
    return text


def stream_piece(cfg, held, text):
    """The part of a streamed piece that can be shown now, and what to hold back: a tail
    that may begin a secret (a model that read the key must not print it, even split across
    chunks), or the first UTF-16 half of a character whose second half is still to come."""
    text = held + text
    secrets = secrets_of(cfg)
    if not secrets and not "\ud800" <= text[-1:] <= "\udfff":
        return text, ""   # the hot path
    for secret in secrets:
        text = text.replace(secret, "***")
    keep = 1 if "\ud800" <= text[-1:] <= "\udbff" else 0
    for secret in secrets:
        if secret[0] in text[-len(secret):]:
            keep = max(keep, next((n for n in range(min(len(secret) - 1, len(text)), 0, -1)
                                   if text.endswith(secret[:n])), 0))
    return join_surrogates(text[:len(text) - keep]), text[len(text) - keep:]


# The plain view: the spec's output. The answer and the traces on stdout, reasoning between
# markers, a subagent's output behind a rail; diagnostics on stderr. Colors when wanted.
COLORS = {"status": "\033[1;90m", "marker": "\033[36m", "reasoning": "\033[2m",
          "call": "\033[33m", "result": "\033[32m", "body": "\033[2m", "error": "\033[31m",
          "dim": "\033[2m"}
RESET = "\033[0m"


def color_wanted(cfg, stream):
    """Whether to color this stream: the color key, NO_COLOR and whether it is a terminal."""
    mode = cfg.get("color", "auto")
    if mode == "never" or os.environ.get("NO_COLOR") or os.environ.get("BANTAM_NO_COLOR"):
        return False
    return mode == "always" or stream.isatty()


def plain_view(cfg, handlers=None):
    """A view: a function passing each event to handlers[its type] (PLAIN unless given) with
    the view's state: stdout for the conversation, stderr for diagnostics, what is open."""
    out, err = sys.stdout, sys.stderr
    state = {"out": out, "err": err, "color": color_wanted(cfg, out),
             "err_color": color_wanted(cfg, err), "tty": out.isatty(), "bol": True,
             "block": None, "status": False, "flushed": 0.0, "depth": 0, "cfg": cfg,
             "md": None, "tool": None, "tool_lines": cfg.get("tool_lines") or 0}
    handlers = handlers or PLAIN

    def view(event):
        handler = handlers.get(event["type"])
        if handler:
            handler(state, event)
    return view


def write(state, text, style=None, depth=0, raw=False):
    """Write conversation text (terminal-safe unless raw), behind the rail at a subagent's
    depth, colored; the status line is cleared first."""
    if state["status"]:
        clear_status(state)
    if not raw:
        text = terminal_safe(text)
    if not text:
        return
    if depth != state["depth"]:
        if not state["bol"]:
            text = "\n" + text
        state["depth"] = depth
    if depth:
        pad = "  \u2502 " * depth   # a subagent's output is set apart by a rail
        text = (pad if state["bol"] else "") + text.replace("\n", "\n" + pad)
        if text.endswith(pad):
            text = text[:-len(pad)]
    state["bol"] = text.endswith("\n")
    try:
        state["out"].write(COLORS[style] + text + RESET if style and state["color"] else text)
    except BrokenPipeError:
        stdout_closed()
    except OSError:   # the terminal is gone (a hang-up): the run goes on, unseen
        terminal_gone(state)


def flush_out(state, now=False):
    """Flush the conversation stream: a terminal at once, a pipe at most every FLUSH_EVERY s."""
    clock = time.monotonic()
    if now or state["tty"] or clock - state["flushed"] >= FLUSH_EVERY:
        try:
            state["out"].flush()
        except BrokenPipeError:
            stdout_closed()
        except OSError:
            terminal_gone(state)
        state["flushed"] = clock


def stdout_closed():
    """Send the rest of stdout to /dev/null (so later writes are harmless) and stop the run."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise OutputClosed("")


def terminal_gone(state):
    """Send the rest of the view's output to /dev/null (writes to a hung-up terminal fail)."""
    state["out"], state["err"] = open(os.devnull, "w"), open(os.devnull, "w")


def end_line(state, depth=None):
    """Finish the current output line, if one is open."""
    if not state["bol"]:
        write(state, "\n", depth=state["depth"] if depth is None else depth)


def close_block(state, event):
    """End the reasoning block and the answer line, if open."""
    if state["block"] == "reasoning":
        end_line(state, event["depth"])
        write(state, "--- reasoning end ---\n", "marker", event["depth"])
    elif state["block"] == "text":
        end_line(state, event["depth"])
    state["block"] = None


def show_status(state, event):
    """...requesting... until the model answers (terminal with color only); "... 3 s" after 2 s."""
    if state["color"] and state["bol"] and state["tty"] and not event["depth"]:
        waited = " %d s" % event["seconds"] if event.get("seconds", 0) >= 2 else ""
        state["out"].write("\r" + COLORS["status"] + "...requesting..." + waited + RESET)
        state["out"].flush()
        state["status"] = True


def clear_status(state):
    """Erase the ...requesting... status line (or the rows of a preview: status is their count)."""
    rows, state["status"] = int(state["status"]), False
    state["out"].write("\r\033[K" + "\033[A\033[K" * (rows - 1))


def show_reasoning(state, event):
    """A piece of reasoning, inside the reasoning markers."""
    if state["block"] != "reasoning":
        close_block(state, event)
        end_line(state, event["depth"])
        write(state, "--- reasoning start ---\n", "marker", event["depth"])
        state["block"] = "reasoning"
    write(state, event["text"], "reasoning", event["depth"])
    flush_out(state)


def show_text(state, event):
    """A piece of the answer."""
    if state["block"] != "text":
        close_block(state, event)
        state["block"] = "text"
    write(state, event["text"], None, event["depth"])
    flush_out(state)


def show_reply_end(state, event):
    """A model call ended (answered, failed or interrupted): close what it opened."""
    if state["status"]:
        clear_status(state)
    close_block(state, event)
    flush_out(state, now=True)


def show_discarded(state, event):
    """[discarded: ...], dim, below the output of a reply that failed."""
    end_line(state, event["depth"])
    write(state, "[discarded: the reply above failed and is not kept]\n", "dim", event["depth"])
    flush_out(state, now=True)


def show_tool_call(state, event):
    """[tool call: name(arguments)]"""
    close_block(state, event)
    end_line(state, event["depth"])
    text = "[tool call: %s(%s)]\n" % (event["name"], short_arguments(event))
    write(state, text, "call", event["depth"])
    flush_out(state, now=True)


def short_arguments(event):
    """A tool call's arguments for the trace; a write's long content as its size only."""
    if event["name"] not in ("write", "write_file") or len(event["arguments"]) < 400:
        return event["arguments"]
    try:
        args = json.loads(event["arguments"])
        content = args["content"]
        size = len(content.encode("utf-8", "replace"))
        args["content"] = "<%d bytes, %d lines>" % (size, count_lines(content))
        return json.dumps(args, ensure_ascii=False)
    except (ValueError, KeyError, TypeError, AttributeError):
        return event["arguments"]


def show_tool_result(state, event):
    """[tool result: name] and the result."""
    end_line(state, event["depth"])
    write(state, "[tool result: %s]\n" % event["name"], "result", event["depth"])
    text = event["content"] + ("" if event["content"].endswith("\n") else "\n")
    write(state, text, "body" if event["ok"] else "error", event["depth"])
    flush_out(state, now=True)


def show_line(state, event):
    """A note, a retry or an error: one line on stderr."""
    text = {"note": "{text}", "retry": "[{error}; retry {attempt}/{of} in {wait:g}s]",
            "error": "error: {message}"}[event["type"]].format(**event)
    show_on_stderr(state, text, "dim" if event.get("level") == "info" else "error")


def show_on_stderr(state, text, style):
    """One line on stderr, after finishing the stdout line on a shared terminal."""
    if state["status"]:
        clear_status(state)
    if not state["bol"] and state["tty"]:
        end_line(state)
    flush_out(state, now=True)
    paint = COLORS[style] if state["err_color"] else None
    text = terminal_safe(text)
    try:
        state["err"].write((paint + text + RESET if paint else text) + "\n")
        state["err"].flush()
    except OSError:
        terminal_gone(state)


def show_context(state, event):
    """The token line: [model: prompt (cached) + completion | context: used/window (share)]"""
    if not state["cfg"].get("usage", True):
        return
    about = "~" if event["estimated"] else ""
    cached, prompt = event["cached_tokens"], event["prompt_tokens"]
    split = "" if cached is None else " (%d cached, %d uncached)" % (cached, prompt - cached)
    cost = "" if event["cost"] is None else " | %s$%.4f (session %s$%.4f)" % (
        about, event["cost"], about, event["session_cost"])
    show_on_stderr(state, "[%s: %s%d prompt%s + %s%d completion | context: %s%d/%d (%.1f%%)%s]" % (
        event["model"], about, prompt, split, about, event["completion_tokens"], about, prompt,
        event["window"], event["share"] * 100, cost), "dim")


def show_approval(state, event):
    """[command refused (deny rm *)]: a decision about a call, unless approve=auto made it."""
    if event["rule"] in ("approve=auto", "working folder"):
        return
    what = "command" if event["tool"] == "shell_exec" else event["tool"]
    done = {"run": "run", "always": "run, and from now on", "edit": "changed and run",
            "refuse": "refused"}[event["decision"]]
    who = "by the user" if event["rule"] == "asked" else "(%s)" % event["rule"]
    why = ": " + event["reason"] if event["reason"] else ""
    show_on_stderr(state, "[%s %s %s%s]" % (what, done, who, why), "dim")


def show_turn_end(state, event):
    """The turn ended: finish the line."""
    if not event["depth"]:
        close_block(state, event)
        end_line(state, 0)
        flush_out(state, now=True)


def show_output(state, event):
    """A command's output on stdout (terminal-safe already, and it may carry its own styles)."""
    write(state, event["text"], raw=True)
    flush_out(state, now=True)


def show_problem(state, event):
    """A note unless it is information only: -q shows only the problems."""
    if event["level"] != "info":
        show_line(state, event)


PLAIN = {"request": show_status, "waiting": show_status, "reasoning": show_reasoning,
         "text": show_text, "reply_end": show_reply_end, "discarded": show_discarded,
         "tool_call": show_tool_call, "tool_result": show_tool_result, "approval": show_approval,
         "note": show_line, "retry": show_line, "error": show_line, "context": show_context,
         "turn_end": show_turn_end, "output": show_output}
# -q's view: only the final answer (an output event) on stdout, only the problems on stderr.
QUIET = {"error": show_line, "retry": show_line, "note": show_problem, "output": show_output}


def jsonl_view(stream, cfg):
    """A view writing each event as one JSON line, flushed at once, secrets replaced (those
    of now: /cfg may set a new key)."""
    encode = json.JSONEncoder(ensure_ascii=False).encode

    def view(event):
        line = redact_all(cfg, encode(event))
        try:
            stream.write(line + "\n")
            stream.flush()
        except BrokenPipeError:
            stdout_closed()
    return view


def both(*views):
    """A view passing each event to every view given (None ones left out)."""
    views = [v for v in views if v]

    def view(event):
        for each in views:
            each(event)
    return view


# ----------------------------------------------------------------------------------------
# Config: flags, then model.cfg (key=value: the folder's over the user's), then BANTAM_<KEY>,
# then DEFAULTS; what a folder may set before it is trusted; secrets kept from commands
# ----------------------------------------------------------------------------------------

def bantam_home(*parts):
    """A path under ~/.bantam."""
    return os.path.join(os.path.expanduser("~"), ".bantam", *parts)


def write_private_file(path, data, exclusive=False, keep_mode=False):
    """Replace path with data (text, bytes, or a function that writes to the open file: its
    result is returned) in one step, a temp file fsynced then renamed: never a torn file. A
    new file gets mode 0600; with keep_mode an existing file keeps its mode and a new one
    gets 0666 - umask. With exclusive=True an existing path is not replaced (FileExistsError)."""
    folder, name = os.path.split(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) if keep_mode else None
    except FileNotFoundError:
        mode = None
    temp = os.path.join(folder, ".%s.%s.tmp" % (name, os.urandom(4).hex()))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)   # no CRLF on Windows
    fd = os.open(temp, flags, 0o666 if keep_mode and mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, str):
                data = data.encode("utf-8", "replace")   # a lone surrogate: '?'
            result = data(f) if callable(data) else f.write(data)
            f.flush()
            os.fsync(f.fileno())   # the data is on disk before the name points at it
        if mode is not None:
            os.chmod(temp, mode)
        if exclusive:
            os.link(temp, path)   # fails if path exists, unlike rename
            os.unlink(temp)
        else:
            os.replace(temp, path)
        return result
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def remove_stale_temp_files(folder, age=60):
    """Delete temp files of writes killed mid-way (SIGKILL leaves them behind)."""
    now = time.time()
    for name in os.listdir(folder):
        if name.startswith(".") and name.endswith(".tmp"):
            try:
                if now - os.stat(os.path.join(folder, name)).st_mtime > age:
                    os.unlink(os.path.join(folder, name))
            except OSError:
                pass


INLINE_COMMENT = re.compile(r"\s+#.*$")   # "key=value  # note"


def read_key_values(path):
    """The key=value lines of a config file as {key: (value, 'file:line')} (a later line of a
    key wins); warns on unknown keys."""
    values = {}
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("%s: cannot read config: %s" % (path, getattr(e, "strerror", None) or e))
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = "%s:%d" % (path, number)
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        if not sep or not key:
            raise ConfigError("%s: expected key=value, got %r" % (where, line[:60]))
        if key not in DEFAULTS:
            note({}, "%s: unknown config key %r (ignored)%s"
                 % (where, key, did_you_mean(key, DEFAULTS)), "warning")
            continue
        values[key] = (INLINE_COMMENT.sub("", value).strip(), where)
    return values


def parse_value(key, raw, where):
    """raw parsed by the type of DEFAULTS[key]; a clear ConfigError naming where otherwise."""
    default = DEFAULTS[key]
    try:
        if isinstance(default, bool):
            low = raw.lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError("expected true or false")
            return low in ("true", "1", "yes", "on")
        if isinstance(default, int):
            value = int(raw)
            if value < (1 if key in POSITIVE else 0):
                raise ValueError("expected a whole number " + (
                    "above 0" if key in POSITIVE else "of 0 or more"))
            return value
        if isinstance(default, float):
            value = float(raw)
            if value < 0 or value != value:
                raise ValueError("expected a number of 0 or more")
            return value
        if isinstance(default, list):
            value = [float(part) for part in raw.split(",") if part.strip()]
            if any(v < 0 for v in value):
                raise ValueError("expected seconds of 0 or more")
            return value
        if isinstance(default, dict):
            value = json.loads(raw)
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValueError("expected a JSON object of strings, like {\"api-key\": \"...\"}")
            return value
    except ValueError as e:
        reason = str(e) if str(e).startswith("expected") else "expected a %s" % (
            "whole number" if isinstance(default, int) else
            "comma-separated list of seconds" if isinstance(default, list) else
            "JSON object of strings" if isinstance(default, dict) else "number")
        raise ConfigError("%s: %s: %s, got %r" % (where, key, reason, raw))
    if key == "endpoint":
        return normal_endpoint(raw, where)
    if key == "tools":
        return check_tool_names(raw, where)
    if key in CHOICES and raw.lower() not in CHOICES[key]:
        raise ConfigError("%s: %s: expected one of %s, got %r"
                          % (where, key, ", ".join(CHOICES[key]), raw))
    return raw.lower() if key in CHOICES else raw


# What a folder's own ./model.cfg may set: a cloned repository is not the user. The keys of
# NEEDS_TRUST steer bantam (whom it talks to, what runs, where it writes): they come from the
# user's own settings (flags, --config, ~/.bantam/model.cfg, BANTAM_<KEY>) or a folder the
# user trusts. The leash only tightens across layers: deny is joined from every layer, and
# the strictest value of STRICTER keys wins, unless a flag sets it. The rest is harmless.
NEEDS_TRUST = {   # key: what it decides (the trust question says it)
    "endpoint": "the model you talk to", "api_key": "the account your conversation goes to",
    "headers": "sent to the model's server", "allow": "commands that run without asking",
    "tools": "what the model may use", "bantam_tools_dir": "scripts offered to the model",
    "bantam_skills_dir": "prompts /skill sends", "trace_file": "a file bantam appends to",
    "shell_env_exclude": "what commands may read", "shell_env_keep": "what commands may read"}
LOOSEST_FIRST = {"approve": ("auto", "ask", "deny"), "sandbox": ("off", "workspace", "read-only"),
                 "sandbox_network": (True, False)}
STRICTER = set(LOOSEST_FIRST) | {"max_al_iterations", "max_turn_tokens", "max_turn_seconds",
                                 "max_cost", "max_identical_calls"}   # budgets: 0 is no limit
SECRET_KEYS = ("api_key", "headers")   # shown as ***, kept out of the readline history


def strictness(key, value):
    """How strict a value of a STRICTER key is (higher is stricter)."""
    if key in LOOSEST_FIRST:
        return LOOSEST_FIRST[key].index(value) if value in LOOSEST_FIRST[key] else 0
    return -value if value else float("-inf")


def normal_endpoint(url, where):
    """The endpoint without a trailing / or /chat/completions (bantam adds it: cut, saying so);
    a ConfigError naming where when it is not an http(s) URL with a host and a numeric port."""
    base = url.rstrip("/")
    cut = re.sub(r"/chat/completions/*(?=\?|$)", "", base, count=1)
    if cut != base:
        note({}, "%s: endpoint: bantam adds /chat/completions itself: using %s" % (where, cut),
             "warning")
    if not re.match(r"https?://([^/?#@]*@)?(\[[^]/]*\]|[^]/?#:[]+)(:[0-9]{1,5})?([/?#]|$)", cut):
        raise ConfigError("%s: endpoint: expected an http:// or https:// URL with a host (and "
                          "a port number after a ':'), got %r" % (where, url))
    return cut


def load_config(overrides=None, config_file=None, env=None, trust=None):
    """The configuration, a plain dict: each key of DEFAULTS from the first layer that sets
    it: overrides (the flags; strings are parsed like the file's values), --config FILE
    (else this folder's model.cfg over ~/.bantam/model.cfg), BANTAM_<KEY>, the default.
    trust: None (as remembered, or BANTAM_TRUST=1), True, or False (the folder may only
    tighten): see NEEDS_TRUST. cfg["sources"] says where each came from ("flag",
    "path:line", a variable, "default") and holds the config's other facts: config_file,
    folder_config, untrusted ({key: (value, "path:line")} that need trust), withheld (the
    environment's secrets not sent), base_system_prompt (without add_prompt_extras)."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    for key in overrides:
        if key not in DEFAULTS:
            raise ConfigError("unknown config key %r (the keys: %s)" % (key, ", ".join(DEFAULTS)))
    if config_file and not os.path.isfile(config_file):
        raise ConfigError("%s: no such config file" % config_file)
    own_file, folder_path = config_file or bantam_home("model.cfg"), os.path.abspath("model.cfg")
    if config_file or not os.path.isfile(folder_path) or (
            os.path.isfile(own_file) and os.path.samefile(folder_path, own_file)):
        folder_path = None   # --config, no folder file, or the folder is ~/.bantam itself
    environ = {}
    for key in DEFAULTS:
        for name in (env_name(key), "OPENAI_API_KEY") if key == "api_key" else (env_name(key),):
            if env.get(name):
                environ[key] = (env[name], name)
                break
    layers = [("flag", {key: (value, "flag") for key, value in overrides.items()}),
              ("folder", read_key_values(folder_path) if folder_path else {}),
              ("own", read_key_values(own_file) if os.path.isfile(own_file) else {}),
              ("own", environ)]
    trusted = trust if trust is not None else bool(folder_path) and (
        env.get("BANTAM_TRUST") == "1" or folder_trusted() is True)
    cfg, sources, untrusted = {}, {}, {}
    for key in DEFAULTS:
        found = [(kind, parse_value(key, raw, where) if isinstance(raw, str) else raw, where)
                 for kind, layer in layers for raw, where in [layer.get(key, ("", ""))]
                 if raw not in ("", "-")]   # blank or '-' defers to the next layer
        own = [f for f in found if f[0] != "folder"]
        if found and found[0][0] == "folder" and key in NEEDS_TRUST and not trusted:
            if found[0][1] != (own[0][1] if own else DEFAULTS[key]):
                untrusted[key] = found[0][1:]
            found = own
        elif trust is False and key not in STRICTER and key != "deny":
            found = own   # the user said no: only what tightens the leash is taken from the folder
        if key == "deny" and found:
            cfg[key], sources[key] = ",".join(f[1] for f in found), " + ".join(f[2] for f in found)
        elif found:
            if key in STRICTER and found[0][0] != "flag":   # a flag is the user's explicit choice
                found.sort(key=lambda f: strictness(key, f[1]), reverse=True)
            cfg[key], sources[key] = found[0][1:]
        else:
            cfg[key], sources[key] = DEFAULTS[key], "default"
    headers = env.get("BANTAM_HEADERS")   # secrets in the environment that are not used:
    held = [env.get("BANTAM_API_KEY"), env.get("OPENAI_API_KEY")] + list(   # still never shown
        parse_value("headers", headers, "BANTAM_HEADERS").values() if headers else [])
    unused = [v for v in held if v and v != cfg["api_key"] and v not in cfg["headers"].values()]
    sources.update(config_file=own_file, folder_config=folder_path, untrusted=untrusted,
                   withheld=unused)
    sources["base_system_prompt"], sources["system_prompt"] = load_system_prompt()
    cfg["sources"] = sources
    add_prompt_extras(cfg)
    return cfg


def env_name(key):
    """The variable of a key: BANTAM_<KEY>, or the key itself for one that starts with bantam_
    (BANTAM_TOOLS_DIR, the name the tools folder's scripts are given)."""
    return key.upper() if key.startswith("bantam_") else "BANTAM_" + key.upper()


def load_system_prompt():
    """(text, where): system.txt of the current directory or ~/.bantam, else the built-in
    prompt (the text of this repository's system.txt)."""
    for path in (os.path.join(os.getcwd(), "system.txt"), bantam_home("system.txt")):
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8-sig") as f:
                    return f.read(), path
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError("%s: cannot read system prompt: %s" % (path, e))
    return DEFAULT_SYSTEM, "built-in"


def add_prompt_extras(cfg):
    """Set cfg["system_prompt"]: the base prompt, what this session changes in it (the tools),
    the tools and skills folders, and AGENTS.md (a project's instructions for coding agents)."""
    extras = []
    enabled = cfg["tools"].split(",")
    more = [name for name in ("read", "write") if name in enabled]
    if more:
        extras.append("You also have %s." % " and ".join(FILE_TOOL_LINES[name] for name in more))
    missing = [name for name in ("shell_exec", "run_subagent") if name not in enabled]
    if missing:   # the prompt names both: say which one this session leaves out
        extras.append("In this session %s %s not available."
                      % (" and ".join(missing), "are" if len(missing) > 1 else "is"))
    if cfg["bantam_tools_dir"]:
        extras.append("Extra shell tools can be found at %s" % cfg["bantam_tools_dir"])
    if cfg["bantam_skills_dir"]:
        extras.append("Skills may be discovered and invoked from %s" % cfg["bantam_skills_dir"])
    path = os.path.join(os.getcwd(), "AGENTS.md")
    cfg["sources"]["project_instructions_file"] = None
    if cfg["project_instructions"] and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8-sig", errors="replace") as f:
                extras.append("Project instructions (AGENTS.md of %s):\n\n%s"
                              % (os.getcwd(), f.read().strip()))
            cfg["sources"]["project_instructions_file"] = path
        except OSError as e:
            note(cfg, "warning: cannot read %s: %s" % (path, e.strerror), "warning")
    base = cfg["sources"]["base_system_prompt"]
    cfg["system_prompt"] = base.rstrip("\n") + "".join("\n\n" + e for e in extras) + "\n" \
        if extras else base


FILE_TOOL_LINES = {"read": "read (a file's numbered lines, or a directory's entries)",
                   "write": "write (a whole file, or a splice at a line or byte offset)"}


def folders_file():
    """~/.bantam/folders.json: what the user said about folders (trusted or not)."""
    return bantam_home("folders.json")


def folder_memory():
    """{folder: {"trusted": bool, "sandbox": mode}} as remembered ({} if none)."""
    try:
        with open(folders_file(), encoding="utf-8") as f:
            memory = json.load(f)
        return memory if isinstance(memory, dict) else {}
    except (OSError, ValueError):
        return {}


def folder_trusted():
    """True or False as the user said for this folder (--trust, the REPL), else None."""
    return folder_memory().get(os.getcwd(), {}).get("trusted")


def remember_folder(**facts):
    """Remember facts about the current folder in ~/.bantam/folders.json (mode 0600)."""
    memory = folder_memory()
    memory.setdefault(os.getcwd(), {}).update(facts)
    try:
        write_private_file(folders_file(), json.dumps(memory, indent=1))
    except OSError as e:
        note({}, "warning: cannot remember this folder's settings: %s" % e, "warning")


def trust_folder(cfg, args, interactive, reload):
    """cfg as this folder may steer it: --trust trusts it, the REPL asks once (both remembered;
    no: reload(False), the user's own settings); without a terminal it stops (exit 2)."""
    changes = cfg["sources"]["untrusted"]
    if not changes:
        return cfg
    said = folder_trusted()
    shown = {key: shown_untrusted(key, value) for key, (value, _) in changes.items()}
    what = ", ".join("%s=%s (%s)" % (key, shown[key], NEEDS_TRUST[key]) for key in shown)
    if args.trust:
        remember_folder(trusted=True)
        return reload(True)
    if not interactive:
        own = " (your own server, even on this machine? bantam -e %s)" % shown["endpoint"] \
            if "endpoint" in shown else ""
        raise ConfigError("this folder's model.cfg would change %s: a folder must be trusted "
                          "to steer bantam: bantam --trust (remembered), BANTAM_TRUST=1 (job "
                          "runners), or answer once in the REPL%s" % (what, own))
    boxed = folder_memory().get(os.getcwd(), {}).get("sandbox")
    if said is None:   # y: trust it; s: not trusted, and its commands in the sandbox
        answer = read_answer("This folder's model.cfg would change %s. Trust this folder? "
                             "[y/N/s] (s: no, and its commands in --sandbox workspace) " % what)
        answer = answer.strip().lower()
        said, boxed = answer in ("y", "yes"), "workspace" if answer in ("s", "sandbox") else None
        remember_folder(trusted=said, **({"sandbox": boxed} if boxed else {}))
        if said:
            return reload(True)
    note(cfg, "[this folder is not trusted: your own settings only%s (bantam --trust to trust it)]"
         % (", commands in sandbox=workspace" if boxed else ""), "info")
    cfg = reload(False)
    if boxed and CHOICES["sandbox"].index(cfg["sandbox"]) < CHOICES["sandbox"].index(boxed):
        cfg["sandbox"], cfg["sources"]["sandbox"] = boxed, folders_file()
    return cfg


def shown_untrusted(key, value):
    """A value an untrusted folder sets, as shown: its key as ***, an endpoint's credentials too."""
    return "***" if key in SECRET_KEYS else redact_all({"endpoint": str(value)}, str(value))


def hide_secrets(cfg):
    """Keep bantam's secrets from the commands it runs as the same user (Linux only): every
    secret in the block the kernel shows as /proc/<pid>/environ and cmdline (os.environ is a
    copy) overwritten with '*', and the process made non-dumpable, which closes /proc/<pid>/mem
    and environ to the user's other processes (not to root: see the README)."""
    secrets = [s.encode("utf-8", "surrogateescape") for s in secrets_of(cfg)]
    if not secrets or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        with open("/proc/self/stat", "rb") as f:   # fields 48 to 51: arg_start ... env_end
            fields = f.read().rpartition(b")")[2].split()
        start, end = int(fields[45]), int(fields[48])
        block = ctypes.string_at(start, end - start)
        for secret in secrets:
            at = block.find(secret)
            while at >= 0:
                ctypes.memset(start + at, ord("*"), len(secret))
                at = block.find(secret, at + len(secret))
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE, 0
    except (OSError, ValueError, IndexError, AttributeError):
        pass


# ----------------------------------------------------------------------------------------
# Sessions: one file per conversation, ~/.bantam/sessions/<id>.json, written after the
# prompt, after every model reply and tool result, and when a turn ends. Its first line
# holds everything but the messages, so /list and /continue read only that:
#   {"id": "20260808-190038", "uid": "9f2c...", "cwd": "/home/me/project",
#    "created_at": "...", "saved_at": "...", "summary": "...", "messages": [
#   {"role": "system", "content": "..."},
#   ...
#   ]}
# autosave.json is a link to the latest conversation's file: the spec's resume point.
# ----------------------------------------------------------------------------------------

SESSION_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*$")   # ids and /save names
TIME_ID = re.compile(r"\d{8}-\d{6}(?:-\d+)?$")                  # ids bantam makes up


def session_path(sid, ext=".json"):
    """The file of session sid (ext ".steps": its journal)."""
    return bantam_home("sessions", sid + ext)


def new_session(sid=None):
    """A conversation with no file yet (the first save gives it an id, unless given); uid
    tells conversations apart when names are reused, written lists what its files hold."""
    return {"id": sid, "uid": os.urandom(8).hex(), "created_at": now(), "summary": "",
            "written": []}


def now():
    """The local time as saved in session files."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def session_text(cfg, session, messages):
    """The text of a session file (secrets redacted): the header, then a message a line."""
    lines = message_texts(session.setdefault("json", {}), messages)
    session["written"] = list(messages)   # what the file holds
    session["summary"] = session["summary"] or first_user_text(messages)   # kept through /compact
    session["written_summary"] = session["summary"]
    head = {"id": session["id"], "uid": session["uid"], "cwd": os.getcwd(),
            "created_at": session["created_at"], "saved_at": now(),
            "summary": session["summary"] or "(empty conversation)", "count": len(messages)}
    if session.get("copy_of"):
        head["copy_of"] = session["copy_of"]
    head = json.dumps(head, ensure_ascii=False)[:-1]
    return redact_all(cfg, head + ', "messages": [\n' + ",\n".join(lines) + "\n]}\n")


def save_session(cfg, session, messages, link=True):
    """Write the conversation whole to its own file (the first save claims a time-based id),
    then (with link) point autosave.json at it; a failure is a warning, never fatal."""
    try:
        if not session["id"]:
            session["id"] = claim_session_id(cfg, session, messages)
        elif session.get("journal") or not saved_as_is(session, messages):
            write_private_file(session_path(session["id"]), session_text(cfg, session, messages))
        if session.get("journal"):
            session["journal"] = False
            if os.path.lexists(session_path(session["id"], ".steps")):
                os.unlink(session_path(session["id"], ".steps"))
        if link:
            point_autosave(session["id"])
    except OSError as e:
        note(cfg, "warning: cannot save the conversation: %s" % e, "warning")


def save_step(cfg, session, messages):
    """Save the messages added since the last save by appending them to the journal, <id>.steps,
    a line each ({"n": position, "m": message}), which read_session applies and the next whole
    save replaces; any other change is saved whole. A kill loses at most the step in flight."""
    written = session["written"]
    if not session["id"] or messages[:len(written)] != written or (   # (a C loop, identity first)
            session.get("written_summary") != session["summary"]):
        return save_session(cfg, session, messages, link=not session["id"])
    try:
        fd = os.open(session_path(session["id"], ".steps"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        new = message_texts(session.setdefault("json", {}), messages)[len(written):]
        with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(new, len(written)):
                f.write(redact_all(cfg, '{"n": %d, "m": %s}\n' % (n, line)))
        session["written"], session["journal"] = written + messages[len(written):], True
    except OSError as e:
        note(cfg, "warning: cannot save the conversation: %s" % e, "warning")


def saved_as_is(session, messages):
    """True when the file and its journal hold exactly these messages and this summary."""
    written = session["written"]
    return (len(written) == len(messages) and session.get("written_summary") == session["summary"]
            and all(w is m for w, m in zip(written, messages)))


def claim_session_id(cfg, session, messages):
    """Write the conversation under a new time-based id that no file has yet; the id."""
    base = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        session["id"] = base if n == 1 else "%s-%d" % (base, n)
        try:
            write_private_file(session_path(session["id"]), session_text(cfg, session, messages),
                               exclusive=True)
            prune_sessions(cfg)
            return session["id"]
        except FileExistsError:
            continue
    raise OSError("no free session id for " + base)


def prune_sessions(cfg):
    """Remove the oldest conversations with made-up ids beyond the newest keep_sessions."""
    made = [sid for sid in session_ids() if TIME_ID.match(sid)] if cfg.get("keep_sessions") else []
    for sid in made[cfg.get("keep_sessions"):]:
        if not session_head(sid).get("copy_of"):
            remove_session(sid)


def remove_session(sid):
    """Delete session sid's file, journal and autosave link; the OSError that stopped it."""
    link = session_path("autosave")
    try:
        if os.path.islink(link) and os.readlink(link) == sid + ".json":
            os.unlink(link)
        for path in (session_path(sid), session_path(sid, ".steps")):
            if os.path.lexists(path):
                os.unlink(path)
    except OSError as e:
        return e


def point_autosave(sid):
    """Make autosave.json a link to session sid's file; bantam 1.0's file is kept under an id."""
    link = session_path("autosave")
    if os.path.isfile(link) and not os.path.islink(link):
        made = time.strftime("%Y%m%d-%H%M%S", time.localtime(os.stat(link).st_mtime))
        os.replace(link, session_path("autosave-" + made))
    tmp = "%s.%d.tmp" % (bantam_home("sessions", ".autosave"), os.getpid())
    try:
        os.symlink(sid + ".json", tmp)
        os.replace(tmp, link)
    except OSError:   # no symbolic links here: a copy
        with open(session_path(sid), encoding="utf-8") as f:
            write_private_file(link, f.read())
    remove_stale_temp_files(bantam_home("sessions"))


def step_saver(convo):
    """A view that saves convo's conversation at every message, and keeps the turn's usage."""
    def view(event):
        if event["type"] == "usage":   # every call of the turn costs, subagents' too
            convo["cost"] = convo.get("cost", 0.0) + (event["cost"] or 0.0)
        if event["depth"]:
            return
        if event["type"] == "message":
            save_step(convo["cfg"], convo["session"], convo["messages"])
        elif event["type"] == "usage" and not event["quiet"]:
            convo["usage"] = event
        elif event["type"] == "turn_end":
            convo["status"] = event["status"]
    return view


def read_session(sid):
    """The session dict stored under sid; BantamError if missing, not JSON, or the wrong shape."""
    path = session_path(sid)
    try:
        with open(path, encoding="utf-8") as f:
            session = json.load(f)
    except FileNotFoundError:
        raise BantamError("no session %r" % sid)
    except (OSError, UnicodeDecodeError) as e:
        raise BantamError("cannot read session %r: %s" % (sid, e))
    except ValueError as e:
        raise BantamError("session %r is not valid JSON (%s); the file is left as it is" % (sid, e))
    messages = session.get("messages") if isinstance(session, dict) else None
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool")
            for m in messages)):
        raise BantamError("session %r is not a bantam session (expected an object with a "
                          "'messages' list of chat messages); the file is left as it is" % sid)
    apply_steps(sid, messages)
    return session


def apply_steps(sid, messages):
    """Append the steps a killed run left in the journal to messages, while they continue it."""
    try:
        with open(session_path(sid, ".steps"), encoding="utf-8") as f:
            for line in f:
                try:
                    step = json.loads(line)
                except ValueError:
                    break
                if step.get("n") == len(messages) and isinstance(step.get("m"), dict):
                    messages.append(step["m"])
    except (OSError, UnicodeDecodeError):
        pass


def session_head(sid):
    """What the first line of session sid says ({} when unreadable; bantam 1.0's: read whole)."""
    try:
        with open(session_path(sid), encoding="utf-8") as f:
            line = f.readline()
            at = line.rfind(', "messages": [')
            if at > 0 and line.endswith("[\n"):
                return json.loads(line[:at] + "}")
            f.seek(0)
            session = json.load(f)
            return dict(session, messages=None, count=len(session.get("messages") or ()))
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return {}


def session_ids():
    """The ids of all saved sessions, newest file first (autosave not among them)."""
    try:
        names = [n for n in os.listdir(bantam_home("sessions"))
                 if n.endswith(".json") and not n.startswith(".") and n != "autosave.json"]
    except OSError:
        return []
    names.sort(key=lambda n: modified(bantam_home("sessions", n)), reverse=True)
    return [n[:-5] for n in names]


def modified(path):
    """When the file at path last changed (seconds since the epoch; 0 when unreadable)."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0


def ago(when):
    """How long ago a time (seconds since the epoch) was, said briefly: '3 h ago'."""
    seconds = time.time() - when
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return "%d %s ago" % (seconds // size, unit)
    return "just now"


def resolve_session(prefix):
    """The session id that is prefix, or the only one starting with it (autosave: its link's)."""
    if prefix == "autosave":
        link = session_path("autosave")
        if os.path.islink(link):
            return os.path.basename(os.readlink(link))[:-5]
        if os.path.isfile(link):
            return "autosave"
    ids = session_ids()
    if prefix in ids:
        return prefix
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigError("no session matches %r (see /list)" % prefix)
    raise ConfigError("%r matches %d sessions: %s" % (prefix, len(matches),
                                                      ", ".join(sorted(matches)[:5])))


def latest_in_folder():
    """The id of the newest conversation that ran in the current folder, or None."""
    here = os.getcwd()
    return next((sid for sid in session_ids() if session_head(sid).get("cwd") == here), None)


def load_session(sid):
    """(session record, repaired messages) to continue conversation sid in its own file."""
    sid = resolve_session(sid)
    stored = read_session(sid)
    session = new_session(None if sid == "autosave" else sid)   # a 1.0 autosave: continued anew
    created = stored.get("created_at") or stored.get("saved_at") or session["created_at"]
    session.update(uid=stored.get("uid") or session["uid"], summary=stored.get("summary") or "",
                   changed=modified(session_path(sid)),   # before it is saved again: how old it is
                   created_at=created)
    if session["id"]:   # what its files hold already (a repaired message is saved anew)
        session.update(written=list(stored["messages"]), written_summary=session["summary"],
                       journal=os.path.exists(session_path(session["id"], ".steps")))
    return session, repair_conversation(stored["messages"])


def first_user_text(messages, width=60):
    """The first user prompt's first line, shortened: a conversation's title ("" when none)."""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            lines = [line for line in m["content"].splitlines() if line.strip()]
            text = " ".join(lines[0].split()) if lines else ""
            return text if len(text) <= width else text[:width - 3] + "..."
    return ""


def repair_conversation(messages):
    """A loaded conversation made valid: no empty assistant message, every call answered,
    no two user messages in a row."""
    fixed = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant" and not str(m.get("content") or "").strip() \
                and not m.get("tool_calls"):
            continue
        if role == "user" and fixed and fixed[-1].get("role") == "user":
            append_user(fixed, m.get("content"))
            continue
        fixed.append(m)
        if role == "assistant" and m.get("tool_calls"):
            answered = {x.get("tool_call_id") for x in messages[i + 1:] if x.get("role") == "tool"}
            for call in m["tool_calls"]:
                if call.get("id") not in answered:
                    fixed.append(tool_message(call.get("id"),
                                              INTERRUPTED + " (no result was recorded)"))
    messages[:] = fixed
    return messages


def append_user(messages, content):
    """Append a user message; after a user message (a compaction summary, an unanswered
    prompt) the content joins it instead, as servers with strict role order require."""
    last = messages[-1] if messages else {}
    if last.get("role") != "user":
        messages.append({"role": "user", "content": content})
    elif isinstance(last.get("content"), str) and isinstance(content, str):
        messages[-1] = dict(last, content=last["content"] + "\n\n" + content)
    else:   # content parts (text, images): one list of parts
        parts = [c if isinstance(c, list) else [{"type": "text", "text": str(c or "")}]
                 for c in (last.get("content"), content)]
        messages[-1] = dict(last, content=parts[0] + parts[1])
    return messages


# ----------------------------------------------------------------------------------------
# The HTTP client: one keep-alive connection per endpoint, retries, SSE
# ----------------------------------------------------------------------------------------

def proxy_for(scheme, host):
    """The proxy URL for host from HTTPS_PROXY / HTTP_PROXY, unless NO_PROXY matches."""
    env = os.environ
    proxy = env.get(scheme + "_proxy") or env.get(scheme.upper() + "_PROXY")
    if not proxy or no_proxy(host):
        return None
    return proxy if "://" in proxy else "http://" + proxy


def no_proxy(host):
    """True when NO_PROXY names host (or a domain above it, or is *)."""
    env = os.environ
    for rule in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(","):
        rule = rule.strip().lower().lstrip(".").split(":")[0]
        if rule == "*" or (rule and (host == rule or host.endswith("." + rule))):
            return True
    return False


def socks_proxy_for(host):
    """The SOCKS_PROXY (else socks_proxy) URL for host, unless NO_PROXY matches it."""
    proxy = os.environ.get("SOCKS_PROXY", "").strip() or os.environ.get("socks_proxy", "").strip()
    return proxy if proxy and not no_proxy(host) else None


def default_port(url):
    """The port of a urlsplit() URL: its own, else 443 for https and 80 for http."""
    return url.port or (443 if url.scheme == "https" else 80)


# SOCKS5 (RFC 1928, with RFC 1929 user/password): SOCKS_PROXY=socks5://[user:pass@]host:port
# (socks5h:// too). Host names are always resolved by the proxy: it may reach names this
# machine cannot resolve, and no lookup here tells the local network where we connect. It is
# tried before HTTP(S)_PROXY, and NO_PROXY applies to it as to them.

# RFC 1928 section 6: the REP field of a CONNECT reply
SOCKS_REPLIES = {1: "general SOCKS server failure", 2: "connection not allowed by ruleset",
                 3: "network unreachable", 4: "host unreachable", 5: "connection refused",
                 6: "TTL expired", 7: "command not supported", 8: "address type not supported"}
SOCKS_TRANSIENT = {1, 3, 4, 5, 6}   # the target or the route may come back; 2, 7, 8 will not


class SocksError(OSError):
    """A SOCKS5 failure, with a one-line message; .retry says whether waiting may help."""

    def __init__(self, message, retry=False):
        OSError.__init__(self, message)
        self.retry = retry


def parse_socks_url(url):
    """(host, port, user, password) of socks5[h]://[user:pass@]host[:port] or a bare
    host:port; user and password percent-decoded, None without credentials; port 1080."""
    from urllib.parse import unquote, urlsplit
    parts = urlsplit(url if "://" in url else "socks5://" + url)
    if parts.scheme.lower() not in ("socks5", "socks5h"):
        raise SocksError("unsupported proxy scheme %r (use socks5:// or socks5h://)"
                         % parts.scheme)
    try:
        port = parts.port or 1080
    except ValueError:   # the message never shows the URL: it may hold a password
        raise SocksError("bad port in the SOCKS proxy address") from None
    if not parts.hostname:
        raise SocksError("no host in the SOCKS proxy address")
    user, password = parts.username, parts.password
    if not user and not password:
        return parts.hostname, port, None, None
    return parts.hostname, port, unquote(user or ""), unquote(password or "")


def socks5_connect(proxy_url, host, port, timeout):
    """A socket connected to host:port through the SOCKS5 proxy at proxy_url; host names are
    resolved by the proxy (socks5:// behaves as socks5h://). Failures raise SocksError."""
    import socket
    import struct
    proxy_host, proxy_port, user, password = parse_socks_url(proxy_url)
    where = "SOCKS5 proxy %s:%d" % (
        "[%s]" % proxy_host if ":" in proxy_host else proxy_host, proxy_port)
    if not 0 < port < 65536:
        raise SocksError("bad port %r for %s" % (port, host))
    try:   # timeout may be socket._GLOBAL_DEFAULT_TIMEOUT, as http.client passes it
        sock = socket.create_connection((proxy_host, proxy_port), timeout)
    except OSError as e:
        raise SocksError("cannot connect to %s: %s" % (where, e), retry=True) from e
    stage = "greeting"   # offer one method: 0 (no authentication) or 2 (username/password)
    try:
        offer = 0 if user is None else 2
        sock.sendall(bytes([5, 1, offer]))   # VER=05 NMETHODS=01 METHODS: 05 01 00 or 05 01 02
        version, method = socks_recv(sock, 2, where, stage)   # VER=05 METHOD (FF: none)
        if version != 5:
            raise SocksError("%s is not a SOCKS5 proxy (it answered version %d)" % (where, version))
        if method == 0xFF:
            raise SocksError("%s: no acceptable authentication method (we offered %s)" % (
                where, "username/password" if offer else "no authentication; it may need "
                       "user:password@ in the proxy address"))
        if method != offer:
            raise SocksError("%s chose authentication method %d, which we did not offer"
                             % (where, method))
        if method == 2:   # RFC 1929: VER=01 ULEN UNAME PLEN PASSWD, e.g. 01 03 'bob' 02 'pw'
            stage = "authentication"
            name, secret = user.encode("utf-8"), password.encode("utf-8")
            if len(name) > 255 or len(secret) > 255:
                raise SocksError("SOCKS5 username and password must be at most 255 bytes each")
            sock.sendall(bytes([1, len(name)]) + name + bytes([len(secret)]) + secret)
            if socks_recv(sock, 2, where, stage)[1] != 0:   # VER=01 STATUS (00: success)
                raise SocksError("%s rejected the username/password (authentication failed)"
                                 % where)
        stage = "CONNECT"   # VER=05 CMD=01 RSV=00 ATYP DST.ADDR DST.PORT (2 bytes, big-endian)
        sock.sendall(b"\x05\x01\x00" + socks_address(host) + struct.pack(">H", port))
        version, rep, _, atyp = socks_recv(sock, 4, where, stage)   # VER REP RSV ATYP
        if version != 5:
            raise SocksError("%s answered CONNECT with version %d" % (where, version))
        if rep != 0:
            why = SOCKS_REPLIES.get(rep, "unknown error")
            raise SocksError("%s could not connect to %s:%d: %s (REP %d)" % (
                where, host, port, why, rep), retry=rep in SOCKS_TRANSIENT)
        if atyp == 3:   # 03 LEN NAME
            size = socks_recv(sock, 1, where, stage)[0]
        elif atyp in (1, 4):   # 01: 4-byte IPv4, 04: 16-byte IPv6
            size = 4 if atyp == 1 else 16
        else:
            raise SocksError("%s answered CONNECT with address type %d" % (where, atyp))
        socks_recv(sock, size + 2, where, stage)   # BND.ADDR BND.PORT: unused, but not HTTP
        return sock
    except BaseException as e:
        sock.close()
        if isinstance(e, OSError) and not isinstance(e, SocksError):   # a timeout, a reset
            raise SocksError("%s failed during %s: %s" % (where, stage, e), retry=True) from e
        raise


def socks_address(host):
    """ATYP + DST.ADDR for host: 01 + 4 bytes, 04 + 16 bytes, or 03 LEN name (not resolved)."""
    import ipaddress
    host = host.strip("[]")   # a URL's [::1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:   # a name in another script goes in its IDNA form (xn--...)
            name = host.encode("ascii" if host.isascii() else "idna")
        except UnicodeError:
            raise SocksError("bad host name %r" % host) from None
        if not 0 < len(name) < 256:
            raise SocksError("host name must be 1 to 255 bytes for SOCKS5: %r" % host)
        return bytes([3, len(name)]) + name
    return bytes([1 if ip.version == 4 else 4]) + ip.packed


def socks_recv(sock, size, where, stage):
    """Exactly size bytes from sock; SocksError when the proxy hangs up first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SocksError("%s closed the connection during %s" % (where, stage), retry=True)
        data += chunk
    return data


def open_connection(endpoint, timeout):
    """A new http.client connection to the endpoint's host, through a proxy if one is set."""
    import http.client
    from urllib.parse import urlsplit, unquote
    url = urlsplit(endpoint)
    socks = socks_proxy_for(url.hostname)
    proxy = None if socks else proxy_for(url.scheme, url.hostname)
    via = urlsplit(proxy) if proxy else url   # where the socket goes
    if url.scheme == "https":
        import ssl
        conn = http.client.HTTPSConnection(via.hostname, default_port(via), timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(via.hostname, default_port(via), timeout=timeout)
    if proxy:
        headers = {}
        if via.username:
            import base64
            login = "%s:%s" % (unquote(via.username), unquote(via.password or ""))
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
        conn.set_tunnel(url.hostname, default_port(url), headers=headers)
    if socks:   # every (re)connect goes through the proxy; http.client still does the TLS
        conn._create_connection = lambda address, timeout, source=None: socks5_connect(
            socks, address[0], address[1], timeout)
    return conn


THREAD = _thread._local()   # what belongs to one thread, and goes away with it


def connections():
    """This thread's connections, by endpoint: {"conn", "response", "sock"} each (a thread
    has its own: two threads never share one)."""
    return THREAD.__dict__.setdefault("connections", {})


def drop_connection(cfg):
    """Close the endpoint's connection (after an error or an abandoned reply)."""
    entry = connections().pop(cfg["endpoint"], None)
    if entry:
        entry["conn"].close()


def http_request(cfg, method, path, body=None, wait=None, root=False, ready=None):
    """Send one request on the endpoint's persistent connection and return the response,
    allowing `wait` seconds (default: timeout) for its first byte. A connection the server
    closed while idle is reopened once, without counting a retry. A connection whose last
    reply was not read to its end is replaced, never reused: http.client would send the
    request and then refuse to read the answer. The path is under the endpoint (with the
    endpoint's query string, e.g. Azure's ?api-version=...), or under the server's root.
    ready(sock), if given, is called once the request is sent, before the reply is read."""
    import http.client
    from urllib.parse import urlsplit
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json, text/event-stream"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    extra = {k.lower() for k in cfg["headers"]}
    if cfg["api_key"] and not extra & {"authorization", "api-key"}:   # (Azure's: api-key)
        headers["Authorization"] = "Bearer " + cfg["api_key"]
    headers = {k: v for k, v in headers.items() if k.lower() not in extra}
    headers.update(cfg["headers"])
    url = urlsplit(cfg["endpoint"])
    query = "?" + url.query if url.query else ""
    target = path if root else url.path.rstrip("/") + path + query
    pool = connections()
    for attempt in (1, 2):
        entry = pool.get(cfg["endpoint"])
        if entry and entry["response"] and not entry["response"].isclosed():
            drop_connection(cfg)
            entry = None
        reused = entry is not None
        if not reused:
            conn = open_connection(cfg["endpoint"], cfg["timeout"])
            entry = pool[cfg["endpoint"]] = {"conn": conn, "response": None, "sock": None}
        conn = entry["conn"]
        try:
            conn.request(method, target, body, headers)
            entry["sock"] = conn.sock   # kept: after a close-delimited reply conn.sock is None
            conn.sock.settimeout(wait or cfg["timeout"])
            if ready:
                ready(conn.sock)
            entry["response"] = conn.getresponse()
            return entry["response"]
        except (ConnectionError, http.client.BadStatusLine):
            drop_connection(cfg)
            if not reused or attempt == 2:
                raise
        except BaseException:
            drop_connection(cfg)
            raise


def set_read_timeout(cfg, seconds):
    """Allow `seconds` between reads of the reply in progress."""
    entry = connections().get(cfg["endpoint"])
    if entry and entry["sock"]:
        entry["sock"].settimeout(seconds)


def release(cfg, response):
    """Finish with a reply so its connection can carry the next request: read what is left
    of its body (bytes after [DONE], a body whose Content-Length is used up but not yet
    marked read), for at most DRAIN_REPLY seconds; otherwise close the connection."""
    if response.isclosed():
        return
    if response.will_close:   # close-delimited or `Connection: close`: nothing to reuse
        drop_connection(cfg)
        return
    try:
        set_read_timeout(cfg, DRAIN_REPLY)
        deadline = time.monotonic() + DRAIN_REPLY
        while not response.isclosed() and time.monotonic() < deadline:
            if not response.read(65536):   # read(), unlike read1(), marks the end on 3.8-3.12
                break
        set_read_timeout(cfg, cfg["timeout"])
    except Exception:
        pass
    if not response.isclosed():
        drop_connection(cfg)


def request_body(cfg, messages, tools, stream):
    """The JSON body of a chat completion request, with the fixes this server's errors taught
    (see learned_fix): without the fields it does not support, streamed if it must be..."""
    fixes = {f for e, m, f in LEARNED["fixes"] if (e, m) == (cfg["endpoint"], cfg["model"])}
    stream = stream or "stream" in fixes
    body = {"model": cfg["model"], "messages": messages, "temperature": cfg["temperature"],
            "stream": stream}
    if tools:
        body["tools"] = tool_definitions(cfg)
    if stream:
        body["stream_options"] = {"include_usage": True}
    if cfg["reasoning_effort"]:
        body["reasoning_effort"] = cfg["reasoning_effort"]
    for field in {"drop " + f for f in body} & fixes:
        del body[field[5:]]
    if fixes - {"stream"} - {"drop " + f for f in OPTIONAL_FIELDS}:   # fixes of the messages
        body["messages"] = [fixed_message(m, fixes) for m in messages]
    return body


def fixed_message(message, fixes):
    """A message as this server takes it, the learned fixes applied (the same dict when none
    changes it: the stored conversation stays as it was)."""
    fixed = {k: v for k, v in message.items() if "drop " + k not in fixes}
    if message.get("tool_calls") and message.get("role") == "assistant":
        if "reasoning_content" in fixes:
            fixed.setdefault("reasoning_content", "")
        if "null_content" in fixes and not str(fixed.get("content") or "").strip():
            fixed["content"] = None
    return message if fixed == message else fixed


# Fixes a server's error teaches, kept for that endpoint and model: the error, and the line
# that says so (none: nothing the user sees changes). Requests change in request_body.
FIXES = {
    # DashScope's Qwen3 thinking models answer only streamed requests (a summary's too)
    "stream": (r"must be set to false for non-streaming", None),
    # Kimi K2.5+ with thinking on, DeepSeek V4: the field on every assistant message with
    # tool calls, even one where the model wrote no reasoning; Groq and Cerebras reject it
    "reasoning_content": (
        r"reasoning_content is missing|reasoning_content`? in the thinking mode",
        "the server wants reasoning_content on tool call messages: sending it"),
    # Claude behind OpenAI-compatible gateways (Databricks, Requesty, one-api): content ""
    # beside tool calls becomes an empty text block, which it rejects; null is no block
    "null_content": (
        r"text content blocks must (?:be non-empty|contain non-whitespace)",
        "the server rejects empty text beside tool calls: sending content null there")}


def learned_fix(error, body):
    """The fix a refused request's ApiError asks for (a refused field to leave out, or one
    of FIXES) and the line saying so, or (None, None)."""
    text = error.body or str(error)
    if error.kind not in ("bad_request", "empty_assistant"):
        return None, None
    field = unsupported_field(text, body)
    if field:
        say = "the server does not support %r for this model: leaving it out" % field
        return "drop " + field, say
    return next(((fix, say) for fix, (pattern, say) in FIXES.items()
                 if re.search(pattern, text, re.I)), (None, None))


OPTIONAL_FIELDS = ("temperature", "reasoning_effort", "stream_options")
MESSAGE_EXTRAS = ("reasoning_content", "reasoning_details", "extra_content")
# How servers refuse a field: OpenAI {"param": "temperature", "code": "unsupported_value"},
# "Unsupported parameter: 'reasoning_effort' is not supported with this model."; Mistral
# {"message": {"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"]}]}};
# Anthropic "`temperature` is deprecated for this model"; Groq "property 'x' is unsupported".
REFUSED_FIELD = re.compile(r"unsupported|not supported|does not support|deprecated"
                           r"|extra_forbidden|not permitted|unrecognized"
                           r"|unknown (?:field|parameter|name)|not allowed", re.I)


def unsupported_field(text, body):
    """The optional field of body (or of its messages) that an error says the server does
    not support, or None."""
    sent = [f for f in OPTIONAL_FIELDS if f in body]
    sent += [f for f in MESSAGE_EXTRAS if any(f in m for m in body["messages"])]
    if not sent or not REFUSED_FIELD.search(text):
        return None
    try:
        error = json.loads(text)
        error = error.get("error", error) if isinstance(error, dict) else {}
        param = str(error.get("param") or "").split(".")[-1].split("]")[-1]
        message = error.get("message")
        detail = message.get("detail") if isinstance(message, dict) else None
        places = [str(d.get("loc", [""])[-1]) for d in detail or () if isinstance(d, dict)]
    except (ValueError, AttributeError, IndexError, TypeError):
        param, places = "", []
    for field in sent:
        if field == param or field in places:
            return field
    # in any case style: xAI's {"error": "Model grok-4 does not support parameter
    # reasoningEffort."}
    named = [f for f in sent if re.search(r"\b%s\b" % f.replace("_", "[_-]?"), text, re.I)]
    return named[0] if named else None


def chat(cfg, messages, tools=True, quiet=False, nudge=None):
    """The model's reply to messages as an assistant message dict, shown as it arrives
    (as events) unless quiet. Retries per the backoff ladder; raises ApiError when it
    cannot get one. Emits a "usage" event per reply (estimated when the server sent none).
    nudge: a line of bantam's for the model, sent after the messages but not stored."""
    if (cfg.get("run") or {}).get("replay"):   # --replay: the recorded reply, not the network
        return replayed_reply(cfg, quiet)
    stream = cfg["stream"] and not quiet
    delays, retries = cfg["backoff"], 0
    while True:
        outgoing = append_user(messages[:], nudge) if nudge else messages   # (nudge: not stored)
        body = request_body(cfg, outgoing, tools, stream)
        try:
            started = time.monotonic()
            message, usage, first, sent = exchange(cfg, body, quiet)
            emit(cfg, "reply", message=message, quiet=quiet)
            report_call(cfg, sent, message, usage, started, first, quiet)
            return message
        except ApiError as e:
            if e.kind == "overflow":
                learn_window(cfg, e.body or str(e))
            count = len(messages)   # strict servers refuse an assistant message with nothing in it
            if e.kind == "empty_assistant" and len(repair_conversation(messages)) < count:
                continue
            fix, say = learned_fix(e, body)
            learned = (cfg["endpoint"], cfg["model"], fix)
            if fix and learned not in LEARNED["fixes"]:   # ask again, fixed (and from now on)
                LEARNED["fixes"].add(learned)
                if say:
                    note(cfg, "[%s from now on]" % say, "info")
                continue
            if e.body == "empty stream":   # some servers only say what went wrong (an overflow...)
                stream = False              # in a reply that is not streamed: ask that way
            if e.kind != "retry" or retries >= len(delays):
                if e.kind == "retry" and retries:
                    raise ApiError("%s (gave up after %d %s)" % (
                        e, retries, "retry" if retries == 1 else "retries"), "retry", e.status)
                raise e
            wait = max(delays[retries], e.wait or 0)
            if wait > MAX_SERVER_WAIT:
                raise ApiError("%s; the server asks to wait %.0f s, so giving up (try again later)"
                               % (e, wait), "retry", e.status)
            retries += 1
            emit(cfg, "retry", error=redact_all(cfg, str(e)), attempt=retries, of=len(delays),
                 wait=wait)
            time.sleep(wait)


def report_call(cfg, sent, message, usage, started, first, quiet):
    """Emit the "usage" event of one model call: the server's figures (else estimated from
    the sizes sent and received), with its timing (seconds in all, to the first output)."""
    estimated = not isinstance(usage, dict)
    if estimated:
        usage = {"prompt_tokens": estimate_tokens(sent),
                 "completion_tokens": estimate_tokens(text_size([message]))}
    prompt, cached, completion = usage_numbers(usage)
    cost = call_cost(cfg, prompt, cached, completion)
    spend(cfg, prompt + completion, cost)
    emit(cfg, "usage", model=cfg["model"], prompt_tokens=prompt, cached_tokens=cached,
         completion_tokens=completion, estimated=estimated, quiet=quiet, cost=cost,
         seconds=round(time.monotonic() - started, 3),
         first_output=round(first - started, 3) if first else None)


def exchange(cfg, body, quiet):
    """One request and its reply: (message, usage or None, time of the first output or
    None, bytes sent). Network faults become retryable ApiErrors."""
    import http.client
    reply, response = new_reply(cfg, quiet), None
    try:
        if not quiet:
            emit(cfg, "request", model=cfg["model"], messages=len(body["messages"]),
                 stream=body["stream"])
        # (a summary's request is trimmed in place: never from the cache of encoded messages)
        payload = (json.dumps(body) if quiet else encode_body(cfg, body)).encode()
        reply["asked"] = time.monotonic()
        response = http_request(cfg, "POST", "/chat/completions", payload,
                                wait=cfg["first_byte_timeout"],
                                ready=lambda sock: await_reply(cfg, reply, sock))
        if response.status != 200:
            raise error_from_response(cfg, response)
        kind = response.getheader("Content-Type") or ""
        if "event-stream" in kind or (body["stream"] and "json" not in kind):
            read_stream(cfg, response, reply)
        else:   # not streamed, or a server that ignores stream=true
            data = response.read()
            try:
                whole = DECODE_JSON(data.decode("utf-8", "replace").strip())[0]
                merge_chunk(reply, whole, whole=True)
            except ValueError:
                raise ApiError("the server sent a reply that is not JSON: %r"
                               % page_text(data[:4000].decode("utf-8", "replace"))[:200], "retry")
            reply["first"] = time.monotonic()
        release(cfg, response)
        message = finish_reply(reply)
        end_reply(cfg, reply)
        if reply["finish"] in CUT_REPLY and not quiet:
            note(cfg, CUT_REPLY[reply["finish"]], "warning")
        say_cuts(cfg, reply)
        return message, reply["usage"], reply["first"], len(payload)
    except (OSError, http.client.HTTPException) as e:
        drop_connection(cfg)
        output = bool(reply["content"] or reply["reasoning"] or reply["calls"])
        raise discard(cfg, reply, network_error(e, cfg, got_output=output))
    except ApiError as e:
        if response is not None and not response.isclosed():
            drop_connection(cfg)   # the rest of the reply is unread: the connection is unusable
        raise discard(cfg, reply, e)
    except BaseException:   # Ctrl+C, a closed stdout, SIGTERM: the reply is abandoned
        drop_connection(cfg)
        if "turn" in (cfg.get("run") or {}) and not quiet:   # shown of it: keep_interrupted_text
            cfg["run"]["partial_reply"] = "".join(reply["content"])
        raise
    finally:
        end_reply(cfg, reply)


def discard(cfg, reply, error):
    """End a failed reply and return its error; what of it was shown is marked as not kept
    (a "discarded" event), there where it was shown."""
    shown = not reply["quiet"] and (reply["content"] or reply["reasoning"])
    end_reply(cfg, reply)
    if shown:
        emit(cfg, "discarded", error=redact_all(cfg, str(error)))
    return error


def encode_body(cfg, body):
    """json.dumps(body), byte for byte, with each message encoded once per run: a long turn
    resends the whole conversation at every step, and re-encoding it all made that quadratic."""
    parts = message_texts(cfg.get("run", {}).setdefault("wire", {}), body["messages"], True)
    head = json.dumps(dict(body, messages=0))   # keys in order; no string holds '"messages": 0'
    return head.replace('"messages": 0', '"messages": [%s]' % ", ".join(parts), 1)


def message_texts(cache, messages, ascii=False):
    """The JSON text of each message, made once while it stays in the list (a stored message
    is never changed in place): ascii as json.dumps writes it (the wire), else with UTF-8 kept
    (the session file). cache, {id: (message, text)}, is left holding these messages only."""
    known = {}
    for m in messages:
        entry = cache.get(id(m))
        known[id(m)] = entry if entry and entry[0] is m else (m, json.dumps(m, ensure_ascii=ascii))
    cache.clear()
    cache.update(known)
    return [known[id(m)][1] for m in messages]


CUT_REPLY = {   # finish reasons that mean the reply is not whole
    "length": "[the reply was cut: it reached the output token limit (finish_reason: length)]",
    "content_filter": "[the reply was cut by the provider's content filter "
                      "(finish_reason: content_filter)]"}


def network_error(e, cfg, got_output=False):
    """The ApiError for a failed connection or read: retried when waiting may help (refused
    while a local server starts, resets, timeouts), fatal when it cannot (a certificate that
    is not trusted, a host name that does not exist, a proxy that says no)."""
    import socket
    from urllib.parse import urlsplit
    url = urlsplit(cfg["endpoint"])
    proxy = proxy_for(url.scheme, url.hostname)
    via = urlsplit(proxy) if proxy else url
    host = via.hostname   # (a proxy's URL may hold a password: never print it)
    if isinstance(e, SocksError):   # its message names the proxy, never its password
        return ApiError("network error: %s (SOCKS_PROXY)" % e, "retry" if e.retry else "fatal")
    ssl = sys.modules.get("ssl")
    if ssl and isinstance(e, ssl.SSLCertVerificationError):
        return ApiError("TLS error: the certificate of %s is not trusted (%s); to trust a private "
                        "or company CA, point SSL_CERT_FILE at its PEM file"
                        % (url.hostname, getattr(e, "verify_message", "") or e), "fatal")
    if isinstance(e, socket.gaierror):
        if e.errno == socket.EAI_AGAIN:
            return ApiError("network error: looking up %s failed for now (%s)" % (
                host, e.strerror), "retry")
        return ApiError("network error: the host name %s does not resolve (%s); check %s"
                        % (host, e.strerror, "the proxy setting" if proxy else "endpoint"), "fatal")
    if re.match(r"Tunnel connection failed: 4", str(e)):   # the proxy said no (407...)
        return ApiError("network error: %s" % e, "fatal")
    if isinstance(e, socket.timeout) or "timed out" in str(e):
        if got_output:
            return ApiError("network error: the reply stalled for %g s (timeout)"
                            % cfg["timeout"], "retry")
        return ApiError("network error: no answer within %g s (first_byte_timeout)"
                        % cfg["first_byte_timeout"], "retry")
    if isinstance(e, ConnectionRefusedError):
        if proxy:
            return ApiError("network error: connection refused by the proxy %s:%s (%s_PROXY)" % (
                host, default_port(via), url.scheme.upper()), "retry")
        return ApiError("network error: connection refused by %s" % cfg["endpoint"], "retry")
    return ApiError("network error: %s" % (str(e) or type(e).__name__), "retry")


def error_from_response(cfg, response):
    """The ApiError for a non-200 response: its kind says whether to retry, compact or stop."""
    status = response.status
    data = response.read(1 << 20)
    if not response.isclosed():
        drop_connection(cfg)
    text = data.decode("utf-8", "replace")
    message = page_text(text)[:300] or response.reason
    try:
        error = json.loads(text)
        error = error.get("error", error) if isinstance(error, dict) else error
        if isinstance(error, list) and error:   # some servers send [{"error": {...}}]
            error = error[0].get("error", error[0]) if isinstance(error[0], dict) else error[0]
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
        elif isinstance(error, str):
            message = error
    except (ValueError, AttributeError):
        pass
    message = " ".join(message.split())
    headline = "HTTP %d: %s" % (status, message)
    kind, hint = "fatal", ""
    if status == 413 or (status in (400, 422, 500) and OVERFLOW_PATTERNS.search(text)):
        kind = "overflow"
    elif status == 400 and EMPTY_ASSISTANT_PATTERNS.search(text):
        kind = "empty_assistant"
    elif status == 402 or (status in (400, 403, 429) and QUOTA_PATTERNS.search(text)):
        hint = " (quota, credits or billing exhausted: not retried)"
    elif status in RETRY_STATUSES or status >= 500:
        kind = "retry"
    elif status in (400, 422):
        kind = "bad_request"
    elif status in (301, 302, 303, 307, 308):
        target = response.getheader("Location") or "(no Location header)"
        headline = "HTTP %d: the endpoint moved to %s" % (status, target)
        hint = "; set endpoint to %s" % re.sub(r"/chat/completions/?(\?.*)?$", "", target)
    elif status == 401:
        hint = " (check api_key in model.cfg, or BANTAM_API_KEY / OPENAI_API_KEY)"
    elif status == 404:   # the URL posted to, and the setting that chose the endpoint
        url = re.sub(r"(?=\?|$)", "/chat/completions", cfg["endpoint"], 1)
        hint = " (POST %s: check endpoint, from %s, and model)" % (
            url, cfg.get("sources", {}).get("endpoint"))
    elif status == 403:
        hint = " (check endpoint and model in model.cfg)"
    should = (response.getheader("x-should-retry") or "").strip().lower()
    if should == "true" and kind in ("fatal", "bad_request") and "quota" not in hint:
        kind = "retry"
    elif should == "false" and kind == "retry":
        kind = "fatal"
    if kind == "bad_request" and '"tool_use_failed"' in text:   # Groq: the model's slip, not ours
        kind, hint = "retry", hint + " (a malformed tool call from the model)"
    return ApiError(headline + hint, kind, status, server_wait(response), text[:4000])


def page_text(text):
    """An error body as one line can show it: an HTML page's title, else its text without
    the tags (a proxy's or a web server's page, not an API's error); any other text as is."""
    if not re.match(r"\s*<(?:!doctype html|html|head|body|title)\b", text, re.I):
        return text.strip()
    import html
    title = re.search(r"<title[^>]*>(.*?)</title", text, re.I | re.S)
    words = title.group(1) if title else re.sub(r"(?s)<(script|style)\b.*?</\1>|<[^>]*>", " ", text)
    return " ".join(html.unescape(words).split())


def server_wait(response):
    """Seconds the server asks us to wait (retry-after-ms, Retry-After), or None."""
    ms = response.getheader("retry-after-ms")
    try:
        if ms:
            return float(ms) / 1000
    except ValueError:
        pass
    after = (response.getheader("retry-after") or "").strip()
    if not after:
        return None
    try:
        return max(0.0, float(after))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime
    try:
        return max(0.0, parsedate_to_datetime(after).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def sse_events(read):
    """Yield, after each read(65536), the list of events completed by it (each event's
    data as bytes). Lines look like:
        data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}
        : keep-alive comment          event: name          (blank line ends an event)
    and, from servers that break the format, `error: {"message": ...}` (older llama.cpp) or a
    bare JSON line (a proxy's error): each is taken as an event of its own."""
    partial, data, ended = [], [], False
    while not ended:
        block = read(65536)
        ended = not block
        if ended:   # the end: it also ends a last line and a last event that lacked theirs
            block = b"\n\n"
        elif b"\n" not in block:   # a long line arriving in pieces
            partial.append(block)
            yield []   # (no event yet: the reader still checks its deadlines)
            continue
        if partial:
            partial.append(block)
            block, partial = b"".join(partial), []
        lines = block.split(b"\n")
        last = lines.pop()
        if last:
            partial.append(last)
        events = []
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = []
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[:6] == b"error:":
                events.append(b'{"error":' + line[6:].strip() + b"}")
            elif line[:1] == b"{":
                events.append(line)
        if events or not ended:
            yield events


DECODE_JSON = json.JSONDecoder().raw_decode


def read_stream(cfg, response, reply):
    """Merge a streamed reply into reply until [DONE] or the end, passing on the text that
    came (one text or reasoning event per burst of reads, not one per chunk: while more bytes
    are already waiting on the socket, reading goes on first). Until the model's output
    begins, reads may wait first_byte_timeout; then timeout."""
    import select
    sock = (connections().get(cfg["endpoint"]) or {}).get("sock")

    def read(size):
        """response.read1, after waiting (see await_reply) while the output has not begun."""
        if not response.isclosed() and response.length != 0:   # (0: Content-Length used up)
            await_reply(cfg, reply, sock, response.fp)
        return response.read1(size)
    for events in sse_events(read):
        moved = False
        for data in events:
            if data[:6] == b"[DONE]":
                return
            try:   # the hot path: one JSON object per event
                chunks = (DECODE_JSON(data.decode())[0],)
            except ValueError:
                chunks = parse_event(cfg, data)
            for chunk in chunks:
                if isinstance(chunk, dict):
                    if chunk.get("error"):   # OpenRouter sends it next to choices
                        raise stream_error(chunk["error"])
                    merge_chunk(reply, chunk)
                    moved = moved or carries_output(chunk)
        if reply["pending"] and not (sock and select.select([sock], [], [], 0)[0]):
            pass_on(cfg, reply)
        if not reply["first"] and moved:
            reply["first"] = time.monotonic()
            set_read_timeout(cfg, cfg["timeout"])
        check_progress(cfg, reply, moved)
    if response.length:   # read1() returns b"" on a short Content-Length body, without an error
        raise ApiError("the connection closed in the middle of the reply", "retry")
    if not (reply["finish"] or reply["content"] or reply["reasoning"] or reply["calls"]):
        raise ApiError("the server ended the reply without sending anything", "retry",
                       body="empty stream")
    if not reply["finish"] and not response.chunked and response.length is None:
        # A reply delimited by closing the connection, closed before [DONE] or a finish_reason:
        # dropped. (A chunked reply cut short raises IncompleteRead instead.)
        raise ApiError("the connection closed in the middle of the reply", "retry")


def await_reply(cfg, reply, sock, fp=None):
    """Until the model's output begins: wait for the reply's next bytes with a "waiting" event
    every second (bantam has one thread: the wait is cut into one-second selects), raising
    socket.timeout at first_byte_timeout as the read would. Bytes already off the socket (in
    fp's buffer, or decrypted by TLS) end the wait at once: select cannot see them."""
    import select
    import socket
    if reply["quiet"] or reply["first"] or sock is None:
        return
    deadline = time.monotonic() + cfg["first_byte_timeout"]
    while not read_ahead(sock, fp):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        if select.select([sock], [], [], min(1.0, left))[0]:
            return
        emit(cfg, "waiting", seconds=round(time.monotonic() - reply["asked"]))


def read_ahead(sock, fp):
    """Are bytes of the reply already read from sock, into fp's buffer or the TLS layer?"""
    if getattr(sock, "pending", None) and sock.pending():
        return True
    timeout = sock.gettimeout()
    try:
        sock.settimeout(0)   # fp.peek reads the socket only when its buffer is empty: never block
        return bool(fp and fp.peek(1).strip(b"\r\n"))   # (a chunk's closing CRLF is no reply yet)
    except OSError:   # nothing there (TLS says so with SSLWantReadError)
        return False
    finally:
        sock.settimeout(timeout)


OUTPUT_KEYS = ("content", "reasoning_content", "reasoning", "refusal", "reasoning_details")


def carries_output(chunk):
    """Whether a chunk (merged already) brings output: text, reasoning or a tool call's name
    or arguments, not only an empty delta, a role, usage or a finish reason."""
    for choice in chunk.get("choices") or ():
        delta = isinstance(choice, dict) and choice.get("delta") or {}
        if any(map(delta.get, OUTPUT_KEYS)) or any(isinstance(f, dict) and any(
                (f.get("function") or {}).values()) for f in delta.get("tool_calls") or ()):
            return True
    return False


def check_progress(cfg, reply, moved):
    """After each read of a stream: a retryable ApiError when no output came for
    first_byte_timeout (before the first) or timeout: comments, blank lines and empty deltas
    are no progress (the socket's timeout catches silence only). Says what was cut; an
    ApiError of kind budget when the turn's max_turn_seconds have run out."""
    now, key = time.monotonic(), "timeout" if reply["first"] else "first_byte_timeout"
    if moved:
        reply["progress"] = now
    elif now - reply["progress"] > cfg[key]:
        raise ApiError("network error: no output for %g s, only keep-alives (%s)"
                       % (cfg[key], key), "retry")
    say_cuts(cfg, reply)
    if time_up(cfg):
        raise ApiError("the turn's time ran out (max_turn_seconds) mid-reply", "budget")


def parse_event(cfg, data):
    """The JSON values in one event's data (some servers omit the blank line between events)."""
    values = []
    for line in data.split(b"\n"):
        try:
            values.append(json.loads(line))
        except ValueError:   # (said once a turn: a broken server must not flood the screen)
            note_once(cfg, "garbage", "warning: skipped stream data that is not JSON: %r"
                      % line[:80], "warning")
    return values


def stream_error(error):
    """The ApiError for an error object sent inside a stream."""
    message = error.get("message") if isinstance(error, dict) else str(error)
    text = json.dumps(error)
    kind = "overflow" if OVERFLOW_PATTERNS.search(text) else "retry"
    return ApiError("error in stream: %s" % " ".join(str(message).split()), kind, body=text[:4000])


# A reply under construction: text pieces, reasoning pieces, tool calls by index, and what
# is still to be passed on as events: pending, [(kind, [pieces])] (see pass_on).
def new_reply(cfg, quiet):
    """An empty reply accumulator."""
    return {"content": [], "reasoning": [], "calls": {}, "details": [], "quiet": quiet,
            "echo_reasoning": False, "finish": None, "usage": None, "extra": {},
            "first": None, "pending": [], "ended": False, "think": "start", "unsure": "",
            "progress": time.monotonic(), "parts": {}, "cut": [],   # see merge_tool_call
            "room": {"reasoning": cfg["max_reasoning"], "details": cfg["max_reasoning"],
                     "arguments": MAX_ARGUMENTS, "calls": cfg["max_calls_per_reply"]}}


def room_for(reply, kind, size):
    """How many of size new characters of kind the reply may keep: max_reasoning of reasoning
    and of reasoning_details, MAX_ARGUMENTS of tool-call arguments. A cut is noted, once."""
    room = reply["room"]
    if size <= room[kind]:
        room[kind] -= size
        return size
    if room[kind] >= 0:
        reply["cut"].append(kind)
    fit, room[kind] = max(0, room[kind]), -1
    return fit


CUTS = {"reasoning": "[the reasoning was cut at %(max_reasoning)d characters (max_reasoning)]",
        "details": "[the reasoning_details passed %(max_reasoning)d characters: none is kept]",
        "arguments": "[the tool calls' arguments were cut at %(limit)d characters]"}


def say_cuts(cfg, reply):
    """Say once what was cut of the reply."""
    for kind in () if reply["quiet"] else reply["cut"]:
        note(cfg, CUTS[kind] % dict(cfg, limit=MAX_ARGUMENTS), "warning")
    del reply["cut"][:]


def merge_chunk(reply, chunk, whole=False):
    """Merge one streamed chunk (or a whole non-streamed response) into reply, printing it.
    {"choices":[{"index":0,"delta":{"content":"Hi","tool_calls":[{"index":0,"id":"call_1",
     "function":{"name":"shell_exec","arguments":"{\\"comm"}}]}}],"usage":{...}}"""
    if chunk.get("usage"):
        reply["usage"] = chunk["usage"]
    choices = chunk.get("choices")
    if whole and not choices:
        if chunk.get("error"):
            raise stream_error(chunk["error"])
        raise ApiError("the server sent a reply with no choices", "retry")
    for choice in choices or ():
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("message" if whole else "delta") or choice.get("delta") or {}
        if len(delta) != 1 or "content" not in delta:   # more than plain text (the hot path)
            merge_extras(reply, delta)
        if choice.get("finish_reason"):
            reply["finish"] = choice["finish_reason"]
            if reply["finish"] == "error":   # OpenRouter: the provider failed mid-reply
                raise stream_error(choice.get("error") or chunk.get("error")
                                   or "finish_reason: error")
        text = delta.get("content")
        if text and isinstance(text, str):
            add_text(reply, text)
        elif isinstance(text, list):
            merge_content_parts(reply, text)


def merge_content_parts(reply, parts):
    """Merge content sent as a list of parts, as Mistral's reasoning models do:
    [{"type": "thinking", "thinking": [{"type": "text", "text": "..."}]},
     {"type": "text", "text": "..."}]: thinking is reasoning, text is the answer."""
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "thinking":
            thinking = part.get("thinking")
            for piece in thinking if isinstance(thinking, list) else [{"text": thinking}]:
                if isinstance(piece, dict) and isinstance(piece.get("text"), str) and piece["text"]:
                    add_reasoning(reply, piece["text"])
        elif part.get("type") == "text" and isinstance(part.get("text"), str) and part["text"]:
            add_text(reply, part["text"])


def merge_extras(reply, delta):
    """Merge the reasoning, reasoning details, refusal, provider extras and tool-call
    fragments of one delta."""
    refusal = delta.get("refusal")   # OpenAI's safety refusal: it is the answer
    if refusal and isinstance(refusal, str):
        add_text(reply, refusal)
    if isinstance(delta.get("extra_content"), dict):   # Gemini's thought signature on text
        merge_dict(reply["extra"], delta["extra_content"])
    thought = delta.get("reasoning_content")
    reply["echo_reasoning"] = reply["echo_reasoning"] or bool(thought)
    thought = thought or delta.get("reasoning")
    if thought and isinstance(thought, str):
        add_reasoning(reply, thought)
    merge_details(reply, delta.get("reasoning_details"))
    for position, fragment in enumerate(delta.get("tool_calls") or ()):
        merge_tool_call(reply, fragment, position)


def merge_details(reply, details):
    """Merge reasoning_details entries while they hold at most max_reasoning characters; past
    that none is kept (a signed block cut short is worthless). OpenRouter streams one block as
    fragments with the same type and index (text in pieces, the signature last); the provider
    wants the whole block back, as its signature covers the whole text."""
    kept = reply["details"]
    for d in details if isinstance(details, list) else ():
        size = sum(len(v) for v in d.values() if isinstance(v, str)) if isinstance(d, dict) else 0
        if room_for(reply, "details", size) < size:
            del kept[:]
        if reply["room"]["details"] < 0:
            continue
        block = None
        if isinstance(d, dict) and isinstance(d.get("index"), int):
            block = next((b for b in kept if isinstance(b, dict) and b.get("index") == d["index"]
                          and b.get("type") == d.get("type")), None)
        if block is None:
            kept.append(dict(d) if isinstance(d, dict) else d)
            continue
        for key, value in d.items():
            if key in ("text", "summary", "data") and isinstance(value, str) \
                    and isinstance(block.get(key), str):
                block[key] += value
            elif value is not None:
                block[key] = value


def add_reasoning(reply, text):
    """Record reasoning (to be passed on after this network read), max_reasoning at most."""
    text = text[:room_for(reply, "reasoning", len(text))]
    if not text:
        return
    reply["reasoning"].append(text)
    if not reply["quiet"]:
        add_pending(reply, "reasoning", text)


def add_text(reply, text):
    """Record answer text (to be passed on after this network read); a <think> block at the
    start of the content is passed on as reasoning, and stored as sent."""
    reply["content"].append(text)
    if not reply["quiet"]:
        text = split_think(reply, text) if reply["think"] else text
        if text:
            add_pending(reply, "text", text)


THINK_TAGS = ("<think>", "<thinking>")   # MiniMax, Qwen3, DeepSeek-R1 distills, Amazon Nova


def split_think(reply, text):
    """The answer part of a piece of content that may begin, hold or end a <think> block at
    the start of the content; reasoning inside it goes to pending. A piece that may be part
    of a marker waits for the next one (reply["unsure"]): until the marker is whole, it is not
    known whether it is answer or reasoning. reply["think"]: "start", the closing tag looked
    for, "after" (blanks after it are not shown) or None."""
    text, reply["unsure"] = reply["unsure"] + text, ""
    if reply["think"] == "start":
        head = text.lstrip()
        tag = next((t for t in THINK_TAGS if head.startswith(t)), None)
        if not tag:
            if any(t.startswith(head) for t in THINK_TAGS):   # "", "<thi": not known yet
                reply["unsure"] = text
                return ""
            reply["think"] = None
            return text
        reply["think"], text = "</" + tag[1:], head[len(tag):].lstrip()
    if reply["think"] != "after":
        close = reply["think"]
        end = text.find(close)
        keep = 0 if end >= 0 else next((n for n in range(len(close) - 1, 0, -1)
                                        if text.endswith(close[:n])), 0)
        thought = text[:end] if end >= 0 else text[:len(text) - keep]
        if thought:
            add_pending(reply, "reasoning", thought)
        if end < 0:
            reply["unsure"] = text[len(text) - keep:]
            return ""
        reply["think"], text = "after", text[end + len(close):]
    text = text.lstrip()
    reply["think"] = "after" if not text else None
    return text


def add_pending(reply, kind, text):
    """Queue a piece to pass on, joined to the last run when it is of the same kind."""
    pending = reply["pending"]
    if pending and pending[-1][0] == kind:
        pending[-1][1].append(text)
    else:
        pending.append((kind, [text]))


def pass_on(cfg, reply, final=False):
    """Emit what is queued, one event per run of text or reasoning, in the order it came.
    Unless final (the reply is over), the end of the last run stays queued while it may begin
    a secret (a model that read the key must not print it, even split across chunks) or is
    the first half of a character. Taken off the queue first: a Ctrl+C inside a view must
    not have it passed on twice."""
    pending = reply["pending"][:]
    del reply["pending"][:]
    for n, (kind, pieces) in enumerate(pending):
        text = pieces[0] if len(pieces) == 1 else "".join(pieces)
        if final or n < len(pending) - 1:   # its run has ended: nothing of it is held back
            text = join_surrogates(redact_all(cfg, text))
        else:
            text, held = stream_piece(cfg, "", text)
            if held:
                reply["pending"].append((kind, [held]))
        if text:
            emit(cfg, kind, text=text)


def end_reply(cfg, reply):
    """The reply is over (whole, failed or abandoned): pass on what is left, once."""
    if reply["quiet"] or reply["ended"]:
        return
    reply["ended"] = True
    if reply["unsure"]:   # the content ended inside a <think> block, or before it was known
        add_pending(reply, "text" if reply["think"] == "start" else "reasoning", reply["unsure"])
    pass_on(cfg, reply, final=True)
    emit(cfg, "reply_end", finish=reply["finish"])


def merge_dict(into, extra):
    """Merge a provider's extra object into another, nested objects key by key."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_dict(into[key], value)
        elif value is not None:
            into[key] = value


def merge_tool_call(reply, fragment, position):
    """Merge one tool-call fragment into reply["calls"] (by index) as servers send them: the
    id and name only in the first fragment or repeated in each, arguments split anywhere.
    The arguments are kept as pieces, joined once by finish_reply (adding each to one string
    copied it every time: minutes for a few megabytes), at most MAX_ARGUMENTS; none for a
    call beyond max_calls_per_reply (AL answers it: not run). Whatever else a provider puts
    on the call is kept, to be sent back unchanged: Gemini 3 signs calls with {"extra_content":
    {"google": {"thought_signature": "..."}}} and rejects the next request without it."""
    calls = reply["calls"]
    if not isinstance(fragment, dict):
        return
    index = fragment.get("index")
    if not isinstance(index, int):   # no index: its position, unless it starts a new call
        index = position
        old = calls.get(index)
        if old and fragment.get("id") and old["id"] and fragment["id"] != old["id"]:
            index = max(calls) + 1
    function = fragment.get("function") or {}
    call = calls.get(index)
    other = call and call["id"] and fragment.get("id") and str(fragment["id"]) != call["id"]
    if other and function.get("name"):
        # Ollama sends every call whole at index 0, each with its own id: this is a new
        # one; the one before moves to a key of its own (calls keep the order they began in)
        calls[-1 - len(calls)] = calls.pop(index)
        call = None
    if call is None:
        call = calls[index] = {"id": "", "type": "function",
                               "function": {"name": "", "arguments": ""}}
    if fragment.get("id") and not call["id"]:
        call["id"] = str(fragment["id"])
    if function.get("name") and not call["function"]["name"]:
        call["function"]["name"] = str(function["name"])
    arguments = function.get("arguments")
    if isinstance(arguments, dict):   # some servers send an object, not a JSON string
        arguments = json.dumps(arguments)
    room = len(reply["parts"]) < reply["room"]["calls"]
    pieces = reply["parts"].setdefault(id(call), [] if room else None)
    if arguments and isinstance(arguments, str) and pieces is not None:
        pieces.append(arguments[:room_for(reply, "arguments", len(arguments))])
    if len(fragment) > 4 or "index" not in fragment:   # more than index, id, type and function
        merge_dict(call, {k: v for k, v in fragment.items()
                          if k not in ("index", "id", "type", "function")})


def finish_reply(reply):
    """The assistant message to store, exactly as the API expects it back."""
    text = join_surrogates("".join(reply["content"]))
    message = {"role": "assistant", "content": text if text.strip() else ""}   # blank is empty
    calls = [c for c in reply["calls"].values() if c["function"]["name"]]   # in the order begun
    if calls:
        for call in calls:
            call["id"] = call["id"] or "call_" + os.urandom(12).hex()   # if the server gave none
            pieces = reply["parts"].get(id(call)) or ()   # (see merge_tool_call)
            call["function"]["arguments"] = join_surrogates("".join(pieces)) or "{}"
        message["tool_calls"] = calls
        if reply["echo_reasoning"]:   # DeepSeek's thinking mode wants it back during tool use
            message["reasoning_content"] = join_surrogates("".join(reply["reasoning"]))
    if reply["details"]:
        message["reasoning_details"] = reply["details"]
    if reply["extra"]:
        message["extra_content"] = reply["extra"]
    return message


# ----------------------------------------------------------------------------------------
# The tools: shell_exec, run_subagent, read and write (each takes cfg and a dict, returns a string)
# ----------------------------------------------------------------------------------------

def shell_exec(cfg, args):
    """Run args['command'] with bash (else sh): output + '\\n\\nexit: ' + code. Own process
    group, stdin from /dev/null, no pagers; killed on timeout, Ctrl+C or a hang-up, keeping
    what it printed; output bounded. What it prints is passed on live as tool_output events."""
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "error: shell_exec needs a non-empty 'command' string"
    import subprocess
    env = dict(command_env(cfg), PAGER="cat", GIT_PAGER="cat", MANPAGER="cat", SYSTEMD_PAGER="",
               GIT_TERMINAL_PROMPT="0", DEBIAN_FRONTEND="noninteractive")
    try:
        proc = sandboxed_popen(cfg, [shell_path(), "-c", command], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True, env=env)
    except (OSError, ConfigError) as e:   # ConfigError: the sandbox asked for cannot be had
        return "error: cannot start the shell: %s" % e
    output, started = BoundedOutput(cfg), time.monotonic()
    try:
        code, remark = pump_output(cfg, proc, output, *command_time(cfg))
    except BaseException as stop:   # Ctrl+C, SIGTERM, SIGHUP: stop the command's whole group
        kill_group(proc)
        drain(proc, output)   # what it printed just before is kept too
        why = ("interrupted by the user" if isinstance(stop, KeyboardInterrupt)
               else "bantam was stopped")
        if cfg.get("run"):   # the call's result, for answer_unanswered
            cfg["run"]["partial_output"] = "%s\n[%s after %.1f s: the command's process group " \
                "was killed]\n\nexit: %s" % (output.text(), why, time.monotonic() - started,
                                               proc.poll())
        raise
    finally:
        proc.stdout.close()
        output.close()
    note = sandbox_words(cfg) if code else ""   # a refused write may be why it failed
    return output.text() + remark + ("\n[%s]" % note if note else "") + "\n\nexit: " + str(code)


SECRET_VARIABLES = ("BANTAM_API_KEY", "OPENAI_API_KEY", "BANTAM_HEADERS")   # bantam's own secrets


def command_env(cfg):
    """The environment of every command bantam runs (shell_exec, !command, and so the tools
    folder's scripts): bantam's own, less the variables of withheld_variables."""
    withheld = withheld_variables(cfg)
    return {name: value for name, value in os.environ.items() if name not in withheld}


def withheld_variables(cfg):
    """The variables kept from commands: those bantam reads secrets from, any holding a
    secret of cfg (a short one, like "none", only as the whole value), and those matching
    shell_env_exclude (unless named in shell_env_keep)."""
    import fnmatch
    secrets = secrets_of(cfg)
    exclude = cfg.get("shell_env_exclude", "")
    patterns = [fnmatch.translate(p.strip()) for p in exclude.split(",")
                if p.strip() and exclude.strip().lower() != "none"]
    excluded = re.compile("|".join(patterns) or "(?!)", re.I).match
    keep = {name.strip() for name in cfg.get("shell_env_keep", "").split(",")}
    return sorted(name for name, value in os.environ.items()
                  if name in SECRET_VARIABLES
                  or (excluded(name) and name not in keep)
                  or any(value == s or (len(s) >= 12 and s in value) for s in secrets))


def shell_path():
    """bash if installed, else /bin/sh."""
    for path in ("/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"):
        if os.access(path, os.X_OK):
            return path
    return "/bin/sh"


def command_time(cfg):
    """The seconds a command may run, shell_timeout or what the turn has left of its
    max_turn_seconds if less, and what to say when it is killed then."""
    turn, limit = (cfg.get("run") or {}).get("turn"), cfg.get("max_turn_seconds")
    wait = cfg["shell_timeout"]
    left = max(0.0, limit - time.monotonic() + turn["started"]) if turn and limit else wait
    if left < wait:
        return left, "stopped after %.1f s: the turn's time ran out (max_turn_seconds=%g)" % (
            left, limit)
    return wait, "timed out after %g s" % wait


def pump_output(cfg, proc, output, timeout, why):
    """Read the command's output until it exits (then drain briefly: a background child may
    hold the pipe open forever) or its timeout (why says it); returns (exit code, remark)."""
    import select
    fd, killed = proc.stdout.fileno(), "\n[%s: the command's process group was killed]" % why
    started = time.monotonic()
    deadline, exited_at, ticked = started + timeout, None, started
    while True:
        now = time.monotonic()
        if now - ticked >= 1:   # still running: once a second, say so
            ticked = now
            emit(cfg, "tool_progress", seconds=round(now - started, 1))
        if now >= deadline:
            kill_group(proc)
            return proc.wait(), killed
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at >= DRAIN_SECONDS:
            break
        if select.select([fd], [], [], min(0.1, deadline - now))[0]:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            output.add(data)
            emit(cfg, "tool_output", text=redact_all(cfg, data.decode("utf-8", "replace")))
    try:
        return proc.wait(max(0.01, deadline - time.monotonic())), ""
    except Exception:   # closed its output but still running: treat as a timeout
        kill_group(proc)
        return proc.wait(), killed


def drain(proc, output):
    """Read what is left in a stopped command's pipe, for at most DRAIN_SECONDS."""
    import select
    end = time.monotonic() + DRAIN_SECONDS
    fd = proc.stdout.fileno()
    try:
        while time.monotonic() < end and select.select(
                [fd], [], [], max(0, end - time.monotonic()))[0]:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            output.add(data)
    except OSError:
        pass


def kill_group(proc):
    """Stop the command's process group: TERM, then KILL if it lingers."""
    import signal
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        end = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        if proc.poll() is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # children left behind in the group
            except OSError:
                pass
            return


class BoundedOutput:
    """A command's output in bounded memory: whole when it fits in max_tool_res bytes, else
    the head and the tail, and all of it in a spill file under $TMPDIR/bantam/ (see leave_run)."""

    def __init__(self, cfg):
        self.limit = cfg["max_tool_res"]
        self.keep = max(1, self.limit * 2 // 5)
        self.head, self.tail = bytearray(), b""
        self.size = self.newlines = 0
        self.file = self.path = None
        self.spill = (cfg.get("run") or {}).get("spill", [])

    def add(self, data):
        """Take one piece of output."""
        self.size += len(data)
        self.newlines += data.count(b"\n")
        self.tail = (self.tail + data)[-self.keep:]
        if self.file is None:
            if self.size <= self.limit:
                self.head += data
                return
            self.open_spill_file()   # with all that came before this piece
            self.head = (self.head + data[:self.keep])[:self.keep]
        room = SPILL_LIMIT - (self.size - len(data))
        if room > 0:   # an endless `yes` must not fill the disk
            self.file.write(data[:room])

    def open_spill_file(self):
        """Start the spill file with what was kept so far."""
        import tempfile
        folder = os.path.join(tempfile.gettempdir(), "bantam")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, self.path = tempfile.mkstemp(prefix="toolres-", suffix=".txt", dir=folder)
        self.spill.append(self.path)
        self.file = os.fdopen(fd, "wb")
        self.file.write(self.head)

    def close(self):
        """Close the spill file, if any."""
        if self.file:
            self.file.close()

    def text(self):
        """What the model gets: the output, or its head and tail with a note on the rest."""
        if self.file is None:
            return self.head.decode("utf-8", "replace")
        lines = self.newlines + (0 if self.tail.endswith(b"\n") else 1)
        whole = ("The whole output" if self.size <= SPILL_LIMIT
                 else "Its first %d bytes are" % SPILL_LIMIT)
        return "%s\n\n[... output too long: %d bytes, %d lines; showing the first and last %d " \
               "bytes. %s in %s: read it in parts with shell_exec, e.g. " \
               "sed -n '1,200p' %s ...]\n\n%s" % (
                   self.head[:self.keep].decode("utf-8", "replace"), self.size, lines, self.keep,
                   whole, self.path, self.path, self.tail.decode("utf-8", "replace"))


def remove_spill_files(paths):
    """Delete the tool-output files of a turn that ended."""
    while paths:
        try:
            os.unlink(paths.pop())
        except OSError:
            pass


def run_subagent(cfg, args):
    """Run AL on a fresh conversation for args['prompt']; return the child's last answer."""
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "error: run_subagent needs a non-empty 'prompt' string"
    depth = (cfg.get("run") or {}).get("depth", 0)
    if depth >= MAX_SUBAGENT_DEPTH:   # a model that delegates forever must not recurse forever
        return "error: subagents may nest only %d deep; do this task yourself" % (
            MAX_SUBAGENT_DEPTH)
    child = [{"role": "system", "content": cfg["system_prompt"] + CHILD_NOTE},
             {"role": "user", "content": prompt}]
    try:
        AL(cfg, child)
    except ApiError as e:
        return "error: the subagent failed: %s" % e
    answers = [m["content"] for m in child if m.get("role") == "assistant" and m.get("content")]
    return answers[-1] if answers else "(the subagent gave no answer)"


# The read and write tools (offered when listed in the tools key): read shows a file's
# numbered lines '<n>: <text>' (the numbers write's lineOffset uses) or a directory's
# entries; write replaces a whole file or splices content in at a line or byte offset. A
# model edits a big file by lines without echoing it through a shell command.

READ_LIMIT = 2000       # lines shown when no limit is given
LINE_BYTES = 2000       # longer lines are cut here: one minified line must not flood the model
BINARY_SNIFF = 8192     # a NUL byte in this many leading bytes marks a binary file
HINT_ROOM = 200         # bytes of max_tool_res kept free for the "more lines" hint

READ_SCHEMA = {
    "description": "Read a text file as numbered lines '<line>: <content>' (the numbers are the "
                   "lineOffset values of write), or list a directory (subdirectories end with "
                   "'/'). Long files are shown in pages: a last line says which offset reads the "
                   "rest.",
    "parameters": {"type": "object", "properties": {
        "filePath": {"type": "string", "description": "The file or directory to read."},
        "offset": {"type": "integer",
                   "description": "The first line to show, 1-indexed (default 1)."},
        "limit": {"type": "integer",
                  "description": "How many lines to show at most (default 2000)."}},
        "required": ["filePath"]}}

WRITE_SCHEMA = {
    "description": "Write a file. With only filePath and content, the whole file is replaced (it "
                   "and its folders are created if missing). With lineOffset or byteOffset, "
                   "content is inserted there, after deleting delLines lines or delBytes bytes; "
                   "with lineOffset content is whole lines (a missing final newline is added "
                   "before following text).",
    "parameters": {"type": "object", "properties": {
        "filePath": {"type": "string", "description": "The file to write."},
        "content": {"type": "string",
                    "description": "The text to write (may be empty, e.g. to delete lines)."},
        "lineOffset": {"type": "integer", "description": "1-indexed line to write at, as "
                       "numbered by read; past the end appends. Takes precedence over byteOffset."},
        "byteOffset": {"type": "integer", "description": "0-indexed byte to write at; used only "
                       "without lineOffset."},
        "delLines": {"type": "integer", "description": "Lines to delete at the insertion point "
                     "first. Takes precedence over delBytes."},
        "delBytes": {"type": "integer", "description": "Bytes to delete at the insertion point "
                     "first; used only without delLines."}},
        "required": ["filePath", "content"]}}


def path_argument(args):
    """The filePath (or legacy path) argument with ~ expanded; ValueError when missing."""
    path = args.get("filePath")
    if path is None:
        path = args.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ValueError("filePath must be a non-empty string")
    return os.path.expanduser(path)


def in_working_folder(path):
    """Is this absolute path the working folder or inside it?"""
    here = os.getcwd()
    return os.path.commonpath([path, here]) == here


def int_argument(args, names, low):
    """The first of names present in args as an int >= low, else None; ValueError when bad."""
    for name in names:
        value = args.get(name)
        if value is None:   # models send null for optional parameters they skip
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)   # JSON 10.0 is still ten
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("%s must be an integer, got %r" % (name, value))
        if value < low:
            raise ValueError("%s must be %d or more, got %d" % (name, low, value))
        return value
    return None


def count_lines(data):
    """Lines in text or bytes as read numbers them: a last line without a newline counts."""
    newline = "\n" if isinstance(data, str) else b"\n"
    return data.count(newline) + (1 if data and not data.endswith(newline) else 0)


def read_tool(cfg, args):
    """The read tool: a file's numbered lines `<n>: <text>`, or a directory's sorted entries,
    at most limit of them and max_tool_res bytes (less room for the hint of what follows)."""
    try:
        path = path_argument(args)
        offset = int_argument(args, ("offset",), 0) or 1   # 0 is taken as 1: harmless for a read
        limit = int_argument(args, ("limit",), 1) or READ_LIMIT
    except ValueError as e:
        return "error: read: %s" % e
    budget = max(1, cfg["max_tool_res"] - HINT_ROOM)
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            with os.scandir(path) as entries:   # dotfiles included: they matter (.gitignore, .env)
                names = sorted(e.name + "/" if e.is_dir() else e.name for e in entries)
            unit, empty = "entries", "(%s is an empty directory)" % path
            page = paginate(enumerate(names, 1), offset, limit, budget, lambda item: item[1],
                            lambda number: len(names) - number)
        elif not stat.S_ISREG(info.st_mode):   # a FIFO or device could block or never end
            return "error: %s is not a regular file or a directory" % path
        else:
            with open(path, "rb") as f:
                if b"\0" in f.read(BINARY_SNIFF):   # text has no NULs; binary wastes context
                    return "error: %s looks like a binary file (%d bytes); inspect it with bash, " \
                           "e.g. xxd %s | head" % (path, os.fstat(f.fileno()).st_size, path)
                f.seek(0)
                unit, empty = "lines", "(%s is empty: 0 lines)" % path
                page = paginate(file_lines(f), offset, limit, budget, lambda item: "%d: %s" % (
                    item[0], model_line(item[1], item[2])), lambda number: count_rest(f))
    except FileNotFoundError:
        return "error: no such file or directory: %s" % path
    except OSError as e:
        return "error: cannot read %s: %s" % (path, e.strerror or e)
    shown, total, following = page
    if total == 0:
        return empty
    if not shown:
        return "error: offset %d is past the end of %s (%d %s)" % (offset, path, total, unit)
    if following:
        shown.append("[... %d more %s: read with offset=%d]" % (
            total - following + 1, unit, following))
    return "\n".join(shown)


def paginate(items, offset, limit, budget, text, rest):
    """(texts, total, first number not shown or None) of numbered items from offset on.
    items yields tuples whose [0] is the 1-indexed number; text(item) is its shown line;
    rest(number) counts the items after that one, so stopping early still knows the total."""
    shown, used, number = [], 0, 0
    for item in items:
        number = item[0]
        if number < offset:
            continue
        line = text(item)
        cost = len(line.encode("utf-8", "replace")) + 1
        if len(shown) == limit or (shown and used + cost > budget):
            return shown, number + rest(number), number
        shown.append(line)
        used += cost
    return shown, number, None


def file_lines(f):
    """(number, first LINE_BYTES+1 bytes, length without the newline) of each line of f.
    Lines end at \\n; the rest of a long line is skipped in pieces, never held whole."""
    number = 0
    while True:
        head = piece = f.readline(LINE_BYTES + 1)
        if not head:
            return
        length = len(head)
        while not piece.endswith(b"\n"):
            piece = f.readline(1 << 16)
            if not piece:
                break
            length += len(piece)
        number += 1
        yield number, head, length - (1 if piece.endswith(b"\n") else 0)


def model_line(head, length):
    """One line for the model: without its newline (and a CRLF's CR), invalid UTF-8 as U+FFFD,
    cut at LINE_BYTES on a character boundary with a note of its full length."""
    body = head[:length]
    if length <= LINE_BYTES:
        return body[:-1 if body.endswith(b"\r") else None].decode("utf-8", "replace")
    cut = LINE_BYTES
    while cut > 0 and (body[cut] & 0xC0) == 0x80:   # 10xxxxxx: inside a UTF-8 character
        cut -= 1
    return body[:cut].decode("utf-8", "replace") + " [... line cut: %d bytes in all]" % length


def count_rest(f):
    """Lines from f's position (a line start) to its end."""
    count, last = 0, b"\n"
    for block in iter(lambda: f.read(1 << 20), b""):
        count, last = count + block.count(b"\n"), block[-1:]
    return count + (last != b"\n")


def write_tool(cfg, args):
    """The write tool: replace a whole file, or splice content in at a line or byte offset."""
    if sandbox_refusal(cfg, args):
        return sandbox_refusal(cfg, args)
    try:
        path = path_argument(args)
        content = args.get("content")
        if not isinstance(content, str):
            raise ValueError("content must be a string (it may be empty)")
        line = int_argument(args, ("lineOffset",), 1)
        byte = int_argument(args, ("byteOffset", "offset"), 0)         # offset: legacy name
        del_lines = int_argument(args, ("delLines",), 0)
        del_bytes = int_argument(args, ("delBytes", "del_bytes"), 0)   # del_bytes: legacy name
    except ValueError as e:
        return "error: write: %s" % e
    data = content.encode("utf-8", "replace")   # "replace": a lone surrogate from JSON
    target = os.path.realpath(path)   # write through a symlink, do not replace the link
    try:
        if in_working_folder(os.path.abspath(path)) and not in_working_folder(target):
            return "error: %s is a symlink that leads outside the working folder (to %s); " \
                   "write does not follow it" % (path, target)
        if os.path.isdir(target):
            return "error: %s is a directory" % path
        if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
            return "error: %s is not a regular file (a FIFO, device or socket); write " \
                   "replaces only regular files" % path
        if os.path.exists(target) and not os.access(target, os.W_OK):
            return "error: %s is read-only" % path
        if line is None and byte is None and del_lines is None and del_bytes is None:
            existed = os.path.exists(target)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            write_private_file(target, data, keep_mode=True)
            return "wrote %d bytes to %s (%d lines%s)" % (
                len(data), path, count_lines(data), "" if existed else ", new file")
        with open(target, "rb") as f:
            return splice(target, path, f, data, line, byte, del_lines, del_bytes)
    except FileNotFoundError:
        return "error: %s does not exist; to create it, give only filePath and content" % path
    except OSError as e:
        return "error: cannot write %s: %s" % (path, e.strerror or e)


def splice(target, path, f, data, line, byte, del_lines, del_bytes):
    """Stream f (target, open) into target's replacement, data at a line or byte offset after
    deleting delLines lines or delBytes bytes there (from line 1 / byte 0); the confirmation."""
    by_line = line is not None or (byte is None and del_lines is not None)
    line, byte = line or 1, byte or 0

    def fill(out):
        head = stream_part(f, out, line - 1 if by_line else None, byte)
        past = head[1] < line - 1 if by_line else head[0] < byte
        lead = b"\n" if by_line and past and head[0] and head[2] != b"\n" else b""   # its own line
        removed = stream_part(f, None, del_lines, del_bytes or 0)
        # keep lines whole: "X" inserted before "b\n" must not become "Xb"
        text = data + (b"\n" if by_line and data[-1:] not in (b"", b"\n") and f.peek(1) else b"")
        out.write(lead + text)
        return past, head, removed, lead + text, text, stream_part(f, out, None, float("inf"))
    past, head, removed, new, text, rest = write_private_file(target, fill, keep_mode=True)
    (old_size, old_lines), (new_size, new_lines) = tally(head, removed, rest), tally(
        head, (len(new), new.count(b"\n"), new[-1:]), rest)
    in_lines = del_lines is not None or (by_line and del_bytes is None)
    deleted = ("%d lines" % tally(removed)[1]) if in_lines else "%d bytes" % removed[0]
    unit, at, before, now, count = ("line", line, old_lines, new_lines, count_lines(text)) \
        if by_line else ("byte", byte, old_size, new_size, len(text))
    where = ("appended at the end of %s (%sOffset %d is past its %d %ss)" % (
        path, unit, at, before, unit) if past else "spliced at %s %d of %s" % (unit, at, path))
    return "%s: deleted %s, inserted %d %ss (now %d %ss)" % (
        where, deleted, count, unit, now, unit)


def stream_part(f, out, lines, size):
    """Copy the next lines of f (lines None: size bytes) to out (None: skip them), in bounded
    pieces: (bytes, newlines, last byte) of what went by."""
    moved, newlines, last = 0, 0, b""
    while newlines < lines if lines is not None else moved < size:
        block = f.read(min(1 << 20, size - moved)) if lines is None else f.readline(1 << 16)
        if not block:
            break
        if out:
            out.write(block)
        moved, newlines, last = moved + len(block), newlines + block.count(b"\n"), block[-1:]
    return moved, newlines, last


def tally(*parts):
    """(bytes, lines) of consecutive pieces (bytes, newlines, last byte), as count_lines does."""
    size = sum(part[0] for part in parts)
    last = next((part[2] for part in reversed(parts) if part[0]), b"")
    return size, sum(part[1] for part in parts) + (1 if size and last != b"\n" else 0)


# The tool table: the single source of truth for dispatch and for the schema sent to the model.
TOOLS = {
    "shell_exec": ({
        "description": "Run a shell command (bash -c) on the user's machine and return its "
                       "combined stdout and stderr followed by the exit code. Non-interactive: "
                       "stdin is empty and pagers are off. Long output is cut and saved to a "
                       "file you can read in parts.",
        "parameters": {"type": "object", "properties": {"command": {
            "type": "string", "description": "The command line to run, e.g. \"ls -la src\"."}},
            "required": ["command"]}}, shell_exec),
    "run_subagent": ({
        "description": "Delegate a self-contained sub-task to a fresh copy of this agent, which "
                       "has the same tools but none of this conversation. Returns its final "
                       "answer. Put every detail it needs into the prompt.",
        "parameters": {"type": "object", "properties": {"prompt": {
            "type": "string", "description": "The complete task for the subagent."}},
            "required": ["prompt"]}}, run_subagent),
    "read": (READ_SCHEMA, read_tool),
    "write": (WRITE_SCHEMA, write_tool),
}
# Names of other agents' tools that models trained on them still call: run as the tool they
# mean, so such a call does its work instead of failing as an unknown tool.
TOOL_ALIASES = {"bash": "shell_exec", "write_file": "write"}


def check_tool_names(raw, where):
    """The tools key: comma-separated names of TOOLS (or their aliases), normalized."""
    names = [TOOL_ALIASES.get(n.strip(), n.strip()) for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise ConfigError("%s: tools: unknown tool %r (the tools: %s)" % (
            where, unknown[0], ", ".join(TOOLS)))
    return ",".join(dict.fromkeys(names))


def enabled_tools(cfg):
    """The names of the tools offered to the model (the tools key), in TOOLS order."""
    wanted = cfg.get("tools", DEFAULTS["tools"]).split(",")
    return [name for name in TOOLS if name in wanted]


def tool_definitions(cfg):
    """The tools part of a request: the schemas of the enabled tools."""
    return [{"type": "function", "function": dict(TOOLS[name][0], name=name)}
            for name in enabled_tools(cfg)]


def tool_named(cfg, name):
    """The function of an enabled tool called name (or an alias of one), else None."""
    name = TOOL_ALIASES.get(name, name)
    return TOOLS[name][1] if name in enabled_tools(cfg) else None


def tool_message(call_id, content):
    """The message that answers one tool call."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def check_calls(reply):
    """Make the reply's tool calls fit to store and run, before the reply is stored: clean
    the arguments (invisible characters out, also those written as JSON escapes like
    \\u200b) and parse them. Returns, for each call, the arguments dict or the error text
    for the model; invalid JSON is stored as "{}" (strict servers reject it in the history)."""
    parsed = []
    for call in reply.get("tool_calls") or ():
        function = call["function"]
        function["arguments"] = clean_for_model(function["arguments"])
        try:
            args = json.loads(function["arguments"], strict=False)   # (a raw newline is fine)
            if not isinstance(args, dict):
                raise ValueError("expected a JSON object")
        except ValueError as e:
            parsed.append("error: the arguments of %s are not a valid JSON object (%s): %s" % (
                function["name"], e, function["arguments"][:500]))
            function["arguments"] = "{}"
            continue
        clean = clean_values(args)
        if clean != args:
            function["arguments"] = json.dumps(clean, ensure_ascii=False)
        parsed.append(clean)
    return parsed


def run_tool_call(cfg, call, args):
    """Trace and run one tool call whose arguments check_calls parsed (args: a dict, or the
    error text); its tool message. Failures are text for the model, never a crash."""
    name = call["function"]["name"]
    emit(cfg, "tool_call", id=call["id"], name=name,
         arguments=redact_all(cfg, call["function"]["arguments"]))
    tool, failed = tool_named(cfg, name), True
    if isinstance(args, str):
        result = args
    elif time_up(cfg):
        result = "error: not run: the turn's time ran out (max_turn_seconds=%g)" % time_up(cfg)[1]
    elif tool is None:
        result = "error: unknown tool %r; the tools are %s" % (name, ", ".join(enabled_tools(cfg)))
    else:   # may it run? (told: the refusal, or what the model must read first)
        args, told = approval(cfg, call["id"], TOOL_ALIASES.get(name, name), args)
        try:
            result, failed = (told, True) if args is None else (told + tool(cfg, args), False)
        except (OSError, ValueError, TypeError) as e:
            result = "error: %s failed: %s" % (name, e)
    result = clean_for_model(result)
    if cfg["run"].get("replay"):
        check_replayed_result(cfg, name, result)
    emit(cfg, "tool_result", id=call["id"], name=name, content=redact_all(cfg, result),
         ok=not failed)
    return tool_message(call["id"], result)


def clean_values(value):
    """A JSON value with clean_for_model applied to every string in it."""
    if isinstance(value, str):
        return clean_for_model(value)
    if isinstance(value, list):
        return [clean_values(v) for v in value]
    if isinstance(value, dict):
        return {k: clean_values(v) for k, v in value.items()}
    return value


def answer_unanswered(cfg, messages, calls):
    """Append a tool message for every call in calls that has none: one per call id, always.
    A command stopped mid-way answers its call with what it had printed."""
    answered = {m.get("tool_call_id") for m in messages[-len(calls) - 1:]
                if m.get("role") == "tool"}
    for call in calls:
        if call["id"] not in answered:   # the first is the call that was running
            partial = cfg["run"].pop("partial_output", None)
            add_message(cfg, messages, tool_message(call["id"], clean_for_model(partial)
                        if partial else INTERRUPTED + ": the tool did not finish"))


# ----------------------------------------------------------------------------------------
# The sandbox: commands write only in the working and temporary folders (sandbox=workspace)
# or the temporary folder alone (read-only); sandbox_network=false leaves them no socket.
# Linux's Landlock (and seccomp) enforce it in the command's process, between fork and exec.
# ----------------------------------------------------------------------------------------

# Landlock's rights (linux/landlock.h): EXECUTE 1, WRITE_FILE 2, READ_FILE 4, READ_DIR 8,
# REMOVE_* and MAKE_* to 1 << 12; then REFER (ABI 2), TRUNCATE (3), IOCTL_DEV (5), and TCP
# (BIND 1, CONNECT 2: ABI 4). A ruleset denies what its ABI knows, unless a rule allows it.
ALL_RIGHTS = (0, 1 << 13, 1 << 14, 1 << 15, 1 << 15, 1 << 16)   # by ABI, minus 1: every right
FILE_RIGHTS = 1 | 2 | 4 | 1 << 14 | 1 << 15    # the rights a rule on a file (not a folder) may give
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
SECCOMP_ARCH = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}   # audit arch, socket


def sandbox_of(cfg):
    """(mode, closed): 'workspace' or 'read-only' ('' when off), and whether sockets are closed."""
    return cfg.get("sandbox", "off").replace("off", ""), not cfg.get("sandbox_network", True)


def landlock(call, *args):
    """Landlock call 444 + call (create_ruleset, add_rule, restrict_self; alpha aside); OSError."""
    import ctypes
    result = ctypes.CDLL(None, use_errno=True).syscall(
        ctypes.c_long(444 + call), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def sandbox_roots(cfg):
    """(the folders commands may write in, the paths hidden from them: ~/.bantam, the history)."""
    roots = [os.getcwd()] * (cfg["sandbox"] == "workspace") + [os.environ.get("TMPDIR") or "/tmp"]
    real = lambda paths: [os.path.realpath(path) for path in paths]
    hidden = real([bantam_home(), history_path()])
    return [p for p in real(roots + ["/dev/shm"]) if os.path.isdir(p)], hidden


def within(path, folders):
    """Is path one of folders, or beneath one?"""
    return any((path + "/").startswith(folder.rstrip("/") + "/") for folder in folders)


def sandbox_ruleset(cfg):
    """The Landlock ruleset fd (close-on-exec) of cfg's sandbox, None without one; ConfigError."""
    mode, closed = sandbox_of(cfg)
    if not mode and not closed:
        return None
    try:   # LANDLOCK_CREATE_RULESET_VERSION; ENOSYS: before Linux 5.13, EOPNOTSUPP: not in lsm=
        abi, why = (landlock(0, None, 0, 1), "") if sys.platform == "linux" else (0, "not on Linux")
    except OSError as e:
        abi, why = 0, "this kernel has no Landlock (%s)" % e.strerror
    if closed and abi and (abi < 4 or os.uname().machine not in SECCOMP_ARCH):
        why = "it needs Landlock ABI 4 (Linux 6.7) on x86_64 or aarch64; this is ABI %d" % abi
    if why:   # never a command run with less than was asked for
        raise ConfigError("sandbox=%s%s: %s; sandbox=off runs without" % (
            mode or "off", ", sandbox_network=false" * closed, why))
    import struct
    rights = ALL_RIGHTS[min(abi, 5)] - 1 if mode else 0
    attr = struct.pack("QQQ", rights, 3 * closed, 0)   # fs, net, scoped: an older ABI's are 0
    ruleset = landlock(0, attr, len(attr), 0)
    add = lambda fd, allowed: landlock(1, ruleset, 1, struct.pack("=Qi", allowed, fd), 0)
    try:   # LANDLOCK_RULE_PATH_BENEATH {allowed_access, parent_fd}
        if mode:
            roots, hidden = sandbox_roots(cfg)
            allow(add, "/", 8, [])                  # READ_DIR: every folder can be listed,
            allow(add, "/", 1 | 4, hidden)          # EXECUTE, READ_FILE: all but the hidden
            for path in roots + list(DEVICES):
                allow(add, path, rights, hidden)
    except OSError as e:
        os.close(ruleset)
        raise ConfigError("sandbox=%s: cannot make its Landlock rules: %s" % (mode, e))
    return ruleset


def allow(add, path, rights, hidden):
    """Give rights beneath path but not beneath the hidden paths, nor through a symlink."""
    inside = [h for h in hidden if within(h, [path])]
    if inside:   # a rule only adds rights: each entry of path gets its own instead
        for name in [] if path in inside else os.listdir(path):
            allow(add, os.path.join(path, name), rights, inside)
        return
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:   # gone since it was listed, or not on this system
        return
    try:
        mode = os.fstat(fd).st_mode   # a symlink's target is allowed where it lies, or not at all
        if not stat.S_ISLNK(mode):
            add(fd, rights if stat.S_ISDIR(mode) else rights & FILE_RIGHTS)
    finally:
        os.close(fd)


def socket_filter():
    """(a seccomp program under which socket(), io_uring_setup() fail; its sock_fprog)."""
    import ctypes
    import struct
    arch, socket_call = SECCOMP_ARCH[os.uname().machine]
    deny, allowed = 0x50000 | 13, 0x7FFF0000   # SECCOMP_RET_ERRNO | EACCES, SECCOMP_RET_ALLOW
    steps = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, deny),   # another ABI's calls: no
             (0x20, 0, 0, 0), (0x35, 3, 0, 0x40000000),                  # x32's calls: no
             (0x15, 2, 0, socket_call), (0x15, 1, 0, 425),               # socket, io_uring_setup
             (0x06, 0, 0, allowed), (0x06, 0, 0, deny)]
    code = b"".join(struct.pack("HBBI", *step) for step in steps)   # struct sock_filter
    program = (ctypes.c_char * len(code)).from_buffer_copy(code)
    return program, struct.pack("HP", len(steps), ctypes.addressof(program))   # struct sock_fprog


def sandboxed_popen(cfg, argv, **options):
    """subprocess.Popen(argv, **options), the command confined by cfg's sandbox; ConfigError."""
    import ctypes
    import subprocess
    ruleset = sandbox_ruleset(cfg)
    if ruleset is None:
        return subprocess.Popen(argv, **options)
    # The child only calls functions looked up here: a lock held at the fork cannot stop it.
    libc, u = ctypes.CDLL(None, use_errno=True), ctypes.c_ulong
    calls = [(libc.prctl, 38, u(1), u(0), u(0), u(0)),                         # PR_SET_NO_NEW_PRIVS
             (libc.syscall, ctypes.c_long(446), ctypes.c_long(ruleset), u(0))]  # restrict_self
    program, fprog = socket_filter() if sandbox_of(cfg)[1] else (None, None)   # alive till exec
    if program:
        calls.append((libc.prctl, 22, u(2), fprog, u(0), u(0)))   # PR_SET_SECCOMP, MODE_FILTER

    def confine():
        """Enforce the sandbox on this process: the command's, never bantam's."""
        if any(call[0](*call[1:]) for call in calls):
            os.write(2, b"bantam: the sandbox could not be enforced: the command did not run\n")
            os._exit(126)
    try:
        return subprocess.Popen(argv, preexec_fn=confine, **options)
    finally:
        os.close(ruleset)


def check_sandbox(cfg):
    """Stop (ConfigError: exit 2) before any request when cfg's sandbox cannot be had here."""
    ruleset = sandbox_ruleset(cfg)
    return ruleset is None or os.close(ruleset)


def sandbox_words(cfg):
    """What cfg's sandbox refuses, in one line ('' without one)."""
    mode, closed = sandbox_of(cfg)
    where = "sandbox=%s: writes outside %s are refused" % (mode, ", ".join(sandbox_roots(cfg)[0]))
    return "; ".join([where] * bool(mode) + ["sandbox_network=false: no sockets"] * closed)


def sandbox_refusal(cfg, args):
    """Why the write tool may not write args' path (real) under the commands' rule, else ''."""
    try:
        path = os.path.realpath(path_argument(args)) if sandbox_of(cfg)[0] else ""
    except ValueError:
        return ""   # the tool says what is wrong with its arguments
    roots, hidden = sandbox_roots(cfg) if path else ([], [])
    if path and (within(path, hidden) or not within(path, roots)):
        return "error: %s: %s" % (sandbox_words(dict(cfg, sandbox_network=True)), path)
    return ""


# ----------------------------------------------------------------------------------------
# The agentic loop
# ----------------------------------------------------------------------------------------

def AL(cfg, messages, on_event=None):
    """The Bantam agentic loop: ask the model, run the tool calls it makes, append their
    results, and repeat until it makes none (or a budget runs out: then one last call
    asks for the best answer without tools). Returns messages. Every event of the run
    goes to on_event (else cfg["run"]["emit"], else the plain view)."""
    cfg = enter_run(cfg, on_event)
    emit(cfg, "turn_start", messages=len(messages))
    try:
        for _ in range(cfg["max_al_iterations"]):
            try:
                reply = next_reply(cfg, messages)       # (an empty reply gets one nudge)
            except ApiError as e:                       # max_turn_seconds ran out mid-reply
                if e.kind != "budget":
                    raise
                return final_answer(cfg, messages, *time_up(cfg))
            if not reply["content"] and not reply.get("tool_calls"):
                note(cfg, "[the model sent an empty reply]")
                return messages                         # never store an empty assistant message
            args = check_calls(reply)
            add_message(cfg, messages, reply)
            calls = reply.get("tool_calls")
            if not calls:
                return messages
            try:
                for call, arg in zip(calls[:cfg["max_calls_per_reply"]], args):
                    add_message(cfg, messages, run_tool_call(cfg, call, arg))
                answer_extra_calls(cfg, messages, calls)
            finally:                                    # one tool message per call id, always
                answer_unanswered(cfg, messages, calls)
            spent = over_budget(cfg, calls[:cfg["max_calls_per_reply"]], messages)   # or a cycle
            if spent:
                return final_answer(cfg, messages, *spent)
        limit = cfg["max_al_iterations"]
        return final_answer(cfg, messages, "max_al_iterations", limit, limit)
    finally:
        leave_run(cfg, sys.exc_info()[1])


def answer_extra_calls(cfg, messages, calls):
    """Answer the calls of a reply beyond max_calls_per_reply: not run, and why (said once)."""
    limit = cfg["max_calls_per_reply"]
    why = "not run: the reply made %d tool calls, over max_calls_per_reply=%d" % (len(calls), limit)
    if calls[limit:]:
        note(cfg, "[%d tool calls %s]" % (len(calls) - limit, why), "warning")
    for call in calls[limit:]:
        add_message(cfg, messages, tool_message(call["id"], "error: " + why))


def enter_run(cfg, on_event=None):
    """cfg for one AL run (a copy: the caller's cfg is not changed), holding where the events
    go, the subagent depth and the turn's tool-output files. A subagent's run is its
    parent's, one level deeper; a turn's starts from the process's (main's: cfg["run"])."""
    parent = cfg.get("run") or {}
    if "turn" in parent:
        run = dict(parent, depth=parent["depth"] + 1, streak=(None, 0), budget=None)
    else:   # turn: what the turn has spent (and said once), shared by its subagents
        run = dict(parent, emit=on_event or parent.get("emit") or plain_view(cfg), depth=0,
                   spill=[], streak=(None, 0), budget=None,
                   turn={"started": time.monotonic(), "tokens": 0, "cost": 0.0, "repairs": 0,
                         "noted": set()},
                   approved=parent.get("approved", set()))
    return dict(cfg, run=run)


def leave_run(cfg, stop):
    """The run is over: say how it ended; the top run removes the turn's tool-output files."""
    if not cfg["run"]["depth"]:
        remove_spill_files(cfg["run"]["spill"])
    status = (("budget" if cfg["run"]["budget"] else "done") if stop is None
              else "interrupted" if isinstance(stop, KeyboardInterrupt)
              else "failed" if isinstance(stop, BantamError) else "stopped")
    emit(cfg, "turn_end", status=status,
         error=redact_all(cfg, str(stop)) if isinstance(stop, BantamError) else None)


def add_message(cfg, messages, message):
    """Append a message to the conversation, and say so (the session file is saved on it)."""
    messages.append(message)
    emit(cfg, "message", message=message)


def next_reply(cfg, messages):
    """The model's next reply, with the repairs a turn may need: ask once more after an empty
    reply (see repair_call), read a tool call the model wrote as text, keep the text shown
    before a Ctrl+C."""
    try:
        reply = text_tool_call(cfg, chat_compacting(cfg, messages))
        if not reply["content"] and not reply.get("tool_calls") and repair_call(
                cfg, "[the model sent an empty reply: asking it once more]"):
            reply = text_tool_call(cfg, chat_compacting(cfg, messages, EMPTY_NUDGE))
    except KeyboardInterrupt:
        keep_interrupted_text(cfg, messages)   # text already shown stays, tool calls go
        raise
    return reply


def chat_compacting(cfg, messages, nudge=None):
    """chat() (a nudge of bantam's is sent but not stored), compacting the conversation once
    when it overflows the context window."""
    try:
        return chat(cfg, messages, nudge=nudge)
    except ApiError as e:
        if e.kind != "overflow":
            raise
        note(cfg, "[%s: the context window is full; compacting and trying again]" % e, "warning")
        compact(cfg, messages, current_prompt(messages))
    try:
        return chat(cfg, messages, nudge=nudge)
    except ApiError as again:
        if again.kind == "overflow":
            raise ApiError("%s (even after compacting the conversation)" % again)
        raise


def current_prompt(messages):
    """The text of the last user message (the request the loop is working on), or None."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return m["content"] if isinstance(m.get("content"), str) else None
    return None


def keep_interrupted_text(cfg, messages):
    """After Ctrl+C mid-reply, store what the user saw, marked as interrupted."""
    text = cfg["run"].pop("partial_reply", "")
    if text:
        add_message(cfg, messages, {"role": "assistant", "content": text + "\n" + INTERRUPTED})


TEXT_CALL = re.compile(r"^\s*(?:<tool_call>\s*(\{.*\})\s*</tool_call>|```(?:json)?\s*(\{.*\})\s*```"
                       r"|(\{.*\}))\s*$", re.S)


def text_tool_call(cfg, reply):
    """With text_tool_calls=true, turn a reply that is only a tool call written as text
    (<tool_call>{"name":..,"arguments":..}</tool_call> or bare JSON) into a real one."""
    match = not reply.get("tool_calls") and TEXT_CALL.match(reply["content"] or "")
    try:
        data = json.loads(next(g for g in match.groups() if g)) if match else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return reply
    data = data.get("function", data) if isinstance(data.get("function"), dict) else data
    name, args = data.get("name"), data.get("arguments", data.get("parameters"))
    if name not in TOOLS or not isinstance(args, (dict, str)):
        return reply
    if not cfg["text_tool_calls"]:
        note_once(cfg, "text_tool_hint", "[hint: the reply looks like a tool call written as "
                  "text; set text_tool_calls=true in model.cfg to run such replies]", "info")
        return reply
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_" + os.urandom(12).hex(), "type": "function",
        "function": {"name": name, "arguments": arguments}}]}


# ----------------------------------------------------------------------------------------
# Approvals and budgets: what may run, and what a turn may spend
# ----------------------------------------------------------------------------------------
# approve=auto runs every command (the spec); ask asks the user (cfg["run"]["approver"], at a
# terminal); deny runs none. The allow and deny patterns decide first (deny wins), matched
# against each simple command (shell_commands); what is beyond that analysis never runs
# unasked while a deny pattern is in force. read and write are decided by path. Budgets are
# per turn and shared with the turn's subagents; a stop makes one last call without tools
# for the best answer from what the model has. Nudges after an empty reply and that final
# call come from a budget of their own (max_repair_calls): a model that keeps answering
# empty must not loop on nudges, and repairs must not eat the budgets they repair.

EMPTY_NUDGE = ("Your last reply was empty. Continue with the task: answer the user, "
               "or call a tool if you need one.")
FINAL_PROMPT = ("You have reached a limit of this session (%s) and cannot call tools any "
                "more. From what you have found so far, give your best final answer to the "
                "user's request, and say briefly what is left undone.")
BUDGETS = {   # key: how its use is said
    "max_turn_tokens": "%s tokens this turn", "max_turn_seconds": "%s s this turn",
    "max_cost": "$%s this turn", "max_identical_calls": "the same tool call %s times in a row",
    "max_al_iterations": "%s model calls"}


def note_once(cfg, key, text, level):
    """A note said once a turn (each time outside a turn: a summary, a /command)."""
    turn = (cfg.get("run") or {}).get("turn")   # (main's run, outside AL, has none)
    noted = turn["noted"] if turn else set()
    if key not in noted:
        noted.add(key)
        note(cfg, text, level)


def call_cost(cfg, prompt, cached, completion):
    """Dollars for one model call at the configured prices; None when no price is set."""
    if not (cfg["price_in"] or cfg["price_out"] or cfg["price_cached"]):
        return None
    cached = cached or 0
    cached_price = cfg["price_cached"] or cfg["price_in"]
    return ((prompt - cached) * cfg["price_in"] + cached * cached_price
            + completion * cfg["price_out"]) / 1e6


def spend(cfg, tokens, cost):
    """Add one model call's tokens and cost to the turn's tally (calls outside AL: none)."""
    run = cfg.get("run")
    if run and "turn" in run:
        run["turn"]["tokens"] += tokens
        run["turn"]["cost"] += cost or 0.0


def time_up(cfg):
    """(key, limit, used) when the turn has used up its max_turn_seconds, else None."""
    turn, limit = (cfg.get("run") or {}).get("turn"), cfg.get("max_turn_seconds")
    used = turn and limit and time.monotonic() - turn["started"]
    return ("max_turn_seconds", limit, round(used, 1)) if used and used >= limit else None


def over_budget(cfg, calls, messages):
    """After a step's tool calls: (key, limit, used) of the first budget the turn has used
    up, else None. Counts the same call with the same arguments and the same result made
    again and again (a model polling a log sees new output each time: not a cycle)."""
    run, turn = cfg["run"], cfg["run"]["turn"]
    last, count = run["streak"]
    results = {}
    for m in reversed(messages):   # the tool messages of this step
        if m.get("role") != "tool":
            break
        results[m.get("tool_call_id")] = m.get("content")
    for call in calls:
        key = (call["function"]["name"], call["function"]["arguments"], results.get(call["id"]))
        last, count = key, (count + 1 if key == last else 1)
    run["streak"] = (last, count)
    used = {"max_turn_tokens": turn["tokens"],
            "max_turn_seconds": round(time.monotonic() - turn["started"], 1),
            "max_cost": round(turn["cost"], 6), "max_identical_calls": count}
    for key, value in used.items():
        if cfg[key] and value >= cfg[key]:
            return key, cfg[key], value
    return None


def final_answer(cfg, messages, key, limit, used):
    """A budget stopped the loop while the model still wanted tools: say so, then ask once,
    without tools and with a short timeout, for the best answer from what it has."""
    cfg["run"]["budget"] = key
    emit(cfg, "budget_stop", reason=key, limit=limit, used=used)
    asking, words = repair_call(cfg, None), BUDGETS[key] % used
    if used == 1:   # "1 model call"
        words = words.replace("calls", "call").replace("times", "time")
    note(cfg, "[stopped: %s (%s=%s)%s]" % (
        words, key, limit, "; asking for a final answer" if asking else ""), "warning")
    if not asking:
        return messages
    wait = cfg["final_answer_timeout"]
    quick = dict(cfg, backoff=[], first_byte_timeout=min(cfg["first_byte_timeout"], wait),
                 timeout=min(cfg["timeout"], wait), max_turn_seconds=0)
    try:
        reply = chat(quick, messages, tools=False, nudge=FINAL_PROMPT % words)
    except ApiError as e:
        note(cfg, "[no final answer: %s]" % e)
        return messages
    reply.pop("tool_calls", None)   # nothing runs any more
    if reply["content"]:
        add_message(cfg, messages, reply)
    return messages


def repair_call(cfg, say_why):
    """May the turn spend one more repair call (a nudge, the final answer)? Counts it."""
    turn = cfg["run"]["turn"]
    turn["repairs"] += 1
    if turn["repairs"] > cfg["max_repair_calls"]:
        return False
    if say_why:
        note(cfg, say_why, "warning")
    return True


def approval(cfg, call_id, name, args):
    """May this tool call run? (args to run it with, or None; text for the model to read
    first, or the refusal). Shell commands, reads and writes are decided; each is an event."""
    command = args.get("command") if name == "shell_exec" else None
    try:
        path = os.path.abspath(path_argument(args)) if name in ("read", "write") else None
    except ValueError:
        return args, ""   # the tool says what is wrong
    if not isinstance(command, str) and path is None:
        return args, ""
    decision, rule, reason = decide_file(cfg, name, path) if path else decide(cfg, command.strip())
    edited = None
    if decision == "ask":
        if name == "write" or reason:   # what is asked about, and why
            note(cfg, write_preview(path, args, reason) if name == "write" else "[%s: %s]" % (
                path or "bantam cannot check this command against its patterns", reason),
                 "warning")
        decision, reason, edited = user_decision(cfg, command,
                                                 path and name.title() + "? [y/N/a] ")
        rule = "asked"
    emit(cfg, "approval", id=call_id, tool=name,
         command=None if path else redact_all(cfg, command), path=path, decision=decision,
         rule=rule, reason=reason, edited=redact_all(cfg, edited) if edited else None)
    if decision == "always":
        cfg["run"]["approved"].add(command if path is None else name + ":" + path)
    if decision == "edit":
        told = "[the user changed the command before it ran, to:\n%s]\n\n" % edited
        return dict(args, command=edited), told
    if decision == "refuse":
        return None, refusal(name, rule, reason)
    return args, ""


def refusal(name, rule, reason):
    """The tool result of a refused call: who refused it and why, for the model to adjust."""
    what = "command" if name == "shell_exec" else name
    if rule == "asked":
        return "[the user did not let this %s run%s]" % (what, ": " + reason if reason else "")
    off = {"command": "running commands", "write": "writing files"}.get(what, "reading elsewhere")
    text = {
        "no terminal": "this %s needs the user's approval, and no one is there to ask" % what,
        ".git": "write keeps out of .git/ (git runs code from there: hooks, fsmonitor); the user "
                "may allow a path there (allow=write:PATH)",
        "unchecked": "bantam cannot check this command against its deny patterns",
        "approve=deny": "%s is turned off in bantam's settings (approve=deny)" % off}.get(rule)
    text = text or "the %s matches the pattern %r of bantam's deny setting" % (
        "command" if what == "command" else "path", rule.partition(" ")[2])
    return "[not run: %s%s]" % (text, " (%s)" % reason if reason else "")


def patterns(cfg, key, tool=None):
    """The deny or allow patterns for shell commands (tool None), or those naming a file tool
    (write:PATH, read:PATH) with their paths made absolute."""
    found = [p.strip() for p in cfg[key].split(",") if p.strip()]
    if tool is None:
        return [p for p in found if not p.startswith(("read:", "write:"))]
    return [(p, os.path.abspath(os.path.expanduser(p.partition(":")[2])))
            for p in found if p.startswith(tool + ":")]


def decide(cfg, command):
    """(decision, rule, reason) for a command: deny patterns refuse it if any simple command
    matches; allow ones run it if every one does and all is within analysis; else approve."""
    found, unknown = shell_commands(command)
    deny, allow = patterns(cfg, "deny"), patterns(cfg, "allow")
    for pattern in deny:
        for words in found + [[command]]:   # the line as written, too
            why = pattern_hit(words, pattern)
            if why:
                return "refuse", "deny " + pattern, why if why != command else None
    hits = [next((p for p in allow if pattern_hit(words, p)), None) for words in found]
    if found and all(hits) and not unknown:
        return "run", "allow " + ", ".join(dict.fromkeys(hits)), None
    if command in cfg["run"]["approved"]:
        return "run", "always", None
    if cfg["approve"] == "ask" and not cfg["run"].get("approver"):
        note_once(cfg, "no terminal", "[approve=ask, but there is no terminal to ask: commands "
                  "are refused]", "warning")
        return "refuse", "no terminal", None
    why = unknown[0] if unknown else None
    if cfg["approve"] == "auto" and why and deny:
        asked = cfg["run"].get("approver")
        return ("ask", "approve=auto", why) if asked else ("refuse", "unchecked", why)
    if cfg["approve"] == "deny" and not why and allow:
        why = next(("%s matches no allow pattern" % " ".join(w) for w, hit in zip(found, hits)
                    if not hit), None)
    decision = {"auto": "run", "ask": "ask", "deny": "refuse"}[cfg["approve"]]
    return decision, "approve=" + cfg["approve"], None if decision == "run" else why


def pattern_hit(words, pattern):
    """Why a simple command matches a pattern (its text; "unlink deletes files, as rm does"),
    else None. `rm *` also matches a bare `rm`, as xargs runs it."""
    import fnmatch
    forms = {" ".join(words): " ".join(words)}
    if words[0] in DELETERS or words[0] == "find" and "-delete" in words:
        forms[" ".join(["rm"] + words[1:])] = "%s deletes files, as rm does" % words[0]
    return next((why for text, why in forms.items() if fnmatch.fnmatchcase(text, pattern)
                 or fnmatch.fnmatchcase(text + " ", pattern)), None)


# The shell-command splitter: what the patterns are matched against. Not a shell: it finds the
# programs a command line runs, and says when it cannot know (then the patterns cannot either).
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"}
INTERPRETER = re.compile(r"(python|pypy|perl|ruby|node|nodejs|bun|php|lua|tclsh|Rscript)[\d.]*$")
KEYWORDS = set("if then else elif fi do done while until esac ! { }".split())
DELETERS = {"unlink", "shred", "rmdir"}   # they delete files: a deny pattern for rm covers them
WRAPPERS = {   # program: (its short options that take a value, words before the command it runs)
    "env": ("uCS", 0), "command": ("", 0), "builtin": ("", 0), "exec": ("a", 0), "nice": ("n", 0),
    "nohup": ("", 0), "timeout": ("sk", 1), "sudo": ("ugpCDrtUT", 0), "doas": ("uC", 0),
    "xargs": ("aEdILnPs", 0), "time": ("fo", 0), "stdbuf": ("ioe", 0), "setsid": ("", 0),
    "ionice": ("cnp", 0)}
SHELL_TOKEN = re.compile(   # one token outside double quotes; "plain" ends at anything special
    r"(?P<space>[ \t]+)|(?P<sq>'[^']*'?)|(?P<dq>\")|(?P<esc>\\.?)|(?P<sub>\$\(\(|\$\(|[<>]\(|`)"
    r"|(?P<redir>\d*(?:&>>?|<<<|<<-|<<|<>|>>|>\||>&|<&|>|<))|(?P<op>&&|\|\||;;&?|;&|\|&|[;&|\n()])"
    r"|(?P<plain>[^\s\"'\\$`;&|()<>]+|.)", re.S)
QUOTED_TOKEN = re.compile(   # inside double quotes
    r"(?P<dq>\")|(?P<esc>\\.?)|(?P<sub>\$\(\(|\$\(|`)|(?P<plain>[^\"\\$`]+|.)", re.S)
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
MAX_NESTING = 16


def shell_commands(text):
    """The simple commands a shell command line runs, as word lists (quotes and backslashes
    resolved, the program by its base name, leading assignments dropped, redirections last,
    a wrapper and the command it runs each listed), and the reasons it is beyond analysis."""
    found, unknown = [], []
    shell_parse(text, 0, 0, found, unknown)
    return found, unknown


def shell_parse(text, i, depth, found, unknown, closer=False):
    """Split text[i:] into simple commands (added to found; what bantam cannot know, to
    unknown), up to an unmatched ")" when closer: the index after it."""
    if depth > MAX_NESTING:
        unknown.append("commands nested too deep")
        return len(text)
    words, redirs, heredocs, parens, word, redir, quoted, dq = [], [], [], 0, None, None, 0, 0
    while i <= len(text):   # the end of the text acts as one last operator
        m = (QUOTED_TOKEN if dq else SHELL_TOKEN).match(text, i) if i < len(text) else None
        kind, token, start = m.lastgroup if m else "op", m.group() if m else "", i
        i = m.end() if m else i + 1
        if kind == "plain" and token[0] == "#" and word is None and not dq:   # a comment
            i = text.find("\n", start) % (len(text) + 1)
        elif kind in ("sq", "dq", "esc", "plain", "sub"):   # a piece of a word
            after = token[1:]
            if kind == "sub":
                token, i = substitution(text, start, token, depth, found, unknown)
            elif kind == "sq":
                closed = len(token) > 1 and token[-1] == "'"
                token = after[:-1] if closed else after
                if not closed:
                    unknown.append("an unclosed quote")
            elif kind == "esc":
                token = "" if after == "\n" else after if not dq or after in '$`"\\' else token
            dq, quoted = dq != (kind == "dq"), quoted or kind in ("sq", "dq", "esc")
            word = [] if word is None else word
            word.append("" if kind == "dq" else token)
        else:
            if word is not None:   # a word ends: an argument, or what a redirection names
                (redirs if redir else words).append((redir or "") + "".join(word))
                if redir and redir.lstrip("0123456789") in ("<<", "<<-"):
                    heredocs.append(("".join(word), redir.endswith("-"), not quoted))
                word, redir, quoted = None, None, False
            if kind == "redir":
                redir = token
            elif kind == "op":
                simple_command(words, redirs, depth, found, unknown)
                words, redirs, redir = [], [], None
                if token == ")" and closer and not parens:
                    return i
                parens = parens + 1 if token == "(" else max(0, parens - (token == ")"))
                for delimiter, tabs, expands in heredocs if token == "\n" else ():   # data: skipped
                    while i < len(text):
                        end = text.find("\n", i) % (len(text) + 1)
                        line, i = text[i:end], end + 1
                        if (line.lstrip("\t") if tabs else line) == delimiter:
                            break
                        if expands and ("$(" in line or "`" in line):
                            unknown.append("a heredoc with a command substitution")
                heredocs = heredocs if token != "\n" else []
    if dq or closer:
        unknown.append("an unclosed quote" if dq else "an unclosed $(")
    return len(text)


def substitution(text, start, opener, depth, found, unknown):
    """The $(...), <(...), >(...), `...` or $((...)) opening at start, its commands added to
    found: (its text, the index after it)."""
    if opener == "$((":
        end = text.find("))", start) % (len(text) + 1) + 2
        if "$(" in text[start + 3:end] or "`" in text[start + 3:end]:
            unknown.append("a command substitution inside arithmetic")
    elif opener == "`":
        m = re.compile(r"`((?:[^`\\]|\\.)*)(`?)", re.S).match(text, start)
        shell_parse(re.sub(r"\\([`$\\])", r"\1", m.group(1)), 0, depth + 1, found, unknown)
        if not m.group(2):
            unknown.append("an unclosed backtick")
        end = m.end()
    else:
        end = shell_parse(text, start + 2, depth + 1, found, unknown, closer=True)
    return text[start:end], end


def simple_command(words, redirs, depth, found, unknown):
    """Add a simple command to found, then what it runs when it is a wrapper, a shell given
    -c or find -exec; say in unknown what it runs beyond analysis."""
    while words and (words[0] in KEYWORDS or ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words or words[0] in ("for", "select", "case", "function"):
        return   # a loop's or a case's head: its substitutions are already found
    if depth > MAX_NESTING:
        return unknown.append("commands nested too deep")
    program, args = os.path.basename(words[0]) or words[0], words[1:]
    found.append([program] + args + redirs)
    operand = next((n for n, arg in enumerate(args) if arg[:1] != "-"), len(args))   # past options
    if re.search(r"[$`*?{]|\[.", words[0]) and words[0] != "[[":
        unknown.append("the program is computed: %s" % words[0])
    elif program in ("eval", "source", "."):
        unknown.append("%s runs code bantam cannot see" % program)
    elif program in SHELLS and shell_script(args) is not None:
        shell_parse(shell_script(args), 0, depth + 1, found, unknown)
    elif program in SHELLS:
        unknown.append("%s runs a script or what it reads" % program)
    elif INTERPRETER.match(program):
        code = [a for a in args[:operand] if re.match(r"-[^-]*[ceEpr]|--eval|--print", a)]
        if code or operand == len(args) or any(r.lstrip("0")[:1] == "<" for r in redirs):
            unknown.append("%s %s runs code given inline" % (program, code[0]) if code else
                           "%s runs code from its input" % program)
    elif program in ("awk", "gawk", "mawk") and any("system" in a or "|" in a for a in args):
        unknown.append("%s runs commands" % program)
    elif program == "find":
        for n, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir"):
                end = next((k for k in range(n + 1, len(args)) if args[k] in (";", "+")), len(args))
                simple_command(args[n + 1:end], [], depth + 1, found, unknown)
    elif program in WRAPPERS:
        takes, skip = WRAPPERS[program]
        n = 0
        while n < len(args) and args[n][:1] == "-" and args[n] not in ("-", "--"):
            if program == "env" and re.match(r"-[^-]*S|--split", args[n]):
                unknown.append("env -S splits a string into a command")
            cluster = "" if args[n][:2] == "--" else args[n][1:]
            taken = next((k for k, letter in enumerate(cluster) if letter in takes), None)
            n += 2 if taken == len(cluster) - 1 else 1   # the option's value is the next word
        n += args[n:n + 1] == ["--"]
        simple_command(args[n + skip:], redirs, depth + 1, found, unknown)


def shell_script(args):
    """The command string of `sh [options] -c STRING`, else None (a script file, or stdin)."""
    n = 0
    while n < len(args) and args[n][:1] in ("-", "+") and args[n] != "--":
        n += 2 if args[n] in ("-o", "+o", "-O", "+O") else 1   # these take a value
    with_c = any("c" in a for a in args[:n] if a[:1] in ("-", "+") and a[:2] != "--")
    n += args[n:n + 1] == ["--"]
    return args[n] if with_c and n < len(args) else None


def user_decision(cfg, command, question=None):
    """Ask the user (cfg["run"]["approver"]) about a command, or a file tool's call (its question):
    (decision, reason, edited command). y(es), a(lways), e(dit), n(o)/Enter; else a reason."""
    answer = cfg["run"]["approver"](question or "Run? [y/N/a/e] ", "")
    word, _, rest = (answer or "").strip().partition(" ")
    word = word.lower().rstrip(",:")
    if word in ("y", "yes"):
        return "run", None, None
    if word in ("a", "always"):
        return "always", None, None
    if word in ("e", "edit") and not question:
        edited = cfg["run"]["approver"]("Command: ", command)
        if edited and edited.strip() and edited != command:
            return "edit", None, edited
        return ("run", None, None) if edited == command else ("refuse", None, None)
    reason = rest.strip() if word in ("n", "no") else (answer or "").strip()
    return "refuse", reason or None, None


def decide_file(cfg, tool, path):
    """(decision, rule, reason) for a read or write of an absolute path: its deny and allow
    patterns, then where it leads (.git/, outside the working folder) and approve."""
    import fnmatch
    real = os.path.realpath(path)
    for key, decision, names in (("deny", "refuse", [path, real]), ("allow", "run", [real])):
        for pattern, glob in patterns(cfg, key, tool):   # allow: only where the path leads
            if any(fnmatch.fnmatchcase(name, glob) for name in names):
                return decision, "%s %s" % (key, pattern), None
    if tool + ":" + path in cfg["run"]["approved"]:
        return "run", "always", None
    # a symlink in the folder that leads out: write_tool refuses to follow it, and says so
    inside = in_working_folder(real) or tool == "write" and in_working_folder(path)
    if tool == "write" and ".git" in (path + os.sep + real).split(os.sep):
        return "refuse", ".git", None
    if inside and tool == "read" or cfg["approve"] == "auto" and (inside or tool == "read"):
        return "run", "approve=auto" if cfg["approve"] == "auto" else "working folder", None
    if cfg["approve"] == "deny":
        return "refuse", "approve=deny", None
    if not cfg["run"].get("approver"):
        return "refuse", "no terminal", None if inside else "outside the working folder"
    return "ask", "approve=" + cfg["approve"], None if inside else "outside the working folder"


def write_preview(path, args, reason):
    """What a write would do, for its question: the path (and why it is asked), a short diff."""
    import difflib
    new, old = str(args.get("content", "")).splitlines(), []
    whole = all(v is None or k in ("filePath", "path", "content") for k, v in args.items())
    try:   # a splice shows only what it adds
        if whole and os.path.isfile(path) and os.path.getsize(path) < 1 << 20:
            with open(path, encoding="utf-8", errors="replace") as f:
                old = f.read().splitlines()
    except OSError:
        pass
    lines = [line[:200] for line in difflib.unified_diff(old, new, lineterm="", n=1)][2:]
    more = ["... %d more lines" % (len(lines) - 12)] if len(lines) > 12 else []
    return "\n".join(["write " + path + (" (%s)" % reason if reason else "")] + lines[:12] + more)


# ----------------------------------------------------------------------------------------
# Usage, the context window and compaction
# ----------------------------------------------------------------------------------------

COMPACT_PROMPT = ("Summarize this conversation so that it can continue from the summary alone: "
                  "the user's goals and requests, decisions made, facts learned, files and "
                  "commands involved, the current state of the work and the next steps. Be "
                  "complete but concise.")
SUMMARY_PROMPT = ("Write a title for this conversation in at most ten words. "
                  "Reply with the title only.")


def context_window(cfg):
    """The model's context window in tokens: what the server reports, else the
    context_window key. Looked up once per process (and learned from overflow errors)."""
    key = (cfg["endpoint"], cfg["model"])
    if key not in LEARNED["windows"]:
        LEARNED["windows"][key] = discover_window(cfg) or cfg["context_window"]
    return LEARNED["windows"][key]


def discover_window(cfg):
    """The window the server reports for the model, or None: a field of its GET /models
    entry, else LiteLLM's /model/info, else (for a server on this machine or network) the
    local servers' own APIs."""
    model = cfg["model"]
    for entry in list_models(cfg, quiet=True):
        if entry.get("id") == model:
            top, meta = (entry.get(k) if isinstance(entry.get(k), dict) else {}
                         for k in ("top_provider", "meta"))
            window = first_count(entry.get("context_length"), entry.get("context_window"),
                                 entry.get("max_model_len"), entry.get("max_context_length"),
                                 entry.get("loaded_context_length"), top.get("context_length"),
                                 meta.get("n_ctx"))   # llama-server's meta.n_ctx (not n_ctx_train)
            if window:
                return window
    # The LiteLLM proxy (often on a host of its own): GET {endpoint}/model/info {"data":
    # [{"model_name": m, "model_info": {"max_input_tokens": 4096, ...}}]}; else a 404, once
    for entry in entries(get_json(cfg, "GET", "/model/info"), "data", model, "model_name"):
        about = entry.get("model_info")
        window = first_count(about.get("max_input_tokens") if isinstance(about, dict) else None)
        if window:
            return window
    from urllib.parse import urlsplit
    if not private_host(urlsplit(cfg["endpoint"]).hostname or ""):
        return None   # a cloud API: its /models said nothing, the local APIs below do not exist
    # llama.cpp: GET /props {"default_generation_settings": {"n_ctx": 2048, ...}, ...}
    props = get_json(cfg, "GET", "/props", root=True)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        window = first_count(props.get("n_ctx"),
                             settings.get("n_ctx") if isinstance(settings, dict) else None)
        if window:
            return window
    # Ollama: POST /api/show {"model": m} -> {"parameters": "num_ctx 8192\n...", "model_info":
    # {"llama.context_length": 131072, ...}}; num_ctx is the window it runs with, else the one
    # of the loaded model (GET /api/ps), else the model's own limit (the most it can run with).
    shown = get_json(cfg, "POST", "/api/show", {"model": model, "name": model}, root=True)
    if isinstance(shown, dict):
        match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str(shown.get("parameters") or ""))
        if match:
            return int(match.group(1))
        loaded = get_json(cfg, "GET", "/api/ps", root=True)
        for entry in entries(loaded, "models", model, "name", "model"):
            if first_count(entry.get("context_length")):
                return entry["context_length"]
        info = shown.get("model_info") if isinstance(shown.get("model_info"), dict) else {}
        window = first_count(*[v for k, v in info.items() if k.endswith(".context_length")])
        if window:
            return window
    # LM Studio: GET /api/v0/models {"data": [{"id": m, "loaded_context_length": 4096, ...}]}
    for entry in entries(get_json(cfg, "GET", "/api/v0/models", root=True), "data", model, "id"):
        return first_count(entry.get("loaded_context_length"), entry.get("max_context_length"))
    return None


def entries(answer, key, value, *fields):
    """The objects listed under key in a JSON answer whose field (one of fields) is value."""
    listed = answer.get(key) or () if isinstance(answer, dict) else ()
    return [e for e in listed if isinstance(e, dict) and value in map(e.get, fields)]


def first_count(*values):
    """The first value that is a positive whole number, or None."""
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0),
                None)


def private_host(host):
    """True for a host on this machine or a private network (where local servers run)."""
    import ipaddress
    try:
        address = ipaddress.ip_address(host)
        return address.is_private or address.is_loopback or address.is_link_local
    except ValueError:
        return "." not in host or host.endswith(
            (".localhost", ".local", ".lan", ".internal", ".home.arpa"))


# What overflow errors say about the window: "maximum context length is 2048 tokens" (OpenAI,
# vLLM, DeepSeek, llama-cpp-python), "maximum prompt length is 2048" (xAI), "exceed context
# window of 2048", "the available context size (2048 tokens)" and "n_ctx": 2048 (llama.cpp),
# "context length of only 2048", "n_ctx: 2048)" (LM Studio), "with 2048 maximum context
# length" (Mistral), "maximum number of tokens allowed (2048)" (Gemini), "> 2048 maximum"
# (Anthropic), "model token limit: 2048" (Moonshot).
WINDOW_IN_ERROR = re.compile(
    r"(?:maximum (?:context|prompt) length is|context window of|context length of(?: only)?"
    r"|available context size \(|maximum number of tokens allowed \(|tokens? > |model token limit:"
    r"|\bn_ctx\"?:)\s*(\d+)|(\d+) maximum context length", re.I)


def learn_window(cfg, text):
    """Remember the window an overflow error names, for the rest of the process (only ever
    smaller: an error never makes the window grow)."""
    match = WINDOW_IN_ERROR.search(text)
    if match:
        key = (cfg["endpoint"], cfg["model"])
        window = int(match.group(1) or match.group(2))
        LEARNED["windows"][key] = min(window, LEARNED["windows"].get(key) or window)


def get_json(cfg, method, path, body=None, root=False, what=None):
    """The JSON answer to a small request to the server; None when it fails (with a note
    saying that we could not `what`, when given)."""
    import http.client
    try:
        data = json.dumps(body).encode() if body else None
        response = http_request(cfg, method, path, data, root=root)
        data = response.read()   # the whole answer: the connection stays usable
        if response.status != 200:
            raise LookupError("HTTP %d %s" % (response.status, response.reason))
        return json.loads(data)
    except (OSError, ValueError, LookupError, http.client.HTTPException) as e:
        if not isinstance(e, LookupError):
            drop_connection(cfg)
        if what:
            note(cfg, "error: cannot %s at %s%s: %s" % (
                what, "" if root else cfg["endpoint"], path, e))
        return None


def list_models(cfg, quiet=False):
    """The entries of GET {endpoint}/models ([] and a note on failure, unless quiet)."""
    models = get_json(cfg, "GET", "/models", what=None if quiet else "list models")
    models = models.get("data", models.get("models")) if isinstance(models, dict) else models
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def usage_numbers(usage):
    """(prompt, cached or None, completion) tokens from a usage report of any provider."""
    prompt = usage.get("prompt_tokens") or usage.get("input_tokens") or 0
    completion = usage.get("completion_tokens") or usage.get("output_tokens") or 0
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    for key in ("prompt_cache_hit_tokens", "cached_tokens", "cache_read_input_tokens"):
        if cached is None and isinstance(usage.get(key), int):
            cached = usage[key]
    return prompt, cached, completion


def report_context(cfg, usage, cost=None, session_cost=None):
    """Emit the "context" event (the token line) for the usage event of a turn's last model
    call: its figures, the share of the context window its prompt fills, and (when prices
    are set) what the turn and the session cost. Returns the share."""
    window = context_window(cfg)
    share = usage["prompt_tokens"] / window if window else 0.0
    emit(cfg, "context", model=usage["model"], prompt_tokens=usage["prompt_tokens"],
         cached_tokens=usage["cached_tokens"], completion_tokens=usage["completion_tokens"],
         estimated=usage["estimated"], window=window, share=share,
         cost=None if usage["cost"] is None else round(cost, 6),
         session_cost=None if usage["cost"] is None else round(session_cost, 6))
    return share


def estimate_tokens(chars):
    """Tokens in a text of this many characters, roughly (about four characters a token)."""
    return (chars + 3) // 4


def text_size(messages):
    """The characters of text in messages (contents and tool-call arguments), plus a few for
    each message's framing: what the model reads of them."""
    size = 0
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"text": content or ""}]
        size += 16 + sum(len(str(p.get("text") or "")) for p in parts if isinstance(p, dict))
        size += sum(len(c["function"]["arguments"]) + 32 for c in m.get("tool_calls") or ())
    return size


def compact(cfg, messages, prompt=None):
    """Replace messages, in place, by [system, user: summary of the conversation], followed
    in the same message by prompt (the request in progress) word for word when it fits in
    half the window. The summary request is trimmed (oldest tool results first) until it
    fits; no endless loop."""
    keep = prompt if prompt and estimate_tokens(len(prompt)) <= context_window(cfg) // 2 else None
    request = [dict(m) for m in messages]
    if keep and request[-1].get("role") == "user" and request[-1].get("content") == keep:
        request.pop()   # the prompt follows the summary word for word: no need to summarize it
    append_user(request, COMPACT_PROMPT)
    for _ in range(6):
        try:
            summary = chat(cfg, request, tools=False, quiet=True)["content"].strip()
            break
        except ApiError as e:
            if e.kind != "overflow" or not trim_for_summary(request, context_window(cfg) * 2):
                raise ApiError("compaction failed: %s" % e,
                               "retry" if e.kind == "retry" else "fatal")
    else:
        raise ApiError("compaction failed: the conversation does not fit even when trimmed")
    if not summary:
        raise ApiError("compaction failed: the model returned an empty summary")
    text = "Summary of our conversation so far:\n\n" + summary
    if keep:
        text += "\n\nThe request I am working on now, as I wrote it:\n\n" + keep
    before = len(messages)
    messages[:] = [messages[0], {"role": "user", "content": text}]
    emit(cfg, "compaction", before=before, after=len(messages), kept_prompt=bool(keep))
    return messages


def trim_for_summary(request, room):
    """Make a summary request smaller: blank the older half of the tool results, then drop
    the older half of the conversation, then cut the longest message (its head and tail
    stay) so the text fits in `room` characters (half the window), or to half its length.
    False when there is nothing left to trim."""
    results = [m for m in request if m.get("role") == "tool" and m["content"] != "[omitted]"]
    if results:
        for m in results[:max(1, len(results) // 2)]:
            m["content"] = "[omitted]"
        return True
    body = request[1:-1]
    users = [i for i, m in enumerate(body) if m.get("role") == "user" and i > 0]
    if users:
        cut = users[len(users) // 2] if len(users) > 1 else users[0]
        request[1:-1] = body[cut:]
        return True
    texts = [m for m in request if isinstance(m.get("content"), str)]
    longest = max(texts, key=lambda m: len(m["content"]), default=None)
    if not longest or len(longest["content"]) < 200:
        return False
    text, total = longest["content"], sum(len(m["content"]) for m in texts)
    ask = COMPACT_PROMPT if text.endswith(COMPACT_PROMPT) else ""   # the question stays whole
    text = text[:len(text) - len(ask)]
    keep = max(100, min(len(text) // 4, (len(text) - (total - room)) // 2))
    if len(text) <= 2 * keep + 100:
        return False
    longest["content"] = "%s\n[... %d characters left out ...]\n%s%s" % (
        text[:keep], len(text) - 2 * keep, text[-keep:], ask)
    return True


# ----------------------------------------------------------------------------------------
# Settings changed live (/cfg): the value on the last line of its key (the line that
# read_key_values keeps) rewritten, else a key=value line appended; every other line kept
# ----------------------------------------------------------------------------------------

def set_config_line(text, key, value):
    """text with key set to value: on the last line of key, its spacing, inline comment and
    line break kept, else on a key=value line appended. ValueError for a key or value that
    read_key_values would not read back exactly."""
    if not isinstance(key, str) or key.lower() not in DEFAULTS:
        raise ValueError("bad config key %r" % (key,))
    if value.splitlines() not in ([], [value]):
        raise ValueError("a config value must be a single line of text")
    read = INLINE_COMMENT.sub("", value).strip()
    if read != value:
        raise ValueError("cannot store %r as %s: it would be read back as %r, because values "
                         "lose surrounding spaces and a space followed by '#' starts a comment"
                         % (value, key, read))
    bom = "\ufeff" if text.startswith("\ufeff") else ""   # read_key_values reads utf-8-sig
    lines = text[len(bom):].splitlines(True)   # the same line breaks as read_key_values sees
    for n in reversed(range(len(lines))):
        body = lines[n].splitlines()[0]
        name, sep, _ = body.partition("=")
        if sep and not body.strip().startswith("#") and name.strip().lower() == key.lower():
            # "key = old  # note": the parts around the value stay
            head, _, tail = re.match(r"([^=]*=\s*)(.*?)(\s*(?:\s#.*)?)$", body).groups()
            if value.startswith("#"):   # "key = #x" would read as a comment, "key =#x" not
                head = head.rstrip()
            lines[n] = head + value + tail + lines[n][len(body):]
            return bom + "".join(lines)
    newline = "\r\n" if "\r\n" in text else "\n"
    if lines and lines[-1] == lines[-1].splitlines()[0]:
        lines[-1] += newline   # the old last line must stay a line of its own
    return bom + "".join(lines) + key + "=" + value + newline


def shown_value(cfg, key):
    """A setting as /cfg and --show-config print it: secrets as ***."""
    value = cfg[key]
    if key == "api_key" and value:
        value = "***"
    elif key == "headers":
        value = {k: "***" for k in value}
    text = json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
    return redact_all(cfg, text)   # the credentials in an endpoint URL too


def setting_file(cfg, key):
    """The config file /cfg writes key to: the one it came from (this folder's model.cfg,
    --config or ~/.bantam/model.cfg), else the user's own (--config, else ~/.bantam/model.cfg)."""
    sources = cfg["sources"]
    for path in (sources["folder_config"], sources["config_file"]):
        if path and sources.get(key, "").startswith(path + ":"):
            return path
    return sources["config_file"]


def in_git_work_tree(path):
    """True when a .git lies in path's folder or above it: a file there may be committed."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(os.path.join(folder, ".git")):
        if os.path.dirname(folder) == folder:
            return False
        folder = os.path.dirname(folder)
    return True


def save_setting(path, key, raw):
    """Write key=raw into the config file at path (through a symlink), with mode 0600: it may
    hold the API key, now or later; the 'path:line' it now comes from."""
    try:
        with open(path, encoding="utf-8", newline="") as f:   # newline="": CRLF files stay CRLF
            text = f.read()
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as e:
        raise BantamError("%s: cannot read config: %s" % (path, getattr(e, "strerror", None) or e))
    try:
        write_private_file(os.path.realpath(path), set_config_line(text, key, raw))
    except ValueError as e:
        raise BantamError("%s: %s" % (key, e))
    except OSError as e:
        raise BantamError("%s: cannot write config: %s" % (path, e.strerror or e))
    return read_key_values(path).get(key, ("", path))[1]


def apply_setting(convo, key, value, where):
    """Use a new value of key from now on, in this conversation too."""
    cfg = convo["cfg"]
    if key == "endpoint":
        drop_connection(cfg)
    cfg[key], cfg["sources"][key] = value, where
    if key in ("bantam_tools_dir", "bantam_skills_dir", "project_instructions", "tools"):
        add_prompt_extras(cfg)   # the system prompt names them
        first = convo["messages"][0] if convo["messages"] else {}
        if first.get("role") == "system":
            first["content"] = cfg["system_prompt"]


# ----------------------------------------------------------------------------------------
# Commands: name -> (handler, help). A handler takes (convo, argument): convo is the
# conversation of the REPL, {"cfg", "messages", "session"}; it changes it in place and
# returns QUIT to end the REPL, or text to send as the next prompt (/skill).
# ----------------------------------------------------------------------------------------

def summarize(cfg, messages):
    """A short summary for a saved session: asked of the model, else the first prompt."""
    try:
        request = append_user([dict(m) for m in messages], SUMMARY_PROMPT)
        text = " ".join(chat(cfg, request, tools=False, quiet=True)["content"].split())
        if text:
            return text[:120]
    except ApiError as e:
        note(cfg, "[summary: %s; using the first prompt]" % e, "info")
    return first_user_text(messages)


def cmd_save(convo, arg):
    """/save [name]: keep a copy of the conversation, with a summary written by the model;
    the conversation goes on in its own file. A name holding another conversation is refused."""
    cfg, session = convo["cfg"], convo["session"]
    if arg and (not SESSION_NAME.match(arg) or arg == "autosave"):
        raise BantamError("a session name is letters, digits, '-', '_' and '.' (not 'autosave'), "
                          "got %r" % arg)
    if arg and arg != session["id"] and os.path.exists(session_path(arg)) \
            and session_head(arg).get("copy_of") != session["uid"]:   # this conversation's copy
        free = next(n for n in ("%s-%d" % (arg, i) for i in range(2, 1000))
                    if not os.path.exists(session_path(n)))
        raise BantamError("%r holds a different conversation; choose another name, e.g. /save %s"
                          % (arg, free))
    session["summary"] = summarize(cfg, convo["messages"])
    copy = dict(new_session(arg or None), summary=session["summary"], copy_of=session["uid"],
                created_at=session["created_at"])
    save_session(cfg, copy, convo["messages"], link=False)
    if session["id"]:
        save_session(cfg, session, convo["messages"])   # the summary goes on the conversation too
    show(cfg, "[saved session %s]\n" % copy["id"])


LIST_SHOWN = 20   # sessions /list shows (/list all: every one)


def cmd_list(convo, arg):
    """/list [all]: the newest saved sessions, one line each cut to the terminal's width
    (narrow: without the message count); * marks this folder's."""
    here, ids = os.getcwd(), session_ids()
    width = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
    for sid in ids if arg == "all" else ids[:LIST_SHOWN]:
        head = session_head(sid)
        count = "  %4s msgs" % head.get("count", "?") if not width or width >= 60 else ""
        line = terminal_safe("%s %-15s %10s%s  %s" % (
            "*" if head.get("cwd") == here else " ", sid, ago(modified(session_path(sid))), count,
            head.get("summary", "(unreadable)")))
        if width and display_width(line) > width:   # cut at a word: the terminal would wrap it
            line = wrap_words(line, width - 1)[0] + "\u2026"
        show(convo["cfg"], line + "\n")
    if arg != "all" and len(ids) > LIST_SHOWN:
        show(convo["cfg"], "(%d older: /list all shows every one)\n" % (len(ids) - LIST_SHOWN))
    if not ids:
        show(convo["cfg"], "(no saved sessions)\n")


def cmd_load(convo, arg):
    """/load <id>: continue a saved session (exact id or unique prefix) in its own file."""
    if not arg:
        raise BantamError("usage: /load <id or unique prefix> (see /list)")
    switch_to(convo, *load_session(arg))
    show_resumed(convo)


def show_resumed(convo):
    """Say which conversation goes on, how long and how old it is, and show its last
    exchange; a --session id with no file yet: that it starts a new conversation."""
    session, messages = convo["session"], convo["messages"]
    if len(messages) > 1:
        show(convo["cfg"], "[continuing %s: %d messages, %s]\n" % (
            session["id"] or "autosave", len(messages), ago(session.get("changed") or time.time())))
        show_exchange(convo["cfg"], messages)
    elif session["id"]:
        show(convo["cfg"], "[new conversation %s: no saved session has that id]\n" % session["id"])


def show_exchange(cfg, messages):
    """The last prompt (three rows at most, dim, behind "you:", not the input line's "> ")
    and the answer to it, rendered as the terminal view renders answers (else as it is):
    its last rows when it is longer than a screenful."""
    at = max(i for i, m in enumerate(messages) if m["role"] == "user" or i == 0)
    prompt = messages[at].get("content") if at else None
    if prompt is None:
        return
    if not isinstance(prompt, str):   # content parts: their text
        prompt = " ".join(str(p.get("text") or "") for p in prompt if isinstance(p, dict))
    (columns, rows), color = screen_size({"out": sys.stdout}), color_wanted(cfg, sys.stdout)
    lines = terminal_safe(prompt).strip("\n").split("\n")
    shown = [row for n, line in enumerate(lines)
             for row in wrap_words(("you: " if n == 0 else "     ") + line, columns)]
    shown = [COLORS["dim"] + row + RESET if color else row for row in shown[:3]]
    answer = terminal_safe(last_answer(messages[at:])).strip("\n")
    if answer and (cfg["render"] == "always" or cfg["render"] == "auto" and sys.stdout.isatty()):
        md = md_start(columns, color)
        answer = (md_feed(md, answer + "\n") + md_end(md)).rstrip("\n")
    lines, room = answer.split("\n") if answer else [], max(rows - len(shown) - 4, 3)
    if len(lines) > room:
        lines = ["... %d earlier lines" % (len(lines) - room + 1)] + lines[1 - room:]
    emit(cfg, "output", text="\n".join(shown + lines) + "\n")   # terminal-safe and styled


def cmd_delete(convo, arg):
    """/delete <id> (--delete: convo None): delete a saved conversation (id or unique prefix)."""
    if not arg:
        raise BantamError("usage: /delete <id or unique prefix> (see /list)")
    sid = resolve_session(arg)
    if convo and sid == convo["session"]["id"]:
        raise BantamError("%s is the conversation you are in: /clear (or /load another) first"
                          % sid)
    error = remove_session(sid)
    if error:
        raise ConfigError("cannot delete session %s: %s" % (sid, error.strerror or error))
    show({}, "[deleted session %s]\n" % sid)


def cmd_continue(convo, arg):
    """/continue: resume the newest conversation of this folder."""
    sid = latest_in_folder()
    if not sid:
        raise BantamError("no conversation of this folder to continue (see /list)")
    cmd_load(convo, sid)


def switch_to(convo, session, messages):
    """Make session (with messages) the REPL's conversation; the one left stays in its file."""
    if len(convo["messages"]) > 1:
        save_session(convo["cfg"], convo["session"], convo["messages"])
    convo["session"] = session
    convo["messages"][:] = messages
    if session["id"]:
        save_session(convo["cfg"], session, convo["messages"])


def cmd_compact(convo, arg):
    """/compact: replace the conversation by a summary of it."""
    before = len(convo["messages"])
    if before < 3:
        raise BantamError("nothing to compact yet")
    show(convo["cfg"], "[compacting...]\n")
    compact(convo["cfg"], convo["messages"])
    save_session(convo["cfg"], convo["session"], convo["messages"])
    show(convo["cfg"], "[compacted %d messages into a summary]\n" % before)


def cmd_clear(convo, arg):
    """/clear: start a new conversation with just the system prompt (the old one is kept)."""
    switch_to(convo, new_session(), [{"role": "system", "content": convo["cfg"]["system_prompt"]}])
    show(convo["cfg"], "[conversation cleared]\n")


def cmd_models(convo, arg):
    """/models: the endpoint's model ids, the configured one marked with *."""
    for entry in list_models(convo["cfg"]):
        mid = str(entry.get("id", "?"))
        show(convo["cfg"], "%s %s\n" % ("*" if mid == convo["cfg"]["model"] else " ", mid))


def cmd_cfg(convo, arg):
    """/cfg [key [value]]: every setting, one with where it comes from, or set one live and
    write it to its config file."""
    cfg = convo["cfg"]
    if not arg:
        show_config(cfg)
        return
    key, _, raw = arg.partition(" ")
    key, raw = key.lower(), raw.strip()
    if key not in DEFAULTS:
        raise BantamError("unknown config key %r (the keys: %s)" % (key, ", ".join(DEFAULTS)))
    if not raw:
        show(cfg, "%s = %s   (%s)\n" % (key, shown_value(cfg, key), cfg["sources"][key]))
        return
    readline = sys.modules.get("readline")
    if key in SECRET_KEYS and readline and readline.get_current_history_length():
        # a key typed at the prompt stays out of ~/.bantam_history
        readline.remove_history_item(readline.get_current_history_length() - 1)
    value = parse_value(key, raw, "/cfg")
    before, path = cfg["sources"][key], setting_file(cfg, key)
    where = save_setting(path, key, raw)
    apply_setting(convo, key, value, where)
    show(cfg, "[%s = %s, saved in %s]\n" % (key, shown_value(cfg, key), where))
    if before == "flag":
        show(cfg, "[note: the command line set %s; a flag still wins over the file at the next "
             "start]\n" % key)
    if key in SECRET_KEYS and in_git_work_tree(path):
        show(cfg, "[note: %s is inside a git work tree: a commit may take the key with it; add it "
             "to .gitignore, or keep the key in ~/.bantam/model.cfg]\n" % path)


def cmd_model(convo, arg):
    """/model [name]: switch the model (a name the server does not list: for this session
    only, not saved); without a name, the endpoint's models to choose from."""
    listed = [str(m.get("id")) for m in list_models(convo["cfg"], quiet=True)] if arg else []
    if listed and arg not in listed:
        apply_setting(convo, "model", parse_value("model", arg, "/model"), "/model")
        return note(convo["cfg"], "[%s is not among the server's models (/model lists them): "
                    "for this session only, not saved]" % arg, "warning")
    if arg:
        return cmd_cfg(convo, "model " + arg)
    cmd_models(convo, "")
    show(convo["cfg"], "(/model <name> switches to one; now: %s)\n" % convo["cfg"]["model"])


def cmd_endpoint(convo, arg):
    """/endpoint [url]: show or switch the API's base URL (the user's: the key goes there)."""
    return cmd_cfg(convo, "endpoint" + (" " + arg if arg else ""))


def skills(cfg):
    """{name: folder} of the skills under bantam_skills_dir (folders holding a SKILL.md)."""
    root = os.path.expanduser(cfg["bantam_skills_dir"])
    try:
        names = sorted(os.listdir(root)) if root else []
    except OSError:
        return {}
    return {n: os.path.join(root, n) for n in names
            if os.path.isfile(os.path.join(root, n, "SKILL.md"))}


def front_matter(text):
    """The key: value pairs of a Markdown file's leading --- block ({} when none)."""
    match = re.match(r"---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", text, re.S)
    pairs = (line.partition(":") for line in match.group(1).splitlines()) if match else ()
    return {k.strip().lower(): v.strip().strip("\"'") for k, sep, v in pairs if sep}


def read_skill(path):
    """The text of a SKILL.md; a BantamError naming it when it cannot be read."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise BantamError("cannot read skill %s: %s" % (path, e.strerror))


def cmd_skill(convo, arg):
    """/skill [name [prompt]]: list the skills, or send one's SKILL.md (and the prompt) as the
    next user turn."""
    cfg = convo["cfg"]
    found, folder = skills(cfg), cfg["bantam_skills_dir"]
    if not arg:
        if not folder:
            show(cfg, "(no skills folder: set bantam_skills_dir, e.g. /cfg bantam_skills_dir "
                 "~/skills)\n")
        for name, path in found.items():
            about = front_matter(read_skill(os.path.join(path, "SKILL.md")))
            show(cfg, "%-20s %s\n" % (about.get("name") or name, about.get("description", "")))
        if folder and not found:
            show(cfg, "(no skills in %s: a skill is a folder with a SKILL.md)\n" % folder)
        return None
    name, _, prompt = arg.partition(" ")
    if name in found:
        path = os.path.join(found[name], "SKILL.md")
    elif os.path.isabs(os.path.expanduser(name)) and not folder:   # no folder: a skill's own path
        path = os.path.expanduser(name)
        path = os.path.join(path, "SKILL.md") if os.path.isdir(path) else path
    else:
        raise BantamError("no skill %r%s" % (name, " (the skills: %s)" % ", ".join(found) if found
                                             else "" if folder else " (set bantam_skills_dir)"))
    text = read_skill(path).rstrip("\n")
    return text + ("\n\n" + prompt.strip() if prompt.strip() else "")


def cmd_help(convo, arg):
    """/help: the commands."""
    for name, (_, text) in COMMANDS.items():
        show(convo["cfg"], "%-14s %s\n" % (name, text))
    show(convo["cfg"], "%-14s %s\n" % ("!cmd", "run cmd with bash here, outside the conversation"))
    show(convo["cfg"], "%-14s %s\n" % ("Ctrl+J", "new line in a prompt (Enter sends)"))


def cmd_quit(convo, arg):
    """/quit: leave (the conversation is saved)."""
    return QUIT


QUIT = object()   # what a command returns to end the REPL
COMMANDS = {
    "/save": (cmd_save, "/save [name]: save the conversation with a summary (under name)"),
    "/list": (cmd_list, "/list [all]: the newest 20 saved sessions (* marks this folder's)"),
    "/load": (cmd_load, "/load <id>: continue a saved session (id or unique prefix)"),
    "/continue": (cmd_continue, "continue this folder's latest conversation (also /cont)"),
    "/delete": (cmd_delete, "/delete <id>: delete a saved session (id or unique prefix)"),
    "/compact": (cmd_compact, "replace the conversation by a summary of it"),
    "/clear": (cmd_clear, "start a new conversation (the old one stays saved)"),
    "/models": (cmd_models, "list the endpoint's models (* marks the configured one)"),
    "/model": (cmd_model, "/model [name]: switch the model (no name: list the endpoint's models)"),
    "/endpoint": (cmd_endpoint, "/endpoint [url]: show or switch the API's base URL"),
    "/cfg": (cmd_cfg, "/cfg [key [value]]: show the settings, one, or change one (saved to its "
                      "file)"),
    "/skill": (cmd_skill, "/skill [name [prompt]]: list the skills, or run one as the next prompt"),
    "/help": (cmd_help, "show this help"),
    "/quit": (cmd_quit, "exit (also /exit, or Ctrl+D on an empty line)"),
}
ALIASES = {"/cont": "/continue", "/exit": "/quit"}


# ----------------------------------------------------------------------------------------
# Markdown: the reply rendered line by line, each line when its newline arrives
# ----------------------------------------------------------------------------------------
# A renderer is a plain dict (md_start). md_feed keeps only the open partial line, and while
# a table is possible its rows; every completed line is rendered once and never revisited.

MD_STYLES = {"b": "\033[1m", "i": "\033[3m", "bi": "\033[1;3m", "s": "\033[9m",
             "code": "\033[36m", "url": "\033[2;4m", "dim": "\033[2m",
             "title": "\033[1;35m", "heading": "\033[1m"}   # title: heading levels 1-2
MD_PLAIN = dict.fromkeys(MD_STYLES, "")   # color off: same layout, no escape sequences
BULLETS = "\u2022\u25e6\u25aa"            # • ◦ ▪ by nesting depth
TASK_BOXES = {" ": "\u2610", "x": "\u2611", "X": "\u2611"}   # - [ ] ☐   - [x] ☑

SGR = re.compile(r"\033\[[0-9;]*m")                        # \033[1;36m
NON_ASCII = re.compile(r"[^\x00-\x7f]")
# A ZWJ with the character it joins, and skin-tone modifiers, draw as part of the glyph before.
GLUED = re.compile("\u200d.?|[\U0001f3fb-\U0001f3ff]", re.S)
PIECES = re.compile(r"( *)([^ ]+)")                        # "  word": the gap and the word
# One style code, or one character with the marks drawn on it (a hard break never splits them):
# joined by ZWJ, combining accents, variation selectors, skin tones.
CHARS = re.compile("\033\\[[0-9;]*m"
                   "|.(?:\u200d.?|[\u0300-\u036f\ufe00-\ufe0f\U0001f3fb-\U0001f3ff])*", re.S)

FENCE = re.compile(r"([ \t]*)(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$")    # ```python
FENCE_END = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*$")                 # ```
HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")   # ## Title
RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")            # ---  ***  _ _ _
QUOTE = re.compile(r" {0,3}((?:>[ \t]?)+)(.*)")                       # > > quoted text
# "- item", "  * item", "12. item", "3) item", "- [x] done" (indent, marker, task, text)
ITEM = re.compile(r"([ \t]*)([-*+]|\d{1,9}[.)])(?:[ \t]+(?:\[([ xX])\](?=[ \t]|$))?[ \t]*(.*)|$)")
DELIMITER = re.compile(r" *\|? *:?-+:? *(?:\| *:?-+:? *)*\|? *$")    # | :--- | :-: | --: |
# A table row splits at "|", except inside `code spans` and in "\|".
CELL_BREAK = re.compile(r"(?<!`)(`+)(?!`).{1,500}?(?<!`)\1(?!`)|\\.|\|")

MARKUP = re.compile(r"[`\\\[<*_~]")
# Inline spans. Every alternative starts with a literal character, which lets re skip ahead
# fast; a lookbehind right after it checks the character before: `(?<!``)` = "not after `".
# Spans are at most 500 characters, so a line full of unmatched markers stays linear.
INLINE = re.compile(
    r"`(?<!``)(?P<ticks>`*)(?!`)(?P<code>.{1,500}?)(?<!`)`(?P=ticks)(?!`)"   # `code` ``a`b``
    r"|\\(?P<esc>[!-/:-@\[-`{-~])"                                            # \*
    r"|\[(?P<text>[^\]]{0,500})\]\((?P<url>[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)"  # [text](url)
    r"|<(?P<auto>https?://[^>\s]{1,500})>"                                  # <https://a.b>
    r"|\*(?<!\*\*)(?P<stars>\*{0,2})(?![\s*])(?P<star>.{1,500}?)(?<![\s*\\])\*(?P=stars)(?!\*)"
    r"|_(?<![\w\\]_)(?P<lows>_{0,2})(?![\s_])(?P<low>.{1,500}?)(?<![\s_\\])_(?P=lows)(?!\w)"
    r"|~~(?![\s~])(?P<strike>.{1,500}?)(?<![\s~\\])~~")                     # ~~strike~~


def md_start(width, color=True):
    """A new renderer for a terminal width columns wide."""
    return {"width": max(int(width), 10), "styles": MD_STYLES if color else MD_PLAIN,
            "part": [], "fence": None, "held": None, "table": None, "lists": [],
            "blank": True}


def md_feed(state, text):
    """Terminal text for every line that text completes; the rest waits for its newline."""
    if "\n" not in text:
        state["part"].append(text)
        return ""
    lines = text.split("\n")
    lines[0] = "".join(state["part"]) + lines[0]
    state["part"] = [lines.pop()]
    return "".join([md_line(state, line) for line in lines])


def md_end(state):
    """Terminal text for whatever is left: the last line, a table, an open code block."""
    out = md_feed(state, "\n") if "".join(state["part"]) else ""
    if state["held"] is not None:
        head, state["held"] = state["held"], None
        out += md_block(state, head, hold=False)
    if state["table"] is not None:
        out += md_table(state)
    if state["fence"] is not None:             # closed as its own closing fence would
        out += md_code(state, state["fence"][0] * state["fence"][1])
    return out


def md_line(state, line):
    """One complete source line rendered (a possible table header is held for one line)."""
    if line.endswith("\r"):
        line = line[:-1]
    if state["fence"] is not None:
        return md_code(state, line)
    out = ""
    if state["table"] is not None:
        if "|" in line:
            state["table"][0].append(split_row(line))
            return ""
        out = md_table(state)
    elif state["held"] is not None:
        head, state["held"] = state["held"], None
        cells = split_row(head)
        delimiters = split_row(line) if "|" in line and DELIMITER.match(line) else []
        if len(delimiters) == len(cells):      # a table: rows are kept until it ends
            state["table"] = ([cells], [alignment(d) for d in delimiters])
            del state["lists"][:]
            return ""
        out = md_block(state, head, hold=False)
    return out + md_block(state, line)


def md_block(state, line, hold=True):
    """One source line outside code blocks and tables as terminal lines."""
    if "\t" in line:
        line = line.expandtabs(4)
    text = line.strip()
    if not text:
        if state["blank"]:
            return ""                      # runs of blank lines show as one
        state["blank"] = True
        return "\n"
    state["blank"] = False
    indent, lead = len(line) - len(line.lstrip()), text[0]
    st, lists = state["styles"], state["lists"]
    m = lead in "`~" and FENCE.match(line)
    if m:
        return md_fence(state, m, indent)
    m = lead == "#" and HEADING.match(line)
    if m:
        del lists[:]
        return md_heading(state, len(m.group(1)), m.group(2) or "")
    if lead in "-*_" and RULE.match(line):
        del lists[:]
        return styled("\u2500" * state["width"], st["dim"]) + "\n"
    m = lead == ">" and QUOTE.match(line)
    if m:
        del lists[:]
        return md_quote(state, m.group(1).count(">"), m.group(2))
    m = lead in "-*+0123456789" and ITEM.match(line)
    if m:
        return md_item(state, indent, m)
    if hold and "|" in text:
        state["held"] = line               # a table header, if a delimiter row follows
        return ""
    pad = " " * list_column(lists, indent)  # a paragraph, or an item's continuation
    return hang(wrap_words(md_inline(text, st), state["width"] - len(pad)), pad, pad)


def hang(lines, first, rest):
    """Lines as output text, the first behind first, the others behind rest."""
    return first + ("\n" + rest).join(lines) + "\n"


def list_column(lists, indent):
    """Text column of the deepest open list item that a line continues (none: lists end)."""
    for item_indent, _, column in reversed(lists):
        if item_indent < indent:
            return column
    del lists[:]
    return 0


def md_item(state, indent, m):
    """A list item: bullet by depth or the item's own number, text with a hanging indent."""
    lists = state["lists"]
    while lists and indent < lists[-1][0]:
        lists.pop()
    if lists and indent < lists[-1][0] + 2:
        start = lists.pop()[1]             # a sibling (indents off by one still count)
    else:
        start = lists[-1][2] if lists else 0   # a child starts at its parent's text
    start = min(start, state["width"] // 2)    # deep nesting in a narrow terminal
    marker = m.group(2)
    if not marker[0].isdigit():
        marker = BULLETS[len(lists) % 3]
    if m.group(3):                         # task list: the box replaces a bullet
        box = TASK_BOXES[m.group(3)]
        marker = box if not marker[0].isdigit() else marker + " " + box
    column = start + display_width(marker) + 1
    lists.append((indent, start, column))
    text = md_inline((m.group(4) or "").strip(), state["styles"])
    lines = wrap_words(text, state["width"] - column)
    return hang(lines, " " * start + marker + " ", " " * column)


def md_heading(state, level, text):
    """A heading without its #s, bold; levels 1 and 2 underlined with a line of ═ or ─."""
    st = state["styles"]
    style = st["title"] if level < 3 else st["heading"]
    lines = wrap_words(styled(md_inline(text, st, style), style), state["width"])
    out = hang(lines, "", "")
    wide = max(map(display_width, lines))
    if level < 3 and wide:
        out += styled(("\u2550" if level == 1 else "\u2500") * wide, st["dim"]) + "\n"
    return out


def md_quote(state, depth, text):
    """A block quote behind one bar per level (never a leading >, which is the prompt)."""
    st = state["styles"]
    bar = styled(" ".join(["\u2502"] * depth), st["dim"])
    if not text.strip():
        return bar + "\n"
    width, lead = state["width"] - 2 * depth, bar + " "
    item, heading = ITEM.match(text), HEADING.match(text)
    if item and item.group(4):             # > - item: a bullet with a hanging indent
        marker = item.group(2) if item.group(2)[0].isdigit() else BULLETS[0]
        lines = wrap_words(md_inline(item.group(4).strip(), st), width - len(marker) - 1)
        return hang(lines, lead + marker + " ", lead + " " * (len(marker) + 1))
    if heading:                            # > ## Note: bold
        text = styled(md_inline(heading.group(2) or "", st, st["heading"]), st["heading"])
    else:
        text = md_inline(text.strip(), st)
    return hang(wrap_words(text, width), lead, lead)


def md_fence(state, m, indent):
    """The header of a fenced code block (─── python), indented like the list it is in."""
    pad = " " * list_column(state["lists"], indent)
    state["fence"] = (m.group(2)[0], len(m.group(2)), indent, pad)   # ``` or ~~~, length
    label = "\u2500" * 3 + (" " + m.group(3) if m.group(3) else "")
    return pad + styled(label, state["styles"]["dim"]) + "\n"


def md_code(state, line):
    """A line inside a fenced code block: verbatim and unwrapped, or the closing fence."""
    char, size, indent, pad = state["fence"]
    m = FENCE_END.match(line)
    if m and m.group(1)[0] == char and len(m.group(1)) >= size:
        state["fence"] = None
        return pad + styled("\u2500" * 3, state["styles"]["dim"]) + "\n"
    body = line[min(indent, len(line) - len(line.lstrip(" "))):]   # drop the fence's indent
    return pad + "    " + styled(body, state["styles"]["code"]) + "\n" if body else "\n"


def split_row(line):
    """The cells of a table row: "| a | `b|c` | d \\| e |" -> ["a", "`b|c`", "d | e"]."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    cells, start = [], 0
    for m in CELL_BREAK.finditer(text):
        if m.group() == "|":
            cells.append(text[start:m.start()])
            start = m.end()
    cells.append(text[start:])
    return [cell.strip().replace("\\|", "|") for cell in cells]


def alignment(cell):
    """A delimiter cell's alignment: ":--" left, ":-:" center, "--:" right."""
    if cell.endswith(":"):
        return "center" if cell.startswith(":") else "right"
    return "left"


def align(text, width, how):
    """Text padded to width columns, left, centered or right."""
    gap = width - display_width(text)
    if how == "right":
        return " " * gap + text
    if how == "center":
        return " " * (gap // 2) + text + " " * (gap - gap // 2)
    return text + " " * gap


def fit_columns(widths, room):
    """Column widths with the widest capped so that all of them fill room at most."""
    if sum(widths) <= room:
        return widths
    left, count = room, len(widths)
    for k, w in enumerate(sorted(widths)):    # narrow columns keep their width
        if w * (count - k) > left:
            cap = left // (count - k)
            break
        left -= w
    fitted = [min(w, cap) for w in widths]
    spare = room - sum(fitted)
    for i, w in enumerate(widths):            # the remainder goes to capped columns
        if spare and w > cap:
            fitted[i], spare = cap + 1, spare - 1
    return fitted


def md_table(state):
    """The buffered table drawn once in a box, header bold, cells wrapped to fit the width."""
    rows, aligns = state["table"]
    state["table"] = None
    st, count = state["styles"], len(aligns)
    rows = [(row + [""] * count)[:count] for row in rows]     # as many cells as the header
    cells = [[styled(md_inline(cell, st, st["b"]), st["b"]) for cell in rows[0]]]
    cells += [[md_inline(cell, st) for cell in row] for row in rows[1:]]
    room = state["width"] - 3 * count - 1    # "│ " + " │ " between cells + " │"
    if room < 2 * count:                   # too many columns for a frame: one line a row
        sep = " " + styled("\u2502", st["dim"]) + " "
        return "".join(hang(wrap_words(sep.join(row), state["width"]), "", "") for row in cells)
    natural = [max(1, max(display_width(row[i]) for row in cells)) for i in range(count)]
    widths = fit_columns(natural, room)

    def rule(left, mid, right):
        return styled(left + mid.join("\u2500" * (w + 2) for w in widths) + right, st["dim"])
    bar = styled("\u2502", st["dim"])
    out = [rule("\u250c", "\u252c", "\u2510")]
    for r, row in enumerate(cells):
        parts = [wrap_words(cell, w) for cell, w in zip(row, widths)]
        for k in range(max(map(len, parts))):
            texts = [align(part[k] if k < len(part) else "", w, how)
                     for part, w, how in zip(parts, widths, aligns)]
            out.append(bar + " " + (" " + bar + " ").join(texts) + " " + bar)
        if r == 0:
            out.append(rule("\u251c", "\u253c", "\u2524"))
    out.append(rule("\u2514", "\u2534", "\u2518"))
    return "\n".join(out) + "\n"


def md_inline(text, st, base="", depth=0):
    """Inline Markdown as terminal text: markers dropped, styles applied (base kept around)."""
    if depth > 8 or not MARKUP.search(text):   # spans in spans: 8 deep is plenty
        return text

    def span(m):
        kind = m.lastgroup                 # the last group of each alternative names it
        inner = m.group(kind)
        if kind == "code":                 # verbatim; `` ` x ` `` loses one space a side
            if inner[:1] == inner[-1:] == " " and inner.strip():
                inner = inner[1:-1]
            return styled(inner, st["code"], base) if st["code"] else "`" + inner + "`"
        if kind == "esc":
            return inner
        if kind == "auto":
            return styled(inner, st["url"], base)
        if kind == "url":
            url = styled(inner, st["url"], base)
            if m.group("text").strip() in ("", inner):
                return url                 # [https://a.b](https://a.b) shows the URL once
            return md_inline(m.group("text"), st, base, depth + 1) + " (" + url + ")"
        if kind == "strike":
            inner = md_inline(inner, st, base + st["s"], depth + 1)
            return styled(inner, st["s"], base) if st["s"] else "~~" + inner + "~~"
        marks = m.group("stars") or m.group("lows") or ""    # after the first * or _
        style = st[("i", "b", "bi")[len(marks)]]
        return styled(md_inline(inner, st, base + style, depth + 1), style, base)
    return INLINE.sub(span, text)


def styled(text, style, base=""):
    """Text in a style, then the enclosing base style again (nothing when color is off)."""
    return style + text + RESET + base if style and text else text


def wrap_words(text, width):
    """Text broken at spaces into lines of at most width columns; a style open at a break
    is closed at the line's end and reopened on the next line."""
    width = max(width, 1)
    if display_width(text) <= width:
        return [text]
    lines, line, used, active = [], "", 0, ""
    for gap, word in PIECES.findall(text):
        w = len(word) if word.isascii() and "\033" not in word else display_width(word)
        if used + len(gap) + w <= width:           # the usual case: it fits
            line, used = line + gap + word, used + len(gap) + w
        elif w <= width:                           # on a new line (a leading gap is dropped)
            if used:
                lines.append(line + RESET if active else line)
                line = active
            line, used = line + word, w
        else:                                      # longer than a line: fill it, then cut
            if width - used - len(gap) < 1:
                lines.append(line + RESET if active else line)
                line, used, gap = active, 0, ""
            for i, (piece, w) in enumerate(hard_split(word, width - used - len(gap), width)):
                if i:
                    lines.append(line + RESET if active else line)
                    line, used, gap = active, 0, ""
                if piece:                          # empty: not even one character fitted
                    line, used = line + gap + piece, used + len(gap) + w
                active = active_styles(active, piece) if "\033" in piece else active
            continue
        if "\033" in word:
            active = active_styles(active, word)
    return lines + [line]


def hard_split(word, room, width):
    """A too-long word cut into (piece, columns): room columns first, then width each."""
    pieces, piece, used = [], "", 0
    for ch in CHARS.findall(word):
        w = display_width(ch)
        if used + w > room and (used or room < width):
            pieces.append((piece, used))
            piece, used, room = "", 0, width
        piece, used = piece + ch, used + w
    return pieces + [(piece, used)]


def active_styles(active, text):
    """The SGR codes still open after text, given those open before it."""
    for code in SGR.findall(text):
        active = "" if code in (RESET, "\033[m") else active + code
    return active


def display_width(text):
    """Terminal columns of text: CJK and emoji 2, combining marks and SGR codes 0."""
    if "\033" in text:
        text = SGR.sub("", text)
    if text.isascii():
        return len(text)
    text = GLUED.sub("", text)
    wide = NON_ASCII.findall(text)        # only the non-ASCII characters need a look-up
    return len(text) - len(wide) + sum(map(char_width, wide))


def char_width(ch):
    """Columns of one character: 0 for combining and format marks, 2 for wide ones, else 1."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


# ----------------------------------------------------------------------------------------
# The terminal view: the answer rendered as Markdown, tool calls shown as what they do,
# a command's output live (cut to a screenful). Only for a terminal (render=auto) or on
# request (render=always); pipes and files get the plain view, the spec's traces.
# ----------------------------------------------------------------------------------------

def terminal_view(cfg):
    """A view for a person at a terminal: the plain view's layout and colors, plus rendered
    Markdown, readable tool calls and live tool output."""
    return plain_view(cfg, TERMINAL)


def screen_size(state):
    """(columns, rows) of the terminal (COLUMNS/LINES when it is not one)."""
    try:
        size = os.get_terminal_size(state["out"].fileno())
        return size.columns, size.lines
    except (OSError, ValueError, AttributeError):
        return int(os.environ.get("COLUMNS") or 80), int(os.environ.get("LINES") or 24)


PREVIEW_ROWS = 3   # rows of the line in progress shown (it has not been rendered yet)


def term_text(state, event):
    """A piece of the answer, rendered line by line; the line in progress is previewed."""
    depth = event["depth"]
    if state["block"] != "text":
        close_block(state, event)
        state["block"] = "text"
        state["md"] = md_start(screen_size(state)[0] - 4 * depth, state["color"])
    rendered = md_feed(state["md"], terminal_safe(event["text"]))
    if rendered:
        write(state, rendered, depth=depth, raw=True)
    preview(state, "".join(state["md"]["part"]), depth)
    flush_out(state)


def preview(state, text, depth):
    """Show the line in progress, dim and wrapped as it will be rendered, on its last
    PREVIEW_ROWS rows (erased when its newline arrives and the rendered line replaces it)."""
    if not text or not state["bol"]:
        return
    rows = wrap_words(text[-2000:], state["md"]["width"])[-PREVIEW_ROWS:]   # a longer line: its end
    pad = "  \u2502 " * depth
    erase = "\033[A\033[K" * (int(state["status"]) - 1)   # the rows of the last preview
    text = ("\r\n" + pad).join(rows)
    text = COLORS["dim"] + text + RESET if state["color"] else text
    state["out"].write("\r\033[K" + erase + pad + text)
    state["status"] = len(rows)   # one write: a terminal's stream flushes at every \r


def term_reply_end(state, event):
    """The reply is over: render what is left of it."""
    if state["md"] is not None:
        if state["status"]:
            clear_status(state)
        rest = md_end(state["md"])
        state["md"] = None
        if rest:
            write(state, rest, depth=event["depth"], raw=True)
    show_reply_end(state, event)


def term_tool_call(state, event):
    """A tool call as what it does ("$ command", "» read notes.txt"), or as the plain trace."""
    close_block(state, event)
    end_line(state, event["depth"])
    try:
        args = json.loads(event["arguments"])
    except ValueError:
        args = None
    text = (call_in_words(TOOL_ALIASES.get(event["name"], event["name"]), args)
            or "[tool call: %s(%s)]" % (event["name"], event["arguments"]))
    write(state, text + "\n", "call", event["depth"])
    import collections
    limit = max(4, state["tool_lines"] or screen_size(state)[1] - 4)
    state["tool"] = {"lines": 0, "partial": "", "limit": limit, "started": time.monotonic(),
                     "tail": collections.deque(maxlen=limit - limit // 2), "status_at": 0.0}
    flush_out(state, now=True)


def call_in_words(name, args):
    """A tool call in words ("$ ls -la", "» subagent: prompt", "» read notes.txt lines 10-29",
    "» write a.txt: 3 lines at line 5, deleting 2 lines"), or None for another call."""
    if not isinstance(args, dict):
        return None
    if name == "shell_exec" and isinstance(args.get("command"), str):
        return "$ " + args["command"].rstrip("\n")
    if name == "run_subagent" and isinstance(args.get("prompt"), str):
        return "\u00bb subagent: " + args["prompt"].rstrip("\n")
    path = args.get("filePath", args.get("path"))
    if name not in ("read", "write") or not isinstance(path, str):
        return None
    if name == "read":
        offset, limit = args.get("offset"), args.get("limit")
        if offset is None and limit is None:
            return "\u00bb read %s" % path
        first = offset if isinstance(offset, int) and offset > 0 else 1
        last = "%d" % (first + limit - 1) if isinstance(limit, int) and limit > 0 else "end"
        return "\u00bb read %s lines %d-%s" % (path, first, last)
    content = args.get("content") if isinstance(args.get("content"), str) else ""
    size = "%d lines" % count_lines(content) if content else "nothing"
    starts = (("lineOffset", "line"), ("byteOffset", "byte"), ("offset", "byte"))
    cuts = (("delLines", "lines"), ("delBytes", "bytes"), ("del_bytes", "bytes"))
    at = next(("at %s %s" % (word, args[k]) for k, word in starts if args.get(k) is not None), "")
    cut = next((", deleting %s %s" % (args[k], word) for k, word in cuts
                if args.get(k) is not None), "")
    if not at and not cut:
        return "\u00bb write %s: %s (whole file)" % (path, size)
    return "\u00bb write %s: %s %s%s" % (path, size, at or "at the start", cut)


def term_approval(state, event):
    """A decision about a command: the clock starts now; the user's own answer is not repeated."""
    if state["tool"]:
        state["tool"]["started"] = time.monotonic()
    if event["rule"] != "asked":
        show_approval(state, event)


def term_tool_output(state, event):
    """A command's output as it comes, dim: the first half-screenful of lines, then only the
    count (the last lines are shown when it ends). Once the first lines are shown, a piece
    is only counted and its end kept: little work per piece whatever its size."""
    tool = state["tool"]
    if tool is None:
        return
    text = tool["partial"] + event["text"]
    shown = tool["limit"] // 2
    while tool["lines"] < shown and "\n" in text:
        line, text = text.split("\n", 1)
        tool["lines"] += 1
        write(state, screen_line(state, line, event["depth"]) + "\n", "body", event["depth"])
    if tool["lines"] >= shown:
        tool["lines"] += text.count("\n")
        keep = tool["tail"].maxlen   # one split more: a first piece that held lines is left out
        pieces = text.rsplit("\n", keep + 1)
        text = pieces.pop()
        tool["tail"].extend(pieces[-keep:])
    tool["partial"] = text[-4096:]   # a line this long is cut on screen anyway
    if time.monotonic() - tool["status_at"] >= 0.1:
        tool_status(state, event)
    else:
        flush_out(state)


def screen_line(state, line, depth):
    """A line of a command's output cut to one row (the model gets it whole): a third of the
    row from its start, the rest from its end, which usually names the thing (the file in
    `ls -la`, the message after a log's timestamp)."""
    room = max(screen_size(state)[0] - 4 * depth, 10)
    if len(line) <= room and line.isascii() or display_width(line) <= room:
        return line
    head, tail = line[:room // 3], line[-room:]
    while display_width(head) > room // 3:
        head = head[:-1]
    while display_width(head + tail) > room - 1:
        tail = tail[1:]
    return head + "\u2026" + tail


def tool_status(state, event):
    """The live status of a running command (and the tool_progress handler): seconds so far,
    lines not shown yet."""
    tool = state["tool"]
    if tool is None:
        return
    tool["status_at"] = time.monotonic()
    if state["bol"] and state["tty"]:
        hidden = tool["lines"] - tool["limit"] // 2
        text = "\u231b %.0f s" % (time.monotonic() - tool["started"])
        if hidden > 0:
            text += " \u00b7 %d more lines" % hidden
        text = COLORS["dim"] + text + RESET if state["color"] else text
        state["out"].write("\r\033[K" + "  \u2502 " * event["depth"] + text)
        state["status"] = True
    flush_out(state)


def term_tool_result(state, event):
    """The end of a tool: a command's last lines and how it ended; a subagent's end (its
    answer was shown as it came); another tool's result, cut to a screenful."""
    tool, state["tool"] = state["tool"], None
    depth = event["depth"]
    if tool is not None and (tool["lines"] or tool["partial"]) and event["ok"]:
        end_tool_output(state, event, tool)
        code = re.search(r"\nexit: (-?\d+)$", event["content"])
        took = time.monotonic() - tool["started"]
        summary = "exit %s \u00b7 %.1f s" % (code.group(1) if code else "?", took)
        write(state, summary + "\n", "dim" if code and code.group(1) == "0" else "error", depth)
    elif (event["name"] == "run_subagent" and event["ok"]
          and not event["content"].startswith(("error:", "("))):
        end_line(state, depth)   # its answer is on screen already, behind the rail
        write(state, "\u00bb subagent done\n", "dim", depth)
    else:
        end_line(state, depth)
        lines = event["content"].split("\n")
        limit = max(4, state["tool_lines"] or screen_size(state)[1] - 4)
        if len(lines) > limit:
            more = ["... %d more lines" % (len(lines) - limit)]
            lines = lines[:limit // 2] + more + lines[limit // 2 - limit:]
        text = "\n".join(lines)
        text += "" if text.endswith("\n") else "\n"
        write(state, text, "body" if event["ok"] else "error", depth)
    flush_out(state, now=True)


def end_tool_output(state, event, tool):
    """The output lines kept back: "... N more lines", then the last ones."""
    if tool["partial"]:   # the last line had no newline
        if tool["lines"] < tool["limit"] // 2:
            write(state, tool["partial"] + "\n", "body", event["depth"])
        else:
            tool["tail"].append(tool["partial"])
        tool["lines"] += 1
    if state["status"]:
        clear_status(state)
    hidden = tool["lines"] - tool["limit"] // 2 - len(tool["tail"])
    if hidden > 0:
        write(state, "... %d more lines\n" % hidden, "dim", event["depth"])
    for line in tool["tail"]:
        write(state, screen_line(state, line, event["depth"]) + "\n", "body", event["depth"])


TERMINAL = dict(PLAIN, text=term_text, reply_end=term_reply_end, tool_call=term_tool_call,
                tool_output=term_tool_output, tool_result=term_tool_result,
                tool_progress=tool_status, approval=term_approval)


# ----------------------------------------------------------------------------------------
# The REPL, batch mode and the command line
# ----------------------------------------------------------------------------------------

def run_turn(convo, prompt, take_back=False):
    """One user turn, saved before, during and after AL; the share of the context window in
    use. With take_back (the REPL), a turn that got no reply at all (Ctrl+C before the first
    byte, a request that failed for good) takes its prompt back out of the conversation, into
    convo["taken_back"] for the input line; a new conversation then leaves no file."""
    cfg, messages, session = convo["cfg"], convo["messages"], convo["session"]
    before, first, taken = messages[:], take_back and not session["written"], False
    given = session["id"]   # a --session id, or None
    append_user(messages, prompt)
    asked = messages[-1]
    if first:   # the prompt survives a kill; autosave.json moves once the turn got a reply
        save_session(cfg, session, messages, link=False)
    else:       # the prompt survives a kill
        save_step(cfg, session, messages)
    emit(cfg, "prompt", text=redact_all(cfg, prompt) if isinstance(prompt, str) else prompt,
         session=convo["session"]["id"])
    convo["usage"], spent_before = None, convo.get("cost", 0.0)   # (set by step_saver)
    try:
        AL(cfg, messages)
    except BaseException:
        if take_back and messages[-1] is asked:   # nothing came back: as if it was never sent
            messages[:] = before
            convo["taken_back"], taken = prompt, True
        raise
    finally:
        if taken and first:
            remove_session(session["id"])
            convo["session"] = new_session(given)
        else:
            save_session(cfg, session, messages, link=not taken)
    if not convo.get("usage"):
        return 0.0
    spent = convo.get("cost", 0.0)
    return report_context(cfg, convo["usage"], spent - spent_before, spent)


def last_answer(messages):
    """The last assistant message's content, without a <think> block at its start, or ""."""
    answer = next((m["content"] for m in reversed(messages) if m.get("role") == "assistant"
                   and isinstance(m.get("content"), str)), "")
    return re.sub(r"^\s*<(think|thinking)>.*?</\1>\s*", "", answer, count=1, flags=re.S)


def history_path():
    """The readline history file."""
    return os.path.join(os.path.expanduser("~"), ".bantam_history")


HISTORY_MARK = "#bantam history 2: one entry a line, \\n is a line break, \\\\ a backslash\n"


def setup_readline(cfg=None):
    """Line editing and history (Ctrl+J a newline, a paste one prompt, Tab completion); the
    readline module, or None without it."""
    try:
        import readline
    except ImportError:
        return None
    readline.parse_and_bind(r'"\C-j": "\C-v\C-j"')   # quoted-insert of a real newline
    readline.parse_and_bind("set enable-bracketed-paste on")
    readline.parse_and_bind("tab: complete")
    readline.set_completer_delims(" \t\n")
    readline.set_completer(lambda text, state: complete(text, state, cfg))
    readline.set_history_length(1000)
    catch_big_pastes(readline)
    for entry in read_history():
        readline.add_history(collapse_pastes(entry))
    return readline


PASTE_LINES, PASTE_CHARS = 5, 1000   # a paste longer than this shows as a placeholder
PASTES = {"hook": None, "texts": {}}  # the REPL's: the readline hook (kept alive while readline
                                      # may call it) and each placeholder's text


def catch_big_pastes(readline):
    """Make a long bracketed paste one placeholder, "[pasted 300 lines, 12 KB]", on the input
    line, which readline garbles when taller than the screen. GNU readline only, through ctypes
    (the module cannot bind a key to a function); elsewhere pastes stay whole."""
    import ctypes
    try:
        lib = ctypes.CDLL(readline.__file__)   # the module's symbols and its libreadline's
        begin, insert, delete = lib.rl_bracketed_paste_begin, lib.rl_insert_text, lib.rl_delete_text
        point, mark = ctypes.c_int.in_dll(lib, "rl_point"), ctypes.c_int.in_dll(lib, "rl_mark")
        line = ctypes.c_char_p.in_dll(lib, "rl_line_buffer")
    except (OSError, AttributeError, ValueError):
        return

    def paste(count, key):
        done = begin(count, key)   # readline inserts the paste from rl_mark to rl_point
        try:
            text = line.value[mark.value:point.value].decode("utf-8", "replace")
            if long_input(text):
                delete(mark.value, point.value)
                point.value = mark.value
                insert(paste_placeholder(text).encode("utf-8"))
        except Exception:   # the paste stays as readline inserted it
            pass
        return done
    PASTES["hook"] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int)(paste)
    lib.rl_bind_keyseq(b"\033[200~", PASTES["hook"])   # how the terminal starts a paste


def long_input(text):
    """Is text too long for the input line (more than PASTE_LINES lines or PASTE_CHARS)?"""
    return text.rstrip("\n").count("\n") >= PASTE_LINES or len(text) > PASTE_CHARS


def paste_placeholder(text):
    """The placeholder standing for text on the input line (the same for the same text)."""
    lines = text.rstrip("\n").count("\n") + 1
    size = max(1, round(len(text.encode("utf-8")) / 1024))
    label = key = "[pasted %d %s, %d KB]" % (lines, "line" if lines == 1 else "lines", size)
    n = 1
    while PASTES["texts"].get(key, text) != text:   # another paste of that size
        n, key = n + 1, "%s #%d]" % (label[:-1], n + 1)
    PASTES["texts"][key] = text
    return key


def expand_pastes(line):
    """The line typed, each paste placeholder replaced by its text, without a final line break."""
    for key, text in PASTES["texts"].items():
        line = line.replace(key, text)
    return line.rstrip("\n")


def collapse_pastes(text):
    """Text for the input line: each paste in it as its placeholder, a long one as a new one."""
    if not PASTES["hook"]:
        return text
    for key, pasted in PASTES["texts"].items():
        text = text.replace(pasted, key)
    return paste_placeholder(text) if long_input(text) else text


def read_history():
    """The history entries: a multi-line prompt is one entry (bantam 1.0's file: one a line)."""
    try:
        with open(history_path(), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")[:-1]
    except OSError:
        return []
    if lines[:1] != [HISTORY_MARK.rstrip("\n")]:
        return lines
    unescape = {"\\n": "\n", "\\\\": "\\"}
    return [re.sub(r"\\[n\\]", lambda m: unescape[m.group()], line) for line in lines[1:]]


def save_history(readline):
    """Write the history file atomically, mode 0600, a multi-line entry on one line."""
    if not readline:
        return
    entries = [expand_pastes(readline.get_history_item(i) or "")
               for i in range(1, readline.get_current_history_length() + 1)]
    text = "".join(e.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for e in entries if e)
    try:
        write_private_file(history_path(), HISTORY_MARK + text)
    except OSError as e:
        note({}, "warning: cannot save history: %s" % e, "warning")


def complete(text, state, cfg=None):
    """Readline's completer: /commands, then session ids, config keys or skill names."""
    import readline
    line = readline.get_line_buffer()
    if line.startswith(("/load ", "/save ", "/delete ")):
        options = [sid for sid in session_ids() if sid.startswith(text)]
    elif line.startswith("/cfg ") and line.count(" ") == 1:
        options = [key for key in DEFAULTS if key.startswith(text)]
    elif line.startswith("/skill ") and line.count(" ") == 1 and cfg:
        options = [name for name in skills(cfg) if name.startswith(text)]
    elif " " not in line:
        options = [name for name in list(COMMANDS) + list(ALIASES) if name.startswith(text)]
    else:
        options = []
    return options[state] + " " if state < len(options) else None


def keyboard_mode(fd, held):
    """held (while a turn runs): keys typed wait unseen for the next prompt, an Enter stays an
    Enter; else (a question mid-turn) keys seen and lines edited as usual. Returns the
    terminal settings to put back (None if fd is not a terminal)."""
    import termios
    try:
        before = termios.tcgetattr(fd)
    except (OSError, termios.error):
        return None
    mode = list(before)
    if held:
        mode[0] &= ~termios.ICRNL                     # Enter arrives as \r: readline's accept-line
        mode[3] &= ~(termios.ECHO | termios.ICANON)   # unseen; each key readable as it comes
        mode[3] |= termios.NOFLSH                     # Ctrl+C keeps the keys typed ahead
    else:
        mode[0] |= termios.ICRNL
        mode[3] |= termios.ECHO | termios.ICANON
    termios.tcsetattr(fd, termios.TCSANOW, mode)   # TCSANOW: keys already typed are kept
    return before


def keyboard_back(fd, before):
    """Put the terminal settings back (keys typed meanwhile stay queued for readline)."""
    if before is not None:
        import termios
        try:
            termios.tcsetattr(fd, termios.TCSANOW, before)
        except (termios.error, OSError):   # the terminal is gone (a hang-up)
            pass


def terminal_approver(convo):
    """approve=ask's questions at the terminal; keys typed ahead are kept for the next prompt,
    never taken as the answer."""
    def approver(question, text=""):
        convo["typed"] = convo.get("typed", "") + keys_typed_ahead(sys.stdin.fileno())
        return read_answer(question, text)
    return approver


def keys_typed_ahead(fd):
    """The printable text of the keys waiting unread on the terminal (Enter becomes a space)."""
    import select
    waiting = b""
    try:
        while select.select([fd], [], [], 0)[0]:
            more = os.read(fd, 4096)
            if not more:
                break
            waiting += more
    except OSError:
        pass
    text = waiting.decode("utf-8", "replace").replace("\r", " ").replace("\n", " ")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z~]|[\x00-\x1f\x7f]", "", text)


def forget_trailing_newline(readline, line):
    """The line without a paste's last line break: not sent, nor kept in the history."""
    if line.endswith("\n"):
        line = line.rstrip("\n")
        last = readline.get_current_history_length() if readline else 0
        if last and line.strip():
            readline.replace_history_item(last - 1, line)
    return line


def did_you_mean(name, names=None):
    """ "; did you mean /list?" for a name close to one of names (the commands), else ""."""
    import difflib
    names = list(COMMANDS) + list(ALIASES) if names is None else list(names)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return "; did you mean %s?" % close[0] if close else ""


def startup_line(cfg, columns=80):
    """The REPL's first line: model, endpoint host, context window when set, sandbox, /help."""
    from urllib.parse import urlsplit
    parts = ["bantam %s" % VERSION, "%s @ %s" % (cfg["model"], urlsplit(cfg["endpoint"]).netloc)]
    if cfg["sources"]["context_window"] != "default":
        parts.append("context %d" % cfg["context_window"])
    mode, closed = sandbox_of(cfg)
    parts += ["sandbox " + mode] * bool(mode) + ["no network"] * closed
    for line in (" \u00b7 ".join(parts) + " \u00b7 /help for commands",   # shorter when narrow
                 " \u00b7 ".join(parts) + " \u00b7 /help", " \u00b7 ".join(parts[1:]) + " \u00b7 /help"):
        if len(line) <= columns:
            break
    return line


def confirm(question):
    """A yes/no question at the terminal, Enter for yes; the answer stays out of the history."""
    try:
        return read_answer(question).strip().lower() in ("", "y", "yes")
    except KeyboardInterrupt:
        show({}, "\n")
        return False


def read_answer(question, text=""):
    """The line typed in answer to question ("" at end of input), text ready to edit, shown
    even while a turn holds the keys; the answer stays out of the history."""
    readline = sys.modules.get("readline")
    before = readline.get_current_history_length() if readline else 0
    held = keyboard_mode(sys.stdin.fileno(), held=False)
    try:
        return expand_pastes(edit_line(question, text))
    except EOFError:
        show({}, "\n")
        return ""
    finally:
        keyboard_back(sys.stdin.fileno(), held)
        if readline and readline.get_current_history_length() > before:
            readline.remove_history_item(before)


def edit_line(prompt, text=""):
    """input(prompt), with text already on the line to edit (when readline is loaded)."""
    readline = sys.modules.get("readline")
    if text and readline:
        readline.set_pre_input_hook(lambda: (readline.insert_text(text), readline.redisplay()))
    try:
        return input(prompt)
    finally:
        if text and readline:
            readline.set_pre_input_hook(None)


def keys_waiting(fd):
    """Whether keys typed ahead wait unread on the terminal."""
    import select
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def next_line(convo, readline, ready):
    """The next prompt: -i's first (shown as if typed, kept in the history), then the lines
    typed at "> ", ready (a prompt given back, keys typed ahead) already on the line."""
    first = convo.pop("first", None)
    if not first:
        return edit_line("> ", collapse_pastes(ready) if readline else "")
    show({}, "> %s\n" % first)   # where the prompt is (stderr with --jsonl), not the view
    if readline:
        readline.add_history(first)
    return first


def repl(convo):
    """Read prompts and commands until /quit, EOF or Ctrl+C twice on an empty line."""
    cfg = convo["cfg"]
    terminal = sys.stdin.isatty()
    readline = setup_readline(cfg) if terminal else None
    if terminal:
        note(cfg, startup_line(cfg, os.get_terminal_size(sys.stdin.fileno()).columns or 80), "info")
    show_resumed(convo)
    last_interrupt, again = 0.0, ""
    try:
        while True:
            try:   # a prompt that got no reply, or keys typed ahead, come back on the line
                line = next_line(convo, readline, again or convo.pop("typed", ""))
            except KeyboardInterrupt:   # Ctrl+C clears the line; twice on an empty line quits
                show({}, "\n")   # ends the prompt's line, where the prompt is
                again, empty = "", not (readline and readline.get_line_buffer())
                if empty and time.monotonic() - last_interrupt < 2:
                    break
                last_interrupt = time.monotonic() if empty else 0.0
                if empty:
                    note(cfg, "[Ctrl+C again within 2 s quits]", "info")
                continue
            except EOFError:
                show({}, "\n")   # ends the prompt's line, where the prompt is
                break
            again, line = "", expand_pastes(forget_trailing_newline(readline, line))
            if not line.strip():
                continue
            held = None
            try:
                if line.startswith("!"):   # the user's own command, outside the conversation
                    run_direct(cfg, line[1:], own_stdin=terminal)
                    continue
                name, _, arg = line.strip().partition(" ")
                name = ALIASES.get(name, name)
                if name in COMMANDS:
                    result = COMMANDS[name][0](convo, arg.strip())
                    if result is QUIT:
                        break
                    if result is None:
                        continue
                    name, line = "", result   # /skill: the skill is the next prompt
                if re.match(r"/[a-z]+$", name):   # a mistyped command, not a path like /etc/hosts
                    note(cfg, "unknown command %s%s (see /help)" % (name, did_you_mean(name)))
                    continue
                held = keyboard_mode(sys.stdin.fileno(), held=True) if terminal else None
                share = run_turn(convo, line, take_back=True)
                keyboard_back(sys.stdin.fileno(), held)
                held = None
                if share >= COMPACT_AT and sys.stdin.isatty() and confirm(
                        "Context usage is at %.1f%%. Compact conversation? [Y/n]: "
                        % (share * 100)):
                    cmd_compact(convo, "")
            except KeyboardInterrupt:   # keys typed ahead stay queued for the next prompt
                last_interrupt = 0.0
                note(cfg, "[interrupted]")
            except OutputClosed:
                raise
            except BantamError as e:
                emit(cfg, "error", message=redact_all(cfg, str(e)))
            finally:
                keyboard_back(sys.stdin.fileno(), held)
            again = convo.pop("taken_back", "")
            if again and terminal and keys_waiting(sys.stdin.fileno()):
                again += " "   # keys typed meanwhile follow it on the line, not glued to it
            if again:
                note(cfg, "[no reply: your prompt is back on the input line, to edit or send "
                     "again]", "info")
    finally:
        save_history(readline)


def run_direct(cfg, command, own_stdin=True):
    """`!command`: run it with bash on the user's terminal, outside the conversation; its exit
    status (128+N for signal N). Without own_stdin (a REPL reading piped prompts) it reads
    /dev/null: the prompts that follow stay the REPL's."""
    import signal
    import subprocess
    sys.stdout.flush()
    # The terminal's Ctrl+C reaches the command too: bantam lets it end and waits, even when
    # the key comes while the command is still starting (a KeyboardInterrupt inside Popen
    # would leave it running unwaited). A handler, not SIG_IGN: the command must not inherit it.
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        proc = subprocess.Popen([shell_path(), "-c", command], env=command_env(cfg),
                                stdin=None if own_stdin else subprocess.DEVNULL)
        code = proc.wait()
    except OSError as e:
        raise BantamError("cannot start the shell: %s" % e)
    finally:
        signal.signal(signal.SIGINT, previous)
    code = 128 - code if code < 0 else code
    if code:
        note(cfg, "[exit %d]" % code, "info")
    return code


def read_prompt(args):
    """The batch prompt: -p TEXT (with piped stdin added as context), a file, or stdin for '-'.
    A prompt that starts with ! is a shell command (see run_direct): stdin is left to it."""
    prompt_argument(args)
    if args.prompt is not None:
        if args.prompt.startswith("!"):
            return args.prompt
        if args.prompt_file:
            raise ConfigError("give a prompt file or -p, not both")
        piped = "" if sys.stdin is None or sys.stdin.isatty() else read_stdin()
        if piped.strip():
            return args.prompt + "\n\n<stdin>\n%s\n</stdin>" % piped.rstrip("\n")
        return args.prompt
    path = args.prompt_file
    try:
        if path == "-":
            return read_stdin()
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("cannot read prompt file %s: %s" % (path, getattr(e, "strerror", 0) or e))


def prompt_argument(args):
    """`bantam "what is in this folder"`: an argument that names no file and does not look
    like a path (it has a space, or no '/' and no extension) is the prompt, as with -p."""
    text = args.prompt_file
    if text and text != "-" and args.prompt is None and not os.path.exists(text) and (
            len(text.split()) > 1 or "/" not in text and not os.path.splitext(text)[1]):
        args.prompt, args.prompt_file = text, None


def read_stdin():
    """All of stdin. When nothing has come after a second, say so once: a pipe that never
    closes (a parent that hands its own stdin on) would otherwise hang in silence."""
    import select
    try:
        waiting = not select.select([sys.stdin], [], [], 1.0)[0]
    except (OSError, ValueError):   # not a file select can watch: just read it
        waiting = False
    if waiting:
        note({}, "[reading stdin for the prompt; nothing has come yet (to skip it: </dev/null)]",
             "info")
    return sys.stdin.read()


FLAG_KEYS = {"model": "--model", "endpoint": "--endpoint", "trace_file": "--trace",
             "approve": "--ask/--yolo", "sandbox": "--sandbox"}   # the keys flags of their own set


def parse_args(argv):
    """The command line as an argparse namespace; a bad option is a ConfigError (exit 2)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):   # one line naming the option, not the whole usage text
            raise ConfigError("%s (see bantam --help)" % message)

    parser = Parser(prog="bantam", formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="A tiny command-line AI agent for any OpenAI-compatible API.\n"
                                "Without a prompt: an interactive session (type /help there).",
                    epilog=HELP_EPILOG)
    add = parser.add_argument
    add("prompt_file", nargs="?", metavar="PROMPT_FILE",
        help="run one turn with the prompt in this file ('-': stdin)")
    add("-p", "--prompt", metavar="TEXT",
        help="run one turn with this prompt; piped stdin is added as context")
    add("-i", "--interactive", metavar="PROMPT", help="start the REPL with this first prompt")
    add("-m", "--model", help="the model (config key model)")
    add("-e", "--endpoint", metavar="URL", help="the API's base URL (config key endpoint)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="set any config key (repeatable)")
    add("--config", metavar="FILE", help="read this config file instead of looking for model.cfg")
    add("-c", "--continue", dest="cont", action="store_true",
        help="continue this folder's latest conversation")
    add("--session", metavar="ID", help="continue conversation ID, or start one with that id")
    add("--delete", metavar="ID", help="delete saved conversation ID (or unique prefix), then exit")
    add("-q", "--quiet", action="store_true", help="stdout: only the answer; stderr: only problems")
    add("-o", "--output", metavar="FILE", help="also write the final answer to FILE")
    add("--jsonl", action="store_true",
        help="print the events as JSON lines instead of the human output")
    add("--trace", metavar="FILE", dest="trace_file",
        help="append the events as JSON lines to FILE (config key trace_file)")
    add("--replay", metavar="TRACE",
        help="run a recorded trace again: its model replies, real tools")
    leash = parser.add_mutually_exclusive_group()
    leash.add_argument("--ask", dest="approve", action="store_const", const="ask",
                       help="ask before each shell command (approve=ask); without a terminal: "
                            "refuse them")
    leash.add_argument("--yolo", dest="approve", action="store_const", const="auto",
                       help="run shell commands without asking (approve=auto); deny patterns "
                            "still apply")
    add("--sandbox", metavar="MODE", choices=CHOICES["sandbox"],
        help="off, workspace or read-only: where commands may write (config key sandbox)")
    add("--trust", action="store_true", help="trust this folder (remembered): its model.cfg may "
                                             "set endpoint, api_key, tools, trace_file... (README)")
    add("--show-config", action="store_true",
        help="print every setting and where it comes from, then exit")
    add("--version", action="version", version="bantam " + VERSION)
    args = parser.parse_args(argv)
    if args.interactive is not None and {args.prompt, args.prompt_file, args.replay} != {None}:
        parser.error("-i/--interactive starts the REPL: not with a prompt or --replay")
    return args


HELP_EPILOG = """\
config: ~/.bantam/model.cfg (key=value lines), this folder's model.cfg merged over it (what
steers bantam, such as endpoint, only once the folder is trusted: --trust); a key left out
comes from BANTAM_<KEY>, then the default. Flags beat the files, the files beat the
environment; the leash (deny, approve...) only tightens. Keys: """ + ", ".join(DEFAULTS) + """.
bantam --show-config lists them with their values and sources.

exit status: 0 done, 1 failed after retries (transient: retrying later may work), 2 usage,
config or request error (final: the same run fails again), 3 stopped by a budget \
(max_turn_tokens, max_cost, ...; the answer
is the model's best from what it had), 130 interrupted, 129 hang-up, 143 terminated,
141 stdout closed."""


def overrides_of(args):
    """The config values the flags set, parsed: {key: value} (--set over the other flags)."""
    pairs = [(key, getattr(args, key), flag) for key, flag in FLAG_KEYS.items()]
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or key.strip().lower() not in DEFAULTS:
            raise ConfigError("--set %s: expected KEY=VALUE with a config key (%s)"
                              % (item, ", ".join(DEFAULTS)))
        pairs.append((key.strip().lower(), value.strip(), "--set"))
    values = {key: parse_value(key, value, flag) for key, value, flag in pairs if value is not None}
    for key, value, flag in pairs:
        if flag == "--set" and key in SECRET_KEYS and value:
            note({}, "warning: --set %s puts a secret in your shell's history and, while bantam "
                 "starts, in the process list; BANTAM_API_KEY or ~/.bantam/model.cfg keep it "
                 "out" % key, "warning")
    return values


def show_config(cfg):
    """--show-config: every setting, its value (secrets as ***) and where it came from."""
    sources = cfg["sources"]
    rows = [(key, shown_value(cfg, key), sources[key]) for key in DEFAULTS]
    rows.append(("system_prompt", "(%d characters)" % len(cfg["system_prompt"]),
                 sources["system_prompt"]))
    if sources.get("project_instructions_file"):
        rows.append(("", "+ project instructions", sources["project_instructions_file"]))
    rows += [(key, shown_untrusted(key, value), where + " (not used: the folder is not trusted)")
             for key, (value, where) in sources["untrusted"].items()]
    rows.append(("withheld_env", ", ".join(withheld_variables(cfg)) or "(none)",
                 "kept from commands"))
    for row in rows:
        show(cfg, "%-20s %-40s %s\n" % row)


def check_first_run(cfg, batch):
    """No key, no model.cfg and the default endpoint: nothing is set up yet, and a request
    would only come back 401. Say what to do: batch mode stops (exit 2), the REPL starts."""
    sources = cfg["sources"]
    if (cfg["api_key"] or cfg["headers"] or os.path.isfile(sources["config_file"])
            or os.path.isfile(sources["folder_config"] or "") or sources["endpoint"] != "default"):
        return
    fixes = ("export OPENAI_API_KEY=... (or BANTAM_API_KEY)", "~/.bantam/model.cfg with "
             "endpoint=, model=, api_key= lines (bantam's model.cfg.example shows every key)",
             "-e http://localhost:11434/v1 -m MODEL for a local server")
    if batch:
        raise ConfigError("no API key and no model.cfg: %s; or %s; or %s" % fixes)
    note(cfg, "[nothing is set up yet: no API key and no model.cfg. One of these:\n  %s\n  %s"
         "\n  bantam %s]" % fixes, "info")   # a person reads it: one fix a line


def check_prompt_size(cfg, prompt):
    """A batch prompt (a file, or piped input) larger than the model's context window is
    refused before any request: the server would refuse it after the upload, or cut it."""
    tokens = estimate_tokens(len(prompt or ""))
    window = context_window(cfg) if tokens > 1000 else tokens   # a small prompt fits any window
    if tokens > window:
        raise ConfigError("the prompt is about %d tokens (%d characters), more than the model's "
                          "context window of %d tokens" % (tokens, len(prompt), window))


def note_folder_texts(cfg):
    """Say in one line that this folder's system.txt and AGENTS.md are in the system prompt:
    text the model reads needs no trust, but it is never used unsaid."""
    said = ["this folder's system.txt replaces the system prompt"] * (
        cfg["sources"]["system_prompt"] == os.path.join(os.getcwd(), "system.txt"))
    if cfg["sources"].get("project_instructions_file"):
        said.append("using this folder's AGENTS.md (project_instructions=false turns it off)")
    if said:
        note(cfg, "[%s]" % "; ".join(said), "info")


def start_conversation(cfg, args):
    """The conversation to work on: this folder's latest (-c), a given one (--session), or new."""
    system = [{"role": "system", "content": cfg["system_prompt"]}]
    if args.cont:
        sid = latest_in_folder()
        if not sid:
            raise ConfigError("no conversation of this folder to continue")
        return load_session(sid)
    if args.session:
        if not SESSION_NAME.match(args.session) or args.session == "autosave":
            raise ConfigError("--session: expected letters, digits, '-', '_' and '.', got %r"
                              % args.session)
        if os.path.exists(session_path(args.session)):
            return load_session(args.session)
        return new_session(args.session), system
    return new_session(), system


def make_sink(cfg, args, convo, batch):
    """Where the events go: a view (plain, quiet or JSONL), the trace file, the step saver."""
    if args.jsonl:
        stream = sys.stdout
        if not batch:   # the REPL's prompt and commands' output go to stderr: stdout is JSON only
            sys.stdout.flush()
            stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        view = jsonl_view(stream, cfg)
    elif args.quiet and batch:
        view = plain_view(cfg, QUIET)
    elif cfg["render"] == "always" or (cfg["render"] == "auto" and sys.stdout.isatty()):
        view = terminal_view(cfg)
    else:
        view = plain_view(cfg)
    trace = None
    if cfg["trace_file"]:
        path = os.path.expanduser(cfg["trace_file"])
        try:
            trace = jsonl_view(open(path, "a", encoding="utf-8", errors="replace"), cfg)
        except OSError as e:
            raise ConfigError("trace_file: cannot open %s: %s" % (cfg["trace_file"], e.strerror))
    return both(view, trace, step_saver(convo))


def hung_up(*_):
    """SIGHUP: the terminal is gone; stop like SIGTERM (saving), with output to /dev/null."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    sys.exit(129)


def main(argv=None):
    """The command line: REPL without a prompt, batch mode with one. Returns the exit status."""
    if hasattr(sys.stdout, "reconfigure"):   # a Latin-1 terminal shows '?' for an emoji, no crash
        sys.stdout.reconfigure(errors="replace")
    convo = None
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if args.delete:
            cmd_delete(None, args.delete)
            return 0
        import signal
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # saved and stopped like Ctrl+C
        signal.signal(signal.SIGHUP, hung_up)                     # a closed terminal, a dropped SSH
        overrides = overrides_of(args)
        cfg = load_config(overrides, args.config)
        hide_secrets(cfg)
        if args.show_config:
            show_config(cfg)
            return 0
        batch = args.prompt is not None or args.prompt_file is not None or args.replay is not None
        prompt = read_prompt(args) if batch and not args.replay else None
        if prompt is not None and prompt.startswith("!"):   # the user's command: its exit status
            return run_direct(cfg, prompt[1:])
        cfg = trust_folder(cfg, args, not batch and sys.stdin.isatty(),
                           lambda trust: load_config(overrides, args.config, trust=trust))
        hide_secrets(cfg)
        check_first_run(cfg, batch)
        check_sandbox(cfg)   # exit 2 now when it cannot be had: never a silently unsandboxed run
        if args.output:   # before the model is paid: a file that cannot be written fails now
            try:
                open(args.output, "a").close()
            except OSError as e:
                raise ConfigError("-o/--output: cannot write %s: %s" % (args.output, e.strerror))
        if prompt is not None and not prompt.strip():
            raise ConfigError("the prompt is empty")
        check_prompt_size(cfg, prompt)
        session, messages = start_conversation(cfg, args)
        convo = {"cfg": cfg, "messages": messages, "session": session}
        # the process's run: where events go, the commands the user said "always" to, and
        # who answers approve=ask (without a terminal: nobody, so what needs asking is refused)
        cfg["run"] = {"emit": make_sink(cfg, args, convo, batch), "approved": set(),
                      "approver": None}
        if sys.stdin.isatty() and sys.stdout.isatty() and not args.replay:
            cfg["run"]["approver"] = terminal_approver(convo)
        emit(cfg, "start", version=VERSION, model=cfg["model"], mode="batch" if batch else "repl",
             session=session["id"], time=now())
        note_folder_texts(cfg)
        if args.replay:
            return replay(convo, args.replay)
        if not batch:
            convo["first"] = args.interactive
            repl(convo)
            return 0
        run_turn(convo, prompt)
        answer = last_answer(convo["messages"])
        answer += "\n" if answer and not answer.endswith("\n") else ""
        if args.quiet:
            show(cfg, answer)
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(answer)
        return BUDGET_EXIT if convo.get("status") == "budget" else 0
    except KeyboardInterrupt:
        if convo:
            note(convo["cfg"], "[interrupted]")
        return 130
    except BantamError as e:
        if str(e):
            if convo:
                emit(convo["cfg"], "error", message=redact_all(convo["cfg"], str(e)))
            else:
                note({}, "error: %s" % e)
        return e.exit_code
    finally:
        if convo and len(convo["messages"]) > 1:
            save_session(convo["cfg"], convo["session"], convo["messages"])
        try:
            sys.stdout.flush()
        except (BrokenPipeError, OutputClosed):
            pass


def read_trace(path):
    """The runs recorded in a trace file (JSON lines), each a list of events."""
    runs = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise ConfigError("%s:%d: not a JSON line of a bantam trace" % (path, number))
                if event.get("type") == "start" or not runs:
                    runs.append([])
                runs[-1].append(event)
    except OSError as e:
        raise ConfigError("cannot read trace %s: %s" % (path, e.strerror))
    return runs


def replay(convo, path):
    """--replay: run the last run of a trace file again, its recorded model replies instead of
    the network, the tools for real; exit status 1 when a tool result differs (the first is
    reported), else 0."""
    runs = read_trace(path)
    events = runs[-1] if runs else []
    prompts = [e["text"] for e in events if e["type"] == "prompt" and not e["depth"]]
    if not prompts:
        raise ConfigError("%s: no recorded prompt to replay" % path)
    cfg = convo["cfg"]
    state = cfg["run"]["replay"] = {
        "replies": [e["message"] for e in events if e["type"] == "reply"],
        "results": [(e["name"], e["content"]) for e in events if e["type"] == "tool_result"],
        "replied": 0, "checked": 0, "diverged": None}
    for prompt in prompts:
        run_turn(convo, prompt)
    if state["diverged"]:
        note(cfg, "replay: diverged at tool result %d: %s" % state["diverged"])
        return 1
    note(cfg, "replay: all %d tool results matched the recording" % state["checked"], "info")
    return 0


def replayed_reply(cfg, quiet):
    """The next recorded model reply (--replay), passed on as if it had streamed."""
    state = cfg["run"]["replay"]
    if state["replied"] >= len(state["replies"]):
        raise ApiError("replay: the recording has no more model replies", "fatal")
    message = json.loads(json.dumps(state["replies"][state["replied"]]))   # a copy
    state["replied"] += 1
    if not quiet:
        emit(cfg, "request", model=cfg["model"], messages=None, stream=False)
        if message.get("reasoning_content"):
            emit(cfg, "reasoning", text=message["reasoning_content"])
        if message.get("content"):
            emit(cfg, "text", text=message["content"])
        emit(cfg, "reply_end", finish=None)
    emit(cfg, "reply", message=message, quiet=quiet)
    return message


def check_replayed_result(cfg, name, result):
    """--replay: compare a tool result with the recorded one; remember the first difference."""
    state = cfg["run"]["replay"]
    index = state["checked"]
    state["checked"] += 1
    recorded = state["results"][index] if index < len(state["results"]) else (None, None)
    if recorded != (name, redact_all(cfg, result)) and not state["diverged"]:
        import difflib
        diff = difflib.unified_diff(str(recorded[1]).splitlines(True), result.splitlines(True),
                                    "recorded", "now", n=1)
        state["diverged"] = (index + 1, "%s differs from the recording:\n%s"
                             % (name, "".join(list(diff)[:12])))


if __name__ == "__main__":
    sys.exit(main())
