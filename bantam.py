#!/usr/bin/env python3
"""bantam: a tiny command-line AI agent in one standard-library Python file (bantam --help).

Part I is the Bantam spec's agent, complete alone; Part II makes it a daily tool, joining Part I
only through its tables and the hooks of HOOKS.
"""
import json
import os
import re
import sys
import time

VERSION = "1.2.0"

DEFAULTS = {   # the config schema, parsed by each default's type (Part II adds keys)
    "endpoint": "https://api.openai.com/v1",  # base URL of an OpenAI-compatible API
    "model": "gpt-4o",
    "temperature": 0.7,
    "api_key": "",                 # Bearer token; else BANTAM_API_KEY, else OPENAI_API_KEY
    "stream": True,                # stream the reply as it is generated (SSE)
    "color": "auto",               # auto (when a terminal) | always | never
    "timeout": 60.0,               # seconds to connect, and for each read of the reply
    "shell_timeout": 120.0,        # seconds before a shell_exec command's group is killed
    "max_al_iterations": 1000,     # model calls per AL() before it stops
    "backoff": [1.0, 1.0, 2.0, 3.0, 5.0],  # seconds before each retry (Fibonacci)
    "max_tool_res": 65536,         # bytes of a command's output sent whole; more: head and tail
}
CHOICES = {"color": ("auto", "always", "never")}   # a key's words, if it has a list
PARSERS = {}   # key -> function(value, where): a key's own check after its type's (ValueError)
RETRY_STATUSES = {408, 409, 429}   # and every 5xx: waiting may help; other errors are final
DRAIN_SECONDS = 0.25               # read a command's output this long after its shell exits
CHILD_NOTE = "\n\nImportant: this is a child agent"
INTERRUPTED = "[interrupted by user]"
PROMPTS = dict(   # the texts Bantam sends (Part II's default system prompt is system.txt's)
    system="You are Bantam, a command-line AI agent: run commands with shell_exec, hand "
           "self-contained sub-tasks to run_subagent, check every result.\n",
    compact="Summarize this conversation so that it can go on from the summary alone.",
    title="Write a title for this conversation in at most ten words. Reply with the title only.")

HOOKS = {   # the only places where Part II acts inside Part I: lists of functions (empty here)
    "start": [],    # start(convo, args): before the REPL; an exit status ends the run, or None
    "turn": [],     # turn(convo, prompt, go): around a turn, which go(prompt) runs; turn()'s result
    "connect": [],  # connect(cfg): the http.client connection to the endpoint, or None
    "request": [],  # request(cfg, messages, body, error=None): the body; error: True if dealt with
    "delta": [],    # delta(cfg, reply, delta): the delta to merge ({}: no output read; None: end)
    "tool": [],     # tool(cfg, call, args, result=None): args or a refusal text (passed on); result
    "spawn": [],    # spawn(cfg, options): the subprocess.Popen options of a command
    "step": [],     # step(cfg, messages, calls): after tool calls or an exception; a status ends AL
    "event": [],    # event(cfg, event): the event to pass to the run's sink (None: none)
    "load": [],     # load(session, messages): a session file's messages, put right for the API
}

def hooked(name, value, *args):
    """value passed through hook name's functions in turn: f(*args, value)."""
    for function in HOOKS[name]:
        value = function(*args + (value,))
    return value

def first(name, *args):
    """The first result of hook name's functions that is not None or False (0 is one)."""
    results = (function(*args) for function in HOOKS[name])   # (called till one has one)
    return next((r for r in results if r is not None and r is not False), None)

class BantamError(Exception):
    """A failure to report in one line; exit_code is what batch mode exits with."""
    exit_code = 1

class ConfigError(BantamError):
    """A broken config file or value, a missing prompt file: the user must fix something."""
    exit_code = 2

class ApiError(BantamError):
    """A failed model request; kind: retry (waiting may help), fatal, or one of Part II's."""
    def __init__(self, message, kind="fatal", status=None, body="", headers=None):
        BantamError.__init__(self, message)
        self.kind, self.status, self.body, self.headers = kind, status, body, headers or {}
    exit_code = property(lambda self: 1 if self.kind == "retry" else 2)   # 1: try again later

# ---- Events and the plain view: a run sends events, {"type", "depth", ...}, to its sink (README)

def emit(cfg, kind, **fields):
    """Pass one event, through the event hook, to the run's sink (outside a run: a plain view)."""
    run = cfg.get("run") or {}
    event = hooked("event", dict(type=kind, depth=run.get("depth", 0), **fields), cfg)
    if event is not None:
        (run.get("emit") or VIEWS["plain"](cfg))(event)

def note(cfg, text, level="error"):
    """A one-line diagnostic on stderr: an error, a retry, a warning, a hint (info)."""
    emit(cfg, "note", text=text, level=level)

def show(cfg, text):
    """A command's output on stdout."""
    emit(cfg, "output", text=text)

def terminal_safe(text):
    """Text with the control characters a terminal obeys shown (^[ for ESC); no CR or BEL."""
    return re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f]", lambda m: "" if m.group() in "\r\a" else
                  "^" + chr(ord(m.group()) ^ 64) if m.group() <= "\x7f" else
                  "\\x%02x" % ord(m.group()), text)

COLORS = {"status": "\033[1;90m", "marker": "\033[36m", "reasoning": "\033[2m", "dim": "\033[2m",
          "call": "\033[33m", "result": "\033[32m", "body": "\033[2m", "error": "\033[31m"}
RESET = "\033[0m"

def plain_view(cfg, handlers=None, out=None, err=None, **more):
    """A view printing traces on out, diagnostics on err (another view: its handlers, state)."""
    out, err = out or sys.stdout, err or sys.stderr
    plain = cfg.get("color") == "never" or any(map(os.environ.get, ("NO_COLOR", "BANTAM_NO_COLOR")))
    state = {"out": out, "err": err, "tty": out.isatty(), "bol": True, "block": None, "cfg": cfg,
             "color": not plain and (cfg.get("color") == "always" or out.isatty()), **more}
    return lambda event: (handlers or PLAIN).get(event["type"], lambda *_: None)(state, event)

def write(state, text, style=None):
    """Text on out, terminal-safe, colored, flushed."""
    text = terminal_safe(text)
    if text:
        state["bol"] = text.endswith("\n")
        state["out"].write(COLORS[style] + text + RESET if style and state["color"] else text)
        state["out"].flush()

def fresh_line(state, text=""):
    """Finish the current output line, if one is open; then text (a command's output, as it is)."""
    if not state["bol"]:
        write(state, "\n")
    write(state, text)

def close_block(state, event=None):
    """Finish the open line; a reasoning block with its closing marker."""
    fresh_line(state)
    if state["block"] == "reasoning":
        write(state, "--- reasoning end ---\n", "marker")
    state["block"] = None

def show_piece(state, event):
    """A piece of the answer, or of reasoning inside the reasoning markers."""
    if state["block"] != event["type"]:
        close_block(state)
        if event["type"] == "reasoning":
            write(state, "--- reasoning start ---\n", "marker")
        state["block"] = event["type"]
    write(state, event["text"], event["type"] if event["type"] == "reasoning" else None)

def show_tool(state, event):
    """[tool call: name(arguments)], or [tool result: name] and the result."""
    close_block(state)
    if event["type"] == "tool_call":
        return write(state, "[tool call: %(name)s(%(arguments)s)]\n" % event, "call")
    write(state, "[tool result: %(name)s]\n" % event, "result")
    write(state, event["content"] + "\n" * (not event["content"].endswith("\n")),
          "body" if event["ok"] else "error")

def show_on_stderr(state, text, style="error"):
    """One line on stderr (write flushes stdout: the lines come in order)."""
    paint, text = COLORS[style] if state["color"] else "", terminal_safe(text)
    print(paint + text + (RESET if paint else ""), file=state["err"], flush=True)

PLAIN = dict(   # the plain view's handlers, by event type (Part II adds its own)
    reasoning=show_piece, text=show_piece, reply_end=close_block, tool_call=show_tool,
    tool_result=show_tool, output=lambda s, e: fresh_line(s, e["text"]),
    turn_end=lambda s, e: e["depth"] or close_block(s, e),
    note=lambda s, e: show_on_stderr(s, e["text"], "dim" if e["level"] == "info" else "error"),
    error=lambda s, e: show_on_stderr(s, "error: " + e["message"]),
    retry=lambda s, e: show_on_stderr(s, "[%(error)s; retry %(attempt)d/%(of)d in %(wait)gs]" % e))
VIEWS = {"plain": plain_view}   # views by name: view(cfg) (Part II adds its own)

# ---- Config: a key's first layer: flags, ./model.cfg, ~/.bantam/model.cfg (--config), BANTAM_<KEY>

def bantam_home(*parts):
    """A path under ~/.bantam."""
    return os.path.join(os.path.expanduser("~"), ".bantam", *parts)

def write_private_file(path, data, exclusive=False):
    """path replaced at once by data (text), mode 0600; exclusive: only as a new file."""
    import tempfile
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)   # (mkstemp's file: 0600)
    fd, temp = tempfile.mkstemp(".tmp", "." + os.path.basename(path) + ".", os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())   # on disk before the name points at it: never a torn file
        os.link(temp, path) if exclusive else os.replace(temp, path)   # link: fails if it exists
    finally:
        if os.path.exists(temp):
            os.unlink(temp)

def read_text(path, what):
    """A text file's contents (a byte-order mark dropped); a ConfigError if it cannot be read."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("%s: cannot read %s: %s" % (path, what, getattr(e, "strerror", 0) or e))

def read_key_values(path):
    """A config file's key=value lines (a "  # note" cut): {key: (value, "path:line")}, any key."""
    values = {}
    for number, line in enumerate(read_text(path, "config").splitlines(), 1):
        key, sep, value = line.strip().partition("=")
        where = "%s:%d" % (path, number)
        if sep and key.strip() and not key.startswith("#"):
            values[key.strip().lower()] = (re.sub(r"\s+#.*$", "", value).strip(), where)
        elif line.strip() and not key.startswith("#"):
            raise ConfigError("%s: expected key=value, got %r" % (where, line.strip()[:60]))
    return values

def parse_value(key, raw, where):
    """raw parsed by the type of DEFAULTS[key], then by PARSERS[key]; else a ConfigError."""
    kind, value = type(DEFAULTS[key]), raw.lower() if key in CHOICES else raw
    try:
        if kind is bool:   # (another word: a KeyError)
            value = {"true": True, "1": True, "yes": True, "on": True, "false": False,
                     "0": False, "no": False, "off": False}[raw.lower()]
        elif kind in (int, float):
            value = kind(raw)
        elif kind is list:
            value = [float(part) for part in raw.split(",") if part.strip()]
        elif value not in CHOICES.get(key, [value]):
            raise ValueError
        return PARSERS[key](value, where) if key in PARSERS else value
    except (ValueError, KeyError):
        what = "one of " + ", ".join(CHOICES[key]) if key in CHOICES else {
            bool: "true or false", int: "a whole number", float: "a number", list:
            "a comma-separated list of seconds", dict: "a JSON object of strings"}.get(kind)
        raise ConfigError("%s: %s: expected %s, got %r" % (where, key, what, raw)) from None

def load_config(overrides=None, config_file=None):
    """The config: each key from its first layer; "sources": where from, "layers", "config_file"."""
    own = config_file or bantam_home("model.cfg")
    files = [("folder", os.path.abspath("model.cfg"))] * (not config_file) + [("own", own)]
    env, names = os.environ, [("api_key", "OPENAI_API_KEY")] + [
        (key, "BANTAM_" + key.upper().replace("BANTAM_", "")) for key in DEFAULTS]
    environ = {key: (env[name], name) for key, name in names if env.get(name)}   # (later wins)
    layers = [("flag", {k: (v, "flag") for k, v in (overrides or {}).items()})] + [
        (name, read_key_values(path)) for name, path in files
        if path == config_file or os.path.isfile(path)] + [("env", environ)]
    cfg = {"sources": {"layers": layers, "config_file": own}}
    for key in DEFAULTS:   # (a blank or '-' value defers to the next layer, then DEFAULTS)
        found = [v for _, layer in layers for v in [layer.get(key)] if v and v[0] not in ("", "-")]
        raw, where = found[0] if found else (DEFAULTS[key], "default")
        cfg[key] = parse_value(key, raw, where) if found and isinstance(raw, str) else raw
        cfg["sources"][key] = where
    path = next((p for p in (os.path.abspath("system.txt"), bantam_home("system.txt"))
                 if os.path.isfile(p)), None)   # (the folder's, else the user's)
    cfg["system_prompt"] = read_text(path, "system prompt") if path else PROMPTS["system"]
    cfg["sources"]["system_prompt"] = path or "built-in"
    return cfg

# ---- The HTTP client: a connection per request, retries, the reply streamed (SSE)

def http_request(cfg, path, body=None):
    """(connection, response): body POSTed (None: a GET) on a new connection the caller closes."""
    import http.client
    from urllib.parse import urlsplit
    url = urlsplit(cfg["endpoint"])
    headers = {"User-Agent": "Mozilla/5.0 (compatible; Bantam/1.0)",   # (gateways block others)
               "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if cfg["api_key"]:
        headers["Authorization"] = "Bearer " + cfg["api_key"]
    kind = http.client.HTTPConnection if url.scheme == "http" else http.client.HTTPSConnection
    conn = first("connect", cfg) or kind(url.netloc.rpartition("@")[2], timeout=cfg["timeout"])
    path = url.path.rstrip("/") + path + ("?" + url.query if url.query else "")
    conn.request("GET" if body is None else "POST", path, body, headers)
    return conn, conn.getresponse()

def chat(cfg, messages, tools=True, quiet=False):
    """The model's reply to messages, shown unless quiet; a failure of kind retry retried."""
    retries, delays = 0, cfg["backoff"]
    while True:
        body = {"model": cfg["model"], "messages": messages, "temperature": cfg["temperature"],
                "stream": cfg["stream"] and not quiet}
        if tools:   # (Part II's request hook offers some)
            body["tools"] = [{"type": "function", "function": dict(schema, name=name)}
                             for name, (schema, _) in TOOLS.items()]
        body = hooked("request", body, cfg, messages)
        try:
            return exchange(cfg, body, quiet)
        except ApiError as e:
            if first("request", cfg, messages, body, e):   # dealt with: ask again now
                continue
            if e.kind != "retry" or retries == len(delays):   # final, or the retries ran out
                if e.kind == "retry" and retries:
                    e.args = ("%s (gave up after %d %s)" % (
                        e, retries, "retry" if retries == 1 else "retries"),)
                raise e
            wait = max(delays[retries], getattr(e, "wait", None) or 0)   # (Part II: Retry-After)
            retries += 1
            emit(cfg, "retry", error=str(e), attempt=retries, of=len(delays), wait=wait)
            time.sleep(wait)

def exchange(cfg, body, quiet):
    """One request: the assistant message; a network fault or a bad reply is retryable."""
    import http.client
    payload, conn = json.dumps(body).encode(), None
    reply = {"content": [], "calls": {}, "quiet": quiet, "finish": None, "pending": [],
             "size": 0, "line": b"", "data": [], "asked": time.monotonic(), "sent": len(payload)}
    try:
        try:
            if not quiet:
                emit(cfg, "request", model=cfg["model"], messages=len(body["messages"]),
                     stream=body["stream"])
            conn, response = http_request(cfg, "/chat/completions", payload)
            status, kind = response.status, response.getheader("Content-Type") or ""
            if status != 200:   # said with its text (Part II reads the message in it)
                text = response.read(1 << 20).decode("utf-8", "replace")
                raise ApiError("HTTP %d: %s" % (status, " ".join(text.strip()[:300].split()) or
                               response.reason), "retry" if status in RETRY_STATUSES or
                               status >= 500 else "fatal", status, text[:4000], response.headers)
            if "event-stream" in kind or (body["stream"] and "json" not in kind):
                read_stream(cfg, response, reply)
            else:   # not streamed, or a server that ignores stream=true
                merge_chunk(cfg, reply, json.loads(response.read()), whole=True)
        finally:   # the reply is over (whole, failed or abandoned): what is left shown
            if not quiet:
                pass_on(cfg, reply)
                emit(cfg, "reply_end", finish=reply["finish"])
        message = reply["message"] = finish_reply(reply)
        emit(cfg, "reply", message=message, quiet=quiet)
        hooked("delta", None, cfg, reply)
        return message
    except (OSError, http.client.HTTPException) as e:
        raise ApiError("network error: %s" % (str(e) or type(e).__name__), "retry") from e
    except (TypeError, AttributeError, LookupError, ValueError, RecursionError) as e:
        raise ApiError("the server sent a malformed reply (%s)" % (
            str(e)[:200] or type(e).__name__), "retry") from e
    finally:
        if conn is not None:
            conn.close()

def read_stream(cfg, response, reply):
    """Merge a streamed reply (SSE) into reply till [DONE] or its end; each read to the hook."""
    block, done, data = True, False, reply["data"]   # (reply's line and data: Part II bounds them)
    while block and not done:
        block = response.read1(65536)   # (b"": the end, which ends a last line and event too)
        *lines, reply["line"] = (reply["line"] + (block or b"\n\n")).split(b"\n")
        for line in (line.rstrip(b"\r") for line in lines):
            if line[:5] == b"data:":   # (comments, event:, id:, retry: are skipped)
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[:1] == b"{" or line[:6] == b"error:":   # an event alone (llama.cpp)
                data[:] = [b'{"error":' + line[6:] + b"}" if line[:6] == b"error:" else line]
                line = b""
            if not line and data and not done:   # a blank line ends an event
                done = data[0][:6] == b"[DONE]" or merge_event(cfg, reply, b"\n".join(data))
                del data[:]
        pass_on(cfg, reply)
        hooked("delta", {}, cfg, reply)
    if not (reply["finish"] or reply["size"]):
        raise ApiError("the server ended the reply without sending anything", "retry")
    if not done and (response.length or response.length is None and not (
            reply["finish"] or response.chunked)):   # (a chunked body cut short raises)
        raise ApiError("the connection closed in the middle of the reply", "retry")

def merge_event(cfg, reply, data):
    """Merge one event's data, a JSON chunk (else skipped, said once a reply)."""
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError):
        if not reply.get("skipped"):
            note(cfg, "warning: skipped data that is not JSON: %r" % data[:80], "warning")
        reply["skipped"] = True
        return
    if isinstance(chunk, dict):   # (not a relay's `data: null`)
        merge_chunk(cfg, reply, chunk)

def merge_chunk(cfg, reply, chunk, whole=False):
    """Merge one chunk (whole: a non-streamed response) into reply via the delta hook."""
    reply["chunk"] = chunk   # {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    if chunk.get("error"):   # retried: it may be a slip (beside the choices too: OpenRouter)
        error = json.dumps(chunk["error"])   # (Part II says its message: see said_in)
        raise ApiError("error in stream: %s" % error[:300], "retry", body=error[:4000])
    if whole and not chunk.get("choices"):
        raise ApiError("the server sent a reply with no choices", "retry")
    choice = (chunk.get("choices") or [{}])[0]
    delta = choice.get("message" if whole else "delta") or choice.get("delta") or {}
    reply["finish"] = choice.get("finish_reason") or reply["finish"]
    delta = hooked("delta", delta, cfg, reply)
    add_piece(reply, "reasoning", delta.get("reasoning_content") or delta.get("reasoning"))
    add_piece(reply, "text", delta.get("content"))
    for position, fragment in enumerate(delta.get("tool_calls") or ()):
        merge_tool_call(reply, fragment, position)

def add_piece(reply, kind, text):
    """Record text, if a string, as a piece of the answer (kind text) or of reasoning (pass_on)."""
    if isinstance(text, str) and text:
        reply["size"] += len(text)
        if kind == "text":   # (reasoning is shown, not kept)
            reply["content"].append(text)
        reply["pending"].append((kind, text))

def pass_on(cfg, reply):
    """Show the pieces read, a run of one kind in one event (a burst is not a write a piece)."""
    import itertools
    pending, reply["pending"] = [] if reply["quiet"] else reply["pending"], []
    for kind, pieces in itertools.groupby(pending, lambda piece: piece[0]):
        text = "".join(text for _, text in pieces)
        if "\ud800" <= text[-1:] <= "\udbff":   # an emoji's first half: shown with its second
            text, reply["pending"] = text[:-1], [(kind, text[-1])]
        if text:
            emit(cfg, kind, text=join_surrogates(text))

def join_surrogates(text):
    """Text (or its pieces, joined) with UTF-16 halves joined (a split emoji); a lone one U+FFFD."""
    return "".join(text).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")

def merge_tool_call(reply, fragment, position):
    """Merge a tool-call fragment into the call at its index (else its place in the delta)."""
    call = reply["calls"].setdefault(fragment.get("index", position), {
        "id": "", "type": "function", "function": {"name": "", "arguments": []}})
    function, kept = fragment.get("function") or {}, call["function"]
    call["id"] = call["id"] or str(fragment.get("id") or "")
    kept["arguments"].append(function.get("arguments") or "")   # (joined at the end)
    reply["size"] += len(kept["arguments"][-1]) + bool(function.get("name") and not kept["name"])
    kept["name"] = kept["name"] or function.get("name") or ""
    call.update((k, v) for k, v in fragment.items() if k not in ("index", "id", "type", "function"))

def finish_reply(reply):
    """The assistant message to store, exactly as the API expects it back."""
    text = join_surrogates(reply["content"])
    message = {"role": "assistant", "content": text if text.strip() else ""}   # blank is empty
    calls = [call for _, call in sorted(reply["calls"].items()) if call["function"]["name"]]
    for call in calls:   # (in index order: as the model meant them)
        call["id"] = call["id"] or "call_" + os.urandom(12).hex()
        call["function"]["arguments"] = join_surrogates(call["function"]["arguments"]) or "{}"
    if calls:
        message["tool_calls"] = calls
    return {**message, **reply.get("extra", {})}   # (Part II's: reasoning_content, ...)

# ---- The tools (TOOLS: each takes cfg and a dict of arguments, returns a string) and AL

SHELL = next((p for p in ("/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash")   # bash, else sh
              if os.access(p, os.X_OK)), "/bin/sh")

def shell_exec(cfg, args):
    """Run args["command"] in bash, its own process group, no stdin or pager: output, exit code."""
    import codecs
    import contextlib
    import signal
    import subprocess
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "error: shell_exec needs a non-empty 'command' string"
    env = dict(os.environ, PAGER="cat", GIT_PAGER="cat", MANPAGER="cat", SYSTEMD_PAGER="",
               GIT_TERMINAL_PROMPT="0", DEBIAN_FRONTEND="noninteractive")
    try:   # (a spawn hook refuses with a BantamError: a sandbox that cannot be had)
        options = hooked("spawn", dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env,
                                       stderr=subprocess.STDOUT, start_new_session=True), cfg)
        proc = subprocess.Popen([SHELL, "-c", command], **options)
    except (OSError, ValueError, BantamError) as e:
        return "error: cannot start the shell: %s" % e
    out = {"head": bytearray(), "tail": b"", "size": 0, "lines": 0,
           "decoder": codecs.getincrementaldecoder("utf-8")("replace")}
    started, limit = time.monotonic(), cfg["shell_timeout"]
    try:
        text = pump_output(cfg, proc, out, started + limit)
        return text + "\n\nexit: %d" % proc.wait(started + limit - time.monotonic())
    except BaseException as stop:   # the time is up, Ctrl+C: kill the group
        with contextlib.suppress(OSError):   # (none of it may be left)
            os.killpg(proc.pid, signal.SIGKILL)   # the shell and all it started
        text = pump_output(cfg, proc, out, time.monotonic() + DRAIN_SECONDS)   # its last words
        timed_out = isinstance(stop, subprocess.TimeoutExpired)
        why = ("timed out after %g s" % limit if timed_out else
               "interrupted by the user after %.1f s" % (time.monotonic() - started))
        text += "\n[%s: the command's process group was killed]\n\nexit: %d" % (why, proc.wait())
        if timed_out:
            return text
        cfg["run"]["partial"] = text   # the run stops: this is the call's tool message
        raise

