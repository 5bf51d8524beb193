#!/usr/bin/env python3
"""bantam: a tiny command-line AI agent in one standard-library Python file.

The whole agent is the Bantam algorithm: keep a list of chat messages, send it to an
OpenAI-compatible /chat/completions endpoint, print the reply as it streams, run the tool
calls it asks for (shell_exec and run_subagent), append their results, and loop until the
model stops calling tools. Everything else here (config, HTTP, sessions, the REPL) serves
that loop, AL(cfg, messages), which you will find under "The agentic loop".

Usage:  bantam               interactive REPL (readline, history, /commands)
        bantam prompt.txt    batch mode: one turn from a file ('-' reads stdin)
"""
import json
import os
import re
import sys
import time

VERSION = "1.0.0"
USER_AGENT = "Mozilla/5.0 (compatible; Bantam/1.0)"

# The config schema: every key with its default. Values from model.cfg or BANTAM_<KEY>
# are parsed by the default's type (bool, int, float, list of seconds, or a string).
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
    "context_window": 262144,      # tokens, when GET /models does not say
    "reasoning_effort": "",        # forwarded when set (low | medium | high ...)
    "text_tool_calls": False,      # run a reply that is only a tool call written as text
}
CHOICES = {"color": ("auto", "always", "never")}

RETRY_STATUSES = {408, 409, 429}       # plus every 5xx
MAX_SERVER_WAIT = 60.0                 # a longer Retry-After fails the turn instead
DRAIN_SECONDS = 0.25                   # read output this long after the shell exits
DRAIN_REPLY = 2.0                      # seconds to read the rest of a reply after [DONE]
FLUSH_EVERY = 0.02                     # seconds between flushes of streamed text to a pipe
SPILL_LIMIT = 1 << 30                  # bytes of tool output kept on disk at most
COMPACT_AT = 0.60                      # offer /compact at this share of the context window
MAX_SUBAGENT_DEPTH = 4                 # subagents of subagents... at most this deep
CHILD_NOTE = "\n\nImportant: this is a child agent"
INTERRUPTED = "[interrupted by user]"

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

# Runtime state of this process (kept off the wire): one connection per endpoint, the
# last usage report, discovered context windows, and tool-output files of the turn.
STATE = {"connections": {}, "usage": None, "windows": {}, "dropped": set(),
         "spill": [], "text_tool_hint": False, "garbage_noted": False}


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
    """A failed model request. kind: retry | fatal | overflow | empty_assistant | bad_request."""

    def __init__(self, message, kind="fatal", status=None, wait=None, body=""):
        BantamError.__init__(self, message)
        self.kind, self.status, self.wait, self.body = kind, status, wait, body


# ----------------------------------------------------------------------------------------
# Output: one funnel for the conversation (stdout), one for diagnostics (stderr)
# ----------------------------------------------------------------------------------------

COLORS = {"status": "\033[1;90m", "marker": "\033[36m", "reasoning": "\033[2m",
          "call": "\033[33m", "result": "\033[32m", "body": "\033[2m", "error": "\033[31m",
          "dim": "\033[2m"}
RESET = "\033[0m"
UI = {"color": False, "err_color": False, "depth": 0, "bol": True, "status": False,
      "secrets": []}

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


def redact(text):
    """Text with the API key replaced, for anything printed or written to disk."""
    for secret in UI["secrets"]:
        text = text.replace(secret, "***")
    return text


def setup_colors(cfg):
    """Decide color for stdout and stderr from the color key, NO_COLOR and the terminal."""
    mode = cfg["color"]
    allowed = mode != "never" and not os.environ.get("NO_COLOR") and not os.environ.get("BANTAM_NO_COLOR")
    UI["color"] = allowed and (mode == "always" or sys.stdout.isatty())
    UI["err_color"] = allowed and (mode == "always" or sys.stderr.isatty())
    UI["secrets"] = secrets_of(cfg)


def secrets_of(cfg):
    """The values never to print or save: the API key and the values of the extra headers."""
    values = [cfg["api_key"]] + [str(v) for v in cfg["headers"].values()]
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def paint(text, style, on=None):
    """Text wrapped in a palette color when color is on."""
    if (UI["color"] if on is None else on) and style:
        return COLORS[style] + text + RESET
    return text


def show(text, style=None):
    """Write conversation text to stdout: made terminal-safe, indented in a subagent, colored."""
    if UI["status"]:
        clear_status()
    text = TERMINAL_UNSAFE.sub(visible, text)   # terminal_safe(), inlined: the hot path
    if not text:
        return
    if UI["depth"]:
        pad = "  \u2502 " * UI["depth"]   # a subagent's output is set apart by a rail
        text = (pad if UI["bol"] else "") + text.replace("\n", "\n" + pad)
        if text.endswith(pad):
            text = text[:-len(pad)]
    UI["bol"] = text.endswith("\n")
    try:
        sys.stdout.write(COLORS[style] + text + RESET if style and UI["color"] else text)
    except BrokenPipeError:
        stdout_closed()


def flush():
    """Push what was written to stdout out to the reader."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()


def stdout_closed():
    """Send the rest of stdout to /dev/null (so later writes are harmless) and stop the run."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise OutputClosed("")


def end_line():
    """Finish the current stdout line, if one is open."""
    if not UI["bol"]:
        show("\n")


def note(text, style="error"):
    """Write one diagnostic line to stderr (errors, retries, usage); never holds secrets."""
    if UI["status"]:
        clear_status()
    if not UI["bol"] and sys.stdout.isatty():
        end_line()
    flush()
    sys.stderr.write(paint(terminal_safe(redact(text)), style, UI["err_color"]) + "\n")
    sys.stderr.flush()


def show_status():
    """Show ...requesting... while the model has not answered (terminal with color only)."""
    if UI["color"] and UI["bol"] and sys.stdout.isatty():
        sys.stdout.write(paint("...requesting...", "status"))
        sys.stdout.flush()
        UI["status"] = True


def clear_status():
    """Erase the ...requesting... status line."""
    UI["status"] = False
    sys.stdout.write("\r\033[K")


# ----------------------------------------------------------------------------------------
# Config: model.cfg (key=value), then BANTAM_<KEY>, then DEFAULTS
# ----------------------------------------------------------------------------------------

def find_file(name):
    """The path of name in the current directory, else in ~/.bantam, else None."""
    for folder in (os.getcwd(), os.path.join(os.path.expanduser("~"), ".bantam")):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def read_key_values(path):
    """The key=value lines of a config file as {key: (value, 'file:line')}; warns on the odd ones."""
    values = {}
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("%s: cannot read config: %s" % (path, e))
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
            note("%s: unknown config key %r (ignored)" % (where, key))
            continue
        values[key] = (re.sub(r"\s+#.*$", "", value).strip(), where)   # "key=value  # note"
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
            if value < 1:
                raise ValueError("expected a whole number above 0")
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
    if key in CHOICES and raw.lower() not in CHOICES[key]:
        raise ConfigError("%s: %s: expected one of %s, got %r" % (where, key, ", ".join(CHOICES[key]), raw))
    return raw.lower() if key in CHOICES else raw


def load_config(env=None):
    """The run configuration: DEFAULTS overridden by BANTAM_<KEY>, overridden by model.cfg."""
    env = os.environ if env is None else env
    path = find_file("model.cfg")
    from_file = read_key_values(path) if path else {}
    cfg = {}
    for key in DEFAULTS:
        raw, where = from_file.get(key, ("", ""))
        if raw in ("", "-"):   # blank or '-' in the file defers to the environment
            raw, where = env.get("BANTAM_" + key.upper(), ""), "BANTAM_" + key.upper()
        if key == "api_key" and not raw:
            raw = env.get("OPENAI_API_KEY", "")
        cfg[key] = parse_value(key, raw, where) if raw != "" else DEFAULTS[key]
    cfg["endpoint"] = cfg["endpoint"].rstrip("/")
    if not re.match(r"https?://[^/]", cfg["endpoint"]):
        raise ConfigError("%s: endpoint: expected an http:// or https:// URL, got %r"
                          % (path or "BANTAM_ENDPOINT", cfg["endpoint"]))
    cfg["system_prompt"] = load_system_prompt()
    return cfg


