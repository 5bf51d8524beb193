"""Transport and start-up (issue 5): one keep-alive connection for the whole process, a
transparent reconnect when the server closed it, CONNECT proxies, late imports, and no
network call before the first prompt.

Everything runs for real: bantam.py as a subprocess or on a pseudo-terminal, the FakeServer
(which counts the TCP connections it accepts), and two small TCP helpers defined here: a
relay that can cut its connections like a server dropping an idle keep-alive connection,
and a CONNECT proxy.
"""

import base64
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unittest

from tests.support import (
    BANTAM, BantamTestCase, Pty, completion, run_program, strip_ansi, text_stream,
    tool_call_stream, usage)

CHILD_MARK = "this is a child agent"        # bantam's note in a subagent's system prompt
TITLE_MARK = "Write a title"                # bantam's /save summary request
MODELS_WINDOW = "/262144"                    # the context_window key's default: batch asks no server


# ---------------------------------------------------------------- TCP helpers

def pump(src, dst):
    """Copy bytes from src to dst until EOF or an error, then pass the EOF on."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Relay:
    """A TCP forwarder on 127.0.0.1 to upstream_port; cut() closes every open connection.

    `accepted` counts client connections; `tunnels` (in ConnectProxy) records CONNECTs.
    """

    def __init__(self, upstream_port=None):
        """Listen on a free port and accept in a daemon thread."""
        self.upstream_port = upstream_port
        self.accepted = 0
        self._lock = threading.Lock()
        self._sockets = set()
        self._threads = []
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)   # so the accept loop notices stop()
        self.port = self._listener.getsockname()[1]
        self._spawn(self._accept_loop)

    def _spawn(self, target, *args):
        """Start a daemon thread and remember it for stop()."""
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        with self._lock:
            self._threads.append(thread)

    def _track(self, sock, add=True):
        """Add or forget an open socket."""
        with self._lock:
            (self._sockets.add if add else self._sockets.discard)(sock)

    def _accept_loop(self):
        """Accept clients until stop()."""
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:
                self.accepted += 1
            self._track(client)
            self._spawn(self._serve, client)

    def _serve(self, client):
        """Pipe one client to its upstream in both directions, then close both."""
        upstream = None
        try:
            upstream = self.open_upstream(client)
            if upstream is not None:
                self._track(upstream)
                back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
                back.start()
                pump(client, upstream)
                back.join(10)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    self._track(sock, add=False)
                    sock.close()

    def open_upstream(self, client):
        """Connect to the upstream port (a proxy decides from the CONNECT line instead)."""
        return socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)

    def cut(self):
        """Close every open connection at once, as a server dropping idle keep-alives does."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self):
        """Stop accepting, cut every connection, join the threads."""
        self._stop.set()
        self.cut()
        self._listener.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5)


class ConnectProxy(Relay):
    """An HTTP proxy on 127.0.0.1 that only does CONNECT tunnels, to 127.0.0.1 only.

    Each CONNECT is recorded in `tunnels` as {"line": request line, "target": "host:port",
    "headers": {lowercase name: value}}. refuse=N answers every CONNECT with status N.
    """

    def __init__(self, refuse=None):
        """Start the proxy; refuse is an HTTP status to answer instead of tunnelling."""
        self.tunnels = []
        self.refuse = refuse
        Relay.__init__(self)

    def open_upstream(self, client):
        """Read the CONNECT request, record it, connect to the target and answer 200."""
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(4096)
            if not data:
                return None
            head += data
        head, rest = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        method, target = (lines[0].split() + ["", ""])[:2]
        with self._lock:
            self.tunnels.append({"line": lines[0], "target": target, "headers": headers})
        host, _, port = target.rpartition(":")
        if self.refuse:
            client.sendall(b"HTTP/1.1 %d Refused by test proxy\r\nContent-Length: 0\r\n\r\n"
                           % self.refuse)
            return None
        if method != "CONNECT" or host != "127.0.0.1":   # tests stay on this machine
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return None
        upstream = socket.create_connection((host, int(port)), timeout=10)
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        return upstream