def pump_output(cfg, proc, out, until):
    """Read and show the output into out until it closes, or until: all the model reads of it."""
    import select
    started, seconds, most = time.monotonic(), 0, cfg["max_tool_res"]
    while time.monotonic() < until:
        if time.monotonic() >= started + seconds + 1:   # each second: how long it has run
            seconds += 1
            emit(cfg, "tool_progress", seconds=seconds)
        if proc.poll() is not None:   # the shell exited: what it left, for DRAIN_SECONDS more
            until = min(until, time.monotonic() + DRAIN_SECONDS)
        if select.select([proc.stdout], [], [], 0.1)[0]:
            data = os.read(proc.stdout.fileno(), 1 << 16)
            if not data:
                break
            out["size"], out["lines"] = out["size"] + len(data), out["lines"] + data.count(b"\n")
            out["head"] += data[:max(0, most - len(out["head"]))]
            out["tail"] = (out["tail"] + data)[-most:]
            emit(cfg, "tool_output", text=out["decoder"].decode(data))   # (split characters: whole)
    if out["size"] <= most:   # all of it, or its head and tail
        return out["head"].decode("utf-8", "replace")
    keep = max(1, most * 2 // 5)
    head, tail = (b.decode("utf-8", "replace") for b in (out["head"][:keep], out["tail"][-keep:]))
    return "%s\n\n[... output too long: %d bytes, %d lines; showing the first and last %d bytes " \
           "(to read it all, send it to a file and read that in parts) ...]\n\n%s" % (
               head, out["size"], out["lines"] + (not out["tail"].endswith(b"\n")), keep, tail)

def run_subagent(cfg, args):
    """Run AL on a fresh [system + CHILD_NOTE, prompt]: the child's last answer with text."""
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "error: run_subagent needs a non-empty 'prompt' string"
    child = AL(cfg, [{"role": "system", "content": cfg["system_prompt"] + CHILD_NOTE},
                     {"role": "user", "content": prompt}])   # (failing: the tool's error)
    answers = [m["content"] for m in child if m["role"] == "assistant" and m.get("content")]
    return answers[-1] if answers else "(the subagent gave no answer)"

TOOLS = {   # name -> (schema, function): what is offered to the model, and run
    "shell_exec": ({"description": "Run a bash command; returns its output and exit code.",
                    "parameters": {"type": "object", "required": ["command"],
                                   "properties": {"command": {"type": "string"}}}}, shell_exec),
    "run_subagent": ({"description": "Hand a self-contained task to a fresh copy of this agent.",
                      "parameters": {"type": "object", "required": ["prompt"],
                                     "properties": {"prompt": {"type": "string"}}}}, run_subagent),
}

def parse_arguments(call):
    """A call's arguments as a dict, or the error the model reads (they are then stored "{}")."""
    function = call["function"]
    try:
        args = json.loads(function["arguments"], strict=False)   # a raw newline is fine
        if isinstance(args, dict):
            return args
        raise ValueError("expected a JSON object")
    except (ValueError, RecursionError) as e:
        text, function["arguments"] = function["arguments"], "{}"
        return "error: the arguments of %s are not a valid JSON object (%s): %s" % (
            function["name"], e, text[:500])

def run_tool_call(cfg, call, args):
    """Trace and run one tool call (args: a dict, or an error text): its tool message."""
    name = call["function"]["name"]
    emit(cfg, "tool_call", id=call["id"], name=name, arguments=call["function"]["arguments"])
    args = hooked("tool", args, cfg, call)   # before: the args, or a refusal (a text)
    if name not in TOOLS and not isinstance(args, str):
        args = "error: unknown tool %r; the tools are %s" % (name, ", ".join(TOOLS))
    try:
        result = args if isinstance(args, str) else TOOLS[name][1](cfg, args)
    except Exception as e:   # a tool's bug is text for the model too, never a crash
        result = "error: %s failed: %s" % (name, e)
    result = hooked("tool", result, cfg, call, args)
    ok = not isinstance(args, str) and not result.startswith("error:")   # a tool's own too
    emit(cfg, "tool_result", id=call["id"], name=name, content=result, ok=ok)
    return {"role": "tool", "tool_call_id": call["id"], "content": result}

def AL(cfg, messages, on_event=None):
    """The agentic loop: ask, run the tool calls, again until none; messages (events: on_event)."""
    parent = cfg.get("run") or {}   # this run's own cfg: its event sink, its subagent depth
    run = dict(parent, depth=parent["depth"] + 1 if parent.get("loop") else 0, loop=True, own={},
               emit=on_event or parent.get("emit") or plain_view(cfg))
    cfg, status = dict(cfg, run=run), None
    emit(cfg, "turn_start", messages=len(messages))
    try:
        for _ in range(cfg["max_al_iterations"]):
            reply = chat(cfg, messages)
            calls = reply.get("tool_calls") or []
            if not reply["content"] and not calls:
                note(cfg, "[the model sent an empty reply]")
                break                                   # never store an empty assistant message
            args = [parse_arguments(call) for call in calls]
            add_message(cfg, messages, reply)
            before = len(messages)
            try:
                for call, arg in zip(calls, args):
                    add_message(cfg, messages, run_tool_call(cfg, call, arg))
            finally:   # stopped: each call not answered gets its one tool message all the same
                for call in calls[len(messages) - before:]:
                    text = run.pop("partial", None) or INTERRUPTED + ": the tool did not finish"
                    add_message(cfg, messages, {"role": "tool", "tool_call_id": call["id"],
                                                "content": hooked("tool", text, cfg, call, {})})
            status = first("step", cfg, messages, calls) if calls else "done"   # (the answer)
            if status:
                break
    except BaseException as stop:   # (Part II: a budget's final answer; a cut reply's text)
        status = first("step", cfg, messages, stop)   # (turn_end: Part II says how it stopped)
        if not status:
            raise
    emit(cfg, "turn_end", status=status or "done", error=None)
    return messages

def add_message(cfg, messages, message):
    """Append a message to the conversation, and say so."""
    messages.append(message)
    emit(cfg, "message", message=message)

# ---- Sessions: ~/.bantam/sessions/<id>.json (0600): a line of all but the messages, then one each

def session_path(sid, ext=".json"):
    """The file of session sid."""
    return bantam_home("sessions", sid + ext)

def new_session(sid=None):
    """A conversation not saved yet (a first save gives it an id); uid tells reused ids apart."""
    return dict(id=sid, uid=os.urandom(8).hex(), summary="", created_at=time.strftime("%FT%T%z"))

def save_session(cfg, session, messages, link=True):
    """Write the conversation's file unless it holds this (a first save takes a new id)."""
    lines = ",\n".join(json.dumps(m, ensure_ascii=False) for m in messages)
    n, written = 1, (session["summary"], list(messages))
    try:
        os.makedirs(bantam_home("sessions"), mode=0o700, exist_ok=True)   # (a file there: fails)
        while session.get("written") != written:
            sid = session["id"] or time.strftime("%Y%m%d-%H%M%S") + "-%d" % n * (n > 1)
            head = dict(id=sid, uid=session["uid"], cwd=os.getcwd(), created_at=session[
                "created_at"], saved_at=time.strftime("%FT%T%z"), summary=session["summary"],
                count=len(messages), **session.get("head", {}))
            text = json.dumps(head, ensure_ascii=False)[:-1] + ', "messages": [\n%s\n]}\n' % lines
            try:
                write_private_file(session_path(sid), text, not session["id"])
                session.update(id=sid, written=written)
            except FileExistsError:   # (exclusive: a new id is never another's)
                n += 1
        if link:   # autosave.json: a link to it, renamed from a random name (runs relink at once)
            tmp = session_path(".autosave.%s" % os.urandom(8).hex(), ".tmp")
            os.symlink(session["id"] + ".json", tmp)
            os.replace(tmp, session_path("autosave"))
    except OSError as e:
        note(cfg, "warning: cannot save the conversation: %s" % e, "warning")

def session_ids():
    """The ids of the saved sessions, newest saved first (autosave not among them)."""
    try:
        files = [f for f in os.scandir(bantam_home("sessions")) if f.name.endswith(".json")
                 and not f.name.startswith(".") and f.name != "autosave.json"]
        return [f.name[:-5] for f in sorted(files, key=lambda f: f.stat().st_mtime, reverse=True)]
    except OSError:   # (no sessions yet; one deleted while they were read: none this time)
        return []

def resolve_session(prefix):
    """The id that is prefix, or the only one starting with it; autosave: the one it links to."""
    if prefix == "autosave" and os.path.islink(session_path("autosave")):
        return os.path.basename(os.readlink(session_path("autosave")))[:-5]
    matches = [sid for sid in session_ids() if sid.startswith(prefix)]
    if prefix not in matches and len(matches) != 1:
        raise ConfigError("%r matches %d sessions: %s" % (prefix, len(matches), ", ".join(
            sorted(matches)[:5])) if matches else "no session matches %r (see /list)" % prefix)
    return prefix if prefix in matches else matches[0]

def load_session(sid):
    """(session, messages) of conversation sid (or a unique prefix), as the load hooks put them."""
    session = new_session(resolve_session(sid))
    try:
        with open(session_path(session["id"]), encoding="utf-8") as f:
            stored = json.load(f)
        session.update((k, stored[k]) for k in ("uid", "summary", "created_at") if stored.get(k))
        return session, hooked("load", stored["messages"], session)
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as e:   # (not JSON...)
        raise BantamError("cannot read session %r (%s); the file is left as it is" % (
            session["id"], e))

def append_user(messages, content):
    """Append a user message, or join it to one just before (strict servers want turns)."""
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": content})
    else:
        messages[-1] = dict(messages[-1], content=messages[-1]["content"] + "\n\n" + content)
    return messages

# ---- Commands: name -> (handler, help); handler(convo, arg) changes convo, or returns QUIT

QUIT = object()   # (the REPL ends)
SUMMARY_HEAD, SUMMARY_END = "Summary of our conversation so far:\n\n", "\n\n[end of summary]"

def cmd_save(convo, arg):
    """/save: a copy of the conversation under a new id, titled by the model."""
    cfg, session = convo["cfg"], convo["session"]
    request = append_user([dict(m) for m in convo["messages"]], PROMPTS["title"])
    title = chat(cfg, request, False, True)["content"]
    session["summary"] = " ".join(title.split())[:120] or session["summary"]
    copy = dict(new_session(), summary=session["summary"], created_at=session["created_at"])
    save_session(cfg, copy, convo["messages"], link=False)
    show(cfg, "[saved session %s]\n" % copy["id"])

def cmd_list(convo, arg):
    """/list: the saved sessions, newest first: id, when started, messages, summary."""
    for sid in session_ids():
        session, messages = load_session(sid)   # (an unreadable one: said; the list ends there)
        show(convo["cfg"], terminal_safe("%s  %s  %d msgs  %s\n" % (
            sid, session["created_at"], len(messages), session["summary"])))

def cmd_load(convo, arg):
    """/load <id>: go on with a saved session (its id or a unique prefix) in its own file."""
    convo["session"], convo["messages"][:] = load_session(arg)
    save_session(convo["cfg"], convo["session"], convo["messages"])   # autosave: this one

def compact(cfg, messages):
    """Replace messages by [system, user: a summary of them]."""
    request = append_user([dict(m) for m in messages], PROMPTS["compact"])
    summary = chat(cfg, request, False, True)["content"].strip()
    if not summary:   # (it would replace the conversation)
        raise ApiError("the model returned an empty summary")
    emit(cfg, "compaction", before=len(messages), after=2)
    messages[:] = [messages[0], {"role": "user", "content": SUMMARY_HEAD + summary + SUMMARY_END}]

def cmd_compact(convo, arg):
    """/compact: replace the conversation by a summary of it."""
    compact(convo["cfg"], convo["messages"])
    save_session(convo["cfg"], convo["session"], convo["messages"])

def cmd_clear(convo, arg):
    """/clear: start a new conversation with just the system prompt (the old one is kept)."""
    convo["session"], convo["messages"][:] = new_session(), [
        {"role": "system", "content": convo["cfg"]["system_prompt"]}]
    save_session(convo["cfg"], convo["session"], convo["messages"])   # autosave: this one
    show(convo["cfg"], "[conversation cleared]\n")

def cmd_help(convo, arg):
    """/help: the commands."""
    show(convo["cfg"], "".join("%-14s %s\n" % (name + "cmd" * (len(name) == 1), text)
                               for name, (_, text) in COMMANDS.items() if text)
         + "%-14s %s\n" % ("Ctrl+J", "new line in a prompt (Enter sends)"))

COMMANDS = {   # (Part II adds its own; a help of None: another name, not listed)
    "/save": (cmd_save, "save a copy of the conversation, with a summary"),
    "/list": (cmd_list, "list the saved sessions, newest first"),
    "/load": (cmd_load, "/load <id>: continue a saved session (id or unique prefix)"),
    "/compact": (cmd_compact, "replace the conversation by a summary of it"),
    "/clear": (cmd_clear, "start a new conversation (the old one stays saved)"),
    "/help": (cmd_help, "show this help"),
    "/quit": (lambda convo, arg: QUIT, "exit (or Ctrl+D on an empty line)"),
    "\x03": (lambda convo, arg: show(convo["cfg"], "\n"), None),   # Ctrl+C: the line dropped
}

# ---- The REPL and main

def turn(convo, prompt, wraps=None):
    """One user turn inside the turn hooks (the last outermost): append, save, run AL, save."""
    wraps = HOOKS["turn"] if wraps is None else wraps
    if wraps:
        return wraps[-1](convo, prompt, lambda text: turn(convo, text, wraps[:-1]))
    cfg, messages, session = convo["cfg"], convo["messages"], convo["session"]
    append_user(messages, prompt)
    save_session(cfg, session, messages)   # the prompt survives a kill
    emit(cfg, "prompt", text=prompt, session=session["id"])
    try:
        AL(cfg, messages)
    finally:
        save_session(cfg, session, messages)

HISTORY = "~/.bantam_history"   # the REPL's readline history

def setup_readline():
    """Line editing and history (Ctrl+J: a line break; Enter sends); None without readline."""
    try:
        import readline
        readline.parse_and_bind(r'"\C-j": "\C-v\C-j"')   # quoted-insert of a real newline
        readline.read_history_file(os.path.expanduser(HISTORY))
    except ImportError:
        return None
    except OSError:   # (no history yet)
        pass
    return readline

def repl(convo):
    """Read and do prompts and /commands until /quit or end of input; then save the history."""
    readline = convo.get("readline") or (setup_readline() if sys.stdin.isatty() else None)
    while True:
        try:
            line = input("> ")
        except KeyboardInterrupt:   # Ctrl+C: the command "\x03" (its argument: the line)
            line = "\x03 " + (readline.get_line_buffer() if readline else "")
        except EOFError:
            show(convo["cfg"], "\n")
            break
        name, _, arg = line.strip().partition(" ")
        try:
            if name in COMMANDS:
                if COMMANDS[name][0](convo, arg.strip()) is QUIT:
                    break
            elif line.strip():
                turn(convo, line)
        except KeyboardInterrupt:
            note(convo["cfg"], "[interrupted]")
        except BantamError as e:
            emit(convo["cfg"], "error", message=str(e))
    try:
        if readline:   # (GNU readline writes the file 0600)
            readline.write_history_file(os.path.expanduser(HISTORY))
    except OSError as e:
        note(convo["cfg"], "warning: cannot save history: %s" % e, "warning")

FLAGS = []   # functions adding Part II's options to the argparse parser

def read_prompt(path):
    """The batch prompt: the file's text, or stdin's for '-'."""
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8-sig", "replace")
    return read_text(path, "prompt file")

def main(argv=None):
    """The REPL without a prompt, batch mode with one: the exit status (the README lists them)."""
    convo, cfg = None, {}
    try:
        import argparse   # (a bad option: exit 2)
        parser = argparse.ArgumentParser(prog="bantam")
        parser.add_argument("prompt_file", nargs="?", metavar="PROMPT_FILE",
                            help="run one turn with the prompt in this file ('-': stdin)")
        for add_flags in FLAGS:
            add_flags(parser)
        args = parser.parse_args(argv)
        cfg = load_config(getattr(args, "overrides", None), getattr(args, "config", None))
        convo = {"cfg": cfg, "session": new_session(), "messages": [
            {"role": "system", "content": cfg["system_prompt"]}]}
        cfg["run"] = {"emit": VIEWS["plain"](cfg), "depth": 0}   # the run's sink
        status = first("start", convo, args)   # Part II: its flags, views, -p's turn...
        if status is not None:
            return status
        if args.prompt_file is None:
            repl(convo)
        else:
            turn(convo, read_prompt(args.prompt_file))
        return 0
    except KeyboardInterrupt:
        note(cfg, "[interrupted]")
        return 130
    except BantamError as e:
        if str(e):
            emit(cfg, "error", message=str(e))
        return e.exit_code
    finally:
        if convo and len(convo["messages"]) > 1:
            save_session(convo["cfg"], convo["session"], convo["messages"])

# Here ends Part I: all of Bantam. Part I alone does without:
#   secrets hidden on screen, in sessions and from commands; invisible characters removed;
#   a kept-alive connection, Retry-After, providers' quirks, proxies, first_byte_timeout;
#   session repair, saves at each step, the token line, budgets, compaction on overflow;
#   trust in a folder's files; approvals and the kernel sandbox; the write tool, /undo, /diff;
#   Markdown and the terminal view, --jsonl, -c, the ...requesting... line, subagents' rail;
#   Ctrl+C twice to quit, multi-line history, SIGTERM, SIGHUP, !cmd, /exit, /commands' checks;
#   config values' ranges, unknown keys warned of, --help's notes, --version, automatic titles;
#   closed or odd stdio (unbuffered, Latin-1, gone), stderr colored as its own terminal allows.
# ==== Part II: what makes Bantam a daily tool ============================================

import functools     # (Part II's own modules)
import shutil
import stat

# Part II adds keys, views, tools, commands, flags to Part I's tables; fills hooks; lists events.

PROMPTS["compact"] = (
    "Summarize this conversation so that it can continue from the summary alone: the user's "
    "goals and requests, decisions made, facts learned, files and commands involved, the current "
    "state of the work and the next steps. Be complete but concise.")
PROMPTS["system"] = """\
You are Bantam, a command-line AI agent working on the user's machine.

You have two tools:
- shell_exec runs a shell command (bash) and returns its output and exit code.
- run_subagent hands a self-contained sub-task to a fresh copy of yourself and returns its answer.

Work in small, verifiable steps: look before you change things, check the result of every
command, and fix what fails. Never start interactive programs (editors, pagers, prompts);
use non-interactive flags instead. Long outputs are cut: read big files in parts.
When you are done, say briefly what you did and what you found.
"""

DEFAULTS.update({
    "first_byte_timeout": 300.0,   # seconds to wait for a reply to begin (a model may think long)
    "headers": {},                 # extra request headers, JSON: {"api-key": "..."} (secret)
    "context_window": 262144,      # tokens, when the server does not say
    "reasoning_effort": "",        # forwarded when set (low | medium | high ...)
    "max_reasoning": 262144,       # characters of a reply's reasoning shown, kept and sent back
    "trace_file": "",              # append every event as a JSON line to this file
    "render": "auto",              # Markdown, live tool output: auto (a terminal) | always | never
    "tool_lines": 10,              # lines of a command's output shown on screen (0: a screenful)
    "tools": "shell_exec,run_subagent",  # the tools offered to the model (also: write)
    "bantam_tools_dir": "",        # a folder of helper scripts, named in the system prompt
    "bantam_skills_dir": "",       # a folder of skills (<name>/SKILL.md), named to the model
    "shell_env_exclude": "*KEY*,*SECRET*,*TOKEN*,*PASSWORD*",  # kept from commands (none: all pass)
    "shell_env_keep": "",          # variables passed to commands all the same: GITHUB_TOKEN,...
    "project_instructions": True,  # add this folder's AGENTS.md to the system prompt
    "usage": True,                 # the token line on stderr after each turn
    # the leash (see "Approvals and budgets"): what may run, and what a turn may spend
    "approve": "auto",             # commands, writes: auto (run them) | ask (REPL asks) | deny
    "allow": "",                   # comma-separated patterns that run unasked: commands, write:PATH
    "deny": "",                    # ... that never run (deny wins over allow, allow over approve)
    "sandbox": "off",              # off | workspace (commands write here and in temp) | read-only
    "sandbox_network": True,       # false: commands get no sockets (Landlock ABI 4+)
    "max_turn_tokens": 0,          # prompt + completion tokens a turn, subagents too (0: no limit)
    "max_turn_seconds": 0.0,       # wall-clock seconds per turn (0: no limit)
    "max_cost": 0.0,               # dollars per turn, from the prices below (0: no limit)
    "price_in": 0.0,               # dollars per million prompt tokens
    "price_out": 0.0,              # dollars per million completion tokens
    "price_cached": 0.0,           # dollars per million cached prompt tokens (0: price_in)
    "max_identical_calls": 3,      # same call and result this many times in a row: stop (0: off)
    "max_repair_calls": 3,         # a turn's final-answer calls (after a budget stop)
    "final_answer_timeout": 60.0,  # seconds for the final-answer call after a budget stop
})
CHOICES.update(render=("auto", "always", "never"), approve=("auto", "ask", "deny"),
               sandbox=("off", "workspace", "read-only"))
POSITIVE = {"max_al_iterations", "max_tool_res", "timeout", "first_byte_timeout", "shell_timeout",
            "context_window"}   # the numbers that must be above 0 (the others: 0 or more)

def in_range(key, value, where):
    """A number key's value (PARSERS): finite, 0 or more, a POSITIVE key's above 0."""
    values = value if isinstance(value, list) else [value]
    if all(0 <= v < float("inf") for v in values) and (value or key not in POSITIVE):
        return value
    what = "a comma-separated list of seconds" if values is value else "%s %s" % (
        "a number" if isinstance(value, float) else "a whole number",
        "above 0" if key in POSITIVE else "of 0 or more")
    typed = ",".join("%g" % v for v in values)   # (as it was typed: 0, not 0.0)
    raise ConfigError("%s: %s: expected %s, got %r" % (where, key, what, typed))

PARSERS.update({key: functools.partial(in_range, key) for key, value in DEFAULTS.items()
                if type(value) in (int, float, list)})
EVENTS = {   # every type of event and its fields, Part I's first: the README's schema
    "start": "version model mode session time", "prompt": "text session", "turn_start":
    "messages", "request": "model messages stream", "reasoning": "text", "text": "text",
    "reply_end": "finish", "reply": "message quiet", "message": "message", "tool_call":
    "id name arguments", "tool_output": "text", "tool_progress": "seconds", "tool_result":
    "id name content ok", "retry": "error attempt of wait", "note": "text level", "output":
    "text", "error": "message", "turn_end": "status error", "compaction": "before after",
    "usage": "model prompt_tokens cached_tokens completion_tokens estimated quiet seconds "
    "first_output cost", "context": "model prompt_tokens cached_tokens completion_tokens "
    "estimated window share cost session_cost", "approval": "id tool command path decision "
    "rule reason edited", "budget_stop": "reason limit used"}
MAX_ARGUMENTS = 1 << 20   # characters of tool-call arguments a reply keeps (then: cut)
MAX_EVENT = 16 << 20      # bytes of one stream event at most
COMPACT_AT = 0.60         # offer /compact at this share of the context window
BUDGET_EXIT = 3           # batch mode's exit status when a budget stopped the turn
MAX_SUBAGENT_DEPTH = 4    # subagents of subagents... at most this deep
# Facts about the servers, learned by this process and shared by its runs: context windows by
# (endpoint, model), and the fixes their errors taught, (endpoint, model, fix) (see FIXES).
LEARNED = {"windows": {}, "told": {}, "fixes": set()}   # told: windows overflow errors said
TIME_UP = "the turn's time ran out (max_turn_seconds=%g)"   # (a command's or a call's)

def own(cfg):
    """The fields of Part II that belong to this AL run alone ({} outside one)."""
    return (cfg.get("run") or {}).get("own", {})

def turn_tally(cfg):
    """The turn's spending {started, tokens, cost, repairs}, shared by subagents (or None)."""
    run = cfg.get("run")
    if not run or not run.get("loop"):
        return None
    if "tally" not in run or not run["depth"] and run["tally"].get("run") is not run["own"]:
        run["tally"] = {"started": time.monotonic(), "tokens": 0, "cost": 0.0, "repairs": 0,
                        "run": run["own"]}
    return run["tally"]

def note_once(cfg, key, text, level="warning"):
    """A note said once a turn, subagents' too (outside a turn: each time)."""
    said = (turn_tally(cfg) or {}).setdefault("said", set())
    if key not in said:
        said.add(key)
        note(cfg, text, level)

def time_up(cfg):
    """(key, used) when the turn has used up its max_turn_seconds, else None."""
    turn, limit = turn_tally(cfg), cfg.get("max_turn_seconds")
    used = turn and limit and time.monotonic() - turn["started"]
    return ("max_turn_seconds", round(used, 1)) if used and used >= limit else None

def fan_out(convo, args):
    """The start hook: the run's events go to each of convo["views"] (the first: the shown one)."""
    convo["views"] = [convo["cfg"]["run"]["emit"]]
    convo["cfg"]["run"]["emit"] = lambda event: [view(event) for view in convo["views"]]

HOOKS["start"].append(fan_out)

def shell_in_time(cfg, args):
    """shell_exec, killed when the turn's time runs out (max_turn_seconds) if that comes first."""
    turn, limit = turn_tally(cfg), cfg.get("max_turn_seconds")
    left = turn and limit and turn["started"] + limit - time.monotonic()
    if not left or left >= cfg["shell_timeout"]:
        return shell_exec(cfg, args)
    return shell_exec(dict(cfg, shell_timeout=left), args).replace(
        "\n[timed out after %g s: " % left, "\n[" + TIME_UP % limit + ": ")

def nested_subagent(cfg, args):
    """run_subagent, unless subagents nest MAX_SUBAGENT_DEPTH deep already (endless recursion)."""
    if (cfg.get("run") or {}).get("depth", 0) >= MAX_SUBAGENT_DEPTH:
        return "error: subagents may nest only %d deep; do this task yourself" % MAX_SUBAGENT_DEPTH
    return run_subagent(cfg, args)

TOOLS.update(shell_exec=({   # (the descriptions a model does best with)
    "description": "Run a shell command (bash -c) on the user's machine and return its combined "
                   "stdout and stderr followed by the exit code. Non-interactive: stdin is empty "
                   "and pagers are off. Long output is cut to its head and tail: send it to a "
                   "file and read that in parts.",
    "parameters": {"type": "object", "properties": {"command": {
        "type": "string", "description": "The command line to run, e.g. \"ls -la src\"."}},
        "required": ["command"]}}, shell_in_time), run_subagent=({
    "description": "Delegate a self-contained sub-task to a fresh copy of this agent, which has "
                   "the same tools but none of this conversation. Returns its final answer. Put "
                   "every detail it needs into the prompt.",
    "parameters": {"type": "object", "properties": {"prompt": {
        "type": "string", "description": "The complete task for the subagent."}},
        "required": ["prompt"]}}, nested_subagent))


# ----------------------------------------------------------------------------------------
# Providers' quirks: what a server's errors mean, what it sends beyond text, reasoning and
# tool calls, and the fixes its refusals teach (the request and delta hooks)
# ----------------------------------------------------------------------------------------

# What servers say of a prompt too long, of money run out, of a blank assistant message:
OVERFLOW_PATTERNS = (
    r"(?i)context[_ ]length[_ ]exceeded|exceed_context_size|maximum context length|context window"
    r"|exceeds the available context|greater than the context length|prompt is too long"
    r"|input token count.*exceeds|exceeds the maximum number of tokens|request too large"
    r"|too large for model with|exceeded model token limit|range of input length|exceed context"
    r"|longer than the model's context length|exceeds the maximum allowed length|exceeds max len")
QUOTA_PATTERNS = (r"(?i)insufficient_quota|exceeded your current quota|check your plan and billing"
                  r"|credit balance is too low|insufficient (?:credits|balance)")
EMPTY_ASSISTANT_PATTERNS = r"(?i)content or tool_calls must be set|text content blocks must"

# Fixes errors teach, per endpoint and model (Kimi, DeepSeek want reasoning_content; Claude
# gateways: no "").
FIXES = {
    "reasoning_content": (r"reasoning_content is missing|reasoning_content`? in the thinking",
                          "the server wants reasoning_content on tool call messages: sending it"),
    "null_content": (r"text content blocks must (?:be non-empty|contain non-whitespace)",
                     "the server rejects empty text beside tool calls: sending content null there")}

# The fields a server may refuse (of the request, of its messages), and how it says so.
OPTIONAL_FIELDS = ("temperature", "reasoning_effort", "stream_options")
MESSAGE_EXTRAS = ("reasoning_content", "reasoning_details", "extra_content")
REFUSED_FIELD = (r"(?i)unsupported|not supported|does not support|deprecated|extra_forbidden"
                 r"|not permitted|unrecognized|unknown (?:field|parameter|name)|not allowed"
                 r"|only [\d.]+ is allowed")

CUTS = {   # what was cut of a reply: by its finish_reason, by a bound of bantam's
    "length": "[the reply was cut: it reached the output token limit (finish_reason: length)]",
    "content_filter": "[the reply was cut by a content filter (finish_reason: content_filter)]",
    "reasoning": "[the reasoning was cut at %(max_reasoning)d characters (max_reasoning)]",
    "arguments": "[the tool calls' arguments were cut at %(limit)d characters]"}

def shape_request(cfg, messages, body, error=None):
    """The request hook: the body as this server takes it; after a failure, learn_from's."""
    if error is not None:
        return learn_from(cfg, messages, body, error)
    (cfg.get("run") or {})["reply"] = None   # (this request's once it answers: shape_delta)
    fixes = {f for e, m, f in LEARNED["fixes"] if (e, m) == (cfg["endpoint"], cfg["model"])}
    body["stream"] = body["stream"] and own(cfg).get("unstreamed") is not messages[-1]
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    if cfg["reasoning_effort"]:
        body["reasoning_effort"] = cfg["reasoning_effort"]
    body = {key: value for key, value in body.items() if "drop " + key not in fixes}
    body["messages"] = [{k: v for k, v in m.items() if "drop " + k not in fixes}
                        for m in body["messages"]]
    for m in body["messages"]:   # (copies: the conversation's messages stay as they are)
        if m.get("tool_calls") and m["role"] == "assistant":
            if "reasoning_content" in fixes:
                m.setdefault("reasoning_content", "")
            if "null_content" in fixes and not str(m.get("content") or "").strip():
                m["content"] = None
    return body

def learn_from(cfg, messages, body, error):
    """After a failure: True to ask again at once (a fix learned, a blank message dropped)."""
    if classify(cfg, error):   # no first byte: one more wait at most (each may be minutes)
        if own(cfg).get("silent") is messages[-1]:
            raise ApiError("%s (gave up after 1 retry)" % error, "retry")
        own(cfg)["silent"] = messages[-1]
    text = error.body or str(error)
    kept = [m for m in messages if m["role"] != "assistant" or m.get("tool_calls")
            or str(m.get("content") or "").strip()]
    if len(kept) < len(messages) and re.search(EMPTY_ASSISTANT_PATTERNS, text):
        messages[:] = kept   # strict servers refuse an assistant message of nothing
        return True
    sent = [f for f in OPTIONAL_FIELDS if f in body]   # a refused field it names, else a FIXES one
    sent += [f for f in MESSAGE_EXTRAS if any(f in m for m in body["messages"])]
    fixes = [("drop " + f, "the server does not support %r for this model: leaving it out" % f)
             for f in sent if re.search(r"\b%s\b" % f.replace("_", "[_-]?"), text, re.I)
             and re.search(REFUSED_FIELD, text)]
    fixes += [(fix, say) for fix, (pattern, say) in FIXES.items() if re.search(pattern, text, re.I)]
    fix, say = fixes[0] if fixes and error.status in (400, 422) else (None, None)
    if fix and (cfg["endpoint"], cfg["model"], fix) not in LEARNED["fixes"]:
        LEARNED["fixes"].add((cfg["endpoint"], cfg["model"], fix))
        note(cfg, "[%s from now on]" % say, "info")
        return True
    if str(error).endswith("without sending anything") and body["stream"]:   # unstreamed next
        own(cfg)["unstreamed"] = messages[-1]
    return False

def classify(cfg, error):
    """Set an ApiError's kind, message, wait from cause, status, body (True: no first byte)."""
    import http.client
    if isinstance(error.__cause__, (OSError, http.client.HTTPException)):   # a failed connection
        return network_error(cfg, error)   # or read (not a malformed reply): its cause said
    text, status, headers = error.body or "", error.status, error.headers
    waits = [float(headers[key]) / unit for key, unit in [("retry-after-ms", 1000),
             ("retry-after", 1)] if re.match(r"\s*\d+(\.\d*)?\s*$", headers.get(key, ""))]
    kind, hint, wait = error.kind, "", (waits + [None])[0]   # (an HTTP date: no wait)
    if status == 413 or status in (None, 400, 422, 429, 500) and re.search(OVERFLOW_PATTERNS, text):
        kind = "overflow"
    elif status == 402 or status in (400, 403, 429) and re.search(QUOTA_PATTERNS, text) and not (
            status == 429 and wait):   # a per-minute quota may say the same, with a wait
        kind, hint = "fatal", " (quota, credits or billing exhausted: not retried)"
    elif status == 404:   # the URL posted to, and the setting that chose the endpoint
        hint = " (POST %s: check endpoint, from %s, and model)" % (re.sub(
            r"(?=\?|$)", "/chat/completions", cfg["endpoint"], 1), cfg["sources"]["endpoint"])
    elif status == 400 and '"tool_use_failed"' in text:   # Groq: the model's slip, not ours
        kind, hint = "retry", " (a malformed tool call from the model)"
    elif status == 401:
        hint = " (check api_key in model.cfg, or BANTAM_API_KEY / OPENAI_API_KEY)"
    said = said_in(text)   # (a message in another shape than Part I reads)
    if said:
        error.args = ("HTTP %d: %s" % (status, said) if status else "error in stream: " + said,)
    error.args, error.kind, error.wait = (str(error) + hint,), kind, wait
    if kind == "retry" and (wait or 0) > 60 and cfg["backoff"]:   # (a longer wait: give up)
        raise ApiError("%s; the server asks to wait %.0f s, so giving up (try again later)" % (
            error, wait), "retry", status)

def said_in(text):
    """An error body's message: {"message"}, {"error": "..."}, or a list of those (Gemini)."""
    try:
        said = json.loads(text)
        said = (said[0] if isinstance(said, list) else said).get("error", said)
        said = said.get("message") if isinstance(said, dict) else said
        return " ".join(said.split()) if isinstance(said, str) and said else None
    except (ValueError, LookupError, AttributeError, RecursionError):
        return None

def shape_delta(cfg, reply, delta):
    """The delta hook: a delta as Part I merges it, within the reply's bounds (see HOOKS)."""
    (cfg.get("run") or {})["reply"] = reply   # the run's: what a failure or Ctrl+C leaves shown
    reply.setdefault("room", {"reasoning": cfg["max_reasoning"], "arguments": MAX_ARGUMENTS})
    reply.setdefault("cut", [])   # (room: what the reply may still keep, see room_for)
    reply.setdefault("extra", {})   # (fields of the message beyond Part I's: finish_reply)
    chunk = reply.get("chunk") or {}
    choice = (chunk.get("choices") or [{}])[0]   # usage: beside it or in it (Moonshot)
    usage = chunk.get("usage") or isinstance(choice, dict) and choice.get("usage")
    reply["usage"] = usage if isinstance(usage, dict) else reply.get("usage")   # the last said
    if delta is None:
        return reply_ended(cfg, reply)   # (None)
    if not delta:   # a network read: output, or only keep-alives for too long?
        if reply["size"] and not reply.get("first"):   # output began: a gap of timeout stalls
            reply["first"], conn = time.monotonic(), (cfg.get("run") or {}).get("conn")
            if conn and not conn.response.isclosed():   # (a closed one's socket: EBADF)
                conn.held.settimeout(cfg["timeout"])
        stalled(cfg, reply)
        return delta
    if isinstance(delta.get("content"), list):   # Mistral's parts: thinking ones, text ones
        parts = [p for p in delta["content"] if isinstance(p, dict)]
        thinking = [t for p in parts if p.get("type") == "thinking" for t in p.get("thinking", ())]
        delta["reasoning"] = "".join(str(t.get("text", "")) for t in thinking if type(t) is dict)
        delta["content"] = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    if isinstance(delta.get("extra_content"), dict):   # Gemini's thought signature on text
        reply["extra"].setdefault("extra_content", {}).update(delta["extra_content"])
    named, thought = delta.pop("reasoning_content", None), delta.pop("reasoning", None)
    key, thought = "reasoning_content" if named else "reasoning", named or thought
    if isinstance(thought, str) and thought:   # (bounded here, merged by Part I)
        delta[key] = thought[:room_for(reply, "reasoning", len(thought))]
        if named:   # DeepSeek's thinking mode wants it back during tool use
            reply.setdefault("echo", []).append(delta[key])
    if isinstance(delta.get("reasoning_details"), list):   # OpenRouter's, sent back
        merge_details(reply, delta["reasoning_details"])
    calls = delta.get("tool_calls") if isinstance(delta.get("tool_calls"), list) else []
    delta["tool_calls"] = [f if isinstance(f, dict) else {} for f in calls]
    for position, fragment in enumerate(delta["tool_calls"]):
        fragment_quirks(reply, fragment, position)
    if reply.get("echo") and delta["tool_calls"]:   # (joined once: a list of one after)
        reply["echo"][:] = ["".join(reply["echo"])]
        reply["extra"]["reasoning_content"] = reply["echo"][0]
    return delta

def reply_ended(cfg, reply):
    """At a reply's end: its cuts said; its tokens and cost counted, the turn's too (usage)."""
    for cut in [] if reply["quiet"] else reply["cut"] + [reply["finish"]]:
        if cut in CUTS:
            note(cfg, CUTS[cut] % dict(cfg, limit=MAX_ARGUMENTS), "warning")
    prompt, cached, completion, estimated = count_tokens(reply)
    cost, turn = None, turn_tally(cfg)
    if cfg["price_in"] or cfg["price_out"] or cfg["price_cached"]:
        cost = ((prompt - (cached or 0)) * cfg["price_in"] + completion * cfg["price_out"]
                + (cached or 0) * (cfg["price_cached"] or cfg["price_in"])) / 1e6
    if turn:   # (calls outside AL have none)
        turn["tokens"] += prompt + completion
        turn["cost"] += cost or 0.0
    emit(cfg, "usage", model=cfg["model"], prompt_tokens=prompt, cached_tokens=cached,
         completion_tokens=completion, estimated=estimated, quiet=reply["quiet"], cost=cost,
         seconds=round(time.monotonic() - reply["asked"], 3),
         first_output=round(reply["first"] - reply["asked"], 3) if reply.get("first") else None)

def fragment_quirks(reply, fragment, position):
    """A tool-call fragment made fit to merge (Ollama's new id at an index: a new call)."""
    calls, function = reply["calls"], fragment.get("function")
    function = fragment["function"] = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    arguments = json.dumps(arguments) if isinstance(arguments, dict) else arguments or ""
    arguments = function["arguments"] = arguments[:room_for(reply, "arguments", len(arguments))]
    index = fragment["index"] if isinstance(fragment.get("index"), int) else position
    call, new_id = calls.get(index), str(fragment.get("id") or "")
    if new_id and any(c["id"] == new_id for i, c in calls.items() if i != index):
        fragment["id"] = new_id = ""   # an id sent twice: this call gets its own (finish_reply)
    if call and call["id"] and new_id and new_id != call["id"] and (
            function.get("name") or not isinstance(fragment.get("index"), int)):
        calls[len(calls) - (1 << 30)] = calls.pop(index)   # the one before: kept, in order
        call = None
    fragment["index"], pieces = index, call and call["function"]["arguments"]
    if pieces and arguments.startswith(pieces[0]) and arguments.startswith("".join(pieces)):
        del pieces[:]   # all so far, sent again: replaced

def count_tokens(reply):
    """The reply's (prompt, cached, completion, estimated) tokens (estimated: 4 bytes a token)."""
    usage = reply["usage"] or {}
    if not usage:   # estimated: the bytes sent and received
        return (reply["sent"] + 3) // 4, None, (reply["size"] + 3) // 4, True
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    for key in ("prompt_cache_hit_tokens", "cache_read_input_tokens"):
        cached = usage.get(key) if cached is None else cached
    return usage.get("prompt_tokens") or 0, cached, usage.get("completion_tokens") or 0, False

def stalled(cfg, reply):
    """After a read: the turn's time, an event over MAX_EVENT, keep-alives alone too long: fail."""
    if time_up(cfg) and not reply["quiet"]:
        raise ApiError("the turn's time ran out (max_turn_seconds) mid-reply", "budget")
    if len(reply["line"]) + sum(map(len, reply["data"])) > MAX_EVENT:   # (in bounded memory)
        raise ApiError("the server sent a stream event over %d MB" % (MAX_EVENT >> 20))
    key, now = "timeout" if reply.get("first") else "first_byte_timeout", time.monotonic()
    if reply["size"] != reply.setdefault("seen", 0):
        reply["seen"], reply["progress"] = reply["size"], now
    elif now - reply.get("progress", reply["asked"]) > cfg[key]:
        raise ApiError("network error: no output for %g s, only keep-alives (%s)" % (
            cfg[key], key), "retry")

def merge_details(reply, details):
    """Keep reasoning_details to send back, a block's fragments joined (signed as a whole)."""
    kept = reply["extra"].setdefault("reasoning_details", [])
    for d in (d for d in details if isinstance(d, dict)):
        reply["size"] += 1
        block = next((b for b in kept if isinstance(d.get("index"), int)
                      and (b.get("index"), b.get("type")) == (d["index"], d.get("type"))), None)
        if block is None:
            kept.append(d)
        for key, value in d.items() if block else ():
            joined = key in ("text", "summary", "data") and isinstance(block.get(key), str)
            block[key] = block[key] + value if joined and isinstance(value, str) else value
    if not kept or "reasoning" in reply["cut"]:   # (a signed block cut short is void)
        del reply["extra"]["reasoning_details"]

def room_for(reply, kind, size):
    """How many of size new characters of kind the reply may keep (past its bound: none)."""
    room, fit = reply["room"], max(0, min(size, reply["room"][kind]))
    if size > room[kind] >= 0:
        reply["cut"].append(kind)
    room[kind] = room[kind] - size if size <= room[kind] else -1
    return fit

HOOKS["request"].append(shape_request)
HOOKS["delta"].append(shape_delta)


# ----------------------------------------------------------------------------------------
# The transport: a kept-alive connection, HTTP(S)_PROXY (a CONNECT tunnel), and network errors
# said plainly
# ----------------------------------------------------------------------------------------

def route(cfg):
    """(endpoint URL, proxy URL): the endpoint's HTTP(S)_PROXY, or none (NO_PROXY)."""
    from urllib.parse import urlsplit
    url, env = urlsplit(cfg["endpoint"]), lambda name: (
        os.environ.get(name.lower()) or os.environ.get(name) or "").strip()
    for rule in env("NO_PROXY").lower().split(","):
        rule = rule.strip().lstrip(".").split(":")[0]
        if rule == "*" or rule and (url.hostname == rule or url.hostname.endswith("." + rule)):
            return url, None
    proxy = env(url.scheme.upper() + "_PROXY")
    return url, urlsplit(proxy if "://" in proxy else "http://" + proxy) if proxy else None

def default_port(url):
    """The port of a urlsplit() URL: its own, else 443 for https and 80 for http."""
    return url.port or (443 if url.scheme == "https" else 80)

IDLE = {}   # endpoint -> a connection whose last reply was read whole (taken while in use)

def kept(kind, endpoint):
    """kind, an http.client connection class, whose close() keeps it idle after a whole reply."""
    class Kept(kind):   # taken out of IDLE by a request, put back by its close()
        reused = response = None

        def request(self, method, url, body, headers, **more):   # (headers: the key's too)
            names = {k.lower() for k in self.extra}
            names |= {"authorization"} if "api-key" in names else set()   # (Azure: no Bearer)
            headers = {k: v for k, v in headers.items() if k.lower() not in names}
            kind.request(self, method, url, body, dict(headers, **self.extra), **more)

        def getresponse(self):   # (held: it lets go of the socket at a connection's last reply)
            self.held = self.sock
            self.sock.settimeout(self.wait)   # the reply may take first_byte_timeout to begin
            self.response = kind.getresponse(self)   # (None till then: a close() in it closes)
            return self.response

        def close(self):
            if self.sock and self.response and self.response.isclosed():
                self.reused, self.response = True, None
                if IDLE.setdefault(endpoint, self) is self:   # (one idle: another's is closed)
                    return
            kind.close(self)
    return Kept

def connect_endpoint(cfg):
    """The connect hook: the endpoint's idle connection, else a new one (through its proxy)."""
    import http.client
    from urllib.parse import unquote
    conn = IDLE.pop(cfg["endpoint"], None)   # (taken: another thread's request opens its own)
    if not conn:
        url, proxy = route(cfg)
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = kept(kind, cfg["endpoint"])((proxy or url).hostname, default_port(proxy or url),
                                           timeout=cfg["timeout"])
        if proxy:   # a CONNECT tunnel, with the proxy URL's credentials
            import base64
            login = "%s:%s" % (unquote(proxy.username or ""), unquote(proxy.password or ""))
            auth = {"Proxy-Authorization": "Basic " + base64.b64encode(login.encode()).decode()}
            conn.set_tunnel(url.hostname, default_port(url), auth if proxy.username else {})
    conn.extra, conn.wait = cfg["headers"], cfg["first_byte_timeout"]   # (see Kept)
    (cfg.get("run") or {})["conn"] = conn   # the run's: its failure and its reply's rest
    return conn

def resend_stale(cfg, messages, body, error=None):
    """The request hook: after a failure, True (send again) for a kept connection gone stale."""
    if error is None:
        return body
    conn = (cfg.get("run") or {}).get("conn")   # (a close unanswered: RemoteDisconnected)
    return bool(conn and conn.reused and conn.response is None and isinstance(
        error.__cause__, ConnectionError))   # (once: the connection sent on next is a new one)

def read_rest(cfg, reply, delta):
    """The delta hook at a reply's end: the rest read (the connection kept)."""
    if delta is None:
        conn = (cfg.get("run") or {}).get("conn")
        try:   # (none kept: the server closes after the reply; a rest that fails: closed)
            conn.sock.settimeout(2.0)
            conn.response.read()
        except Exception:
            pass
    return delta

def network_error(cfg, error):
    """Say error's cause plainly, fatal if waiting cannot help (True: no first byte came)."""
    import socket
    url, proxy = route(cfg)
    e, reply = error.__cause__, (cfg.get("run") or {}).get("reply") or {}
    text, silent, host = str(e) or type(e).__name__, False, url.netloc.rpartition("@")[2]
    fatal = text.startswith("Tunnel connection failed: 4")
    if type(e).__name__ == "SSLCertVerificationError":   # (ssl is loaded for https only)
        text, fatal = ("the certificate of %s is not trusted (%s); for a private or company CA, "
                       "set SSL_CERT_FILE to its PEM file" % (url.hostname, e.verify_message)), True
    elif getattr(e, "reason", "") == "WRONG_VERSION_NUMBER":   # plain HTTP on that port
        text, fatal = "%s does not speak TLS; try http://%s%s" % (host, host, url.path), True
    elif isinstance(e, socket.gaierror) and e.errno != socket.EAI_AGAIN:   # (not for now)
        text, fatal = "the host name %s does not resolve" % (proxy or url).hostname, True
    elif isinstance(e, socket.timeout) or "timed out" in text:
        silent = not reply.get("first")
        text = "the reply stalled for %g s (timeout)" % cfg["timeout"] if not silent else (
            "no answer within %g s (first_byte_timeout)" % cfg["first_byte_timeout"])
    elif isinstance(e, ConnectionRefusedError):   # (the proxy's URL may hold a password)
        text = "connection refused by " + ("the proxy %s (%s_PROXY)" % (
            proxy.netloc.rpartition("@")[2], url.scheme.upper()) if proxy else cfg["endpoint"])
    error.args, error.kind = ("network error: " + text,), "fatal" if fatal else "retry"
    return silent

HOOKS["connect"].append(connect_endpoint)
HOOKS["request"].append(resend_stale)
HOOKS["delta"].append(read_rest)


# ----------------------------------------------------------------------------------------
# Trust and secrets: a folder's model.cfg trusted (see layered); secrets, hidden text kept out
# ----------------------------------------------------------------------------------------

def secrets_of(cfg):
    """The values never to show or save, longest first: the key, the headers' values, more."""
    found = [cfg.get("api_key") or ""] + list((cfg.get("headers") or {}).values()) + (
        cfg.get("run") or {}).get("secrets", [])
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)