def load_system_prompt():
    """system.txt from the current directory or ~/.bantam, else the built-in prompt."""
    path = find_file("system.txt")
    if not path:
        return DEFAULT_SYSTEM
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("%s: cannot read system prompt: %s" % (path, e))


# ----------------------------------------------------------------------------------------
# Sessions: ~/.bantam/sessions/<id>.json = {"id", "saved_at", "summary", "messages"}
# ----------------------------------------------------------------------------------------

def sessions_dir():
    """The folder of saved sessions."""
    return os.path.join(os.path.expanduser("~"), ".bantam", "sessions")


def write_private_file(path, text, exclusive=False):
    """Write text to path atomically with mode 0600 (temp file + rename): never a torn file.
    With exclusive=True an existing path is not replaced (FileExistsError)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    import tempfile
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:   # a lone surrogate: '?'
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)   # fails if path exists, unlike rename
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
        remove_stale_temp_files(folder, "." + os.path.basename(path) + ".")
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_stale_temp_files(folder, prefix, age=60):
    """Delete temp files of writes killed mid-way (SIGKILL leaves them behind)."""
    now = time.time()
    for name in os.listdir(folder):
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                if now - os.stat(os.path.join(folder, name)).st_mtime > age:
                    os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def session_text(sid, summary, messages):
    """The JSON text of a session file (secrets redacted)."""
    session = {"id": sid, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "summary": summary, "messages": messages}
    return redact(json.dumps(session, indent=1, ensure_ascii=False))


def save_new_session(messages, summary):
    """Save messages under a new time-based id (never overwriting one); returns the id."""
    base = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        sid = base if n == 1 else "%s-%d" % (base, n)
        try:
            write_private_file(os.path.join(sessions_dir(), sid + ".json"),
                               session_text(sid, summary, messages), exclusive=True)
            return sid
        except FileExistsError:
            continue
    raise BantamError("cannot find a free session id for " + base)


def autosave(messages):
    """Write the conversation to autosave.json; a failure is reported, never fatal."""
    try:
        write_private_file(os.path.join(sessions_dir(), "autosave.json"),
                           session_text("autosave", first_user_text(messages), messages))
    except OSError as e:
        note("warning: autosave failed: %s" % e)


def read_session(sid):
    """The session dict stored under sid; BantamError if missing, not JSON, or the wrong shape."""
    path = os.path.join(sessions_dir(), sid + ".json")
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
    return session


def session_ids():
    """The ids of all saved sessions."""
    try:
        names = os.listdir(sessions_dir())
    except OSError:
        return []
    return [n[:-5] for n in names if n.endswith(".json") and not n.startswith(".")]


def resolve_session(prefix):
    """The session id that is prefix exactly, or the only one starting with it."""
    ids = session_ids()
    if prefix in ids:
        return prefix
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise BantamError("no session matches %r (see /list)" % prefix)
    raise BantamError("%r matches %d sessions: %s" % (prefix, len(matches), ", ".join(sorted(matches)[:5])))


def first_user_text(messages, width=60):
    """The first user prompt, on one line and shortened: the fallback summary."""
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            text = " ".join(m["content"].split())
            return text if len(text) <= width else text[:width - 3] + "..."
    return "(empty conversation)"


def repair_conversation(messages):
    """Make a loaded conversation valid: drop empty assistant messages, answer unanswered
    calls, join user messages that follow each other."""
    fixed = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and not str(m.get("content") or "").strip() and not m.get("tool_calls"):
            continue
        if m.get("role") == "user" and fixed and fixed[-1].get("role") == "user":
            append_user(fixed, m.get("content"))
            continue
        fixed.append(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            answered = {x.get("tool_call_id") for x in messages[i + 1:] if x.get("role") == "tool"}
            for call in m["tool_calls"]:
                if call.get("id") not in answered:
                    fixed.append(tool_message(call.get("id"), INTERRUPTED + " (no result was recorded)"))
    messages[:] = fixed
    return messages


# ----------------------------------------------------------------------------------------
# The HTTP client: one keep-alive connection per endpoint, retries, SSE
# ----------------------------------------------------------------------------------------

def proxy_for(scheme, host):
    """The proxy URL for host from HTTPS_PROXY / HTTP_PROXY, unless NO_PROXY matches."""
    env = os.environ
    proxy = env.get(scheme + "_proxy") or env.get(scheme.upper() + "_PROXY")
    if not proxy:
        return None
    for rule in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(","):
        rule = rule.strip().lower().lstrip(".").split(":")[0]
        if rule == "*" or (rule and (host == rule or host.endswith("." + rule))):
            return None
    return proxy if "://" in proxy else "http://" + proxy


def load_http_client(endpoint):
    """Import http.client, without ssl for an http:// endpoint (fixed for the process):
    http.client imports ssl eagerly, and only https needs its milliseconds of loading."""
    if "http.client" in sys.modules or "ssl" in sys.modules or endpoint.startswith("https:"):
        return
    sys.modules["ssl"] = None   # makes http.client's optional `import ssl` fail quietly
    try:
        import http.client
    finally:
        del sys.modules["ssl"]


def open_connection(endpoint, timeout):
    """A new http.client connection to the endpoint's host, through a CONNECT proxy if set."""
    import http.client
    from urllib.parse import urlsplit, unquote
    url = urlsplit(endpoint)
    https = url.scheme == "https"
    port = url.port or (443 if https else 80)
    proxy = proxy_for(url.scheme, url.hostname)
    host, host_port = url.hostname, port
    if proxy:
        p = urlsplit(proxy)
        host, host_port = p.hostname, p.port or (443 if p.scheme == "https" else 80)
    if https:
        import ssl
        conn = http.client.HTTPSConnection(host, host_port, timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, host_port, timeout=timeout)
    if proxy:
        headers = {}
        if p.username:
            import base64
            login = "%s:%s" % (unquote(p.username), unquote(p.password or ""))
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(login.encode()).decode()
        conn.set_tunnel(url.hostname, port, headers=headers)
    return conn


def drop_connection(cfg):
    """Close the endpoint's connection (after an error or an abandoned reply)."""
    entry = STATE["connections"].pop(cfg["endpoint"], None)
    if entry:
        entry["conn"].close()


def http_request(cfg, method, path, body=None, wait=None, root=False):
    """Send one request on the endpoint's persistent connection and return the response,
    allowing `wait` seconds (default: timeout) for its first byte. A connection the server
    closed while idle is reopened once, without counting a retry. A connection whose last
    reply was not read to its end is replaced, never reused: http.client would send the
    request and then refuse to read the answer. The path is under the endpoint (with the
    endpoint's query string, e.g. Azure's ?api-version=...), or under the server's root."""
    import http.client
    from urllib.parse import urlsplit
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json, text/event-stream"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    extra = {k.lower(): k for k in cfg["headers"]}
    if cfg["api_key"] and "authorization" not in extra and "api-key" not in extra:   # Azure: api-key
        headers["Authorization"] = "Bearer " + cfg["api_key"]
    for name in [k for k in headers if k.lower() in extra]:
        del headers[name]
    headers.update(cfg["headers"])
    url = urlsplit(cfg["endpoint"])
    target = path if root else url.path.rstrip("/") + path + ("?" + url.query if url.query else "")
    for attempt in (1, 2):
        entry = STATE["connections"].get(cfg["endpoint"])
        if entry and entry["response"] and not entry["response"].isclosed():
            drop_connection(cfg)
            entry = None
        reused = entry is not None
        if not reused:
            entry = STATE["connections"][cfg["endpoint"]] = {
                "conn": open_connection(cfg["endpoint"], cfg["timeout"]), "response": None, "sock": None}
        conn = entry["conn"]
        try:
            conn.request(method, target, body, headers)
            entry["sock"] = conn.sock   # kept: after a close-delimited reply conn.sock is None
            conn.sock.settimeout(wait or cfg["timeout"])
            entry["response"] = conn.getresponse()
            return entry["response"]
        except (ConnectionError, http.client.BadStatusLine) as e:
            drop_connection(cfg)
            if not reused or attempt == 2:
                raise
        except BaseException:
            drop_connection(cfg)
            raise


