"""Unit tests of the C++ port's extras inside bantam.py: the write tool, the SOCKS5
client (against tests/socks_server.py) and set_config_line (the /cfg file editor).

The same features are tested end to end (a real bantam process, the FakeServer, a pty) in
tests/test_extras_cli.py."""
import http.client
import http.server
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import unittest
import unittest.mock

import bantam
from tests.socks_server import Socks5Server

tools = socks = cfgfile = bantam   # the parts' tests call them by their old module names

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


# ---- SOCKS5 -----------------------------------------------------------------------------

class Hello(http.server.BaseHTTPRequestHandler):
    """Answers every GET with its path; /close asks the client to close the connection."""
    protocol_version = "HTTP/1.1"
    timeout = 5

    def do_GET(self):
        body = ("hello " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.path == "/close":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class SocksTest(unittest.TestCase):

    def setUp(self):
        self.http = self.serve_http()

    def serve_http(self, context=None):
        """A real HTTP(S) server on 127.0.0.1; its port."""
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        server.daemon_threads = False   # so server_close() joins the handler threads
        if context:
            server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return server.server_address[1]

    def proxy(self, users=None):
        server = Socks5Server(users)
        self.addCleanup(server.stop)
        return server

    def get(self, conn, path):
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()

    def test_http_through_conn_sock_without_auth(self):
        proxy = self.proxy()
        conn = http.client.HTTPConnection("localhost", self.http, timeout=5)
        self.addCleanup(conn.close)
        conn.sock = socks.socks5_connect(proxy.url, "localhost", self.http, 5)
        self.assertEqual(self.get(conn, "/a"), (200, "hello /a"))
        self.assertEqual(self.get(conn, "/b"), (200, "hello /b"))   # keep-alive, same tunnel
        self.assertEqual(proxy.methods, [b"\x00"])
        self.assertEqual(proxy.requests, [
            {"command": 1, "atyp": 3, "address": "localhost", "port": self.http}])

    def test_conn_sock_reconnects_directly_after_close(self):
        """Why NOTES.md prefers the _create_connection hook: conn.sock covers one socket only."""
        proxy = self.proxy()
        conn = http.client.HTTPConnection("localhost", self.http, timeout=5)
        self.addCleanup(conn.close)
        conn.sock = socks.socks5_connect(proxy.url, "localhost", self.http, 5)
        self.get(conn, "/close")
        self.assertEqual(self.get(conn, "/again"), (200, "hello /again"))
        self.assertEqual(len(proxy.requests), 1)   # the second connection bypassed the proxy

    def test_http_through_hook_with_password_survives_reconnects(self):
        proxy = self.proxy({"bob": "p@ss:w%rd"})
        proxy.bound = b"\x03\x09localhost\x04\x38"   # a domain BND.ADDR must be consumed whole
        url = "socks5h://bob:p%40ss%3Aw%25rd@" + proxy.address
        conn = http.client.HTTPConnection("localhost", self.http, timeout=5)
        self.addCleanup(conn.close)
        conn._create_connection = lambda address, timeout, source=None: socks.socks5_connect(
            url, address[0], address[1], timeout)
        self.assertEqual(self.get(conn, "/close"), (200, "hello /close"))
        self.assertEqual(self.get(conn, "/again"), (200, "hello /again"))
        self.assertEqual(proxy.methods, [b"\x02", b"\x02"])
        self.assertEqual(proxy.auths, [("bob", "p@ss:w%rd")] * 2)
        self.assertEqual([(r["atyp"], r["address"]) for r in proxy.requests], [(3, "localhost")] * 2)

    @unittest.skipUnless(shutil.which("openssl"), "needs openssl to make a test certificate")
    def test_https_through_the_tunnel(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder)
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(cert, key)
        port = self.serve_http(server_context)
        context = ssl.create_default_context(cafile=cert)
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)   # 3.13: a bare test cert
        proxy = self.proxy()
        hooked = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
        self.addCleanup(hooked.close)
        hooked._create_connection = lambda address, timeout, source=None: socks.socks5_connect(
            proxy.url, address[0], address[1], timeout)
        self.assertEqual(self.get(hooked, "/tls"), (200, "hello /tls"))
        manual = http.client.HTTPSConnection("localhost", port, timeout=5, context=context)
        self.addCleanup(manual.close)
        manual.sock = context.wrap_socket(socks.socks5_connect(proxy.url, "localhost", port, 5),
                                          server_hostname="localhost")
        self.assertEqual(self.get(manual, "/manual"), (200, "hello /manual"))
        self.assertEqual([r["address"] for r in proxy.requests], ["localhost", "localhost"])

    def test_wrong_password(self):
        proxy = self.proxy({"bob": "secret"})
        url = "socks5://bob:wrong@" + proxy.address
        with self.assertRaisesRegex(socks.SocksError, "rejected the username/password") as caught:
            socks.socks5_connect(url, "localhost", self.http, 5)
        self.assertNotIn("wrong", str(caught.exception))
        self.assertEqual(proxy.requests, [])

    def test_no_acceptable_method(self):
        proxy = self.proxy({"bob": "secret"})
        with self.assertRaisesRegex(socks.SocksError, "no acceptable authentication method"):
            socks.socks5_connect(proxy.url, "localhost", self.http, 5)

    def test_each_refusal_code_has_its_message(self):
        proxy = self.proxy()
        for rep in range(1, 9):
            proxy.reply = rep
            with self.assertRaises(socks.SocksError) as caught:
                socks.socks5_connect(proxy.url, "localhost", self.http, 5)
            self.assertEqual(str(caught.exception), "SOCKS5 proxy %s could not connect to "
                             "localhost:%d (SOCKS5 reply %d)" % (proxy.address, self.http, rep))

    def test_proxy_refusing_the_connection(self):
        with socket.socket() as probe:   # a port with nobody listening
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with self.assertRaises(ConnectionRefusedError):
            socks.socks5_connect("127.0.0.1:%d" % port, "localhost", 80, 5)


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

    def test_crlf_and_bom_are_kept(self):
        windows = "\ufeff" + CONFIG.replace("\n", "\r\n")
        self.assertEqual(cfgfile.set_config_line(windows, "timeout", "5"), windows + "timeout=5\r\n")
        appended = cfgfile.set_config_line(windows.rstrip("\r\n"), "color", "never")
        self.assertEqual(appended, windows + "color=never\r\n")
        self.assertEqual(read_back(appended)["color"], "never")

    def test_values_with_hash_read_back_or_are_refused(self):
        text = cfgfile.set_config_line(CONFIG, "api_key", "a#b")
        self.assertEqual(read_back(text)["api_key"], "a#b")
        text = cfgfile.set_config_line(CONFIG, "model", "#x")   # "model = #x" would be a comment
        self.assertEqual(read_back(text)["model"], "#x")
        for value in ("a #b", " padded", "two\nlines"):
            with self.assertRaises(ValueError):
                cfgfile.set_config_line(CONFIG, "model", value)
        for key in ("", "a=b", "# model", " model"):
            with self.assertRaises(ValueError):
                cfgfile.set_config_line(CONFIG, key, "x")


if __name__ == "__main__":
    unittest.main()