def redact(cfg, value):
    """value with each secret of cfg as ***: a text, or in place the texts of a dict or list."""
    for secret in secrets_of(cfg) if isinstance(value, str) else ():
        value = value.replace(secret, "***")
    for key, item in list(value.items() if isinstance(value, dict) else enumerate(value)
                          if isinstance(value, list) else ()):
        value[key] = redact(cfg, item)
    return value

def redact_event(cfg, event):
    """The event hook: *** for secrets; a piece's end that may begin one held to the next."""
    run, piece = cfg.get("run") or {}, event["type"] in ("text", "reasoning", "tool_output")
    held = run.setdefault("held", {})   # a piece's end not passed on yet (its event)
    if held and (held["type"], held["depth"]) != (event["type"], event["depth"]) and (
            piece or event["type"] in ("reply_end", "tool_result", "turn_end")):
        (run.get("emit") or VIEWS["plain"](cfg))(dict(held))
        held.clear()
    if event["type"] == "reply":   # (its calls run as the model wrote them; stored, redacted)
        event["message"] = json.loads(json.dumps(event["message"]))
    redact(cfg, event)
    if not piece:
        return event
    text = redact(cfg, held.get("text", "") + event["text"])
    cut = min([len(text)] + [len(text) - n for s in secrets_of(cfg) for n in range(1, len(s))
                             if text.endswith(s[:n])])
    run["held"] = dict(event, text=text[cut:]) if text[cut:] else {}
    event["text"] = text[:cut]
    return event if event["text"] else None