def set_read_timeout(cfg, seconds):
    """Allow `seconds` between reads of the reply in progress."""
    entry = STATE["connections"].get(cfg["endpoint"])
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
    """The JSON body of a chat completion request, without the fields this server has said
    it does not support (see unsupported_field)."""
    body = {"model": cfg["model"], "messages": messages, "temperature": cfg["temperature"],
            "stream": stream}
    if tools:
        body["tools"] = TOOL_DEFINITIONS
    if stream:
        body["stream_options"] = {"include_usage": True}
    if cfg["reasoning_effort"]:
        body["reasoning_effort"] = cfg["reasoning_effort"]
    dropped = {f for e, m, f in STATE["dropped"] if (e, m) == (cfg["endpoint"], cfg["model"])}
    for field in dropped & set(body):
        del body[field]
    if dropped & set(MESSAGE_EXTRAS):   # fields a provider put on messages that this one refuses
        body["messages"] = [{k: v for k, v in m.items() if k not in dropped} for m in messages]
    return body


OPTIONAL_FIELDS = ("temperature", "reasoning_effort", "stream_options")
MESSAGE_EXTRAS = ("reasoning_content", "reasoning_details", "extra_content")
# How servers refuse a field: OpenAI {"param": "temperature", "code": "unsupported_value"},
# "Unsupported parameter: 'reasoning_effort' is not supported with this model."; Mistral
# {"message": {"detail": [{"type": "extra_forbidden", "loc": ["body", "stream_options"]}]}};
# Anthropic "`temperature` is deprecated for this model"; Groq "property 'x' is unsupported".
REFUSED_FIELD = re.compile(r"unsupported|not supported|does not support|deprecated|extra_forbidden"
                           r"|not permitted|unrecognized|unknown (?:field|parameter|name)|not allowed", re.I)


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
        detail = error.get("message", {}).get("detail") if isinstance(error.get("message"), dict) else None
        places = [str(d.get("loc", [""])[-1]) for d in detail or () if isinstance(d, dict)]
    except (ValueError, AttributeError, IndexError, TypeError):
        param, places = "", []
    for field in sent:
        if field == param or field in places:
            return field
    return next((f for f in sent if re.search(r"[`'\"]%s[`'\"]|\b%s\b" % (f, f), text)), None)


def chat(cfg, messages, tools=True, quiet=False):
    """The model's reply to messages as an assistant message dict, printed as it arrives
    unless quiet. Retries per the backoff ladder; raises ApiError when it cannot get one."""
    stream = cfg["stream"] and not quiet
    delays, retries = cfg["backoff"], 0
    while True:
        body = request_body(cfg, messages, tools, stream)
        try:
            message, usage = exchange(cfg, body, quiet)
            if not quiet:   # the token line's figures: the server's, else estimated from the text
                STATE["usage"] = usage if isinstance(usage, dict) else {
                    "prompt_tokens": estimate_tokens(text_size(body["messages"]) + len(json.dumps(body.get("tools", "")))),
                    "completion_tokens": estimate_tokens(text_size([message])), "estimated": True}
            return message
        except ApiError as e:
            if e.kind == "overflow":
                learn_window(cfg, e.body or str(e))
            if e.kind == "empty_assistant" and drop_empty_assistant(messages):
                continue
            field = e.kind == "bad_request" and unsupported_field(e.body or str(e), body)
            if field:   # leave it out from now on, and ask again
                STATE["dropped"].add((cfg["endpoint"], cfg["model"], field))
                note("[the server does not support %r for this model: leaving it out from now on]" % field, "dim")
                continue
            if e.body == "empty stream":   # some servers only say what went wrong (an overflow...)
                stream = False              # in a reply that is not streamed: ask that way
            if e.kind != "retry" or retries >= len(delays):
                if e.kind == "retry" and retries:
                    raise ApiError("%s (gave up after %d %s)" % (e, retries, "retry" if retries == 1 else "retries"))
                raise
            wait = max(delays[retries], e.wait or 0)
            if wait > MAX_SERVER_WAIT:
                raise ApiError("%s; the server asks to wait %.0f s, so giving up (try again later)" % (e, wait))
            retries += 1
            note("[%s; retry %d/%d in %gs]" % (e, retries, len(delays), wait))
            time.sleep(wait)


def exchange(cfg, body, quiet):
    """One request and its reply; network faults become retryable ApiErrors."""
    load_http_client(cfg["endpoint"])
    import http.client
    reply, response = new_reply(quiet), None
    try:
        if not quiet:
            show_status()
        response = http_request(cfg, "POST", "/chat/completions", json.dumps(body).encode(),
                                wait=cfg["first_byte_timeout"])
        if response.status != 200:
            raise error_from_response(cfg, response)
        kind = response.getheader("Content-Type") or ""
        if "event-stream" in kind or (body["stream"] and "json" not in kind):
            read_stream(cfg, response, reply)
        else:   # not streamed, or a server that ignores stream=true
            data = response.read()
            try:
                merge_chunk(reply, DECODE_JSON(data.decode("utf-8", "replace").strip())[0], whole=True)
            except ValueError:
                raise ApiError("the server sent a reply that is not JSON: %r" % data[:200], "retry")
        release(cfg, response)
        message = finish_reply(reply)
        if reply["finish"] in CUT_REPLY and not quiet:
            note(CUT_REPLY[reply["finish"]])
        return message, reply["usage"]
    except http.client.ImproperConnectionState as e:   # our bug, not the network's: never resent
        drop_connection(cfg)
        close_open_blocks(reply)
        raise ApiError("internal error: the HTTP connection was in the wrong state (%s: %s); "
                       "please report this" % (type(e).__name__, e), "fatal")
    except (OSError, http.client.HTTPException) as e:
        drop_connection(cfg)
        close_open_blocks(reply)
        raise network_error(e, cfg, got_output=bool(reply["content"] or reply["reasoning"] or reply["calls"]))
    except ApiError:
        if response is not None and not response.isclosed():
            drop_connection(cfg)   # the rest of the reply is unread: the connection is unusable
        close_open_blocks(reply)
        raise
    except (KeyboardInterrupt, OutputClosed) as stop:
        drop_connection(cfg)   # the reply is abandoned mid-way
        stop.partial = "".join(reply["content"])
        close_open_blocks(reply)
        raise
    finally:
        if UI["status"]:
            clear_status()
        flush()


CUT_REPLY = {   # finish reasons that mean the reply is not whole
    "length": "[the reply was cut: it reached the output token limit (finish_reason: length)]",
    "content_filter": "[the reply was cut by the provider's content filter (finish_reason: content_filter)]"}


