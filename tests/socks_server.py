"""A small SOCKS5 server for tests: 127.0.0.1, random port, records what it receives."""
import select
import socket
import struct
import threading

ALLOWED_TARGETS = ("127.0.0.1", "localhost")   # never relay anywhere but this machine


class Socks5Server:
    """A threaded SOCKS5 proxy: no-auth, or username/password when users is given; CONNECT to
    local targets only. Set .reply to a REP code to refuse, .bound to change BND in replies."""

    def __init__(self, users=None):
        self.users = users            # {"name": "password"}: method 02 required
        self.reply = 0                # REP for CONNECT replies; 0 relays
        self.bound = b"\x01" + bytes(6)   # ATYP BND.ADDR BND.PORT sent back (0.0.0.0:0)
        self.methods, self.auths, self.requests = [], [], []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.sockets, self.threads = [], []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.05)   # accept() polls so stop() is prompt
        self.port = self.listener.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.url = "socks5://" + self.address
        self.acceptor = threading.Thread(target=self.serve, daemon=True)
        self.acceptor.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def start_thread(self, target, *args):
        """Run target in a tracked thread."""
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def track(self, sock):
        """Remember sock so stop() closes it."""
        with self.lock:
            self.sockets.append(sock)
        return sock

    def serve(self):
        """Accept clients until stopped."""
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.start_thread(self.handle, self.track(client))

    def handle(self, client):
        """Serve one client; any protocol or socket error just ends it."""
        try:
            client.settimeout(5)
            upstream = self.negotiate(client)
            if upstream:
                self.relay(client, upstream)
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        finally:
            client.close()

    def negotiate(self, client):
        """The SOCKS5 handshake; the upstream socket, or None when refused."""
        _, count = recv_exact(client, 2)   # VER NMETHODS METHODS
        methods = recv_exact(client, count)
        self.methods.append(methods)
        want = 2 if self.users is not None else 0
        if want not in methods:
            client.sendall(b"\x05\xff")   # no acceptable methods
            return None
        client.sendall(bytes([5, want]))
        if want == 2:   # VER=01 ULEN UNAME PLEN PASSWD -> VER=01 STATUS
            _, size = recv_exact(client, 2)
            name = recv_exact(client, size).decode()
            password = recv_exact(client, recv_exact(client, 1)[0]).decode()
            self.auths.append((name, password))
            good = self.users.get(name) == password
            client.sendall(b"\x01" + (b"\x00" if good else b"\x01"))
            if not good:
                return None
        _, command, _, atyp = recv_exact(client, 4)   # VER CMD RSV ATYP DST.ADDR DST.PORT
        if atyp == 1:
            address = socket.inet_ntoa(recv_exact(client, 4))
        elif atyp == 4:
            address = socket.inet_ntop(socket.AF_INET6, recv_exact(client, 16))
        elif atyp == 3:
            address = recv_exact(client, recv_exact(client, 1)[0]).decode("ascii")
        else:
            client.sendall(b"\x05\x08\x00" + self.bound)
            return None
        port = struct.unpack(">H", recv_exact(client, 2))[0]
        self.requests.append({"command": command, "atyp": atyp, "address": address, "port": port})
        rep, upstream = self.reply, None
        if not rep and command != 1:
            rep = 7   # command not supported: CONNECT only
        if not rep and address not in ALLOWED_TARGETS:
            rep = 2   # not allowed by ruleset
        if not rep:
            try:
                upstream = self.track(socket.create_connection(("127.0.0.1", port), 5))
            except OSError:
                rep = 5
        client.sendall(bytes([5, rep, 0]) + self.bound)   # VER REP RSV ATYP BND.ADDR BND.PORT
        return upstream

    def relay(self, client, upstream):
        """Copy bytes both ways until either side closes or the server stops."""
        peers = {client: upstream, upstream: client}
        try:
            while not self.stopping.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        finally:
            upstream.close()

    def stop(self):
        """Stop accepting, close every socket, join every thread."""
        self.stopping.set()
        self.acceptor.join(5)   # first, so no thread starts after the snapshot below
        self.listener.close()
        with self.lock:
            sockets, threads = list(self.sockets), list(self.threads)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes a thread blocked in recv
            except OSError:
                pass
            sock.close()
        for thread in threads:
            thread.join(5)


def recv_exact(sock, size):
    """Exactly size bytes, or ValueError when the peer hangs up first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("peer closed")
        data += chunk
    return data