STARTED = time.monotonic()   # events carry "t": seconds since the process started

def stamped(cfg, event):
    """The event hook: the event with "t" (seconds since bantam started) after its type."""
    return {"type": event["type"], "t": round(time.monotonic() - STARTED, 3), **event}

HOOKS["event"] += [stamped, redact_event]
HOOKS["turn"].append(lambda convo, text, go: go(redact(convo["cfg"], join_surrogates(
    text))))   # pasted keys: ***; an argument's bytes that are not UTF-8 become U+FFFD

NEEDS_TRUST = {   # key: what it decides (the trust question says it)
    "endpoint": "the model you talk to", "api_key": "the account your conversation goes to",
    "headers": "sent to the model's server", "allow": "commands that run without asking",
    "tools": "what the model may use", "bantam_tools_dir": "scripts offered to the model",
    "bantam_skills_dir": "a folder the model is told to take instructions from",
    "trace_file": "a file bantam appends to",
    "shell_env_exclude": "what commands may read", "shell_env_keep": "what commands may read"}

STRICTER = {"approve", "sandbox", "sandbox_network", "max_al_iterations", "max_turn_tokens",
            "max_turn_seconds", "max_cost", "max_identical_calls"}
TIGHTEN_ONLY = {"shell_timeout", "timeout", "first_byte_timeout", "final_answer_timeout",
                "backoff", "max_tool_res", "max_repair_calls",
                "max_reasoning", "context_window", "price_in", "price_out", "price_cached"}
SECRET_KEYS = ("api_key", "headers")   # shown as ***, kept out of the readline history

def strictness(key, value):
    """How strict a value of a STRICTER key is: higher is stricter (a budget of 0 is none)."""
    if key in CHOICES:
        return CHOICES[key].index(value)   # (loosest first)
    return (not value) if isinstance(value, bool) else -value if value else float("-inf")

def looser(cfg, key, value, than):
    """Does a folder's TIGHTEN_ONLY value loosen than (the user's): costlier, longer or more?"""
    if key == "price_cached":
        value, than = value or cfg["price_in"], than or cfg["price_in"]
    if key == "backoff":
        return len(value) > len(than) or any(v > t for v, t in zip(value, than))
    return value < than if key.startswith("price_") else value > than

def normal_endpoint(url, where):
    """The endpoint without /chat/completions (bantam adds it); ConfigError if not http(s)."""
    url = url.rstrip("/")
    cut = re.sub(r"/chat/completions/*(?=\?|$)", "", url, count=1)
    if cut != url:
        note({}, "%s: endpoint: using %s (bantam adds /chat/completions)" % (where, cut), "warning")
    if not re.match(r"https?://([^/?#@]*@)?(\[[^]/]*\]|[^]/?#:[]+)(:[0-9]{1,5})?([/?#]|$)", cut):
        raise ConfigError("%s: endpoint: expected an http:// or https:// URL with a host (and "
                          "a port number after a ':'), got %r" % (where, url))
    return cut

def settle_secrets(cfg):
    """The run's secrets Part I does not know of: the environment's (used or not), the URL's."""
    env, headers = os.environ.get, os.environ.get("BANTAM_HEADERS")   # (cfg["run"]: main's)
    cfg["run"]["secrets"] = [env("BANTAM_API_KEY", ""), env("OPENAI_API_KEY", "")] + list(
        parse_value("headers", headers, "BANTAM_HEADERS").values() if headers else []) + \
        url_secrets(env("BANTAM_ENDPOINT", "")) + url_secrets(cfg["endpoint"])

def layered(cfg, key):
    """key's (value, where) by the trust rules; a folder value they set aside: to "untrusted"."""
    trusted, unused = cfg["sources"]["trusted"], cfg["sources"]["untrusted"]
    found = [(kind, parse_value(key, raw, where) if isinstance(raw, str) else raw, where)
             for kind, layer in cfg["sources"]["layers"]
             for raw, where in [layer.get(key, ("", ""))]
             if raw not in ("", "-")]   # blank or '-' defers to the next layer
    own = [f for f in found if f[0] != "folder"]
    users = own[0][1] if own else DEFAULTS[key]
    unused.pop(key, None)
    if found and found[0][0] == "folder" and not trusted and (key in NEEDS_TRUST or trusted
            is False and key not in STRICTER | TIGHTEN_ONLY | {"deny"} or key in
            TIGHTEN_ONLY and looser(cfg, key, found[0][1], users)):
        if found[0][1] != users:
            unused[key] = found[0][1:]
        found = own
    if key in STRICTER and found and found[0][0] != "flag":   # a flag: the user's choice
        found.sort(key=lambda f: strictness(key, f[1]), reverse=True)
    if key == "deny" and found:
        return ",".join(f[1] for f in found), " + ".join(f[2] for f in found)
    return found[0][1:] if found else (DEFAULTS[key], "default")

def settle(cfg, trust=None):
    """cfg's folder keys, deny, STRICTER re-taken by trust (None: as remembered; False: a no)."""
    sources, layers = cfg["sources"], cfg["sources"]["layers"]
    mine, facts = dict(layers).get("folder"), folder_memory().get(os.getcwd(), {})
    prints = {key: value_print(raw) for key, (raw, _) in (mine or {}).items()
              if (key in NEEDS_TRUST or key in TIGHTEN_ONLY) and raw not in ("", "-")}
    said = facts.get("trusted")   # True: a yes to the values it saw; another value: a no
    seen = (facts.get("fingerprint") or {}) if said is True else prints
    changed = sorted(key for key in prints if seen.get(key) != prints[key])   # none is then used
    if trust is None and (said not in (None, True) or os.environ.get("BANTAM_TRUST") == "0"):
        trust = False   # a no (remembered, --no-trust): only what tightens is the folder's
    trusted = trust if trust is not None else (os.environ.get("BANTAM_TRUST") == "1" or (
        said is True and not changed) or None)   # True, None (not trusted) or False (a no)
    sources.update(trusted=trusted, untrusted={}, fingerprint=prints, changed=changed,
                   folder_config=mine is not None and os.path.abspath("model.cfg") or None)
    for key in [key for key in DEFAULTS if key in (mine or ()) or key in STRICTER | {"deny"}]:
        cfg[key], sources[key] = layered(cfg, key)
    for kind, layer in layers:
        if kind == "own" or kind == "folder" and trusted:
            check_private(layer)
    sources.setdefault("base_system_prompt", cfg["system_prompt"])
    add_prompt_extras(cfg)
    settle_secrets(cfg)
    return cfg

def check_private(layer):
    """As ssh does: a config file holding a secret that others may read or swap is refused."""
    held = [where.rpartition(":")[0] for key, (raw, where) in layer.items() if raw not in (
        "", "-") and (key in SECRET_KEYS or key == "endpoint" and any(url_secrets(raw)))]
    for path, mask, fix in [(held[0], 0o077, "600"), (os.path.dirname(os.path.abspath(
            held[0])), 0o022, "go-w")] if held else ():
        if os.stat(path).st_mode & mask:
            raise ConfigError("%s holds a secret and others can read or replace it: chmod %s %s"
                              % (held[0], fix, path))

def folder_file(name):
    """The path of the file name here; None if none, or a symlink out of the folder (said)."""
    path = os.path.abspath(name)
    if not os.path.isfile(path):
        return None
    real, here = os.path.realpath(path), os.path.realpath(os.getcwd()).rstrip("/") + "/"
    if real.startswith(here) and not real.startswith(os.path.realpath(bantam_home()) + "/"):
        return path
    note({}, "warning: %s is a symlink that leads outside this folder (to %s): not read"
         % (path, real), "warning")
    return None

def add_prompt_extras(cfg):
    """Set cfg["system_prompt"]: the base one, this session's tools and folders, AGENTS.md."""
    enabled, sources = cfg["tools"].split(","), cfg["sources"]
    extras = ["You also have write (a whole file at a time)."] if "write" in enabled else []
    extras += ["In this session %s is not available." % name   # (the base prompt names both)
               for name in ("shell_exec", "run_subagent") if name not in enabled]
    extras += [text % cfg[key] for key, text in (
        ("bantam_tools_dir", "Extra shell tools can be found at %s"),
        ("bantam_skills_dir", "Skills may be discovered and invoked from %s")) if cfg[key]]
    path = cfg["project_instructions"] and folder_file("AGENTS.md")
    sources["project_instructions_file"] = None
    try:
        if path:
            with open(path, encoding="utf-8-sig", errors="replace") as f:
                text = clean_for_model(f.read(65536).strip())   # every request carries it
            extras.append("Project instructions (AGENTS.md of %s):\n\n%s" % (os.getcwd(), text))
            sources["project_instructions_file"] = path
    except OSError as e:
        note(cfg, "warning: cannot read %s: %s" % (path, e.strerror), "warning")
    base = clean_for_model(sources["base_system_prompt"])   # (the folder's system.txt too)
    cfg["system_prompt"] = "\n\n".join([base.rstrip("\n")] + extras) + "\n" if extras else base

def folder_memory():
    """{folder: {"trusted": bool, "fingerprint": {key: hash}}} ({} if none)."""
    try:
        with open(bantam_home("folders.json"), encoding="utf-8") as f:
            memory = json.load(f)
        return memory if isinstance(memory, dict) else {}
    except (OSError, ValueError):
        return {}

def value_print(raw):
    """The fingerprint of a value as the file writes it (a hash: no key is kept in clear)."""
    import hashlib
    return hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()

def remember_folder(**facts):
    """Remember this folder's facts, locked: runs sharing a HOME add up."""
    import fcntl
    path = bantam_home("folders.json")
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)   # (let go when closed)
            memory = folder_memory()
            memory[os.getcwd()] = facts
            write_private_file(path, json.dumps(memory, indent=1))
    except OSError as e:
        note({}, "warning: cannot remember this folder's settings: %s" % e, "warning")

def trust_folder(cfg, args, interactive, reload):
    """cfg as this folder may steer it (--trust, a yes; a no: yours); reload(trust) re-settles."""
    sources = cfg["sources"]
    changes, changed = sources["untrusted"], sources["changed"]   # (changed: since a yes)
    if not changes:
        return cfg
    what = ", ".join("%s=%s (%s)" % (key, shown_untrusted(key, value), NEEDS_TRUST.get(
        key, "looser than yours")) for key, (value, _) in changes.items())
    since = "changed since you trusted it (%s)" % ", ".join(changed) if changed else ""
    if args.trust:
        remember_folder(trusted=True, fingerprint=sources["fingerprint"])
        return reload(True)
    asking = sources["trusted"] is None and (since or any(k in NEEDS_TRUST for k in changes))
    if asking and not interactive and not since:   # a remembered answer holds in batch mode
        raise ConfigError("this folder's model.cfg would change %s: trust it with bantam "
                          "--trust, BANTAM_TRUST=1 or a yes in the REPL" % what)
    if asking and interactive:
        if read_answer("This folder's model.cfg %swould change %s. Trust this folder? [y/N] " % (
                since and since + ": it ", what)).strip().lower() in ("y", "yes"):
            remember_folder(trusted=True, fingerprint=sources["fingerprint"])
            return reload(True)
        remember_folder(trusted=False)
        cfg = reload(False)
    why = "not used: this folder's model.cfg " + (
        since or "would loosen %s; it is not trusted" % what) if sources["trusted"] is not False \
        else "this folder is not trusted: your own settings only"
    cfg["sources"]["trust_note"] = "[%s (bantam --trust to trust it)]" % why
    return cfg

def remember_own_edit(cfg, path, key):
    """/cfg wrote key into this trusted folder's model.cfg: the user's value joins the yes."""
    facts = folder_memory().get(os.getcwd(), {})   # (a key trust does not cover: never read)
    if path == cfg["sources"]["folder_config"] and facts.get("trusted") is True:
        remember_folder(trusted=True, fingerprint=dict(facts.get("fingerprint") or {}, **{
            key: value_print(read_key_values(path)[key][0])}))

def shown_untrusted(key, value):
    """A value an untrusted folder sets, shown safely: secrets as ***, invisibles as <U+202E>."""
    secrets = url_secrets(str(value)) if key == "endpoint" else []
    return "***" if key in SECRET_KEYS else re.sub(INVISIBLE, lambda m: "<U+%04X>" % ord(
        m.group()), terminal_safe(redact({"run": {"secrets": secrets}}, str(value))))

def hide_secrets(cfg):
    """Linux: not dumpable (a key set later too), *** over secrets in /proc/self's environ."""
    secrets = [s.encode("utf-8", "surrogateescape") for s in secrets_of(cfg)]
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE, 0 (no prctl: not Linux)
        with open("/proc/self/stat", "rb") as f:   # fields 48 and 51: arg_start, env_end
            start, end = [int(n) for n in f.read().rpartition(b")")[2].split()[45:49:3]]
        block = ctypes.string_at(start, end - start)
        for found in re.finditer(b"|".join(map(re.escape, secrets)), block) if secrets else ():
            ctypes.memset(start + found.start(), ord("*"), found.end() - found.start())
    except (OSError, ValueError, AttributeError, TypeError):
        pass

# Query parameters that carry a credential (api-key, X-Amz-Signature, code but not country_code)
CREDENTIAL_PARAMETER = re.compile(r"(?i)key|token|secret|pass|sig|auth|credential|jwt|^(code|pwd)$")

def url_secrets(url):
    """A URL's credentials: its password (else user name: TOKEN@host), its query's keys."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
    except ValueError:   # "http://[::1": not a URL a request could go to
        return []
    secret = parts.password or parts.username or ""   # one too short alone: with its user
    return [secret if len(secret) >= 4 else "//" * bool(secret) + parts.netloc.rpartition(
        "@")[0]] + [value for name, _, value in (
        p.partition("=") for p in parts.query.split("&")) if CREDENTIAL_PARAMETER.search(name)]

def withheld_variables(cfg):
    """The variables kept from commands: bantam's, a secret's, shell_env_exclude's not kept."""
    import fnmatch
    own = ("BANTAM_API_KEY", "OPENAI_API_KEY", "BANTAM_HEADERS")   # bantam's secret variables
    secrets, keep = secrets_of(cfg), {n.strip() for n in cfg.get("shell_env_keep", "").split(",")}
    patterns = [p.strip().upper() for p in cfg.get("shell_env_exclude", "").split(",")]
    return sorted(name for name, value in os.environ.items() if name in own or (
                  patterns != ["NONE"] and name not in keep and any(
                      p and fnmatch.fnmatchcase(name.upper(), p) for p in patterns))
                  or any(value == s or (len(s) >= 12 and s in value) for s in secrets)
                  or set(secrets).intersection(url_secrets(value)))

def scrub_environment(cfg, options):
    """The spawn hook of secrets: no variable of withheld_variables in a command's environment."""
    for name in withheld_variables(cfg):
        options["env"].pop(name, None)
    return options

def command_env(cfg):
    """The environment of the user's own !commands, scrubbed as the model's are."""
    return scrub_environment(cfg, {"env": dict(os.environ)})["env"]

INVISIBLE = ("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
             "\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
             "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]")   # what hides text: bidi, tags...

def clean_for_model(text):
    """Text without invisible characters (prompt injection), odd spaces made plain."""
    return re.sub("[\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]", " ",
                  re.sub(INVISIBLE, "", text))

def json_headers(raw, where):
    """The headers key: a JSON object of strings (else a ValueError, said by parse_value)."""
    value = json.loads(raw)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError("not a JSON object of strings")
    return value

HOOKS["spawn"].append(scrub_environment)
PARSERS.update(headers=json_headers)


# ----------------------------------------------------------------------------------------
# The sandbox: Landlock (sandbox) and seccomp (sandbox_network), between fork and exec
# ----------------------------------------------------------------------------------------

# Landlock's rights (linux/landlock.h): EXECUTE 1, WRITE_FILE 2, READ_FILE 4, READ_DIR 8...
# A ruleset denies what its ABI knows, unless a rule allows it; TCP BIND 1, CONNECT 2 (ABI 4).
ALL_RIGHTS = (0, 1 << 13, 1 << 14, 1 << 15, 1 << 15, 1 << 16)   # by ABI, minus 1: every right
FILE_RIGHTS = 1 | 2 | 4 | 1 << 14 | 1 << 15    # the rights a rule on a file (not a folder) may give
DEVICE_RIGHTS = 1 << 6 | 1 << 11   # MAKE_CHAR, MAKE_BLOCK: never given (a node is a way out)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 53), "aarch64": (0xC00000B7, 198, 199)}   # arch,
#   socket, socketpair

def sandbox_of(cfg):
    """(mode, closed): 'workspace' or 'read-only' ('' when off), and whether sockets are closed."""
    return cfg.get("sandbox", "off").replace("off", ""), not cfg.get("sandbox_network", True)

def libc(name, *args):
    """libc's function name called with args (ints as C longs); OSError naming it if it fails."""
    import ctypes
    result = getattr(ctypes.CDLL(None, use_errno=True), name)(
        *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        raise OSError(ctypes.get_errno(), "%s: %s" % (name, os.strerror(ctypes.get_errno())))
    return result

def sandbox_roots(cfg):
    """(the folders commands may write in, the paths hidden from them: ~/.bantam, the history)."""
    roots = [os.getcwd()] * (cfg["sandbox"] == "workspace") + [os.environ.get("TMPDIR") or "/tmp"]
    roots = [os.path.realpath(p) for p in roots + ["/dev/shm"]]
    return [p for p in roots if os.path.isdir(p)], [os.path.realpath(bantam_home()),
                                                    os.path.realpath(os.path.expanduser(HISTORY))]

def within(path, folders):
    """Is path one of folders, or beneath one?"""
    return any((path + "/").startswith(folder.rstrip("/") + "/") for folder in folders)

def sandbox_ruleset(cfg):
    """The Landlock ruleset fd (close-on-exec) of cfg's sandbox, None without one; ConfigError."""
    mode, closed = sandbox_of(cfg)
    if not mode and not closed:
        return None
    try:   # LANDLOCK_CREATE_RULESET_VERSION; ENOSYS: before Linux 5.13, EOPNOTSUPP: not in lsm=
        abi, why = (libc("syscall", 444, None, 0, 1), "") if sys.platform == "linux" else (
            0, "not on Linux")
    except OSError as e:
        abi, why = 0, "this kernel has no Landlock (%s)" % os.strerror(e.errno)
    if closed and abi and (abi < 4 or os.uname().machine not in SECCOMP_ARCH):
        why = "it needs Landlock ABI 4 (Linux 6.7) on x86_64 or aarch64; this is ABI %d" % abi
    if why:   # never a command run with less than was asked for
        raise ConfigError("sandbox=%s%s: %s; sandbox=off runs without" % (
            mode or "off", ", sandbox_network=false" * closed, why))
    import struct
    rights = ALL_RIGHTS[min(abi, 5)] - 1 if mode else 0
    scoped = 3 if abi >= 6 else 0   # abstract Unix sockets and signals out of the sandbox
    attr = struct.pack("QQQ", rights, 3 * closed, scoped)   # fs, net, scoped (older ABIs: 0)
    ruleset = libc("syscall", 444, attr, len(attr), 0)   # (444: create_ruleset, 445: add_rule)
    add = lambda fd, allowed: libc("syscall", 445, ruleset, 1, struct.pack("=Qi", allowed, fd), 0)
    try:   # LANDLOCK_RULE_PATH_BENEATH {allowed_access, parent_fd}
        if mode:
            roots, hidden = sandbox_roots(cfg)
            allow(add, "/", 8, [])                  # READ_DIR: every folder can be listed,
            allow(add, "/", 1 | 4, hidden)          # EXECUTE, READ_FILE: all but the hidden
            for path in roots + list(DEVICES):
                allow(add, path, rights & ~DEVICE_RIGHTS, hidden)
    except OSError as e:   # (the ruleset's fd is let go with the child or the run)
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
    mode = os.fstat(fd).st_mode   # a symlink's target is allowed where it lies, or not at all
    if not stat.S_ISLNK(mode):
        add(fd, rights if stat.S_ISDIR(mode) else rights & FILE_RIGHTS)
    os.close(fd)   # (an error above ends the ruleset anyway)

def socket_filter():
    """(a seccomp program failing socket(), io_uring_setup(), a datagram socketpair(); fprog)."""
    import ctypes
    import struct
    arch, socket_call, pair_call = SECCOMP_ARCH[os.uname().machine]
    deny, allowed = 0x50000 | 13, 0x7FFF0000   # SECCOMP_RET_ERRNO | EACCES, SECCOMP_RET_ALLOW
    steps = [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, deny),   # another ABI's calls: no
             (0x20, 0, 0, 0), (0x35, 8, 0, 0x40000000),                  # x32's calls: no
             (0x15, 7, 0, socket_call), (0x15, 6, 0, 425),               # socket, io_uring_setup
             (0x15, 1, 0, pair_call), (0x06, 0, 0, allowed),
             (0x20, 0, 0, 24), (0x54, 0, 0, 0xF), (0x15, 0, 1, 1),       # its type: SOCK_STREAM
             (0x06, 0, 0, allowed), (0x06, 0, 0, deny)]
    code = b"".join(struct.pack("HBBI", *step) for step in steps)   # struct sock_filter
    program = (ctypes.c_char * len(code)).from_buffer_copy(code)
    return program, struct.pack("HP", len(steps), ctypes.addressof(program))   # struct sock_fprog

def check_sandbox(cfg, start=False):
    """Is cfg's sandbox on? ConfigError if it cannot be had; at start, said if Landlock's alone."""
    ruleset, mode = sandbox_ruleset(cfg), sandbox_of(cfg)[0]
    if ruleset is None:
        return False
    os.close(ruleset)
    if mode and "mounts" not in LEARNED:
        LEARNED["mounts"] = mounts_here(cfg)   # (a fact of this machine: learned once)
    if start and mode and not LEARNED["mounts"]:
        note(cfg, "sandbox=%s: Landlock alone (no mount namespace here): modes, owners, times and "
             "extended attributes outside the folder are not protected" % mode, "warning")
    return True

def mounts_here(cfg):
    """Can a child make its mounts read-only (private_mounts)?"""
    pid = os.fork()
    if not pid:   # the child: tried, and said by its exit status
        try:
            private_mounts(cfg)
            os._exit(0)
        finally:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0