def network_error(e, cfg, got_output=False):
    """The ApiError for a failed connection or read: retried when waiting may help (refused
    while a local server starts, resets, timeouts), fatal when it cannot (a certificate that
    is not trusted, a host name that does not exist, a proxy that says no)."""
    import socket
    from urllib.parse import urlsplit
    url = urlsplit(cfg["endpoint"])
    proxy = proxy_for(url.scheme, url.hostname)
    p = urlsplit(proxy) if proxy else None
    host = p.hostname if proxy else url.hostname   # the proxy's URL may hold a password: never print it
    ssl = sys.modules.get("ssl")
    if ssl and isinstance(e, ssl.SSLCertVerificationError):
        return ApiError("TLS error: the certificate of %s is not trusted (%s); to trust a private "
                        "or company CA, point SSL_CERT_FILE at its PEM file"
                        % (url.hostname, getattr(e, "verify_message", "") or e), "fatal")
    if isinstance(e, socket.gaierror):
        if e.errno == socket.EAI_AGAIN:
            return ApiError("network error: looking up %s failed for now (%s)" % (host, e.strerror), "retry")
        return ApiError("network error: the host name %s does not resolve (%s); check %s"
                        % (host, e.strerror, "the proxy setting" if proxy else "endpoint"), "fatal")
    if re.match(r"Tunnel connection failed: 4", str(e)):   # the proxy said no (407...)
        return ApiError("network error: %s" % e, "fatal")
    if isinstance(e, socket.timeout) or "timed out" in str(e):
        if got_output:
            return ApiError("network error: the reply stalled for %g s (timeout)" % cfg["timeout"], "retry")
        return ApiError("network error: no answer within %g s (first_byte_timeout)"
                        % cfg["first_byte_timeout"], "retry")
    if isinstance(e, ConnectionRefusedError):
        if proxy:
            return ApiError("network error: connection refused by the proxy %s:%s (%s_PROXY)" % (
                p.hostname, p.port or (443 if p.scheme == "https" else 80), url.scheme.upper()), "retry")
        return ApiError("network error: connection refused by %s" % cfg["endpoint"], "retry")
    return ApiError("network error: %s" % (str(e) or type(e).__name__), "retry")


def error_from_response(cfg, response):
    """The ApiError for a non-200 response: its kind says whether to retry, compact or stop."""
    status = response.status
    data = response.read(1 << 20)
    if not response.isclosed():
        drop_connection(cfg)
    text = data.decode("utf-8", "replace")
    message = text.strip()[:300] or response.reason
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
    elif status in (403, 404):
        hint = " (check endpoint and model in model.cfg)"
    should = (response.getheader("x-should-retry") or "").strip().lower()
    if should == "true" and kind in ("fatal", "bad_request") and "quota" not in hint:
        kind = "retry"
    elif should == "false" and kind == "retry":
        kind = "fatal"
    return ApiError(headline + hint, kind, status, server_wait(response), text[:4000])


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


def drop_empty_assistant(messages):
    """Remove assistant messages with neither content nor tool calls; True if any were.
    Whitespace-only content counts as none (Anthropic rejects it too)."""
    before = len(messages)
    repair_conversation(messages)
    return len(messages) < before


def sse_events(response):
    """Yield, after each network read, the list of events completed by it (each event's
    data as bytes). Lines look like:
        data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}
        : keep-alive comment          event: name          (blank line ends an event)
    and, from servers that break the format, `error: {"message": ...}` (older llama.cpp) or a
    bare JSON line (a proxy's error): each is taken as an event of its own."""
    read = response.read1
    partial, data = [], []
    while True:
        block = read(65536)
        if not block:
            break
        if b"\n" not in block:   # a long line arriving in pieces
            partial.append(block)
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
            elif line[:1] == b"{" or line[:6] == b"error:":
                events.append(odd_line_event(line))
        yield events
    line = b"".join(partial).rstrip(b"\r")   # the last line, if it had no newline
    if line[:5] == b"data:":
        data.append(line[6:] if line[5:6] == b" " else line[5:])
    if data:
        yield [b"\n".join(data)]
    elif line[:1] == b"{" or line[:6] == b"error:":
        yield [odd_line_event(line)]


def odd_line_event(line):
    """The event data for a line that is not SSE: `error: {...}` or a bare JSON object."""
    return b'{"error":' + line[6:].strip() + b"}" if line[:6] == b"error:" else line


DECODE_JSON = json.JSONDecoder().raw_decode


def read_stream(cfg, response, reply):
    """Merge a streamed reply into reply, printing as it comes, until [DONE] or the end.
    A terminal is flushed after every network read; a pipe at most every FLUSH_EVERY s.
    Until the model's output begins, reads may wait first_byte_timeout; then timeout."""
    every, last = 0 if sys.stdout.isatty() else FLUSH_EVERY, 0.0
    clock = time.monotonic
    waiting = True
    for events in sse_events(response):
        for data in events:
            if data[:6] == b"[DONE]":
                reply["done"] = True
                return
            try:   # the hot path: one JSON object per event
                chunks = (DECODE_JSON(data.decode())[0],)
            except ValueError:
                chunks = parse_event(data)
            for chunk in chunks:
                if isinstance(chunk, dict):
                    if chunk.get("error"):   # OpenRouter sends it next to choices
                        raise stream_error(chunk["error"])
                    merge_chunk(reply, chunk)
        if waiting and (reply["content"] or reply["reasoning"] or reply["calls"]):
            waiting = False
            set_read_timeout(cfg, cfg["timeout"])
        if clock() - last >= every:
            flush()
            last = clock()
    if response.length:   # read1() returns b"" on a short Content-Length body, without an error
        raise ApiError("the connection closed in the middle of the reply", "retry")
    if not (reply["finish"] or reply["content"] or reply["reasoning"] or reply["calls"]):
        raise ApiError("the server ended the reply without sending anything", "retry", body="empty stream")
    if not reply["finish"] and not response.chunked and response.length is None:
        # A reply delimited by closing the connection, closed before [DONE] or a finish_reason:
        # dropped. (A chunked reply cut short raises IncompleteRead instead.)
        raise ApiError("the connection closed in the middle of the reply", "retry")


def parse_event(data):
    """The JSON values in one event's data (some servers omit the blank line between events)."""
    values = []
    for line in data.split(b"\n"):
        try:
            values.append(json.loads(line))
        except ValueError:
            if not STATE["garbage_noted"]:   # once: a broken server must not flood the screen
                STATE["garbage_noted"] = True
                note("warning: skipped stream data that is not JSON: %r" % line[:80])
    return values


def stream_error(error):
    """The ApiError for an error object sent inside a stream."""
    message = error.get("message") if isinstance(error, dict) else str(error)
    text = json.dumps(error)
    kind = "overflow" if OVERFLOW_PATTERNS.search(text) else "retry"
    return ApiError("error in stream: %s" % " ".join(str(message).split()), kind, body=text[:4000])


# A reply under construction: text pieces, reasoning pieces, tool calls by index.
def new_reply(quiet):
    """An empty reply accumulator."""
    return {"content": [], "reasoning": [], "calls": {}, "details": [], "quiet": quiet,
            "in_reasoning": False, "in_text": False, "echo_reasoning": False, "finish": None, "held": "",
            "done": False, "usage": None, "extra": {}}


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
                raise stream_error(choice.get("error") or chunk.get("error") or "finish_reason: error")
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
    details = delta.get("reasoning_details")
    for detail in details if isinstance(details, list) else ():
        merge_reasoning_detail(reply["details"], detail)
    for position, fragment in enumerate(delta.get("tool_calls") or ()):
        merge_tool_call(reply["calls"], fragment, position)


def merge_reasoning_detail(details, detail):
    """Add one reasoning_details entry. OpenRouter streams one block as fragments with the
    same type and index (text in pieces, the signature last); the provider wants the whole
    block back, as its signature covers the whole text."""
    block = None
    if isinstance(detail, dict) and isinstance(detail.get("index"), int):
        block = next((d for d in details if isinstance(d, dict) and d.get("index") == detail["index"]
                      and d.get("type") == detail.get("type")), None)
    if block is None:
        details.append(dict(detail) if isinstance(detail, dict) else detail)
        return
    for key, value in detail.items():
        if key in ("text", "summary", "data") and isinstance(value, str) and isinstance(block.get(key), str):
            block[key] += value
        elif value is not None:
            block[key] = value