# ---------------------------------------------------------------- other helpers

IMPORT_LINE = re.compile(r"^import time:\s*\d+\s*\|\s*\d+\s*\|\s*(\S+)\s*$", re.M)


def imported(text):
    """The module names listed by `python3 -X importtime` in text."""
    return set(IMPORT_LINE.findall(text.replace("\r\n", "\n")))


def python_argv(*args):
    """argv running bantam.py with `python3 -S -X importtime` (no site noise in the list)."""
    return [sys.executable, "-S", "-X", "importtime", BANTAM] + list(args)


def mark_reached(path, proc, timeout=15):
    """Wait until path exists (a tool reached that point); fail if bantam exited first."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise AssertionError("bantam exited (%s) before %s appeared: %s"
                                 % (proc.returncode, path, proc.stderr.read().decode()[-2000:]))
        if time.monotonic() > deadline:
            raise AssertionError("%s did not appear within %ss" % (path, timeout))
        time.sleep(0.02)


def paths(server):
    """The recorded requests of server as "METHOD /path" strings, in order."""
    return ["%s %s" % (r["method"], r["path"]) for r in server.requests]


class TransportCase(BantamTestCase):
    """BantamTestCase plus relays and proxies that are stopped in cleanup."""

    def make_relay(self, upstream_port):
        """A Relay to upstream_port, stopped in cleanup."""
        relay = Relay(upstream_port)
        self.addCleanup(relay.stop)
        return relay

    def make_proxy(self, **kw):
        """A ConnectProxy, stopped in cleanup."""
        proxy = ConnectProxy(**kw)
        self.addCleanup(proxy.stop)
        return proxy

    def assertQuietSuccess(self, result, text):
        """The run exited 0, printed text, and said nothing about retries or errors."""
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(text, result.stdout)
        for word in ("retry", "error", "Traceback"):
            self.assertNotIn(word, result.stderr)


# ---------------------------------------------------------------- one connection

class OneConnectionTests(TransportCase):

    def test_batch_run_with_tools_subagent_and_models_uses_one_connection(self):
        """A batch turn with two tool iterations, a subagent with its own tool call, and the
        token line (which asks no GET /models in batch mode) travel on one TCP connection."""
        self.push(
            tool_call_stream([("call_1", "shell_exec", {"command": "echo one"})]),
            tool_call_stream([("call_2", "shell_exec", {"command": "echo two"})]),
            tool_call_stream([("call_3", "run_subagent", {"prompt": "say three"})]),
            tool_call_stream([("call_4", "shell_exec", {"command": "echo three"})]),  # child
            text_stream("child says three"),                                           # child
            text_stream("all done", usage=usage(120, 7)))
        result = self.run_batch("count to three")
        self.assertQuietSuccess(result, "all done")
        self.assertIn(MODELS_WINDOW, result.stderr)
        self.assertEqual(paths(self.server), ["POST /v1/chat/completions"] * 6)
        child = self.server.bodies[3]["messages"]
        self.assertIn(CHILD_MARK, child[0]["content"])
        self.assertEqual(child[1], {"role": "user", "content": "say three"})
        self.assertFalse(self.server.exhausted)
        self.assertEqual(self.server.connections, 1)

    def test_repl_session_with_save_and_models_uses_one_connection(self):
        """Two REPL turns, /save (its summary request) and /model share one TCP connection."""
        self.push(text_stream("answer one", usage=usage(10, 2)),
                  text_stream("answer two", usage=usage(20, 2)),
                  completion("Greeting chat"))
        term = self.pty()
        for line, shown in (("first question", "answer one"), ("second question", "answer two"),
                            ("/save", "[saved session"), ("/model", "now: test-model)")):
            term.expect("> ")
            term.sendline(line)
            term.expect(shown)
        term.expect("> ")
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0, term.output[-2000:])
        self.assertEqual(paths(self.server), [
            "POST /v1/chat/completions", "GET /v1/models",     # turn 1, then its token line
            "POST /v1/chat/completions",                       # turn 2 (window known)
            "POST /v1/chat/completions",                       # /save's summary
            "GET /v1/models"])                                 # /model
        self.assertIn(TITLE_MARK, self.server.bodies[2]["messages"][-1]["content"])
        saved = [n for n in os.listdir(self.ws.sessions_dir()) if n != "autosave.json"]
        with open(os.path.join(self.ws.sessions_dir(), saved[0]), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["summary"], "Greeting chat")
        self.assertEqual(self.server.connections, 1)


# ---------------------------------------------------------------- reconnect

class ReconnectTests(TransportCase):

    def test_connection_close_header_leads_to_a_quiet_new_connection(self):
        """A reply sent with "Connection: close" ends that connection; the next request of the
        turn opens a new one without any retry message."""
        self.push(tool_call_stream([("call_1", "shell_exec", {"command": "echo hi"})],
                                   headers={"Connection": "close"}),
                  text_stream("finished"))
        result = self.run_batch("go")
        self.assertQuietSuccess(result, "finished")
        self.assertEqual(len(self.server.posts), 2)
        self.assertEqual(self.server.connections, 2)

    def test_idle_connection_closed_during_a_tool_is_reopened_quietly(self):
        """The server drops the idle keep-alive connection while a tool runs: the next model
        request goes out on a new connection, with no retry message, and the turn succeeds."""
        relay = self.make_relay(self.server.port)
        self.ws.write_config(endpoint="http://127.0.0.1:%d/v1" % relay.port)
        wait_for_go = "touch idle; while [ ! -e go ]; do sleep 0.02; done; echo resumed"
        self.push(tool_call_stream([("call_1", "shell_exec", {"command": wait_for_go})]),
                  text_stream("finished"))
        self.ws.write("prompt.txt", "go")
        proc = self.start_bantam("prompt.txt")
        mark_reached(os.path.join(self.ws.work, "idle"), proc)
        relay.cut()   # the reply was read in full: the connection is idle now
        open(os.path.join(self.ws.work, "go"), "w").close()
        out, err = proc.communicate(timeout=30)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())
        self.assertQuietSuccess(result, "finished")
        self.assertIn("resumed", self.server.bodies[1]["messages"][-1]["content"])
        self.assertEqual((relay.accepted, self.server.connections), (2, 2))

    def test_idle_connection_closed_at_the_repl_prompt_is_reopened_quietly(self):
        """The server drops the connection while the user sits at the prompt: the next turn
        just works, on a new connection, without a retry or error message."""
        relay = self.make_relay(self.server.port)
        self.ws.write_config(endpoint="http://127.0.0.1:%d/v1" % relay.port)
        self.push(text_stream("answer one"), text_stream("answer two"))
        term = self.pty()
        term.expect("> ")
        term.sendline("first")
        term.expect("answer one")
        term.expect("> ")
        relay.cut()
        term.sendline("second")
        term.expect("answer two")
        term.expect("> ")
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0)
        text = strip_ansi(term.output)
        for word in ("retry", "error"):
            self.assertNotIn(word, text)
        self.assertEqual(len(self.server.posts), 2)
        self.assertEqual((relay.accepted, self.server.connections), (2, 2))


# ---------------------------------------------------------------- proxies

class ProxyTests(TransportCase):

    def run_turn_via(self, env):
        """Run one batch turn with env on a fresh server; (result, server)."""
        server = self.make_server([text_stream("proxied hello", usage=usage(5, 2))])
        self.ws.write_config(server)
        return self.run_batch("hi", env=env), server

    def test_http_proxy_and_no_proxy(self):
        """HTTP_PROXY / http_proxy send an http:// endpoint through a CONNECT tunnel (one for
        the whole run); NO_PROXY / no_proxy matching the host, or only HTTPS_PROXY, go direct."""
        cases = [  # (environment, tunnelled?)
            ({"HTTP_PROXY": "http://127.0.0.1:{p}"}, True),
            ({"http_proxy": "http://127.0.0.1:{p}"}, True),
            ({"HTTP_PROXY": "127.0.0.1:{p}"}, True),                    # no scheme
            ({"HTTP_PROXY": "http://127.0.0.1:{p}", "NO_PROXY": "example.com"}, True),
            ({"HTTP_PROXY": "http://127.0.0.1:{p}", "NO_PROXY": "127.0.0.1"}, False),
            ({"http_proxy": "http://127.0.0.1:{p}", "no_proxy": "example.com, 127.0.0.1"}, False),
            ({"HTTP_PROXY": "http://127.0.0.1:{p}", "NO_PROXY": "*"}, False),
            ({"HTTPS_PROXY": "http://127.0.0.1:{p}"}, False),           # for https:// only
        ]
        for env, tunnelled in cases:
            with self.subTest(env=env):
                proxy = self.make_proxy()
                env = {k: v.format(p=proxy.port) for k, v in env.items()}
                result, server = self.run_turn_via(env)
                self.assertQuietSuccess(result, "proxied hello")
                self.assertEqual(paths(server), ["POST /v1/chat/completions"])
                self.assertEqual(server.connections, 1)
                if tunnelled:
                    self.assertEqual(len(proxy.tunnels), 1, proxy.tunnels)
                    tunnel = proxy.tunnels[0]
                    self.assertRegex(tunnel["line"], r"^CONNECT 127\.0\.0\.1:%d HTTP/1\.[01]$"
                                     % server.port)
                    self.assertNotIn("proxy-authorization", tunnel["headers"])
                else:
                    self.assertEqual((proxy.accepted, proxy.tunnels), (0, []))

    def test_proxy_credentials_are_sent_as_basic_auth(self):
        """Credentials in the proxy URL (percent-decoded) reach the proxy as
        Proxy-Authorization: Basic, and never the model server."""
        cases = [  # (userinfo in the URL, user:password the proxy should get)
            ("user:pw", "user:pw"),
            ("us%40er:p%3Aw%20d", "us@er:p:w d"),
            ("token", "token:"),
        ]
        for userinfo, login in cases:
            with self.subTest(userinfo=userinfo):
                proxy = self.make_proxy()
                url = "http://%s@127.0.0.1:%d" % (userinfo, proxy.port)
                result, server = self.run_turn_via({"HTTP_PROXY": url})
                self.assertQuietSuccess(result, "proxied hello")
                self.assertEqual(len(proxy.tunnels), 1)
                expected = "Basic " + base64.b64encode(login.encode()).decode()
                self.assertEqual(proxy.tunnels[0]["headers"].get("proxy-authorization"), expected)
                for request in server.requests:
                    self.assertNotIn("proxy-authorization", request["headers"])

    def test_proxy_refusing_the_tunnel_is_reported(self):
        """A proxy that answers CONNECT with 407 fails the run with a message naming it."""
        proxy = self.make_proxy(refuse=407)
        result, server = self.run_turn_via({"HTTP_PROXY": "http://127.0.0.1:%d" % proxy.port})
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("407", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual((server.connections, server.requests), (0, []))
        self.assertGreaterEqual(len(proxy.tunnels), 1)

    def test_dead_proxy_is_named_without_its_password(self):
        """When nothing listens at the proxy, the error names the proxy (not the endpoint,
        which is fine) and never prints the proxy password."""
        proxy = self.make_proxy()
        port = proxy.port
        proxy.stop()   # the port is now closed
        result, server = self.run_turn_via({"HTTP_PROXY": "http://me:s3cret@127.0.0.1:%d" % port})
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("connection refused by the proxy 127.0.0.1:%d (HTTP_PROXY)" % port,
                      result.stderr)
        self.assertNotIn(server.url, result.stderr)
        self.assertNotIn("s3cret", result.stderr + result.stdout)


# ---------------------------------------------------------------- start-up

FLUSH_COUNTER = r"""
import io, sys
sys.path.insert(0, sys.argv[1])
import bantam