def private_mounts(cfg):
    """In the child: mounts read-only but the writable folders' (Landlock allows chmod); OSError."""
    uid, gid = os.getuid(), os.getgid()   # (a user namespace, unless root)
    libc("unshare", 0x20000 | (0x10000000 if uid else 0))   # CLONE_NEWNS, CLONE_NEWUSER
    if uid:   # (bantam is not dumpable: its /proc files would be root's; exec ends this)
        libc("prctl", 4, 1, 0, 0, 0)
    for name, text in [("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)),
                       ("gid_map", "%d %d 1" % (gid, gid))] if uid else []:
        with open("/proc/self/" + name, "w") as f:   # (the same ids: no root inside)
            f.write(text)
    libc("mount", None, b"/", None, 1 << 14 | 1 << 18, None)   # MS_REC | MS_PRIVATE: not shared
    roots, hidden = sandbox_roots(cfg)
    for path in roots + [h for h in hidden if within(h, roots) and os.path.exists(h)]:
        path = os.fsencode(path)   # MS_BIND | MS_REC: a mount of its own (~/.bantam: read-only)
        libc("mount", path, path, None, 1 << 12 | 1 << 14, None)
    os.chdir(os.getcwd())   # the working folder through its new mount
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        points = [line.split()[4] for line in f]
    read_only = (1).to_bytes(8, sys.byteorder) + bytes(24)   # mount_attr: attr_set RDONLY
    for point in points:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
        try:   # mount_setattr(AT_FDCWD, point, 0, ...): its other flags stay as they were
            if not within(point, roots) or within(point, hidden):
                libc("syscall", 442, -100, os.fsencode(point), 0, read_only, len(read_only))
        except OSError as e:   # (one we cannot reach is out of its command's reach too)
            if e.errno not in (13, 2):   # EACCES, ENOENT
                raise

def sandboxed(cfg, options):
    """The spawn hook of the sandbox: confined in the child after the fork (no other thread)."""
    if check_sandbox(cfg):   # one switched on mid-run that cannot be had: the command is refused
        options["preexec_fn"] = lambda: confine(cfg)
    return options

def confine(cfg):
    """In the child, before exec: cfg's sandbox for good, or the command does not run (126)."""
    try:
        if sandbox_of(cfg)[0] and LEARNED["mounts"]:
            private_mounts(cfg)
        ruleset, seccomp = sandbox_ruleset(cfg), socket_filter() if sandbox_of(cfg)[1] else None
        if os.geteuid() == 0:   # every capability but 0-5: CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH,
            with open("/proc/sys/kernel/cap_last_cap") as f:   # FOWNER, FSETID, KILL
                for capability in range(6, int(f.read()) + 1):   # PR_CAPBSET_DROP
                    libc("prctl", 24, capability, 0, 0, 0)   # (failing: the command is not run)
        libc("prctl", 38, 1, 0, 0, 0)   # PR_SET_NO_NEW_PRIVS: nothing gained through set-uid
        libc("syscall", 446, ruleset, 0)   # landlock_restrict_self
        if seccomp:
            libc("prctl", 22, 2, seccomp[1], 0, 0)   # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    except Exception:
        os.write(2, b"bantam: the sandbox could not be enforced: the command did not run\n")
        os._exit(126)

def sandbox_refusal(cfg, args):
    """Why the sandbox keeps the write tool (TOOLS asks first) from args' path, or ''."""
    mode, path = sandbox_of(cfg)[0], args.get("filePath")
    if not mode or not isinstance(path, str):   # (the tool says what is wrong with its arguments)
        return ""
    roots, hidden = sandbox_roots(cfg)
    path = os.path.realpath(os.path.expanduser(path))
    why = "error: sandbox=%s: writes outside %s are refused: %s" % (mode, ", ".join(roots), path)
    return why if within(path, hidden) or not within(path, roots) else ""

HOOKS["spawn"].append(sandboxed)


# ----------------------------------------------------------------------------------------
# The file tool: write (a whole file) and the diff it would make; other agents' tool names,
# the tools key; hidden text kept from the model
# ----------------------------------------------------------------------------------------

WRITE_SCHEMA = {
    "description": "Write a file: the whole file is replaced by content (it and its folders are "
                   "created if missing).",
    "parameters": {"type": "object", "required": ["filePath", "content"], "properties": {
        "filePath": {"type": "string", "description": "The file to write."},
        "content": {"type": "string", "description": "The text to write (may be empty)."}}}}

def path_argument(args):
    """The filePath argument with ~ expanded; ValueError when missing."""
    path = args.get("filePath")
    if not isinstance(path, str) or not path.strip():
        raise ValueError("filePath must be a non-empty string")
    return os.path.expanduser(path)

def write_tool(cfg, args):
    """The write tool: replace a whole file with content (it and its folders made if missing)."""
    try:
        path = path_argument(args)
        content = args.get("content")
        if not isinstance(content, str):
            raise ValueError("content must be a string (it may be empty)")
        if set(args) - {"filePath", "content"}:   # (a splice's lineOffset: the rest kept)
            raise ValueError("write replaces a whole file: give only filePath and content")
        data = content.encode("utf-8", "replace")   # "replace": a lone surrogate from JSON
        target = os.path.realpath(os.path.abspath(path))   # through a symlink, not replacing it
        if within(os.path.abspath(path), [os.getcwd()]) and not within(target, [os.getcwd()]):
            return "error: %s is a symlink to outside the working folder: %s" % (path, target)
        existed = os.path.exists(target)
        if existed and not (stat.S_ISREG(os.stat(target).st_mode) and os.access(target, os.W_OK)):
            return "error: %s is not a regular file, or read-only: write does not replace it" % path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        umask = os.umask(0o077)
        os.umask(umask)
        old = os.stat(target) if existed else None
        write_private_file(target, content)   # a new file renamed over it: never a torn one
        os.chmod(target, stat.S_IMODE(old.st_mode) if old else 0o666 & ~umask)
        if old and os.getuid() == 0:   # (root writing another's file: still theirs)
            os.chown(target, old.st_uid, old.st_gid)
        return "wrote %d bytes to %s (%d lines%s)" % (
            len(data), path, len(data.splitlines()), "" if existed else ", new file")
    except ValueError as e:
        return "error: write: %s" % e
    except OSError as e:
        return "error: cannot write %s: %s" % (path, e.strerror or e)

def write_preview(path, args, reason):
    """What a write would do (its question, the terminal view): the path (why asked), a diff."""
    import difflib
    try:
        old = read_text(path, "it").splitlines() if os.path.getsize(path) < 1e6 else []
    except (OSError, ConfigError):
        old = []
    new = str(args.get("content", "")).splitlines()
    lines = [line[:200] for line in difflib.unified_diff(old, new, lineterm="", n=1)][2:]
    more = ["... %d more lines" % (len(lines) - 12)] if len(lines) > 12 else []
    return "\n".join(["write " + path + (" (%s)" % reason if reason else "")] + lines[:12] + more)

TOOL_ALIASES = {"bash": "shell_exec", "write_file": "write"}   # other agents' names models call

def check_tool_names(raw, where):
    """The tools key: comma-separated names of TOOLS (or their other names), normalized."""
    offered = [name for name in TOOLS if name not in TOOL_ALIASES]
    names = [TOOL_ALIASES.get(n.strip(), n.strip()) for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in offered]
    if unknown:
        raise ConfigError("%s: tools: unknown tool %r (the tools: %s)" % (
            where, unknown[0], ", ".join(offered)))
    return ",".join(dict.fromkeys(names))

def offered_tools(cfg, messages, body, error=None):
    """The request hook: of TOOLS, those the tools key names are offered to the model."""
    if error is None and "tools" in body:
        body["tools"] = [tool for tool in body["tools"]
                         if tool["function"]["name"] in cfg["tools"].split(",")]
    return body if error is None else None

def unoffered(cfg, call, args, result=None):
    """The tool hook: a call of a tool the tools key does not name (by any name) is unknown."""
    offered, name = cfg["tools"].split(","), call["function"]["name"]
    if result is None and isinstance(args, dict) and TOOL_ALIASES.get(name, name) not in offered:
        return "error: unknown tool %r; the tools are %s" % (name, ", ".join(offered))
    return args if result is None else result

def overwritten(text):
    """Text as a terminal leaves it: of a line redrawn after a \\r, its last state."""
    return "\n".join(line[line.rstrip("\r").rfind("\r") + 1:] for line in text.split("\n"))

def unhidden(cfg, call, args, result=None):
    """The tool hook: no hidden characters in a result the model reads; a line's \\r undone."""
    return args if result is None else clean_for_model(overwritten(result))

def unhidden_arguments(cfg, reply, delta):
    """The delta hook: at the reply's end, no hidden characters in its calls' arguments."""
    for call in reply["calls"].values() if delta is None else ():   # (those sent: joined)
        if isinstance(call["function"]["arguments"], str):
            call["function"]["arguments"] = clean_for_model(call["function"]["arguments"])
    return delta

TOOLS.update(write=(WRITE_SCHEMA, lambda cfg, args: sandbox_refusal(cfg, args) or
                    write_tool(cfg, args)))
TOOLS.update({alias: TOOLS[name] for alias, name in TOOL_ALIASES.items()})
PARSERS.update(tools=check_tool_names, endpoint=normal_endpoint)
HOOKS["request"].append(offered_tools)
HOOKS["tool"] += [unoffered, unhidden]
HOOKS["delta"].append(unhidden_arguments)


# ----------------------------------------------------------------------------------------
# Approvals and budgets: deny, allow, approve (the tool hook); budgets (the step hook)
# ----------------------------------------------------------------------------------------

FINAL_PROMPT = ("You have reached a limit (%s) and cannot call tools any more. Give your best "
                "final answer from what you have found, and say briefly what is left undone.")
BUDGETS = {   # key: how its use is said, what the turn used (t: its tally, n: repeats in a row)
    "max_turn_tokens": ("%s tokens this turn", lambda t, n: t["tokens"]),
    "max_turn_seconds": ("%s s this turn", lambda t, n: round(time.monotonic() - t["started"], 1)),
    "max_cost": ("$%s this turn", lambda t, n: round(t["cost"], 6)),
    "max_identical_calls": ("the same tool call %s times in a row", lambda t, n: n),
    "max_al_iterations": ("%s model calls", None)}   # (counted by the run: its steps)

def leash(cfg, call, args, result=None):
    """The tool hook: the turn's time limit, then approval; the user's edit first."""
    if result is not None or isinstance(args, str):   # (after it ran; or refused already)
        return args if result is None else cfg["run"].pop("told", "") + result
    if time_up(cfg):   # a command may run only as long as the turn has left (shell_in_time)
        return "error: not run: " + TIME_UP % cfg["max_turn_seconds"]
    name = call["function"]["name"]
    return approval(cfg, call["id"], TOOL_ALIASES.get(name, name), args)

def budgets(cfg, messages, calls):
    """The step hook: a used-up budget stops the loop (max_al_iterations: at the last step)."""
    if isinstance(calls, BaseException):   # (a budget's error; or Ctrl+C, a signal: none)
        return getattr(calls, "kind", "") == "budget" and final_answer(cfg, messages, *time_up(cfg))
    turn, mine = turn_tally(cfg), own(cfg)
    mine["steps"] = mine.get("steps", 0) + 1
    last, count = mine.get("streak", (None, 0))
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    for call in calls:   # a repeat: the same call and result
        key = (call["function"]["name"], call["function"]["arguments"], results.get(call["id"]))
        last, count = key, (count + 1 if key == last else 1)
    mine["streak"] = (last, count)
    spent = next(((key, used(turn, count)) for key, (_, used) in BUDGETS.items()
                  if used and cfg[key] and used(turn, count) >= cfg[key]), None) or (
        mine["steps"] >= cfg["max_al_iterations"] and ("max_al_iterations", mine["steps"]))
    return spent and final_answer(cfg, messages, *spent)

def final_answer(cfg, messages, key, used):
    """Say which budget (key) stopped the loop; ask once, without tools, for a final answer."""
    emit(cfg, "budget_stop", reason=key, limit=cfg[key], used=used)
    turn = turn_tally(cfg)
    turn["repairs"] += 1   # (max_repair_calls: the turn's final-answer calls)
    asking, words = turn["repairs"] <= cfg["max_repair_calls"], BUDGETS[key][0] % used
    if used == 1:   # "1 model call"
        words = words.replace("calls", "call").replace("times", "time")
    note(cfg, "[stopped: %s (%s=%s)%s]" % (
        words, key, cfg[key], "; asking for a final answer" if asking else ""), "warning")
    left = turn["started"] + (cfg["max_turn_seconds"] or 1e9) - time.monotonic()
    wait = min(cfg["final_answer_timeout"], max(left, 5.0))   # the call's time (5 s: none left)
    quick = dict(cfg, backoff=[], first_byte_timeout=min(cfg["first_byte_timeout"], wait),
                 timeout=min(cfg["timeout"], wait),
                 max_turn_seconds=time.monotonic() + wait - turn["started"])   # (time_up ends it)
    try:   # (the last line asks for it: sent, not stored)
        asked = append_user(list(messages), FINAL_PROMPT % words)
        reply = chat(quick, asked, tools=False) if asking else {}
        reply.pop("tool_calls", None)   # nothing runs any more
        if reply.get("content"):
            add_message(cfg, messages, reply)
    except ApiError as e:
        note(cfg, "[no final answer: %s]" % e)
    return "budget"

def approval(cfg, call_id, name, args):
    """The args to run a tool call with, or its refusal (a text); an approval event for each."""
    command = args.get("command") if name == "shell_exec" else None
    path = args.get("filePath") if name == "write" else None
    if not (isinstance(command, str) or isinstance(path, str) and path.strip()):
        return args   # (nothing to decide, or the tool says what is wrong)
    path = path and os.path.abspath(os.path.expanduser(path))
    decision, rule, reason = decide_file(cfg, path) if path else decide(cfg, command.strip())
    edited = None
    if decision == "ask":
        if path:
            note(cfg, write_preview(path, args, reason), "warning")
        (decision, reason, edited), rule = user_decision(cfg, command), "asked"
    emit(cfg, "approval", id=call_id, tool=name,
         command=None if path else redact(cfg, command), path=path, decision=decision,
         rule=rule, reason=reason, edited=redact(cfg, edited) if edited else None)
    if decision == "always":   # as approve() looks it up
        cfg["run"]["approved"].add(name + ":" + (path or command.strip()))
    if decision != "refuse":   # (an edit: the command the user wrote)
        return dict(args, command=edited) if edited else args
    what = "command" if name == "shell_exec" else name   # who refused it and why, for the model
    if rule == "asked":
        return "[the user did not let this %s run%s]" % (what, ": " + reason if reason else "")
    text = {"no terminal": "this %s needs the user's approval, and no one is there to ask" % what,
            ".git": "write keeps out of .git/, where git runs code from (allow=write:PATH lets it)",
            "approve=deny": "approve=deny refuses this %s" % what}.get(rule)
    text = text or "it matches the pattern %r of bantam's deny setting" % rule.partition(" ")[2]
    return "[not run: %s%s]" % (text, " (%s)" % reason if reason else "")

def approve(cfg, key, why, outside=False):
    """After deny and allow: an a(lways) answer, then approve: (decision, rule, why unless run)."""
    if key in cfg["run"].setdefault("approved", set()):
        return "run", "always", None
    setting = "ask" if outside and cfg["approve"] == "auto" else cfg["approve"]
    if setting == "ask" and not cfg["run"].get("approver"):
        note_once(cfg, "no terminal", "[approve=%s, but there is no terminal to ask: what needs "
                  "asking is refused]" % cfg["approve"], "warning")
        return "refuse", "no terminal", why
    decision = {"auto": "run", "ask": "ask", "deny": "refuse"}[setting]
    return decision, "approve=" + cfg["approve"], None if decision == "run" else why

def patterns(cfg, key, paths=False):
    """The deny or allow patterns for commands, or (paths) write's: (text, its absolute path)."""
    found = [p.strip() for p in cfg[key].split(",") if p.strip()]
    return [(p, os.path.abspath(os.path.expanduser(p[6:]))) if paths else p
            for p in found if p.startswith("write:") == paths]

def decide(cfg, command):
    """(decision, rule, reason) for a command line: deny, then allow, then approve."""
    split, allow = shell_commands(command), patterns(cfg, "allow")
    for pattern, words in [(p, w) for p in patterns(cfg, "deny") for w in split.found]:
        why = pattern_hit(words, pattern) or re.search(COMPUTED, words[0]) and (
            "the program is computed: " + words[0])   # it may be any: it matches every pattern
        if why:
            return "refuse", "deny " + pattern, why if why != command else None
    hits = {" ".join(w): next((p for p in allow if pattern_hit(w, p)), None) for w in split.found}
    why = next(("%s matches no allow pattern" % part for part, p in hits.items() if not p), None)
    why = why or allow_bar(cfg, split) or (split.unplain + [None])[0]
    if allow and split.found and not why:
        return "run", "allow " + ", ".join(dict.fromkeys(hits.values())), None
    return approve(cfg, "shell_exec:" + command, why if allow else None)

def pattern_hit(words, pattern):
    """Why a simple command (or [a path]) matches a pattern (`rm *` also a bare rm: xargs rm)."""
    import fnmatch
    forms = {" ".join(words): " ".join(words)}
    if words[0] in ("unlink", "shred", "rmdir") or words[0] == "find" and "-delete" in words:
        forms[" ".join(["rm"] + words[1:])] = "%s deletes files, as rm does" % words[0]
    return next((why for text, why in forms.items() if fnmatch.fnmatchcase(text, pattern)
                 or fnmatch.fnmatchcase(text + " ", pattern)), None)

def allow_bar(cfg, split):
    """Why allow may not run a line whose commands all match (a redirection), else None."""
    writable = [glob for _, glob in patterns(cfg, "allow", True)]
    for word in split.redirs:   # a write (not 2>&1, >&- or >/dev/null)
        m = re.match(r"\d*(?:&>>?|>>|>\||>&(?!\d*-?$)|>(?!&)|<>)(?!/dev/null$)(.*)", word, re.S)
        path = m and os.path.realpath(os.path.expanduser(m.group(1)))
        where = path and ("to a computed path" if re.search(r"[$`*?[{]|^~[^/]", m.group(1)) else
                          "outside the working folder" if not within(path, [os.getcwd()]) else
                          "into a .git folder" if ".git" in path.split(os.sep) else None)
        if where and (where[0] == "t" or not any(pattern_hit([path], g) for g in writable)):
            return "%s writes %s, which allow patterns do not cover" % (word, where)

ARITH = (r"\(\((?:P|\((?:P|\((?:P)*\))*\))*\)\)"   # ((...)) as bash finds it: else ( (...) )
         .replace("P", r"""[^()"'`\\]|"(?:[^"\\]|\\.)*"|'[^']*'|`(?:[^`\\]|\\.)*`|\\."""))
SHELL_TOKEN = (   # one token outside double quotes
    r"(?s)(?P<space>[ \t]+)|(?P<esc>\\.?)|(?P<sq>'[^']*'?)|(?P<dq>\")|(?P<sub>\$?" + ARITH
    + r"|\$\(|[<>]\(|`)|(?P<param>\$(?:\{[^}]*\}?|\[[^]]*\]?|'(?:[^'\\]|\\.)*'?|\w+|[@*#?$!-]))"
    r"|(?P<redir>\d*(?:&>>?|<<<|<<-|<<|<>|>>|>\||>&|<&|>|<))|(?P<op>&&|\|\||\|&|[;&|\n()])"
    r"|(?P<plain>[^\s\"'\\$`;&|()<>]+|.)")
QUOTED_TOKEN = (   # inside double quotes
    r"(?s)(?P<dq>\")|(?P<esc>\\[$`\"\\])|(?P<sub>\$" + ARITH + r"|\$\(|`)"
    r"|(?P<param>\$(?:\{[^}]*\}?|\[[^]]*\]?|\w+|[@*#?$!-]))|(?P<plain>[^\"\\$`]+|.)")
KEYWORDS = set("if then else elif fi do done while until for select case esac in function "
               "coproc ! { }".split())
COMPUTED = r"[$`*?]|\[.*\]|{.*[,.].*}"   # a program named so may be any: $X, $(..), r?, {rm,x}
SHELL_NAME = r"(ba|rba|da|z|k)?sh[\d.]*$"   # sh, bash5.2, rbash...
WRAPPERS = {   # program: its usual short options that take the next word as their value
    "env": "uCS", "command": "", "exec": "a", "nice": "n", "nohup": "", "timeout": "sk",
    "doas": "uC", "sudo": "ugpCDhrtUR", "xargs": "aEdILnPs", "time": "fo", "stdbuf": "ioe",
    "setsid": ""}

def shell_commands(text):
    """A line read plainly, not as a shell does: found (simple commands), unplain (why), redirs."""
    import types
    out = types.SimpleNamespace(found=[], unplain=[], redirs=[])
    shell_parse(text, 0, 0, out)
    return out

def shell_parse(text, i, depth, out, closer=False):
    """Read text[i:] into out, up to an unmatched ) when closer: the index after it."""
    if depth > 16:   # shells in shells, $( in $(: deeper is not read, but taken as computed
        out.found.append(["$(...)"])
        out.unplain.append("commands nested too deep")
        return len(text)
    if not closer:   # line continuations are gone (r\<newline>m is rm)
        text = re.sub(r"(?<!\\)((?:\\\\)*)\\\n", r"\1", text)
    words, redirs, heredocs, word, redir, quoted, dq, parens = [], [], [], None, None, 0, 0, 0
    while i <= len(text):   # the end of the text acts as one last operator
        m = re.compile(QUOTED_TOKEN if dq else SHELL_TOKEN).match(text, i)   # None at the end
        kind, token, start = m.lastgroup if m else "op", m.group() if m else "", i
        i = m.end() if m else i + 1
        if kind == "plain" and token[0] == "#" and word is None:   # a comment: a word's first #
            i = text.find("\n", start) % (len(text) + 1)
        elif kind in ("sq", "dq", "esc", "sub", "param", "plain"):   # a piece of a word
            if kind in ("sub", "param"):
                token, i = substitution(text, start, token, depth, out)
            elif kind == "sq" and not token[1:].endswith("'"):
                out.unplain.append("a lone quote")
            dq, quoted = dq != (kind == "dq"), quoted or kind in ("sq", "dq", "esc")
            if kind in ("sq", "dq", "esc"):   # (a '...' holds no ': its last one closes it)
                token = token[1:].rstrip("'") if kind == "sq" else token[1:]
            word = (word or "") + token
        else:
            if word is not None:   # a word ends: an argument, or what a redirection names
                (redirs if redir else words).append((redir or "") + word)
                if redir and redir.lstrip("0123456789") in ("<<", "<<-"):   # a heredoc
                    heredocs.append("(?m)^%s%s$" % ("\t*" * (redir[-1] == "-"), re.escape(word)))
                    if not quoted:   # (its $(...) and ` run: not read)
                        out.unplain.append("an unquoted heredoc")
                word, redir, quoted = None, None, False
            redir = token if kind == "redir" else redir
            if kind == "op":
                out.redirs.extend(redirs)
                simple_command(words, redirs, depth, out)
                words, redirs, redir = [], [], None
                if token == ")" and closer and not parens:
                    return i
                parens = max(0, parens + (token == "(") - (token == ")"))
                while heredocs and token == "\n":   # their bodies, one after another
                    end = re.compile(heredocs.pop(0)).search(text, i)
                    i = end.end() + 1 if end else len(text)
    if dq or closer:
        out.unplain.append("an unclosed quote" if dq else "an unclosed $(")
    return len(text)

def substitution(text, start, token, depth, out):
    """Read what the $(...), <(...), `...`, ((...)) or ${...} at start runs: (the word, its end)."""
    if token[-1] == "(":   # $( <( >(: up to its )
        out.unplain.append(token + "...)")
        end = shell_parse(text, start + 2, depth + 1, out, closer=True)
        return text[start:end], end
    if token == "`":
        m = re.compile(r"`((?:[^`\\]|\\.)*)`?", re.S).match(text, start)
        out.unplain.append("a backtick")
        shell_parse(re.sub(r"\\([`$\\])", r"\1", m.group(1)), 0, depth + 1, out)
        return m.group(), m.end()
    if not re.match(r"\(\([\d\s+*/%()-]*\)\)$", token.lstrip("$")):   # (its body not read)
        out.unplain.append(token + " is computed")
    return token, start + len(token)

def simple_command(words, redirs, depth, out):
    """Add a simple command to out.found, then what it runs as a wrapper or sh -c."""
    while words:
        if words[0] in KEYWORDS or re.match(r"\(\(|[A-Za-z_]\w*(\[[^]]*\])?\+?=", words[0]):
            if words[0][0] not in "{}(":   # (substitution() said why a ((...)) is not plain)
                out.unplain.append(words[0] + (" is a keyword" if words[0] in KEYWORDS
                                               else " sets a variable"))
            words = words[1:]
            continue
        program, args, n = words[0], words[1:], 0
        if not re.search(COMPUTED, program):   # (a computed one stays whole: $(echo /bin/rm))
            program = os.path.basename(program) or program
        out.found.append([program] + args + redirs)   # (quotes resolved, redirections last)
        if re.search(r"[*?{]|\[.", words[0]):   # a glob, [[, {a,b}
            out.unplain.append("the program is not a plain name: " + words[0])
        shell = re.match(SHELL_NAME, program)   # sh [options] -c STRING: STRING is read too
        takes = "oO" if shell else WRAPPERS.get(program, "")   # (-n 5: the 5 is no program)
        while n < len(args) and args[n][:1] in ("-", "+") and args[n] != "--":   # its options
            n += 2 if len(args[n]) == 2 and args[n][1] in takes else 1   # (env's - is -i)
        n, words = n + (args[n:n + 1] == ["--"]), []
        if shell and n < len(args) and any("c" in a for a in args[:n] if re.match(r"[-+]\w", a)):
            shell_parse(args[n], 0, depth + 1, out)
        if program in WRAPPERS:   # past its options (not their values) to what it runs
            out.unplain.append(program + " runs a command")
            words = args[n + (program == "timeout"):]

def user_decision(cfg, command):
    """Ask the user about a command, or (None) a write: (decision, reason, edited)."""
    ask = cfg["run"]["approver"]
    answer = (ask("Write? [y/N/a] " if command is None else "Run? [y/N/a/e] ", "") or "").strip()
    word, _, rest = answer.partition(" ")
    word = word.lower().rstrip(",:")
    if word in ("y", "yes", "a", "always"):
        return "run" if word[0] == "y" else "always", None, None
    if word in ("e", "edit") and command is not None:
        edited = ask("Command: ", command)
        if edited == command or not (edited or "").strip():   # unchanged: it runs; empty: not
            return ("run" if edited == command else "refuse"), None, None
        cfg["run"]["told"] = "[the user changed the command before it ran, to:\n%s]\n\n" % edited
        return "edit", None, edited   # (leash tells the model first)
    return "refuse", (rest.strip() if word in ("n", "no") else answer) or None, None

def decide_file(cfg, path):
    """(decision, rule, reason) for a write of an absolute path (write refuses symlinks out)."""
    real = os.path.realpath(path)
    for key, decision, names in (("deny", "refuse", [path, real]), ("allow", "run", [real])):
        for pattern, glob in patterns(cfg, key, True):   # allow: only where the path leads
            if any(pattern_hit([name], glob) for name in names):
                return decision, "%s %s" % (key, pattern), None
    if ".git" in (path + os.sep + real).split(os.sep):
        return "refuse", ".git", None
    outside = not (within(real, [os.getcwd()]) or within(path, [os.getcwd()]))
    return approve(cfg, "write:" + path, "outside the working folder" if outside else None, outside)

HOOKS["tool"].append(leash)
HOOKS["step"].append(budgets)


# ----------------------------------------------------------------------------------------
# The context window and compaction: the window asked or learned, the token line after a
# turn, a conversation that no longer fits compacted
# ----------------------------------------------------------------------------------------

def context_window(cfg, ask=True):
    """The window: the key's if set (an overflow's if less), else the server's, else the default."""
    key, window = (cfg["endpoint"], cfg["model"]), cfg["context_window"]
    if cfg["sources"].get("context_window", "default") != "default":
        return min(window, LEARNED["told"].get(key, window))
    if key not in LEARNED["windows"] and ask:
        LEARNED["windows"][key] = discover_window(cfg) or window
    return LEARNED["windows"].get(key, window)

def window_in_use(cfg):
    """The window in use and where it comes from, as /cfg context_window says it."""
    window, key = context_window(cfg), (cfg["endpoint"], cfg["model"])
    where = "an overflow error" if LEARNED["told"].get(key) == window else cfg["sources"][
        "context_window"] if window == cfg["context_window"] else "the server"
    return "[the window in use: %d, from %s]\n" % (window, where)

def discover_window(cfg):
    """The server's window: in the model's /models entry, /props, or /api/show; else None."""
    for ask in (lambda: [e for e in list_models(cfg, quiet=True) if e.get("id") == cfg["model"]],
                lambda: get_json(cfg, "/props", root=True),
                lambda: get_json(cfg, "/api/show", {"model": cfg["model"]}, root=True)):
        text = json.dumps(ask())   # (n_ctx_train is not the window: the "n_ctx" must end)
        for field in (r"num_ctx\s+", r"(?:context_length|context_window|max_model_len|n_ctx)\": "):
            match = re.search(field + r"([1-9]\d*)(?![\d.])", text)
            if match:
                return int(match.group(1))

# What overflow errors say of the window (OpenAI, vLLM, llama.cpp, Mistral, Anthropic...)
WINDOW_IN_ERROR = (
    r"(?:maximum (?:context|prompt) length is|context window of|context length of(?: only)?"
    r"|available context size \(|maximum number of tokens allowed \(|tokens? > |model token limit:"
    r"|\bn_ctx\"?:)\s*(\d+)|(\d+) maximum context length")

def learn_window(cfg, text):
    """Remember the window an overflow error names, for the rest of the process (never larger)."""
    match = re.search(WINDOW_IN_ERROR, text, re.I)
    if match:
        key, window = (cfg["endpoint"], cfg["model"]), int(match.group(1) or match.group(2))
        LEARNED["windows"][key] = min(window, LEARNED["windows"].get(key) or window)
        LEARNED["told"][key] = LEARNED["windows"][key]

def get_json(cfg, path, body=None, root=False, what=None):
    """The JSON answer to a small request; None when it fails (noted when `what` it is for)."""
    import http.client
    cfg = dict(cfg, first_byte_timeout=cfg["timeout"])   # (a small answer)
    if root:   # the path from the server's root, not the endpoint's
        cfg["endpoint"] = re.match(r"[^:/]+://[^/?#]*", cfg["endpoint"]).group()
    try:
        conn, response = http_request(cfg, path, body and json.dumps(body).encode())
        data = response.read()   # the whole answer: the connection stays usable
        conn.close()   # (kept by the transport; one that fails is not reused)
        if response.status != 200:
            raise LookupError("HTTP %d %s" % (response.status, response.reason))
        return json.loads(data)
    except (OSError, ValueError, LookupError, http.client.HTTPException) as e:
        if what:
            note(cfg, "error: cannot %s at %s%s: %s" % (what, cfg["endpoint"], path, e))

def list_models(cfg, quiet=False):
    """The entries of GET {endpoint}/models ([] and a note on failure, unless quiet)."""
    models = get_json(cfg, "/models", what=None if quiet else "list models")
    models = models.get("data", models.get("models")) if isinstance(models, dict) else models
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []

def compacted(cfg, messages):
    """compact(), a failure said as the compaction's (final, unless waiting may help)."""
    try:
        compact(cfg, messages)
    except ApiError as e:
        raise ApiError("compaction failed: %s" % e, "retry" if e.kind == "retry" else "fatal")

def overflowed(cfg, messages, body, error=None):
    """The request hook after an overflow: a summary request trimmed, or compacted once."""
    if error is None or error.kind != "overflow":
        return body if error is None else False
    learn_window(cfg, error.body or str(error))   # (before the prompt is weighed against it)
    if str(messages[-1].get("content") or "").endswith(PROMPTS["compact"]):   # a summary's
        kept = messages[(len(messages) + 1) // 2:-1]   # the newer half
        while kept and kept[0].get("role") == "tool":
            kept.pop(0)
        messages[1:-1], trimmed = kept, len(messages) > 2   # [system, summary prompt]: failed
        return trimmed
    if own(cfg).get("compacted"):
        error.args = ("%s (even after compacting the conversation)" % error,)
        return False
    note(cfg, "[%s: the context window is full; compacting and trying again]" % error, "warning")
    own(cfg)["compacted"] = True
    prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), None)
    fits = isinstance(prompt, str) and (len(prompt) + 3) // 4 <= context_window(cfg) // 2
    if not fits:
        note(cfg, "[your prompt is more than half the context window: it is summarized]", "warning")
    summed = messages[:-1] if fits and messages[-1].get("content") == prompt else messages
    compacted(cfg, summed)   # (the prompt that fits: not summarized, kept word for word after)
    messages[:] = summed
    if fits:
        messages[1]["content"] += "\n\nThe request I am working on now, as I wrote it:\n\n" + prompt
    return True