def add_reasoning(reply, text):
    """Record and print reasoning, opening the reasoning block if needed."""
    reply["reasoning"].append(text)
    if reply["quiet"]:
        return
    if not reply["in_reasoning"]:
        show_held(reply)
        end_line()
        show("--- reasoning start ---\n", "marker")
        reply["in_reasoning"] = True
    show_redacted(reply, text, "reasoning")


def add_text(reply, text):
    """Record and print answer text, closing the reasoning block first."""
    reply["content"].append(text)
    if reply["quiet"]:
        return
    if reply["in_reasoning"]:
        close_open_blocks(reply)
    reply["in_text"] = True
    show_redacted(reply, text)


def show_redacted(reply, text, style=None):
    """Show streamed text as it can be shown: without the secrets (a model that read the key
    must not print it), even when chunks split one (a tail that may begin a secret is held
    back until the next chunk), and with a character a gateway split into two UTF-16 halves
    across chunks joined (a trailing first half is held back too)."""
    if reply["held"]:
        text, reply["held"] = reply["held"] + text, ""
    if not UI["secrets"] and not "\ud800" <= text[-1] <= "\udfff":
        return show(text, style)   # the hot path
    text = redact(text)
    held = 1 if "\ud800" <= text[-1] <= "\udbff" else 0
    for secret in UI["secrets"]:
        if secret[0] in text[-len(secret):]:
            held = max(held, next((n for n in range(min(len(secret) - 1, len(text)), 0, -1)
                                   if text.endswith(secret[:n])), 0))
    if held:
        text, reply["held"] = text[:len(text) - held], text[len(text) - held:]
    show(join_surrogates(text), style)


SURROGATES = re.compile("[\ud800-\udfff]")


def join_surrogates(text):
    """Text with UTF-16 surrogate halves joined into the characters they encode (JSON's
    "\\ud83d\\ude00" is one emoji); a lone half becomes U+FFFD, which UTF-8 can store."""
    if not SURROGATES.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def show_held(reply):
    """Print the text show_redacted held back (it was not a secret after all)."""
    if reply["held"]:
        held, reply["held"] = reply["held"], ""
        show(join_surrogates(held), "reasoning" if reply["in_reasoning"] else None)


def close_open_blocks(reply):
    """End the reasoning block and the answer line, if open."""
    show_held(reply)
    if reply["in_reasoning"]:
        reply["in_reasoning"] = False
        end_line()
        show("--- reasoning end ---\n", "marker")
    if reply["in_text"]:
        reply["in_text"] = False
        end_line()


def merge_dict(into, extra):
    """Merge a provider's extra object into another, nested objects key by key."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_dict(into[key], value)
        elif value is not None:
            into[key] = value


def merge_tool_call(calls, fragment, position):
    """Merge one tool-call fragment into calls (by index) as servers send them: the id and
    name only in the first fragment or repeated in each, arguments split anywhere. Whatever
    else a provider puts on the call is kept, to be sent back unchanged: Gemini 3 signs
    calls with {"extra_content": {"google": {"thought_signature": "..."}}} and rejects the
    next request when the signature does not come back on that call."""
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
    if call is None:
        call = calls[index] = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    if fragment.get("id") and not call["id"]:
        call["id"] = str(fragment["id"])
    if function.get("name") and not call["function"]["name"]:
        call["function"]["name"] = str(function["name"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        call["function"]["arguments"] += arguments
    elif isinstance(arguments, dict):   # some servers send an object, not a JSON string
        call["function"]["arguments"] += json.dumps(arguments)
    if len(fragment) > 4 or "index" not in fragment:   # more than index, id, type and function
        merge_dict(call, {k: v for k, v in fragment.items() if k not in ("index", "id", "type", "function")})


def finish_reply(reply):
    """The assistant message to store, exactly as the API expects it back."""
    close_open_blocks(reply)
    text = join_surrogates("".join(reply["content"]))
    message = {"role": "assistant", "content": text if text.strip() else ""}   # blank is empty
    calls = [reply["calls"][i] for i in sorted(reply["calls"]) if reply["calls"][i]["function"]["name"]]
    if calls:
        for call in calls:
            call["id"] = call["id"] or "call_" + os.urandom(12).hex()   # unique, if the server gave none
            call["function"]["arguments"] = join_surrogates(call["function"]["arguments"]) or "{}"
        message["tool_calls"] = calls
        if reply["echo_reasoning"]:   # DeepSeek's thinking mode wants it back during tool use
            message["reasoning_content"] = join_surrogates("".join(reply["reasoning"]))
    if reply["details"]:
        message["reasoning_details"] = reply["details"]
    if reply["extra"]:
        message["extra_content"] = reply["extra"]
    return message


# ----------------------------------------------------------------------------------------
# The tools: shell_exec and run_subagent (each takes cfg and a dict, returns a string)
# ----------------------------------------------------------------------------------------

def shell_exec(cfg, args):
    """Run args['command'] with bash (else sh): output + '\\n\\nexit: ' + code. Own process
    group, stdin from /dev/null, no pagers; killed on timeout or Ctrl+C; output bounded."""
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "error: shell_exec needs a non-empty 'command' string"
    import subprocess
    env = dict(os.environ, PAGER="cat", GIT_PAGER="cat", MANPAGER="cat", SYSTEMD_PAGER="",
               GIT_TERMINAL_PROMPT="0", DEBIAN_FRONTEND="noninteractive")
    try:
        proc = subprocess.Popen([shell_path(), "-c", command], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    except OSError as e:
        return "error: cannot start the shell: %s" % e
    output = BoundedOutput(cfg["max_tool_res"])
    try:
        code, remark = pump_output(proc, output, cfg["shell_timeout"])
    except BaseException:   # Ctrl+C: stop the command's whole group, then stop the loop
        kill_group(proc)
        raise
    finally:
        proc.stdout.close()
        output.close()
    return output.text() + remark + "\n\nexit: " + str(code)


def shell_path():
    """bash if installed, else /bin/sh."""
    for path in ("/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"):
        if os.access(path, os.X_OK):
            return path
    return "/bin/sh"


def pump_output(proc, output, timeout):
    """Read the command's output until it exits (then drain briefly: a background child may
    hold the pipe open forever) or times out; returns (exit code, remark)."""
    import select
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    exited_at = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            kill_group(proc)
            return proc.wait(), "\n[timed out after %g s: the command's process group was killed]" % timeout
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at >= DRAIN_SECONDS:
            break
        if select.select([fd], [], [], min(0.1, deadline - now))[0]:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            output.add(data)
    try:
        return proc.wait(max(0.01, deadline - time.monotonic())), ""
    except Exception:   # closed its output but still running: treat as a timeout
        kill_group(proc)
        return proc.wait(), "\n[timed out after %g s: the command's process group was killed]" % timeout


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
    """A command's output in bounded memory: whole when it fits in limit bytes, else the
    head and the tail, with everything in a spill file under $TMPDIR/bantam/."""

    def __init__(self, limit):
        self.limit, self.keep = limit, max(1, limit * 2 // 5)
        self.head, self.tail = bytearray(), b""
        self.size = self.newlines = 0
        self.file = self.path = None

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
        STATE["spill"].append(self.path)
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
        whole = "The whole output" if self.size <= SPILL_LIMIT else "Its first %d bytes are" % SPILL_LIMIT
        return "%s\n\n[... output too long: %d bytes, %d lines; showing the first and last %d " \
               "bytes. %s in %s: read it in parts with shell_exec, e.g. " \
               "sed -n '1,200p' %s ...]\n\n%s" % (
                   self.head[:self.keep].decode("utf-8", "replace"), self.size, lines, self.keep,
                   whole, self.path, self.path, self.tail.decode("utf-8", "replace"))


def remove_spill_files():
    """Delete the tool-output files of the turn that ended."""
    while STATE["spill"]:
        try:
            os.unlink(STATE["spill"].pop())
        except OSError:
            pass


def run_subagent(cfg, args):
    """Run AL on a fresh conversation for args['prompt']; return the child's last answer."""
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "error: run_subagent needs a non-empty 'prompt' string"
    if UI["depth"] >= MAX_SUBAGENT_DEPTH:   # a model that delegates forever must not recurse forever
        return "error: subagents may nest only %d deep; do this task yourself" % MAX_SUBAGENT_DEPTH
    child = [{"role": "system", "content": cfg["system_prompt"] + CHILD_NOTE},
             {"role": "user", "content": prompt}]
    end_line()
    UI["depth"] += 1
    try:
        AL(cfg, child)
    except ApiError as e:
        return "error: the subagent failed: %s" % e
    finally:
        end_line()
        UI["depth"] -= 1
    answers = [m.get("content") for m in child if m.get("role") == "assistant" and m.get("content")]
    return answers[-1] if answers else "(the subagent gave no answer)"