class CountingStdout(io.TextIOWrapper):
    flushes = 0
    def flush(self):
        CountingStdout.flushes += 1
        return io.TextIOWrapper.flush(self)

sys.stdout = CountingStdout(open(1, "wb", closefd=False), encoding="utf-8")
code = bantam.main(["prompt.txt"])
sys.stdout.flush()
sys.stderr.write("FLUSHES=%d\n" % CountingStdout.flushes)
sys.exit(code)
"""


class StartupTests(TransportCase):

    def test_version_imports_nothing_beyond_the_basics(self):
        """`bantam --version` prints the version without loading the network, TLS, process,
        line-editing or temp-file modules."""
        result = run_program(self.ws, python_argv("--version"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"^bantam \d+\.\d+")
        modules = imported(result.stderr)
        self.assertIn("json", modules)   # the list is read correctly
        for name in ("http.client", "socket", "ssl", "_ssl", "subprocess", "readline", "select",
                     "signal", "tempfile", "email", "urllib.parse", "base64"):   # (argparse brings
            # shutil, which on Python 3.8 brings bz2 and so threading: allowed)
            self.assertNotIn(name, modules)

    def test_batch_turn_loads_no_readline(self):
        """A whole batch turn never loads readline (only the REPL does)."""
        self.push(text_stream("plain hello", usage=usage(5, 2)))
        self.ws.write("prompt.txt", "hi")
        result = run_program(self.ws, python_argv("prompt.txt"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("plain hello", result.stdout)
        modules = imported(result.stderr)
        self.assertIn("http.client", modules)   # the list is read correctly
        self.assertNotIn("readline", modules)

    def test_https_endpoint_loads_ssl_and_reports_a_failed_handshake(self):
        """An https:// endpoint goes through ssl: against a plain-HTTP port the TLS handshake
        fails and bantam reports a network error (no traceback), final."""
        self.ws.write_config(endpoint="https://127.0.0.1:%d/v1" % self.server.port)
        self.ws.write("prompt.txt", "hi")
        result = run_program(self.ws, python_argv("prompt.txt"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("_ssl", imported(result.stderr))
        self.assertIn("network error", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(self.server.requests, [])   # no plain-text request leaked

    def test_repl_prompt_comes_before_any_network_work(self):
        """The REPL shows its prompt with readline loaded but without touching the network:
        no connection, no request, no http.client; the first prompt then uses one connection."""
        term = Pty([sys.executable, "-X", "importtime", BANTAM], cwd=self.ws.work,
                   env=self.ws.env())
        self.addCleanup(term.kill)
        term.expect(re.compile(r"(?:^|\n)(?:\x1b\[\?2004h)?> "))
        before_prompt = imported(term.before)
        time.sleep(0.3)   # grace for anything started in the background
        self.assertEqual((self.server.connections, self.server.requests), (0, []))
        self.assertIn("readline", before_prompt)
        for name in ("http.client", "socket", "ssl", "subprocess"):
            self.assertNotIn(name, before_prompt)
        self.push(text_stream("hello there"))
        term.sendline("hi")
        term.expect("hello there")
        term.expect("> ")
        term.sendline("/quit")
        self.assertEqual(term.wait(), 0)
        self.assertEqual((self.server.connections, len(self.server.posts)), (1, 1))

    def test_stream_is_flushed_per_network_read_not_per_piece(self):
        """A 3000-piece reply arriving in one burst is written with far fewer flushes than
        pieces, and arrives whole."""
        text = "".join("abcdefghij"[i % 10] for i in range(3000))
        self.push(text_stream(text, pieces=1, split=1 << 22))
        self.ws.write("prompt.txt", "hi")
        result = run_program(self.ws, [sys.executable, "-c", FLUSH_COUNTER, os.path.dirname(BANTAM)])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(text, result.stdout)
        flushes = int(re.search(r"FLUSHES=(\d+)", result.stderr).group(1))
        self.assertLess(flushes, 300)


if __name__ == "__main__":
    unittest.main()