def cmd_compact_said(convo, arg):
    """/compact, said before and after, a failure as the compaction's; refused when too short."""
    if len(convo["messages"]) < 3:
        raise BantamError("nothing to compact yet")
    show(convo["cfg"], "[compacting...]\n")
    before = len(convo["messages"])
    compacted(convo["cfg"], convo["messages"])
    save_session(convo["cfg"], convo["session"], convo["messages"])
    show(convo["cfg"], "[compacted %d messages into a summary]\n" % before)

COMMANDS["/compact"] = (cmd_compact_said, COMMANDS["/compact"][1])

def token_line(convo, prompt, go):
    """The turn hook of the "context" event; the REPL's offer to compact."""
    convo["usage"], before = None, convo.get("cost", 0.0)
    go(prompt)
    usage, cfg, cost = convo.get("usage"), convo["cfg"], convo.get("cost", 0.0)
    if not usage:
        return
    window = context_window(cfg, ask=not convo.get("batch"))   # batch mode asks no server
    share, priced = usage["prompt_tokens"] / window, usage["cost"] is not None
    emit(cfg, "context", model=usage["model"], prompt_tokens=usage["prompt_tokens"],
         cached_tokens=usage["cached_tokens"], completion_tokens=usage["completion_tokens"],
         estimated=usage["estimated"], window=window, share=share,
         cost=round(cost - before, 6) if priced else None,
         session_cost=round(cost, 6) if priced else None)
    if share < COMPACT_AT:
        convo.pop("declined", None)
    elif share >= convo.get("declined", -1.0) + 0.1 and convo.get("take_back") and (
            sys.stdin.isatty()):   # once declined, asked again only 10 points further on
        try:
            answer = read_answer("Context usage is at %.1f%%. Compact conversation? [Y/n]: " % (
                share * 100))
        except KeyboardInterrupt:   # (a no)
            show(cfg, "\n")
            answer = "n"
        if answer.strip().lower() in ("", "y", "yes"):
            cmd_compact_said(convo, "")
        else:
            convo["declined"] = share

def usage_meter(convo):
    """A view keeping the turn's last usage, its end, and every call's cost (subagents' too)."""
    def view(event):
        if event["type"] == "usage":
            convo["cost"] = convo.get("cost", 0.0) + (event["cost"] or 0.0)
            if not event["depth"] and not event["quiet"]:
                convo["usage"] = event
        elif event["type"] == "turn_end" and not event["depth"]:
            convo["ended"] = event["status"]
    return view

HOOKS["request"].append(overflowed)
HOOKS["turn"].append(token_line)


# ----------------------------------------------------------------------------------------
# Sessions and settings: -c, --session, /continue, /delete; /cfg (set live, saved), /model
# ----------------------------------------------------------------------------------------

EVENTS["resumed"] = "session messages ago prompt answer"

def session_head(sid):
    """What the first line of session sid says (all but the messages), or {}."""
    try:
        with open(session_path(sid), encoding="utf-8") as f:
            line = f.readline()
        return json.loads(line[:line.rindex(', "messages": [')] + "}")
    except (OSError, ValueError):
        return {}

def modified(path):
    """When the file at path last changed (0 when it cannot be read)."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0

def repair(session, messages):
    """The load hook: calls answered, stray results and blank replies dropped, prompts joined."""
    session["changed"] = modified(session_path(session["id"]))   # (before a save: resumed's)
    session["head"] = {k: v for k, v in session_head(session["id"]).items() if k not in (
        "id", "uid", "cwd", "created_at", "saved_at", "summary", "count")}   # (Part II's keys)
    if not messages or {m["role"] for m in messages} - {"system", "user", "assistant", "tool"}:
        raise ValueError("not a list of chat messages")   # (load_session: cannot read the file)
    session["written"] = (session["summary"], list(messages))   # not saved again unless put right
    fixed, waiting = [], {}   # waiting: call id -> its result (None: none yet)
    for m in messages + [None]:
        if m and m["role"] == "tool":   # (a result that answers no call is dropped)
            if waiting.get(m.get("tool_call_id"), 0) is None:
                waiting[m["tool_call_id"]] = m
            continue
        fixed += [r or {"role": "tool", "tool_call_id": c, "content": INTERRUPTED +
                        " (no result was recorded)"} for c, r in waiting.items()]
        waiting = {c.get("id"): None for c in (m or {}).get("tool_calls") or ()}
        if m and m["role"] == "user" and fixed and fixed[-1]["role"] == "user":
            append_user(fixed, m["content"])   # (a prompt that got no answer, then another)
        elif m and (m["role"] != "assistant" or waiting or str(m.get("content") or "").strip()):
            fixed.append(m)   # (a blank reply is dropped: strict servers refuse it)
    return fixed

STOPPED = "[bantam was stopped]"   # by a signal (SIGTERM, SIGHUP): not the user's Ctrl+C

def keep_shown_text(cfg, messages, stop):
    """The step hook: a reply cut by Ctrl+C or a signal keeps the text shown, marked so."""
    reply = cfg["run"].get("reply") or {"quiet": True}   # (a summary's is no answer)
    text = "" if reply["quiet"] or "message" in reply else "".join(reply["content"])
    if isinstance(stop, (KeyboardInterrupt, SystemExit)) and text.strip():   # (signals: exit)
        add_message(cfg, messages, {"role": "assistant", "content": text + "\n" + (
            INTERRUPTED if isinstance(stop, KeyboardInterrupt) else STOPPED)})

def said_how(cfg, messages, stop):
    """The step hook, last: turn_end for a run an exception stops (which is then raised)."""
    if isinstance(stop, BaseException):
        failed = isinstance(stop, BantamError)
        emit(cfg, "turn_end", status="interrupted" if isinstance(stop, KeyboardInterrupt) else
             "failed" if failed else "stopped", error=str(stop) if failed else None)

def stopped_calls(cfg, call, args, result=None):
    """The tool hook: a call cut short by a signal, not by Ctrl+C, says that bantam was stopped."""
    stop = sys.exc_info()[1]   # (AL answers the calls a stop left unanswered)
    if result is None or stop is None or isinstance(stop, KeyboardInterrupt):
        return args if result is None else result
    if result.startswith(INTERRUPTED):   # (a call left unanswered)
        return STOPPED + result[len(INTERRUPTED):]
    output, said, rest = result.rpartition("\n[interrupted by the user after ")   # its note: last
    return output + "\n[bantam was stopped after " + rest if said else result

def step_saver(convo):
    """A view saving at each reply and step; a compaction keeps the typed prompt in the head."""
    last = {}   # the id of the last call of the latest reply

    def view(event):
        m = event.get("message") if event["type"] == "message" and not event["depth"] else None
        if event["type"] in ("prompt", "resumed"):
            convo["typed"] = event.get("text", event.get("prompt"))
        elif event["type"] == "compaction" and not event["depth"]:
            convo["session"].setdefault("head", {})["prompt"] = convo.get("typed")
        if m and m["role"] == "assistant":
            last["id"] = (m.get("tool_calls") or [{}])[-1].get("id")
        if m and (m["role"] != "tool" or m.get("tool_call_id") == last.get("id")):
            save_session(convo["cfg"], convo["session"], convo["messages"], link=False)
    return view

def ago(when):
    """How long ago a time (seconds since the epoch) was, briefly: "3 h ago"."""
    seconds = time.time() - when
    return next(("%d %s ago" % (seconds // size, unit) for unit, size in (
        ("d", 86400), ("h", 3600), ("min", 60)) if seconds >= size), "just now")

def titled(convo, prompt, go):
    """The turn hook (innermost): an untitled conversation takes its first prompt's first line."""
    title, session = " ".join(prompt.strip().split("\n")[0].split()), convo["session"]
    session["summary"] = session["summary"] or (title[:57] + "..." if len(title) > 60 else title)
    return go(prompt)

def cmd_save_titled(convo, arg):
    """/save, refused before a prompt; if the model gives no title, the first prompt's is used."""
    cfg, session = convo["cfg"], convo["session"]
    if len(convo["messages"]) < 2:   # (a title written for nothing would be made up)
        raise BantamError("nothing to save yet: the conversation has no prompt")
    try:
        return cmd_save(convo, arg)
    except ApiError as e:
        note(cfg, "[summary: %s; using the first prompt]" % e, "info")
    copy = dict(new_session(), summary=session["summary"], created_at=session["created_at"])
    save_session(cfg, copy, convo["messages"], link=False)
    show(cfg, "[saved session %s]\n" % copy["id"])

def cmd_load_said(convo, arg):
    """/load <id>, saying which conversation goes on; no id: how to use it."""
    if not arg:
        raise BantamError("usage: /load <id or unique prefix> (see /list)")
    return cmd_load(convo, arg) or resumed(convo)

def cmd_list_newest(convo, arg):
    """/list [all]: the 20 newest sessions (all), * before this folder's, saved how long ago."""
    ids = session_ids()
    shown = ids if arg == "all" else ids[:20]
    pad = max([15] + [len(sid) for sid in shown])   # the columns line up
    for sid in shown:
        head, name = session_head(sid), terminal_safe(sid)
        show(convo["cfg"], "%s %s%s %10s  %4s msgs  %s\n" % (
            "*" if head.get("cwd") == os.getcwd() else " ", name, " " * (pad - len(name)),
            ago(modified(session_path(sid))), head.get("count", "?"),
            terminal_safe(head.get("summary", "(unreadable)") or "(empty conversation)")))
    if len(shown) < len(ids):
        show(convo["cfg"], "(%d older: /list all shows every one)\n" % (len(ids) - 20))

def resumed(convo):
    """Say which conversation goes on (with its last exchange), or that a named one is new."""
    session, messages, cfg = convo["session"], convo["messages"], convo["cfg"]
    if len(messages) > 1:
        at = max(i for i, m in enumerate(messages) if m["role"] == "user" or i == 0)
        text = str(messages[at].get("content") or "")
        _, end, after = text.partition(SUMMARY_END)   # compacted: the prompt typed after it,
        if text.startswith(SUMMARY_HEAD) and end:     # the one it kept, else the head's
            text = after[2:].rpartition(", as I wrote it:\n\n")[2] or session["head"].get("prompt")
        emit(cfg, "resumed", session=session["id"], messages=len(messages),
             ago=ago(session.get("changed") or time.time()),
             prompt=redact(cfg, text) if at and text else None,
             answer=redact(cfg, last_answer(messages[at:])))
    elif session["id"]:
        show(cfg, "[new conversation %s: no saved session has that id]\n" % session["id"])

def last_answer(messages):
    """The content of the last assistant message (the turn's final answer), or ""."""
    return next((m["content"] for m in reversed(messages) if m["role"] == "assistant"
                 and isinstance(m.get("content"), str)), "")

PLAIN["resumed"] = lambda s, e: fresh_line(s, "[continuing %s: %d messages, %s]\n%s%s" % (
    e["session"], e["messages"], e["ago"], "you: %s\n" % e["prompt"] if e["prompt"] else "",
    e["answer"] + "\n" if e["answer"] else ""))
HOOKS["load"].append(repair)
HOOKS["turn"].insert(0, titled)   # (after the prompt's secrets are hidden)
HOOKS["step"] += [keep_shown_text, said_how]
HOOKS["tool"].insert(0, stopped_calls)   # (before leash adds what the user was told)
HOOKS["start"].append(lambda convo, args: convo["views"].append(step_saver(convo)))

def latest_in_folder():
    """The id of the newest conversation that ran in the current folder (else ConfigError)."""
    for sid in session_ids():
        if session_head(sid).get("cwd") == os.getcwd():
            return sid
    raise ConfigError("no conversation of this folder to continue (see /list)")

def cmd_delete(convo, arg):
    """/delete <id> (--delete: convo None): delete a saved conversation (id or unique prefix)."""
    if not arg:
        raise BantamError("usage: /delete <id or unique prefix> (see /list)")
    sid = resolve_session(arg)
    if convo and sid == convo["session"]["id"]:
        raise BantamError("%s is the conversation you are in: /clear first" % sid)
    try:   # its file, and the autosave link to it
        if os.path.realpath(session_path("autosave")) == os.path.realpath(session_path(sid)):
            os.unlink(session_path("autosave"))
        os.unlink(session_path(sid))
    except OSError as e:
        raise ConfigError("cannot delete session %s: %s" % (sid, e.strerror or e))
    show({}, "[deleted session %s]\n" % sid)

def start_conversation(cfg, args):
    """(session, messages) to work on: this folder's latest (-c), --session's, or a new one."""
    name = latest_in_folder() if args.cont else args.session
    if name and (not re.match(r"[A-Za-z0-9_-][A-Za-z0-9._-]*$", name) or name == "autosave"):
        raise ConfigError("--session: expected letters, digits, '-', '_' and '.', got %r" % name)
    if name and os.path.exists(session_path(name)):
        return load_session(name)
    return new_session(name or None), [{"role": "system", "content": cfg["system_prompt"]}]

def set_config_line(text, key, value):
    """text with key=value appended (the last wins); a ConfigError if it would not read back."""
    if value.strip() != value or re.search(r"\s#", value) or len(value.splitlines()) > 1:
        raise ConfigError("cannot store %r as %s: a value is one line, read without surrounding "
                          "spaces or a ' #' comment" % (value, key))
    return text + "\n" * (text[-1:] not in ("", "\n")) + key + "=" + value + "\n"

def shown_value(cfg, key):
    """A setting as /cfg and --show-config print it: secrets as ***."""
    value = {k: "***" for k in cfg[key]} if key == "headers" else cfg[key]
    value = "***" if key == "api_key" and value else value
    text = json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
    return redact(cfg, text)   # the credentials in an endpoint URL too

def config_path(cfg, key):
    """Where /cfg saves key: the folder's model.cfg if its value counts next time, else yours."""
    sources, folder = cfg["sources"], cfg["sources"]["folder_config"]
    was = sources.get("at_start", {}).get(key, sources.get(key, ""))
    sets = (dict(sources["layers"]).get("folder") or {}).get(key, ("",))[0] not in ("", "-")
    trusted = folder_memory().get(os.getcwd(), {}).get("trusted") is True
    return folder if folder and (was.startswith(folder + ":") or sets and trusted) else \
        sources["config_file"]

def apply_setting(convo, key, value, where):
    """Use a new value of key from now on, in this conversation too."""
    cfg = convo["cfg"]
    cfg["sources"].setdefault("at_start", {}).setdefault(key, cfg["sources"][key])
    cfg[key], cfg["sources"][key] = value, where
    settle_secrets(cfg)   # (an endpoint's credentials)
    if key in ("bantam_tools_dir", "bantam_skills_dir", "project_instructions", "tools"):
        add_prompt_extras(cfg)   # the system prompt names them
        if convo["messages"] and convo["messages"][0]["role"] == "system":
            convo["messages"][0]["content"] = cfg["system_prompt"]

def cmd_cfg(convo, arg):
    """/cfg [key [value]]: the settings, one with its source, or set one live and save it."""
    cfg = convo["cfg"]
    key, _, raw = arg.partition(" ")
    key, raw = key.lower(), raw.strip()
    if not key:
        return show_config(cfg)
    if key not in DEFAULTS:
        raise BantamError("unknown config key %r (the keys: %s)" % (key, ", ".join(DEFAULTS)))
    if not raw:   # (and the folder's value if it is not used)
        rows = [(key, shown_value(cfg, key), cfg["sources"][key])] + unused_settings(cfg)
        show(cfg, "".join("%s = %s   (%s)\n" % row for row in rows if row[0] == key))
        return show(cfg, window_in_use(cfg)) if key == "context_window" else None
    readline = sys.modules.get("readline")   # a key (or a URL holding one) stays out of history
    if (key in SECRET_KEYS or key == "endpoint" and any(url_secrets(raw))) and readline and \
            readline.get_current_history_length():
        readline.remove_history_item(readline.get_current_history_length() - 1)
    value = None if raw == "-" else parse_value(key, raw, "/cfg")   # -: clear the key
    path = config_path(cfg, key)
    text = read_text(path, "config") if os.path.exists(path) else ""
    new = set_config_line(text, key, raw) if value is not None else re.sub(
        r"(?im)^[ \t]*%s[ \t]*=.*\n?" % key, "", text)   # (appended: the last line of a key wins)
    if new == text:
        raise BantamError("%s: set in no config file /cfg writes (%s)" % (key, path))
    try:
        write_private_file(os.path.realpath(path), new)   # (mode 0600)
    except OSError as e:
        raise BantamError("%s: cannot write config: %s" % (path, e.strerror or e))
    if value is None:
        return clear_setting(convo, key, path)
    where = read_key_values(path)[key][1]
    remember_own_edit(cfg, path, key)
    apply_setting(convo, key, value, where)
    show(cfg, "[%s = %s, saved in %s]\n" % (key, shown_value(cfg, key), where))

def clear_setting(convo, key, path):
    """/cfg KEY - took the key out of path: the value the layers now give is used."""
    cfg = convo["cfg"]
    mine = "folder" if path == cfg["sources"]["folder_config"] else "own"   # (the layer it was)
    dict(cfg["sources"]["layers"]).get(mine, {}).pop(key, None)
    apply_setting(convo, key, *layered(cfg, key))
    show(cfg, "[%s cleared: %s (%s)]\n" % (key, shown_value(cfg, key), cfg["sources"][key]))

def cmd_model(convo, arg):
    """/model [name]: switch the model (unlisted by the server: not saved), or list them."""
    cfg = convo["cfg"]
    listed = [str(m.get("id", "?")) for m in list_models(cfg, quiet=bool(arg))]
    if not arg:
        show(cfg, "".join("%s %s\n" % ("*" if mid == cfg["model"] else " ", mid) for mid in listed))
        return show(cfg, "(/model <name> switches to one; now: %s)\n" % cfg["model"])
    if listed and arg not in listed:
        apply_setting(convo, "model", arg, "/model")
        return note(cfg, "[%s is not among the server's models: used, not saved]" % arg, "warning")
    return cmd_cfg(convo, "model " + arg)