# The tool table: the single source of truth for dispatch and for the schema sent to the model.
TOOLS = {
    "shell_exec": ({
        "description": "Run a shell command (bash -c) on the user's machine and return its combined "
                       "stdout and stderr followed by the exit code. Non-interactive: stdin is empty "
                       "and pagers are off. Long output is cut and saved to a file you can read in parts.",
        "parameters": {"type": "object", "properties": {"command": {
            "type": "string", "description": "The command line to run, e.g. \"ls -la src\"."}},
            "required": ["command"]}}, shell_exec),
    "run_subagent": ({
        "description": "Delegate a self-contained sub-task to a fresh copy of this agent, which has the "
                       "same tools but none of this conversation. Returns its final answer. Put every "
                       "detail it needs into the prompt.",
        "parameters": {"type": "object", "properties": {"prompt": {
            "type": "string", "description": "The complete task for the subagent."}},
            "required": ["prompt"]}}, run_subagent),
}
TOOL_DEFINITIONS = [{"type": "function", "function": dict(schema, name=name)}
                    for name, (schema, _) in TOOLS.items()]


def tool_message(call_id, content):
    """The message that answers one tool call."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def run_tool_call(cfg, call):
    """Trace, validate and run one tool call; its tool message (failures are text too)."""
    function = call["function"]
    name = function["name"]
    function["arguments"] = clean_for_model(function["arguments"])
    show("[tool call: %s(%s)]\n" % (name, redact(function["arguments"])), "call")
    failed = True
    try:
        args = json.loads(function["arguments"], strict=False)   # a raw newline in a string is fine
        if not isinstance(args, dict):
            raise ValueError("expected a JSON object")
        clean = clean_values(args)   # also what was written as JSON escapes, like \u200b
        if clean != args:
            args, function["arguments"] = clean, json.dumps(clean, ensure_ascii=False)
    except ValueError as e:
        result = "error: the arguments of %s are not a valid JSON object (%s): %s" % (
            name, e, function["arguments"][:500])
        function["arguments"] = "{}"   # strict servers reject invalid JSON in the history
    else:
        if name not in TOOLS:
            result = "error: unknown tool %r; the tools are %s" % (name, ", ".join(TOOLS))
        else:
            try:
                result, failed = TOOLS[name][1](cfg, args), False
            except (OSError, ValueError, TypeError) as e:
                result = "error: %s failed: %s" % (name, e)
    result = clean_for_model(result)
    show("[tool result: %s]\n" % name, "result")
    show(redact(result) + ("" if result.endswith("\n") else "\n"), "error" if failed else "body")
    flush()
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


def answer_unanswered(messages, calls):
    """Append a tool message for every call in calls that has none: one per call id, always."""
    answered = {m.get("tool_call_id") for m in messages[-len(calls) - 1:] if m.get("role") == "tool"}
    for call in calls:
        if call["id"] not in answered:
            messages.append(tool_message(call["id"], INTERRUPTED + ": the tool did not finish"))


# ----------------------------------------------------------------------------------------
# The agentic loop
# ----------------------------------------------------------------------------------------

def AL(cfg, messages):
    """The Bantam agentic loop: ask the model, run the tool calls it makes, append their
    results, and repeat until it makes none (or max_al_iterations). Returns messages."""
    for _ in range(cfg["max_al_iterations"]):
        try:
            reply = ask_model(cfg, messages)
        except KeyboardInterrupt as stop:
            keep_interrupted_text(messages, stop)   # text already shown stays, tool calls go
            raise
        if not reply["content"] and not reply.get("tool_calls"):
            note("[the model sent an empty reply]")
            return messages                         # never store an empty assistant message
        messages.append(reply)
        calls = reply.get("tool_calls")
        if not calls:
            return messages
        try:
            for call in calls:
                messages.append(run_tool_call(cfg, call))
        finally:
            answer_unanswered(messages, calls)       # one tool message per call id, always
    note("[stopped after max_al_iterations=%d model calls]" % cfg["max_al_iterations"])
    return messages


def ask_model(cfg, messages):
    """chat() plus the repairs a turn may need: compact once when the context overflows,
    and read a tool call the model wrote as text."""
    try:
        reply = chat(cfg, messages)
    except ApiError as e:
        if e.kind != "overflow":
            raise
        note("[%s: the context window is full; compacting and trying again]" % e)
        compact(cfg, messages, current_prompt(messages))
        try:
            reply = chat(cfg, messages)
        except ApiError as again:
            if again.kind == "overflow":
                raise ApiError("%s (even after compacting the conversation)" % again)
            raise
    return text_tool_call(cfg, reply)


def current_prompt(messages):
    """The text of the last user message (the request the loop is working on), or None."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return m["content"] if isinstance(m.get("content"), str) else None
    return None


def keep_interrupted_text(messages, stop):
    """After Ctrl+C mid-reply, store what the user saw, marked as interrupted."""
    text = getattr(stop, "partial", "")
    if text:
        messages.append({"role": "assistant", "content": text + "\n" + INTERRUPTED})


TEXT_CALL = re.compile(r"^\s*(?:<tool_call>\s*(\{.*\})\s*</tool_call>|```(?:json)?\s*(\{.*\})\s*```|(\{.*\}))\s*$", re.S)


def text_tool_call(cfg, reply):
    """With text_tool_calls=true, turn a reply that is only a tool call written as text
    (<tool_call>{"name":..,"arguments":..}</tool_call> or bare JSON) into a real one."""
    if reply.get("tool_calls") or not reply["content"]:
        return reply
    match = TEXT_CALL.match(reply["content"])
    if not match:
        return reply
    try:
        data = json.loads(next(g for g in match.groups() if g))
    except ValueError:
        return reply
    if not isinstance(data, dict):
        return reply
    data = data.get("function", data) if isinstance(data.get("function"), dict) else data
    name, args = data.get("name"), data.get("arguments", data.get("parameters"))
    if name not in TOOLS or not isinstance(args, (dict, str)):
        return reply
    if not cfg["text_tool_calls"]:
        if not STATE["text_tool_hint"]:
            STATE["text_tool_hint"] = True
            note("[hint: the reply looks like a tool call written as text; "
                 "set text_tool_calls=true in model.cfg to run such replies]", "dim")
        return reply
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_" + os.urandom(12).hex(), "type": "function",
        "function": {"name": name, "arguments": arguments}}]}


# ----------------------------------------------------------------------------------------
# Usage, the context window and compaction
# ----------------------------------------------------------------------------------------

COMPACT_PROMPT = ("Summarize this conversation so that it can continue from the summary alone: "
                  "the user's goals and requests, decisions made, facts learned, files and commands "
                  "involved, the current state of the work and the next steps. Be complete but concise.")