COMMANDS.update({
    "/continue": (lambda convo, arg: COMMANDS["/load"][0](convo, latest_in_folder()),
                  "continue this folder's latest conversation (also /cont)"),
    "/cont": (lambda convo, arg: COMMANDS["/continue"][0](convo, arg), None),
    "/delete": (cmd_delete, "/delete <id>: delete a saved session (id or unique prefix)"),
    "/model": (cmd_model, "/model [name]: switch the model (no name: list the endpoint's models)"),
    "/models": (lambda convo, arg: cmd_model(convo, ""), None),   # (another agent's name)
    "/endpoint": (lambda convo, arg: cmd_cfg(convo, "endpoint " + arg),   # the API key goes to it
                  "/endpoint [url]: show or switch the API's base URL"),
    "/cfg": (cmd_cfg, "/cfg [key [value]]: show the settings, one, or change one (saved)"),
    "/load": (cmd_load_said, COMMANDS["/load"][1]),
    "/save": (cmd_save_titled, COMMANDS["/save"][1]),
    "/list": (cmd_list_newest, "/list [all]: the newest 20 saved sessions (* marks this folder's)"),
})

# ----------------------------------------------------------------------------------------
# Markdown: the reply rendered line by line, each line once, when its newline arrives
# ----------------------------------------------------------------------------------------

MD_STYLES = {"b": "\033[1m", "code": "\033[36m", "dim": "\033[2m", "+": "\033[32m",
             "-": "\033[31m"}   # +, -: a diff's lines
MD_PLAIN = dict.fromkeys(MD_STYLES, "")   # color off: same layout, no escape sequences

SGR = r"\033\[[0-9;]*m"
CHARS = ("(?s)(?:\033\\[[0-9;]*m)*"
         ".(?:\u200d.?|[\u0300-\u036f\ufe00-\ufe0f\U0001f3fb-\U0001f3ff])*(?:\033\\[[0-9;]*m)*")
FENCE = r"([ \t]*)(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$"   # ```python
HEADING = r" {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$"   # ## Title
ITEM = r"([-*]|\d{1,9}\.)[ \t]+(.*)"   # "- item", "* item", "12. item" (the line's text)

def md_start(width, color):
    """A new renderer for a terminal width columns wide."""
    return {"width": max(int(width), 10), "styles": MD_STYLES if color else MD_PLAIN,
            "part": "", "fence": None}

def md_feed(state, text):
    """Terminal text for every line that text completes; the rest waits for its newline."""
    lines = (state["part"] + text).split("\n")
    state["part"] = lines.pop()
    return "".join([md_line(state, line) for line in lines])

def md_end(state):
    """Terminal text for whatever is left: the last line, an open code block."""
    out = md_feed(state, "\n") if state["part"] else ""
    if state["fence"] is not None:             # closed as its own closing fence would
        out += md_line(state, state["fence"][0] * state["fence"][1])
    return out

def md_line(state, line):
    """A complete source line rendered, indented as written (tables, quotes, inline marks kept)."""
    if state["fence"] is not None:   # in a code block: verbatim and unwrapped, or its end
        char, size, indent, pad, lang = state["fence"]
        if re.match(r"[ \t]*%s{%d,}[ \t]*$" % (re.escape(char), size), line):   # ``` or longer
            state["fence"] = None
            return pad + styled("\u2500" * 3, state["styles"]["dim"]) + "\n"
        body = line[min(indent, len(line) - len(line.lstrip(" "))):]   # less the fence's indent
        style = state["styles"][body[:1] if lang == "diff" and body[:1] in "+-" else "code"]
        return pad + "    " + styled(body, style) + "\n" if body else "\n"
    line, st, width = line.expandtabs(4), state["styles"], state["width"]
    text = line.strip()
    if not text:
        return "\n"
    indent = len(line) - len(line.lstrip())
    pad = " " * min(indent, width // 2)          # (deep nesting in a narrow terminal)
    fence = text[0] in "`~" and re.match(FENCE, line)
    if fence:                                    # ─── python
        state["fence"] = (fence.group(2)[0], len(fence.group(2)), indent, pad, fence.group(3))
        label = "\u2500" * 3 + (" " + fence.group(3)) * bool(fence.group(3))
        return pad + styled(label, st["dim"]) + "\n"
    heading, item = text[0] == "#" and re.match(HEADING, line), re.match(ITEM, text)
    first = rest = pad                           # a paragraph: wrapped at spaces
    if heading:                                  # bold, without its #s
        first = rest = ""
        text = styled(heading.group(1) or "", st["b"])
    elif item:                                   # • text, 12. text, with a hanging indent
        marker = item.group(1) if item.group(1)[0].isdigit() else "\u2022"
        first, rest = pad + marker + " ", " " * (len(pad) + len(marker) + 1)
        text = item.group(2)
    return first + ("\n" + rest).join(wrap_words(text, width - len(rest))) + "\n"

def styled(text, style):
    """Text in a style (as it is when color is off)."""
    return style + text + RESET if style and text else text

def wrap_words(text, width):
    """Text broken at spaces into lines of width columns, a style open at a break reopened."""
    width = max(width, 1)
    if display_width(text) <= width:
        return [text]
    lines, line, used, active = [], "", 0, ""
    for gap, word in re.findall(r"( *)([^ ]+)", text):
        w = display_width(word)   # (a word longer than a line: cut between characters)
        pieces = [(word, w)] if w <= width else [(ch, display_width(ch))
                                                 for ch in re.findall(CHARS, word)]
        for piece, w in pieces:
            if used + len(gap) + w > width:        # on a new line (a leading gap is dropped)
                if used:
                    lines.append(line + RESET if active else line)
                    line, used = active, 0
                gap = ""
            line, used, gap = line + gap + piece, used + len(gap) + w, ""
            for code in re.findall(SGR, piece) if "\033" in piece else ():   # styles still open
                active = "" if code in (RESET, "\033[m") else active + code
    return lines + [line]

def display_width(text):
    """Terminal columns of text: CJK and emoji 2, combining and format marks and SGR codes 0."""
    text = re.sub(SGR, "", text)
    if text.isascii():
        return len(text)
    import unicodedata   # (here: only text that is not ASCII needs it, and the import costs)
    text = re.sub("(?s)\u200d.?|[\U0001f3fb-\U0001f3ff]", "", text)   # ZWJ and partner, skin tones
    return len(text) + sum(-1 if unicodedata.combining(ch) or unicodedata.category(ch) in (
        "Mn", "Me", "Cf") else unicodedata.east_asian_width(ch) in ("W", "F")
        for ch in re.findall(r"[^\x00-\x7f]", text))


# ----------------------------------------------------------------------------------------
# The other views: the plain view's token line and decisions, -q's, the JSONL view, and the
# terminal view (render=auto at a terminal): Markdown, tool calls in words, output live.
# ----------------------------------------------------------------------------------------

def show_context(state, event):
    """The token line: [model: prompt (cached) + completion | context: used/window (share)]"""
    if state["cfg"].get("usage", True):
        about, cached, prompt = "~" * event["estimated"], event["cached_tokens"], \
            event["prompt_tokens"]
        split = "" if cached is None else " (%d cached, %d uncached)" % (cached, prompt - cached)
        cost = "" if event["cost"] is None else " | %s$%.4f (session %s$%.4f)" % (
            about, event["cost"], about, event["session_cost"])
        show_on_stderr(state, "[%s: %s%d prompt%s + %s%d completion | context: %s%d/%d "
                       "(%.1f%%)%s]" % (event["model"], about, prompt, split, about,
                                        event["completion_tokens"], about, prompt,
                                        event["window"], event["share"] * 100, cost), "dim")

def show_approval(state, event):
    """[command refused (deny rm *)]: a decision about a call, unless approve=auto made it."""
    if event["rule"] != "approve=auto":
        done = {"run": "run", "always": "run, and from now on", "edit": "changed and run",
                "refuse": "refused"}[event["decision"]]
        show_on_stderr(state, "[%s %s %s%s]" % (
            "command" if event["tool"] == "shell_exec" else event["tool"], done,
            "by the user" if event["rule"] == "asked" else "(%s)" % event["rule"],
            ": " + event["reason"] if event["reason"] else ""), "dim")

def show_call(state, event, text=None):
    """A tool call's trace, [tool call: name(args)], or text; at a terminal, cut to a screen."""
    close_block(state, event)
    columns, rows = shutil.get_terminal_size()
    cut = state["tty"] or text
    text = text or "[tool call: %s(%s)]" % (event["name"], event["arguments"])
    text = bounded(text, max(6, rows - 6), max(20, columns - 4 * event["depth"])) if cut else text
    write(state, text + "\n", "call")

def show_status(state, event):
    """...requesting... on a colored terminal (the top level's), erased by the next output."""
    draw = getattr(state["out"], "draw", None)   # (Guarded's; not sys.stdout of AL's own view)
    if draw and state["color"] and state["bol"] and state["tty"] and not event["depth"]:
        draw("\r" + COLORS["status"] + "...requesting..." + RESET, 1)

PLAIN.update(context=show_context, approval=show_approval, tool_call=show_call,
             request=show_status)
QUIET = {"error": PLAIN["error"], "retry": PLAIN["retry"], "output": PLAIN["output"],   # -q
         "note": lambda s, e: e["level"] == "info" or PLAIN["note"](s, e)}

class OutputClosed(BantamError):
    """stdout's reader went away (`bantam prompt.txt | head`): stop quietly, like SIGPIPE."""
    exit_code = 141

class Guarded:
    """A view's stream: a failing stdout pipe or file ends the run, another goes to /dev/null."""

    def __init__(self, stream, wrap=None):   # wrap: a function, for the terminal view's stderr
        self.stream = stream or open(os.devnull, "w")   # (closed: `>&-`, `2>&-`)
        self.tty, self.rows, self.wrap = self.stream.isatty(), 0, wrap   # rows: draw's

    def __getattr__(self, name):   # (isatty, fileno, encoding...: the stream's own)
        return getattr(self.stream, name)

    def write(self, text, flush=False):
        """Write text (flush: and flush), draw's rows erased first; a failure as the class says."""
        text = self.wrap(text) if self.wrap else text
        if self.rows:
            text, self.rows = "\r\033[K" + "\033[A\033[K" * (self.rows - 1) + text, 0
        try:
            self.stream.write(text)
            if flush:
                self.stream.flush()
        except OSError as e:
            if self.stream in (sys.stdout, sys.stderr):   # Python's flush at exit must not fail
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            if self.stream is sys.stdout and not self.tty:
                raise e.__context__ if isinstance(e.__context__, SystemExit) else OutputClosed(
                    "") if isinstance(e, BrokenPipeError) else BantamError(   # (129, 141, or)
                    "cannot write the output: %s" % (e.strerror or e))
            self.stream = open(os.devnull, "w")

    def flush(self):
        """Flush; a failure as write's."""
        self.write("", True)

    def draw(self, text, rows):
        """text, rows rows below the output (a status line, a preview), till the next write."""
        self.write(text, True)
        self.rows = rows

class Railed:
    """The plain view's stdout: a subagent's lines (depth > 0) behind a rail per level."""

    def __init__(self, stream):   # depth: the event's; at: the current line's
        self.stream, self.depth, self.at, self.bol = stream, 0, 0, True

    def __getattr__(self, name):   # (draw, flush, isatty...: the stream's own)
        return getattr(self.stream, name)

    def write(self, text, flush=False):
        """text railed inside write's color around it, if any, then written."""
        color = re.fullmatch(r"(?s)(\033\[[0-9;]*m)(.*)(\033\[0m)", text)
        head, text, tail = color.groups() if color else ("", text, "")
        depth = self.at if text == "\n" else self.depth   # (a newline ends its own line)
        if text and depth != self.at:
            text, self.at = ("" if self.bol else "\n") + text, depth
        if text and depth:
            pad = "  \u2502 " * depth
            text = (pad if self.bol else "") + text.replace("\n", "\n" + pad)
            text = text[:-len(pad)] if text.endswith(pad) else text
        self.bol = text.endswith("\n") if text else self.bol
        self.stream.write(head + text + tail, flush)

ON_STDERR = {"note", "error", "retry", "context", "approval", "changes"}   # show_on_stderr's

def railed(handler):
    """A VIEWS["plain"] handler: railed at its event's depth; stderr's lines as stderr allows."""
    def handle(state, event):
        state["out"].depth = event["depth"]
        if event["type"] in ON_STDERR:
            state["out"].flush()   # (write_rendered does not flush: its text comes first)
            if not state["bol"] and state["tty"]:
                fresh_line(state)
            state = dict(state, color=state["err_color"])
        return handler(state, event)
    return handle

def plain_railed(cfg, handlers=None, wrap=None, **more):
    """VIEWS["plain"]: the plain view on Guarded streams, railed; stderr colored at a terminal."""
    plain = cfg.get("color") == "never" or any(map(os.environ.get, ("NO_COLOR", "BANTAM_NO_COLOR")))
    more["err_color"] = not plain and (cfg.get("color") == "always" or sys.stderr.isatty())
    return plain_view(cfg, {kind: railed(h) for kind, h in (handlers or PLAIN).items()},
                      Railed(Guarded(sys.stdout)), Guarded(sys.stderr, wrap), **more)

VIEWS["plain"] = plain_railed

def jsonl_view(stream, cfg):
    """A view writing each event as one JSON line, flushed (a closed pipe stops the run)."""
    out, said = Guarded(stream), []
    def view(event):
        out.write(json.dumps(event, ensure_ascii=False) + "\n", True)
        if out.stream is not stream and not said:   # a full disk: say so, once
            said.append(True)
            note(cfg, "warning: cannot write events to %s; no more are written there"
                 % getattr(stream, "name", "the event stream"), "warning")
    return view

def write_rendered(state, text, style=None):
    """Rendered text on out as write writes text, its own escape sequences kept."""
    if text:
        state["bol"] = text.endswith("\n")
        state["out"].write(styled(text, state["color"] and style and COLORS[style]))

def term_text(state, event):
    """A piece of the answer or reasoning rendered, the line in progress previewed (3 rows)."""
    kind, depth = event["type"], event["depth"]
    if state["block"] != kind:
        md_flush(state)
        show_piece(state, dict(event, text=""))   # the block opened (reasoning: its marker)
        width = shutil.get_terminal_size()[0] - 4 * depth
        state["md"] = md_start(width, state["color"] and kind == "text")
    rendered = md_feed(state["md"], terminal_safe(event["text"]))
    if rendered:
        write_rendered(state, rendered, "reasoning" if kind == "reasoning" else None)
    text = state["md"]["part"]
    if text and state["bol"]:
        rows = wrap_words(text[-2000:], state["md"]["width"])[-3:]   # a longer line: its end
        pad = "  \u2502 " * depth
        text = styled(("\r\n" + pad).join(rows), state["color"] and COLORS["dim"])
        state["out"].draw(pad + text, len(rows))   # (the last preview erased in the same write)
    else:
        state["out"].flush()

def md_flush(state):
    """What the renderer still holds written: the end of the reply, or of its reasoning."""
    if state["md"] is not None:   # (write clears the preview)
        write_rendered(state, md_end(state["md"]), "reasoning" if state["block"] == "reasoning"
                       else None)
        state["md"] = None

def term_tool_call(state, event):
    """A command or a subagent's prompt in words ("$ ls"); a write's diff taken before it."""
    args = json.loads(event["arguments"], strict=False)   # (parse_arguments: an object, or "{}")
    name = TOOL_ALIASES.get(event["name"], event["name"])
    words = {"shell_exec": ("$ ", "command"), "run_subagent": ("\u00bb subagent: ", "prompt")}
    mark, key = words.get(name, ("", None))
    text = args.get(key)
    show_call(state, event, mark + text.rstrip("\n") if mark and isinstance(text, str) else None)
    rows = shutil.get_terminal_size()[1]   # (a window taller than the screen could not be redrawn)
    limit = max(4, min(state["tool_lines"] or rows, rows - 4))
    state["tool"] = {"name": name, "lines": 0, "partial": "", "started": time.monotonic(),
                     "head": [], "tail": [], "drawn": 0.0, "limit": limit}
    if name == "write" and isinstance(args.get("filePath"), str) and args["filePath"].strip():
        diff = write_preview(os.path.abspath(path_argument(args)), args, None).partition("\n")[2]
        state["tool"]["diff"] = diff or "(no change)"

def bounded(text, rows, width):
    """text in about rows rows of width: long lines cut, the middle lines of a tall text."""
    cut = 3 * width - 40
    lines = [line if len(line) <= 3 * width else line[:cut] + " [... %d more characters]"
             % (len(line) - cut) for line in text.split("\n")]
    height = [max(1, -(-len(line) // width)) for line in lines]
    if sum(height) <= rows:
        return "\n".join(lines)
    first, last, used = 0, len(lines), 1   # (the row that names the lines not shown)
    while used + height[first] <= rows * 2 // 3:
        used, first = used + height[first], first + 1
    while used + height[last - 1] <= rows:
        used, last = used + height[last - 1], last - 1
    return "\n".join(lines[:first] + ["[... %d lines not shown (%d in all) ...]" % (
        last - first, len(lines))] + lines[last:])

def term_tool_output(state, event):
    """A command's output as it comes: its first and newest lines kept, the window redrawn."""
    tool = state["tool"]
    if tool is None:
        return
    lines = (tool["partial"] + event["text"]).split("\n")
    tool["partial"] = lines.pop()[-4096:]   # a line this long is cut on screen anyway
    tool["head"] += lines[:tool["limit"] // 2 - len(tool["head"])]
    tool["tail"] = (tool["tail"] + lines)[-tool["limit"]:]
    tool["lines"] += len(lines)
    if time.monotonic() - tool["drawn"] >= 0.05:   # (a flood of output: not every piece)
        tool_status(state, event)

def screen_line(state, line, depth):
    """A line of output (its last state after \\r) on one row: its start and its longer end."""
    line, room = overwritten(line), max(shutil.get_terminal_size()[0] - 4 * depth, 10)
    if display_width(line) <= room:   # (cut as if each character took one column)
        return line
    return line[:room // 3] + "\u2026" + line[len(line) - room + room // 3 + 1:]

def tool_status(state, event):
    """A running command's window (also tool_progress's handler): its newest lines, seconds."""
    tool = state["tool"]
    if tool and state["bol"] and state["tty"]:
        window = (tool["tail"] + [tool["partial"]] * bool(tool["partial"]))[-tool["limit"]:]
        hidden = tool["lines"] + bool(tool["partial"]) - len(window)
        text = "\u231b %.0f s" % (time.monotonic() - tool["started"])
        text += " \u00b7 %d more lines" % hidden if hidden > 0 else ""
        pad, body = "  \u2502 " * event["depth"], state["color"] and COLORS["body"]
        rows = [pad + styled(terminal_safe(screen_line(state, line, event["depth"])), body) + "\n"
                for line in window]
        state["out"].draw("".join(rows) + pad + styled(text, state["color"] and COLORS["dim"]),
                          len(rows) + 1)   # (the last window erased)
        tool["drawn"] = time.monotonic()
    else:
        state["out"].flush()

def settle_output(state, depth):
    """A command's output left on screen: its first lines, how many are not shown, its last."""
    tool, state["tool"] = state["tool"], None
    state["out"].write("")   # (the window erased)
    lines = tool["tail"] + [tool["partial"]] * bool(tool["partial"])
    total, shown = tool["lines"] + bool(tool["partial"]), len(tool["head"])
    last = min(total - shown, tool["limit"] - shown)   # the lines shown at the end
    for line in tool["head"]:
        write(state, screen_line(state, line, depth) + "\n", "body")
    if total > shown + last:
        write(state, "... %d more lines\n" % (total - shown - last), "dim")
    for line in lines[len(lines) - last:]:
        write(state, screen_line(state, line, depth) + "\n", "body")

def term_tool_result(state, event):
    """A tool's end: a command's lines and exit, a subagent's end, another's result cut."""
    tool, depth = state["tool"], event["depth"]
    fresh_line(state)   # (a command's output: its lines are whole)
    end = re.search(r"\n?(?:\n\[([^\n]*): the command's process group was killed\])?"
                    r"\n\nexit: (-?\d+)$", event["content"])   # (timed out, time up)
    if event["ok"] and tool and end and tool["name"] == "shell_exec":
        settle_output(state, depth)
        summary = "exit %s \u00b7 %.1f s" % (end.group(2), time.monotonic() - tool["started"])
        summary += " \u00b7 " + end.group(1) if end.group(1) else ""
        write(state, summary + "\n", "dim" if end.group(2) == "0" else "error")
    elif (event["name"] == "run_subagent" and event["ok"]
          and not event["content"].startswith(("error:", "("))):
        write(state, "\u00bb subagent done\n", "dim")
    else:
        width = max(20, shutil.get_terminal_size()[0] - 4 * depth)
        text = bounded(event["content"].rstrip("\n"), tool["limit"] if tool else 20, width)
        write(state, text + "\n", "body" if event["ok"] else "error")
        diff = event["ok"] and (tool or {}).get("diff")
        for line in diff.split("\n") if diff else ():
            write(state, line + "\n", {"+": "result", "-": "error"}.get(line[:1], "body"))
    state["tool"] = None
    state["out"].flush()

def wrapped(text):
    """Text (a command's output: /help, /list, /cfg; a note) wrapped at the terminal's width."""
    columns = shutil.get_terminal_size()[0]
    return "\n".join("\n".join(wrap_words(line, columns)) for line in text.split("\n"))

TERMINAL = dict(PLAIN, text=term_text, reasoning=term_text, tool_call=term_tool_call,
                output=lambda s, e: fresh_line(s, wrapped(e["text"])),
                reply_end=lambda s, e: md_flush(s) or close_block(s, e),
                tool_output=term_tool_output, tool_result=term_tool_result,
                tool_progress=tool_status,   # a command stopped (Ctrl+C): its last lines stay
                turn_end=lambda s, e: s["tool"] and settle_output(s, e["depth"]) or PLAIN[
                    "turn_end"](s, e),
                approval=lambda s, e: e["rule"] == "asked" or show_approval(s, e))   # not echoed
VIEWS.update(terminal=lambda cfg: VIEWS["plain"](   # a person's: notes wrapped at spaces too
    cfg, TERMINAL, md=None, tool=None, tool_lines=cfg.get("tool_lines") or 0, wrap=wrapped))


# ----------------------------------------------------------------------------------------
# The REPL at a terminal: Tab completion, questions asked mid-turn, !commands, the first line
# ----------------------------------------------------------------------------------------

def pasted(convo, prompt, go):
    """The turn hook: a paste's last line break dropped, Enter typed ahead kept, /quit forgotten."""
    import termios
    readline, text = convo.get("readline"), prompt.rstrip("\n")
    if readline and readline.get_current_history_length() and text != prompt:
        readline.replace_history_item(readline.get_current_history_length() - 1, text)
    keys = termios.tcgetattr(0) if readline and sys.stdin.isatty() else None
    if keys:   # (readline reads the line typed ahead once the turn is over)
        termios.tcsetattr(0, termios.TCSANOW, [keys[0] & ~termios.ICRNL] + keys[1:])
    try:
        go(text)
    finally:
        convo.pop("quit", None)   # (a /quit at a question ends only its turn)
        try:
            if keys:
                termios.tcsetattr(0, termios.TCSANOW, keys)
        except termios.error:   # (the terminal is gone: a hang-up, said as one)
            pass

def setup_terminal(convo):
    """The REPL at a terminal: readline (completion, paste, multi-line history), the first line."""
    cfg = convo["cfg"]
    readline = convo["readline"] = setup_readline()
    convo["take_back"] = True   # (the REPL at a terminal: the token line may offer /compact)
    def complete(text, state):   # Tab: /commands, then ids, keys or the server's models
        line, options = readline.get_line_buffer(), []
        if line.startswith(("/load ", "/save ", "/delete ")):
            options = session_ids()
        elif line.startswith("/cfg ") and line.count(" ") == 1:
            options = DEFAULTS
        elif line.startswith("/model "):   # (fetched once)
            options = convo["models"] = convo.get("models") or [
                str(m.get("id")) for m in list_models(cfg, quiet=True)]
        elif " " not in line:
            options = COMMANDS
        options = [name for name in options if name.startswith(text) and name.isprintable()]
        return options[state] + " " if state < len(options) else None
    def save_history():   # at exit, after the REPL's: an entry a line, \n a line break, \\ a \
        count = readline.get_current_history_length()   # the newest 1000
        entries = [readline.get_history_item(i) for i in range(max(1, count - 999), count + 1)]
        try:
            write_private_file(os.path.expanduser(HISTORY), "".join(
                e.replace("\\", "\\\\").replace("\n", "\\n") + "\n" for e in entries if e))
        except OSError:   # (said when the REPL wrote it)
            pass
    if readline:
        import atexit
        for i in range(readline.get_current_history_length()):   # as save_history wrote them
            readline.replace_history_item(i, re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(
                m.group(1), m.group(1)), readline.get_history_item(i + 1)))
        atexit.register(save_history)
        readline.parse_and_bind("set enable-bracketed-paste on")
        readline.parse_and_bind("tab: complete")
        readline.set_completer_delims(" \t\n")
        readline.set_completer(complete)
    from urllib.parse import urlsplit   # the first line: model, host, context window, sandbox
    parts = ["bantam %s" % VERSION, "%s @ %s" % (cfg["model"], urlsplit(cfg["endpoint"]).netloc)]
    parts += ["context %d" % cfg["context_window"]] * (
        cfg["sources"]["context_window"] != "default")
    mode, closed = sandbox_of(cfg)
    parts += ["sandbox " + mode] * bool(mode) + ["no network"] * closed + [
        "approve " + cfg["approve"]] * (cfg["approve"] != "auto") + ["/help for commands"]
    if len(" \u00b7 ".join(parts)) > shutil.get_terminal_size()[0]:
        parts = parts[1:-1] + ["/help"]   # shorter when narrow
    note(cfg, " \u00b7 ".join(parts), "info")

def terminal_approver(convo):
    """approve=ask's questions at the terminal (? lists the answers, /quit ends the turn)."""
    def approver(question, text):
        asking = question.endswith("] ")   # (not "Command: ", whose answer is a command)
        if asking and convo.get("quit"):   # the turn's other calls after a /quit
            return "n"
        answer = read_answer(question, text)
        while asking and answer.strip() == "?":
            show({}, "y run \u00b7 n/Enter skip \u00b7 a always this command \u00b7 e edit "
                 "\u00b7 or type a reason\n")
            answer = read_answer(question, text)
        convo["quit"] = asking and answer.strip() == "/quit"
        return "n the user ended the turn" if convo["quit"] else answer

    def quit_asked(cfg, messages, calls):   # the step hook: a /quit ends the turn
        return cfg["run"].get("approver") is approver and convo.get("quit") and not isinstance(
            calls, BaseException) and "done"   # (Ctrl+C, a signal: not swallowed)
    HOOKS["step"].insert(0, quit_asked)
    return approver

def read_answer(question, text=""):
    """The answer typed to question ("" at the input's end), text ready to edit; no history."""
    readline, columns = sys.modules.get("readline"), shutil.get_terminal_size()[0]
    if display_width(question) >= columns:   # wrapped at spaces (a terminal breaks words)
        *lines, last = wrap_words(question, columns - 1)
        show({}, "\n".join(lines) + "\n")
        question = last + " "
    before = readline.get_current_history_length() if readline else 0
    if text and readline:
        readline.set_pre_input_hook(lambda: (readline.insert_text(text), readline.redisplay()))
    try:
        return input(question)
    except EOFError:
        show({}, "\n")
        return ""
    except KeyboardInterrupt:
        sys.stdout.write("\r\033[K")   # the question's line cleared
        raise
    finally:
        if readline:
            readline.set_pre_input_hook(None)
            if readline.get_current_history_length() > before:
                readline.remove_history_item(before)

def run_direct(cfg, command, own_stdin=True):
    """`!command` run by bash on the terminal (stdin /dev/null without own_stdin): its status."""
    import signal
    import subprocess
    sys.stdout.flush()
    previous = signal.signal(signal.SIGINT, lambda *_: None)   # (SIG_IGN would be inherited)
    try:   # Ctrl+C reaches the command, not bantam
        code = subprocess.call([SHELL, "-c", command], env=command_env(cfg),
                               stdin=None if own_stdin else subprocess.DEVNULL)
    finally:
        signal.signal(signal.SIGINT, previous)
    code = 128 - code if code < 0 else code
    if code:
        note(cfg, "[exit %d]" % code, "info")
    return code

def ctrl_c(convo, arg):
    """Ctrl+C at the prompt (arg: the line dropped); twice within 2 s on an empty line quits."""
    last, convo["ctrl_c"] = convo.get("ctrl_c", 0.0), 0.0 if arg else time.monotonic()
    show(convo["cfg"], "\n")
    if convo["ctrl_c"] and convo["ctrl_c"] - last < 2:
        return QUIT
    if convo["ctrl_c"]:
        note(convo["cfg"], "[Ctrl+C again within 2 s quits]", "info")

COMMANDS["\x03"] = (ctrl_c, None)
COMMANDS.update({"/quit": (COMMANDS["/quit"][0], "exit (also /exit, or Ctrl+D on an empty line)"),
                 "/exit": (COMMANDS["/quit"][0], None)})
COMMANDS["!"] = (lambda convo, command: run_direct(convo["cfg"], command, sys.stdin.isatty()),
                 "run cmd with bash here, outside the conversation")
HOOKS["turn"].append(pasted)


# ----------------------------------------------------------------------------------------
# Changes and undo: in a git work tree, the files (tracked and untracked, not ignored) kept as
# git trees before and after each turn, the user's index, HEAD and stash untouched (outside git:
# not tracked). A turn's changes in one line; /diff shows them, /undo takes them back
# ----------------------------------------------------------------------------------------

DEFAULTS["snapshots"] = True   # keep the work tree around each turn for /diff and /undo
EVENTS.update(changes="files", diff="text")

def git_out(top, args, index=None):
    """git's output for args in top, or None; never the user's index, nor an fsmonitor program."""
    import subprocess
    env = dict(os.environ, GIT_INDEX_FILE=index) if index else None
    try:
        done = subprocess.run(["git", "-C", top, "-c", "core.fsmonitor=false"] + args, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "surrogateescape") if done.returncode == 0 else None

def with_index(top, steps, index_from=None):
    """The last output of git steps [args] on a temporary copy of index_from; None if one fails."""
    import shutil
    import tempfile
    folder = tempfile.mkdtemp(prefix="bantam-git-")
    index, out = os.path.join(folder, "index"), ""
    try:
        if index_from and os.path.isfile(index_from):   # (git then reads only what changed)
            shutil.copyfile(index_from, index)
        for args in steps:
            out = out if out is None else git_out(top, args, index)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)

def snapshot(cfg):
    """{"top": the work tree's folder, "tree": a git tree of its files now}, None outside git."""
    started, top = time.monotonic(), git_out(".", ["rev-parse", "--show-toplevel"])
    real = top and git_out(".", ["rev-parse", "--git-path", "index"])
    tree = real and with_index(top.strip(), [["add", "-A"], ["write-tree"]], real.strip())
    if time.monotonic() - started > 1.0 and not LEARNED.get("slow_snapshot"):   # (over 1 s)
        LEARNED["slow_snapshot"] = True   # (said once a process)
        note(cfg, "[the work tree's snapshot took %.1f s: snapshots=false in model.cfg turns "
             "it off, and /undo with it]" % (time.monotonic() - started), "info")
    return {"top": top.strip(), "tree": tree.strip()} if tree else None

def changes_of(entry, after=None):
    """[{"path", "status": changed, new or deleted}] of a turn (after: from its end to after)."""
    trees = [entry["after"], after] if after else [entry["before"], entry["after"]]
    names = (git_out(entry["top"], ["diff", "--no-renames", "--name-status", "-z"] + trees)
             or "").split("\0")
    return [{"path": path, "status": {"A": "new", "D": "deleted"}.get(code, "changed")}
            for code, path in zip(names[0::2], names[1::2]) if path]

def keep_changes(convo, prompt, go):
    """The turn hook: the work tree kept before the turn and compared after; a change said."""
    cfg = convo["cfg"]
    before = cfg["snapshots"] and snapshot(cfg)
    try:
        go(prompt)
    finally:
        after = before and snapshot(cfg)
        entry = after and {"top": before["top"], "before": before["tree"], "after": after["tree"]}
        files = entry and changes_of(entry)
        if files:
            turns(convo).append(entry)
            convo["session"]["written"] = None   # (saved with the turn's trees)
            save_session(cfg, convo["session"], convo["messages"])
            emit(cfg, "changes", files=files)

def turns(convo):
    """The turns that changed files, oldest first (in the session file's head: -c, /load undo)."""
    head, sid = convo["session"].setdefault("head", {}), convo["session"]["id"]
    if "turns" not in head:
        head["turns"] = session_head(sid).get("turns", []) if sid else []
    head["turns"][:] = [t for t in head["turns"] if "top" in t]   # (an earlier bantam's: no git)
    return head["turns"]

def changed_turns(convo, command, none):
    """turns(convo); if none, an error: the text none, or that command needs a git work tree."""
    if turns(convo):
        return turns(convo)
    if git_out(".", ["rev-parse", "--show-toplevel"]) is None:
        raise BantamError("%s works in a git work tree (git init here to use it)" % command)
    raise BantamError(none)

def show_changes(state, event):
    """changed: a.py, b.md (new), c.txt (deleted) · /diff to see, /undo to take back."""
    listed = ", ".join(terminal_safe(f["path"]) + (" (%s)" % f["status"]) * (
        f["status"] != "changed") for f in event["files"])
    show_on_stderr(state, "changed: %s \u00b7 /diff to see, /undo to take back" % listed, "dim")

def show_diff(state, event):
    """A unified diff, added lines green and removed ones red (plain without colour)."""
    fresh_line(state)
    for line in event["text"].splitlines(True):
        head = line[:1] * (line[:4] not in ("+++ ", "--- "))
        write(state, line, {"+": "result", "-": "error", "@": "marker"}.get(head))
    state["out"].flush()

def cmd_diff(convo, arg):
    """/diff [N]: the changes of the last turn (of the last N turns)."""
    if arg and not (arg.isdigit() and int(arg) > 0):
        raise BantamError("usage: /diff [N]: the changes of the last N turns")
    chosen = changed_turns(convo, "/diff", "no turn of this conversation has changed files yet")
    diffs = [git_out(t["top"], ["diff", "--no-color", "--no-renames", t["before"], t["after"]])
             for t in chosen[-int(arg or 1):]]
    emit(convo["cfg"], "diff", text="".join(d or "" for d in diffs))

def cmd_undo(convo, arg):
    """/undo [all]: put the files back as they were before the last turn that changed them."""
    cfg, done = convo["cfg"], changed_turns(
        convo, "/undo", "nothing to undo: no turn of this conversation has changed files")
    entry, now = done[-1], snapshot(cfg)
    since = {f["path"] for f in changes_of(entry, now["tree"])} if now else set()
    kept = [] if arg == "all" else [f["path"] for f in changes_of(entry) if f["path"] in since]
    todo = [f for f in changes_of(entry) if f["path"] not in kept]
    show(cfg, "".join("  %s %s\n" % ({"new": "remove ", "deleted": "restore"}.get(
        f["status"], "revert "), terminal_safe(f["path"])) for f in todo) + "".join(
        "  left alone (changed since the turn; /undo all takes it back too): %s\n" %
        terminal_safe(path) for path in kept))
    if read_answer("Undo the last turn's changes? [y/N] ").strip().lower() not in ("y", "yes"):
        return show(cfg, "[nothing undone]\n")
    try:   # what the turn created removed, the rest as before the turn
        for f in todo:
            if f["status"] == "new" and os.path.lexists(os.path.join(entry["top"], f["path"])):
                os.unlink(os.path.join(entry["top"], f["path"]))
    except OSError as e:
        raise BantamError("cannot put the files back: %s" % e)
    back = [f["path"] for f in todo if f["status"] != "new"]
    if back and with_index(entry["top"], [["read-tree", entry["before"]], [
            "checkout-index", "-f", "--"] + back]) is None:
        raise BantamError("git could not restore %s" % ", ".join(back))
    done.pop()
    append_user(convo["messages"], "[the user undid the changes of the last turn: %s]" % ", ".join(
        f["path"] for f in todo))
    convo["session"]["written"] = None
    save_session(cfg, convo["session"], convo["messages"])
    show(cfg, "[undone: %d file%s as before the turn]\n" % (len(todo), "s" * (len(todo) != 1)))

PLAIN.update(changes=show_changes, diff=show_diff)
TERMINAL.update(changes=show_changes, diff=show_diff)
COMMANDS.update({"/diff": (cmd_diff, "/diff [N]: the files the last turn (N turns) changed"),
                 "/undo": (cmd_undo, "put back the files the last turn changed (asks first)")})
HOOKS["turn"].append(keep_changes)


# ----------------------------------------------------------------------------------------
# The command line: its flags, their work before the first prompt and after a batch turn
# ----------------------------------------------------------------------------------------

def setting_flag(key, value=None):
    """An argparse action setting config key key (None: --set KEY=VALUE) to the flag's value."""
    import argparse

    class SetKey(argparse.Action):
        def __call__(self, parser, args, raw, option=None):
            name, text = key, raw if value is None else value
            if key is None:   # --set KEY=VALUE
                name, sep, text = raw.partition("=")
                name, text = name.strip().lower(), text.strip()
                if not sep or name not in DEFAULTS:
                    raise ConfigError("--set %s: expected KEY=VALUE with a config key (%s)"
                                      % (raw, ", ".join(DEFAULTS)))
            args.__dict__.setdefault("overrides", {})[name] = parse_value(
                name, text, self.option_strings[-1])
            if key is None and name in SECRET_KEYS and text:
                note({}, "warning: --set %s: a secret in your shell history" % name, "warning")
    return SetKey

def more_flags(parser):
    """Part II's flags and --help's text (made when the command line is read: argparse loads)."""
    import argparse
    def error(message):   # one line naming the option, not the whole usage text (exit 2)
        raise ConfigError("%s (see bantam --help)" % message)
    parser.error = error
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("A tiny command-line AI agent for any OpenAI-compatible API.\n"
                          "Without a prompt: an interactive session (type /help there).")
    parser.epilog = "\n\n".join("\n".join(wrap_words(paragraph, 92)) for paragraph in (
        "config: ~/.bantam/model.cfg (key=value lines), this folder's model.cfg over it (once "
        "trusted: --trust), then BANTAM_<KEY>, then the default; flags beat them all. Keys: "
        + ", ".join(DEFAULTS) + ".",
        "exit status: 0 done, 1 failed after retries, 2 usage, config or request error, 3 "
        "stopped by a budget, 130 interrupted, 129 hang-up, 143 terminated, 141 stdout closed."))
    add, setting = parser.add_argument, setting_flag
    add("-p", "--prompt", metavar="TEXT", help="run one turn with this prompt (+ piped stdin)")
    add("-m", "--model", action=setting("model"), help="the model (config key model)")
    add("-e", "--endpoint", metavar="URL", action=setting("endpoint"), help="the API's base URL")
    add("--set", metavar="KEY=VALUE", action=setting(None), help="set any config key (repeatable)")
    add("--config", metavar="FILE", help="read this config file instead of model.cfg")
    add("-c", "--continue", dest="cont", action="store_true", help="resume this folder's latest")
    add("--session", metavar="ID", help="continue conversation ID, or start one with that id")
    add("--delete", metavar="ID", help="delete saved conversation ID (or unique prefix), then exit")
    add("-q", "--quiet", action="store_true", help="stdout: only the answer; stderr: only problems")
    add("--jsonl", action="store_true", help="print the events as JSON lines")
    add("--trace", metavar="FILE", action=setting("trace_file"), help="append the events to FILE")
    leash = parser.add_mutually_exclusive_group()
    leash.add_argument("--ask", nargs=0, action=setting("approve", "ask"), help="ask each time")
    leash.add_argument("--yolo", nargs=0, action=setting("approve", "auto"), help="never ask")
    add("--sandbox", metavar="MODE", choices=CHOICES["sandbox"], action=setting("sandbox"),
        help="off, workspace or read-only: where commands may write")
    trust = parser.add_mutually_exclusive_group().add_argument
    trust("--trust", action="store_true", help="trust this folder: its model.cfg may steer bantam")
    trust("--no-trust", action="store_true", help="an untrusted folder: your own settings, "
          "without asking (BANTAM_TRUST=0)")
    add("--show-config", action="store_true", help="print every setting and its source, then exit")
    add("--version", action="version", version="bantam " + VERSION)

FLAGS.append(more_flags)

def batch_prompt(args):
    """The batch prompt: -p TEXT (piped stdin added), a file, '-', or a sentence (no file)."""
    text = args.prompt_file
    if text and text != "-" and args.prompt is None and not os.path.exists(text) and (
            len(text.split()) > 1 or "/" not in text and not os.path.splitext(text)[1]):
        args.prompt, args.prompt_file = text, None
    if args.prompt is None:
        return read_prompt(args.prompt_file)
    if args.prompt.startswith("!"):
        return args.prompt
    if args.prompt_file:
        raise ConfigError("give a prompt file or -p, not both")
    piped = "" if sys.stdin.isatty() else read_prompt("-")
    return args.prompt + ("\n\n<stdin>\n%s\n</stdin>" % piped.rstrip("\n")) * bool(piped.strip())

def unused_settings(cfg):
    """Rows (key, value, where: not used and why) of the folder's values that are not used."""
    sources = cfg["sources"]
    why = ("the folder's model.cfg changed since you trusted it (%s)" % ", ".join(
        sources["changed"]) if sources.get("changed") else "the folder is not trusted")
    return [(key, shown_untrusted(key, value), where + " (not used: %s)" % why)
            for key, (value, where) in sources["untrusted"].items()]

def show_config(cfg):
    """--show-config: every setting, its value (secrets as ***) and where it came from."""
    sources = cfg["sources"]
    rows = [(key, shown_value(cfg, key), sources[key]) for key in DEFAULTS]
    rows.append(("system_prompt", "(%d characters)" % len(cfg["system_prompt"]),
                 sources["system_prompt"]))
    if sources.get("project_instructions_file"):
        rows.append(("", "+ project instructions", sources["project_instructions_file"]))
    rows += unused_settings(cfg)
    rows.append(("withheld_env", ", ".join(withheld_variables(cfg)) or "(none)",
                 "kept from commands"))
    show(cfg, "".join("%-20s %-40s %s\n" % row for row in rows))

def keyless(cfg):
    """Why no prompt may go out (the default endpoint, never set up, has no key), else None."""
    if not (cfg["api_key"] or cfg["headers"]) and cfg["endpoint"] == DEFAULTS["endpoint"]:
        return ("no API key for %s, so nothing is sent: set api_key in ~/.bantam/model.cfg, "
                "export OPENAI_API_KEY=..., use -e http://localhost:11434/v1 -m MODEL for a local "
                "server, or in the REPL: /cfg api_key KEY (it writes that file), /endpoint URL"
                % DEFAULTS["endpoint"])

def refuse_keyless(convo, prompt, go):
    """The turn hook keeping a prompt from the default endpoint while no key is set (exit 2)."""
    if keyless(convo["cfg"]):
        raise ConfigError(keyless(convo["cfg"]))
    return go(prompt)

def start(convo, args):
    """The start hook: the flags' work, every check before a request is paid for, a batch turn."""
    import io   # PYTHONUNBUFFERED=1: a short write to a pipe would lose the rest unsaid
    import signal
    if sys.stdout is None:   # `>&-`: the same run would fail the same way again
        raise ConfigError("stdout is closed: there is nowhere to write the answer")
    sys.stdin = sys.stdin or open(os.devnull)   # closed (`<&-`, `2>&-`): read or write nothing
    sys.stderr = sys.stderr or open(os.devnull, "w")
    if isinstance(getattr(sys.stdout, "buffer", None), io.RawIOBase):
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(sys.stdout.buffer), sys.stdout.encoding,
                                      write_through=True)
    if hasattr(sys.stdout, "reconfigure"):   # a Latin-1 terminal shows '?' for an emoji
        sys.stdout.reconfigure(errors="replace")
    cfg = convo["cfg"]
    for key, (_, where) in [kv for _, layer in cfg["sources"]["layers"] for kv in layer.items()]:
        if key not in DEFAULTS:   # (a config file's: Part I ignored it)
            note({}, "%s: unknown config key %r (ignored)" % (where, key), "warning")
    if args.delete:
        return cmd_delete(None, args.delete) or 0
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))   # a dropped SSH: saved, stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # saved, like a Ctrl+C
    if args.no_trust:   # as BANTAM_TRUST=0, which settle and trust_folder read
        os.environ["BANTAM_TRUST"] = "0"
    if cfg["sources"]["system_prompt"] == os.path.abspath("system.txt") and not folder_file(
            "system.txt"):   # a symlink out of the folder (said): not its text
        cfg["sources"]["system_prompt"], cfg["system_prompt"] = "built-in", PROMPTS["system"]
    settle(cfg)
    hide_secrets(cfg)
    if args.show_config:
        return show_config(cfg) or 0
    batch = args.prompt is not None or args.prompt_file is not None
    prompt = batch_prompt(args) if batch else None
    trust_folder(cfg, args, not batch and sys.stdin.isatty(), lambda trust: settle(cfg, trust))
    hide_secrets(cfg)
    check_sandbox(cfg, True)   # exit 2 now when it cannot be had: never silently unsandboxed
    if args.prompt is not None and prompt.startswith("!"):   # typed by the user (never a file's)
        return run_direct(cfg, prompt[1:])
    try:   # a file that cannot be written fails now, before the model is paid
        trace = cfg["trace_file"] and open(os.path.expanduser(cfg["trace_file"]), "a",
                                           encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError("cannot write %s: %s" % (e.filename, e.strerror))
    if prompt is not None and not prompt.strip():
        raise ConfigError("the prompt is empty")
    tokens = (len(prompt or "") + 3) // 4   # over half the key's window: the server's is asked
    window = context_window(cfg) if tokens > cfg["context_window"] // 2 else tokens
    if tokens > window:
        raise ConfigError("the prompt is about %d tokens (%d characters), more than the model's "
                          "context window of %d tokens" % (tokens, len(prompt), window))
    convo["session"], convo["messages"][:] = start_conversation(cfg, args)
    stream = sys.stdout
    if args.jsonl and not batch:   # the events alone on stdout, the rest on stderr
        sys.stdout.flush()
        stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    rendered = cfg["render"] == "always" or (cfg["render"] == "auto" and sys.stdout.isatty())
    convo["views"][0] = jsonl_view(stream, cfg) if args.jsonl else VIEWS["plain"](cfg, QUIET) if (
        args.quiet and batch) else VIEWS["terminal" if rendered else "plain"](cfg)
    convo["views"] += [usage_meter(convo)] + ([jsonl_view(trace, cfg)] if trace else [])
    emit(cfg, "start", version=VERSION, model=cfg["model"], mode="batch" if batch else "repl",
         session=convo["session"]["id"], time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if cfg["sources"].get("trust_note"):   # said through the run's view (-q, --jsonl)
        note(cfg, cfg["sources"]["trust_note"], "info")
    if not batch and keyless(cfg):   # (refuse_keyless holds the prompts until a key is set)
        note(cfg, "[%s]" % keyless(cfg), "info")
    convo.update(args=args, batch=batch)
    cfg["run"].update(approved=set(), approver=terminal_approver(convo) if sys.stdin.isatty()
                      and sys.stdout.isatty() else None)
    if batch:
        return turn(convo, prompt)   # its exit status: batch_answer's
    if sys.stdin.isatty():
        setup_terminal(convo)
    resumed(convo)

def batch_answer(convo, prompt, go):
    """The turn hook: a signal said (see start); in batch mode, -q's answer, the exit status."""
    try:
        go(prompt)
    except SystemExit as stop:
        note(convo["cfg"], "[terminated]" if stop.code == 143 else "[hung up]")
        raise
    if not convo.get("batch"):
        return
    messages, cfg = convo["messages"], convo["cfg"]
    asked = max(i for i, m in enumerate(messages) if m["role"] == "user" or i == 0)
    answer = re.sub(r"^\s*<(think|thinking)>.*?</\1>\s*", "", last_answer(messages[asked:]),
                    count=1, flags=re.S)   # (its reasoning, written into the content)
    answer += "\n" if answer and not answer.endswith("\n") else ""
    if convo["args"].quiet:
        show(cfg, answer)
    if not answer:   # an empty stdout with exit 0 would read as an answer to a script
        note(cfg, "[no answer: the turn ended without one]")
    return BUDGET_EXIT if convo.get("ended") == "budget" else 0 if answer else 1

def typed(convo, prompt, go):
    """The turn hook (outermost) of the REPL: !cmd runs with bash; a mistyped /command is said."""
    name = prompt.strip().partition(" ")[0]
    if convo.get("batch") or not re.match(r"!|/[a-z]+$", name):   # (a path: /etc/hosts...)
        return go(prompt)
    if name.startswith("!"):
        return COMMANDS["!"][0](convo, prompt.strip()[1:])
    note(convo["cfg"], "unknown command %s (see /help)" % name)

HOOKS["start"].append(start)
HOOKS["turn"] += [batch_answer, refuse_keyless, typed]


if __name__ == "__main__":
    sys.exit(main())