SUMMARY_PROMPT = ("Write a title for this conversation in at most ten words. "
                  "Reply with the title only.")


def context_window(cfg):
    """The model's context window in tokens: what the server reports, else the
    context_window key. Looked up once per process (and learned from overflow errors)."""
    key = (cfg["endpoint"], cfg["model"])
    if key not in STATE["windows"]:
        STATE["windows"][key] = discover_window(cfg) or cfg["context_window"]
    return STATE["windows"][key]


def discover_window(cfg):
    """The window the server reports for the model, or None: a field of its GET /models
    entry, else (for a server on this machine or network) the local servers' own APIs."""
    for entry in list_models(cfg, quiet=True):
        if entry.get("id") == cfg["model"]:
            top = entry.get("top_provider") if isinstance(entry.get("top_provider"), dict) else {}
            window = first_count(entry.get("context_length"), entry.get("context_window"),
                                 entry.get("max_model_len"), entry.get("max_context_length"),
                                 entry.get("loaded_context_length"), top.get("context_length"))
            if window:
                return window
    from urllib.parse import urlsplit
    if not private_host(urlsplit(cfg["endpoint"]).hostname or ""):
        return None   # a cloud API: its /models said nothing, the local APIs below do not exist
    # llama.cpp: GET /props {"default_generation_settings": {"n_ctx": 2048, ...}, ...}
    props = get_json(cfg, "GET", "/props", root=True)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        window = first_count(props.get("n_ctx"), settings.get("n_ctx") if isinstance(settings, dict) else None)
        if window:
            return window
    # Ollama: POST /api/show {"model": m} -> {"parameters": "num_ctx 8192\n...", "model_info":
    # {"llama.context_length": 131072, ...}}; num_ctx is the window it runs with, else the one
    # of the loaded model (GET /api/ps), else the model's own limit (the most it can run with).
    shown = get_json(cfg, "POST", "/api/show", {"model": cfg["model"], "name": cfg["model"]}, root=True)
    if isinstance(shown, dict):
        match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str(shown.get("parameters") or ""))
        if match:
            return int(match.group(1))
        loaded = get_json(cfg, "GET", "/api/ps", root=True)
        for entry in loaded.get("models") or () if isinstance(loaded, dict) else ():
            if isinstance(entry, dict) and cfg["model"] in (entry.get("name"), entry.get("model")):
                if first_count(entry.get("context_length")):
                    return entry["context_length"]
        info = shown.get("model_info") if isinstance(shown.get("model_info"), dict) else {}
        window = first_count(*[v for k, v in info.items() if k.endswith(".context_length")])
        if window:
            return window
    # LM Studio: GET /api/v0/models {"data": [{"id": m, "loaded_context_length": 4096, ...}]}
    listing = get_json(cfg, "GET", "/api/v0/models", root=True)
    for entry in listing.get("data") or () if isinstance(listing, dict) else ():
        if isinstance(entry, dict) and entry.get("id") == cfg["model"]:
            return first_count(entry.get("loaded_context_length"), entry.get("max_context_length"))
    return None


def first_count(*values):
    """The first value that is a positive whole number, or None."""
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def private_host(host):
    """True for a host on this machine or a private network (where local servers run)."""
    import ipaddress
    try:
        address = ipaddress.ip_address(host)
        return address.is_private or address.is_loopback or address.is_link_local
    except ValueError:
        return "." not in host or host.endswith((".localhost", ".local", ".lan", ".internal", ".home.arpa"))


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
        STATE["windows"][key] = min(window, STATE["windows"].get(key) or window)


def get_json(cfg, method, path, body=None, root=False, what=None):
    """The JSON answer to a small request to the server; None when it fails (with a note
    saying that we could not `what`, when given)."""
    load_http_client(cfg["endpoint"])
    import http.client
    try:
        response = http_request(cfg, method, path, json.dumps(body).encode() if body else None, root=root)
        data = response.read()
        if response.status != 200:
            raise ValueError("HTTP %d %s" % (response.status, response.reason))
        return json.loads(data)
    except (OSError, ValueError, http.client.HTTPException) as e:
        drop_connection(cfg)
        if what:
            note("error: cannot %s at %s%s: %s" % (what, "" if root else cfg["endpoint"], path, e))
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


def report_usage(cfg):
    """Print the token line of the last model call; returns the context share used (0..1).
    Figures the server did not send are estimated from the text (marked ~)."""
    usage = STATE["usage"]
    if not isinstance(usage, dict):
        return 0.0
    prompt, cached, completion = usage_numbers(usage)
    window = context_window(cfg)
    split = " (%d cached, %d uncached)" % (cached, prompt - cached) if cached is not None else ""
    share = prompt / window if window else 0.0
    about = "~" if usage.get("estimated") else ""
    note("[%s: %s%d prompt%s + %s%d completion | context: %s%d/%d (%.1f%%)]"
         % (cfg["model"], about, prompt, split, about, completion, about, prompt, window, share * 100), "dim")
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
                raise ApiError("compaction failed: %s" % e)
    else:
        raise ApiError("compaction failed: the conversation does not fit even when trimmed")
    if not summary:
        raise ApiError("compaction failed: the model returned an empty summary")
    text = "Summary of our conversation so far:\n\n" + summary
    if keep:
        text += "\n\nThe request I am working on now, as I wrote it:\n\n" + keep
    messages[:] = [messages[0], {"role": "user", "content": text}]
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
    ask = COMPACT_PROMPT if text.endswith(COMPACT_PROMPT) else ""   # the question itself stays whole
    text = text[:len(text) - len(ask)]
    keep = max(100, min(len(text) // 4, (len(text) - (total - room)) // 2))
    if len(text) <= 2 * keep + 100:
        return False
    longest["content"] = "%s\n[... %d characters left out ...]\n%s%s" % (
        text[:keep], len(text) - 2 * keep, text[-keep:], ask)
    return True


# ----------------------------------------------------------------------------------------
# Session commands: name -> (handler, help). A handler takes (cfg, messages, argument),
# changes messages in place, and returns QUIT to end the REPL.
# ----------------------------------------------------------------------------------------

def summarize(cfg, messages):
    """A short summary for a saved session: asked of the model, else the first prompt."""
    try:
        request = append_user([dict(m) for m in messages], SUMMARY_PROMPT)
        text = " ".join(chat(cfg, request, tools=False, quiet=True)["content"].split())
        if text:
            return text[:120]
    except ApiError as e:
        note("[summary: %s; using the first prompt]" % e, "dim")
    return first_user_text(messages)


def cmd_save(cfg, messages, arg):
    """/save: write the conversation to a new session file."""
    sid = save_new_session(messages, summarize(cfg, messages))
    show("[saved session %s]\n" % sid)


def cmd_list(cfg, messages, arg):
    """/list: the saved sessions, newest first."""
    rows = []
    for sid in session_ids():
        try:
            s = read_session(sid)
            rows.append((str(s.get("saved_at", "")), sid, len(s["messages"]), str(s.get("summary", ""))))
        except BantamError as e:
            rows.append(("", sid, 0, "(unreadable: %s)" % e))
    if not rows:
        show("(no saved sessions)\n")
    for saved_at, sid, count, summary in sorted(rows, reverse=True):
        show("%-20s %-25s %4d msgs  %s\n" % (sid, saved_at, count, summary))


def cmd_load(cfg, messages, arg):
    """/load <id>: continue a saved session (exact id or unique prefix)."""
    if not arg:
        raise BantamError("usage: /load <id or unique prefix> (see /list)")
    sid = resolve_session(arg)
    messages[:] = repair_conversation(read_session(sid)["messages"])
    autosave(messages)
    show("[loaded session %s: %d messages]\n" % (sid, len(messages)))


def cmd_compact(cfg, messages, arg):
    """/compact: replace the conversation by a summary of it."""
    before = len(messages)
    if before < 3:
        raise BantamError("nothing to compact yet")
    show("[compacting...]\n", "dim")
    compact(cfg, messages)
    autosave(messages)
    show("[compacted %d messages into a summary]\n" % before)


def cmd_clear(cfg, messages, arg):
    """/clear: start over with just the system prompt."""
    messages[:] = [{"role": "system", "content": cfg["system_prompt"]}]
    autosave(messages)
    show("[conversation cleared]\n")


def cmd_models(cfg, messages, arg):
    """/models: the endpoint's model ids, the configured one marked with *."""
    for entry in list_models(cfg):
        mid = str(entry.get("id", "?"))
        show("%s %s\n" % ("*" if mid == cfg["model"] else " ", mid))


def cmd_help(cfg, messages, arg):
    """/help: the commands."""
    for name, (_, text) in COMMANDS.items():
        show("%-14s %s\n" % (name, text))
    show("%-14s %s\n" % ("Ctrl+J", "new line in a prompt (Enter sends)"))


def cmd_quit(cfg, messages, arg):
    """/quit: leave (the conversation is autosaved)."""
    return QUIT


QUIT = "quit"
COMMANDS = {
    "/save": (cmd_save, "save the conversation as a new session (with a summary)"),
    "/list": (cmd_list, "list saved sessions, newest first"),
    "/load": (cmd_load, "/load <id>: continue a saved session (id or unique prefix)"),
    "/compact": (cmd_compact, "replace the conversation by a summary of it"),
    "/clear": (cmd_clear, "start over with just the system prompt"),
    "/models": (cmd_models, "list the endpoint's models (* marks the configured one)"),
    "/help": (cmd_help, "show this help"),
    "/quit": (cmd_quit, "exit (also Ctrl+D on an empty line)"),
}


# ----------------------------------------------------------------------------------------
# The REPL and batch mode
# ----------------------------------------------------------------------------------------

def run_turn(cfg, messages, prompt, take_back=False):
    """One user turn: append the prompt, run AL, autosave, print the token line. Returns
    the context share used. With take_back (the REPL), a turn that got no reply at all
    (Ctrl+C before the first byte, a request that failed for good) takes its prompt back out
    of the conversation, and the exception carries it as .prompt, for the input line. (In
    batch mode the file keeps it; the next prompt joins it, never two user messages in a row.)"""
    before = messages[:]
    append_user(messages, prompt)
    asked = messages[-1]
    STATE["usage"] = None
    try:
        AL(cfg, messages)
    except BaseException as e:
        if take_back and messages[-1] is asked:   # nothing came back: as if it was never sent
            messages[:] = before
            e.prompt = prompt
        raise
    finally:
        remove_spill_files()
        autosave(messages)
    return report_usage(cfg)


def history_path():
    """The readline history file."""
    return os.path.join(os.path.expanduser("~"), ".bantam_history")


def setup_readline():
    """Line editing and history; Ctrl+J inserts a newline. None without readline."""
    try:
        import readline
    except ImportError:
        return None
    readline.parse_and_bind(r'"\C-j": "\C-v\C-j"')   # quoted-insert of a real newline
    readline.set_history_length(1000)
    try:
        readline.read_history_file(history_path())
    except (OSError, UnicodeDecodeError):
        pass
    return readline


def save_history(readline):
    """Write the history file atomically, mode 0600."""
    if not readline:
        return
    import tempfile
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(history_path()), prefix=".bantam_history.")
        os.close(fd)
        readline.write_history_file(tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, history_path())
    except OSError as e:
        note("warning: cannot save history: %s" % e)


def ask_yes(question):
    """A [Y/n] question on the terminal; Enter means yes. The answer stays out of the history."""
    readline = sys.modules.get("readline")
    before = readline.get_current_history_length() if readline else 0
    try:
        return input(question).strip().lower() in ("", "y", "yes")
    except (EOFError, KeyboardInterrupt):
        show("\n")
        return False
    finally:
        if readline and readline.get_current_history_length() > before:
            readline.remove_history_item(before)


def repl(cfg, messages):
    """Read prompts and commands until /quit, EOF or Ctrl+C twice (messages change in place)."""
    readline = setup_readline() if sys.stdin.isatty() else None
    last_interrupt, again = 0.0, ""
    try:
        while True:
            if again and readline:   # a prompt that got no reply comes back for editing
                readline.set_pre_input_hook(lambda text=again: (readline.insert_text(text),
                                                                readline.redisplay()))
            try:
                line = input("> ")
            except KeyboardInterrupt:   # Ctrl+C at the prompt clears the line
                show("\n")
                again = ""
                if time.monotonic() - last_interrupt < 2:
                    break
                last_interrupt = time.monotonic()
                continue
            except EOFError:
                show("\n")
                break
            finally:
                if again and readline:
                    readline.set_pre_input_hook(None)
            again = ""
            if not line.strip():
                continue
            try:
                name, _, arg = line.strip().partition(" ")
                if name in COMMANDS:
                    if COMMANDS[name][0](cfg, messages, arg.strip()) == QUIT:
                        break
                    continue
                if re.match(r"/[a-z]+$", name):   # a mistyped command, not a path like /etc/hosts
                    note("unknown command %s (see /help)" % name)
                    continue
                share = run_turn(cfg, messages, line, take_back=True)
                if share >= COMPACT_AT and sys.stdin.isatty() and ask_yes(
                        "Context usage is at %.1f%%. Compact conversation? [Y/n]: " % (share * 100)):
                    cmd_compact(cfg, messages, "")
            except KeyboardInterrupt as e:
                end_line()
                if time.monotonic() - last_interrupt < 2:
                    break
                last_interrupt = time.monotonic()
                note("[interrupted: press Ctrl+C again within 2 s to quit]")
                again = getattr(e, "prompt", "")
            except OutputClosed:
                raise
            except BantamError as e:
                note("error: %s" % e)
                again = getattr(e, "prompt", "")
            if again:
                note("[no reply: your prompt is back on the input line, to edit or send again]", "dim")
    finally:
        save_history(readline)


def read_prompt_file(path):
    """The batch prompt from a file, or stdin for '-'."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("cannot read prompt file %s: %s" % (path, getattr(e, "strerror", None) or e))


USAGE = """usage: bantam [prompt-file | -]

  bantam              interactive session (type /help for commands)
  bantam prompt.txt   run one prompt from a file and exit ('-' reads stdin)
  bantam --version    print the version

Config: model.cfg in this folder or ~/.bantam/ (see model.cfg.example)."""


def main(argv=None):
    """The command line: REPL without arguments, batch mode with a prompt file."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("--version", "-V"):
        print("bantam " + VERSION)
        return 0
    if args and args[0] in ("--help", "-h"):
        print(USAGE)
        return 0
    if len(args) > 1 or (args and args[0].startswith("-") and args[0] != "-"):
        sys.stderr.write(USAGE + "\n")
        return 2
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # so the autosave still runs
    if hasattr(sys.stdout, "reconfigure"):   # a Latin-1 terminal shows '?' for an emoji, no crash
        sys.stdout.reconfigure(errors="replace")
    messages = []
    try:
        cfg = load_config()
        setup_colors(cfg)
        messages = [{"role": "system", "content": cfg["system_prompt"]}]
        if args:
            prompt = read_prompt_file(args[0])
            if not prompt.strip():
                raise ConfigError("the prompt is empty")
            run_turn(cfg, messages, prompt)
            return 0
        repl(cfg, messages)
        return 0
    except KeyboardInterrupt:
        end_line()
        note("[interrupted]")
        return 130
    except BantamError as e:
        if str(e):
            note("error: %s" % e)
        return e.exit_code
    finally:
        if len(messages) > 1:
            autosave(messages)
        remove_spill_files()
        try:
            flush()
        except OutputClosed:
            pass


if __name__ == "__main__":
    sys.exit(main())
