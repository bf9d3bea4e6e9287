"""A minimal ADB device peer on 127.0.0.1: a stand-in for a phone, driven by the real `adb` client.

It speaks the device side of the ADB wire protocol over TCP, as `adbd` does after `adb connect`:
CNXN answered with CNXN (no AUTH), OPEN of `shell:` (legacy: no exit status, stderr merged into
stdout) and `sync:` (STAT, SEND/DATA/DONE, RECV, QUIT), WRTE/OKAY flow control and CLSE. Shell
commands run in this machine's `sh`, and file paths are this machine's, so tests point the
transport's device folder at a temporary directory.
"""

import os
import socket
import struct
import subprocess
import threading
from pathlib import Path

A_CNXN, A_OPEN, A_OKAY, A_CLSE, A_WRTE = (int.from_bytes(c, "little") for c in (b"CNXN", b"OPEN", b"OKAY", b"CLSE",
                                                                              b"WRTE"))
A_VERSION = 0x01000001
MAX_PAYLOAD = 256 * 1024
SYNC_CHUNK = 64 * 1024
BANNER = b"device::ro.product.name=edgeprune-peer;ro.product.model=peer;ro.product.device=peer;features=cmd"


def packet(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return struct.pack("<6I", command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, command ^ 0xFFFFFFFF) + data


class Connection:
    """One host connection: reads packets, runs each stream's service in its own thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.send_lock = threading.Lock()
        self.streams: dict[int, Stream] = {}
        self.next_id = 1

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        with self.send_lock:
            self.sock.sendall(packet(command, arg0, arg1, data))

    def read_exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("host closed the connection")
            data += chunk
        return data

    def serve(self) -> None:
        try:
            while True:
                command, arg0, arg1, length, _, magic = struct.unpack("<6I", self.read_exact(24))
                if magic != command ^ 0xFFFFFFFF:
                    raise ConnectionError("bad packet magic")
                data = self.read_exact(length) if length else b""
                self.dispatch(command, arg0, arg1, data)
        except (ConnectionError, OSError):
            pass
        finally:
            for stream in list(self.streams.values()):
                stream.closed.set()
                stream.incoming.put(None)
            self.sock.close()

    def dispatch(self, command: int, arg0: int, arg1: int, data: bytes) -> None:
        if command == A_CNXN:
            self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, BANNER)
        elif command == A_OPEN:
            local_id, self.next_id = self.next_id, self.next_id + 1
            stream = Stream(self, local_id, arg0)
            service = data.rstrip(b"\0").decode()
            if service.startswith("shell:") or service == "sync:":
                self.streams[local_id] = stream
                self.send(A_OKAY, local_id, arg0)
                threading.Thread(target=stream.run, args=(service,), daemon=True).start()
            else:
                self.send(A_CLSE, 0, arg0)
        elif command == A_WRTE and arg1 in self.streams:
            self.send(A_OKAY, arg1, arg0)
            self.streams[arg1].incoming.put(data)
        elif command == A_OKAY and arg1 in self.streams:
            self.streams[arg1].acked.set()
        elif command == A_CLSE and arg1 in self.streams:
            stream = self.streams.pop(arg1)
            stream.closed.set()
            stream.incoming.put(None)


class Stream:
    def __init__(self, connection: Connection, local_id: int, remote_id: int) -> None:
        import queue

        self.connection, self.local_id, self.remote_id = connection, local_id, remote_id
        self.incoming: queue.Queue[bytes | None] = queue.Queue()
        self.acked = threading.Event()
        self.closed = threading.Event()
        self.buffer = b""

    def write(self, data: bytes) -> None:
        for start in range(0, len(data), MAX_PAYLOAD):
            self.acked.clear()
            self.connection.send(A_WRTE, self.local_id, self.remote_id, data[start:start + MAX_PAYLOAD])
            while not self.acked.wait(0.1):  # the host's OKAY is flow control: one WRTE in flight
                if self.closed.is_set():
                    raise ConnectionError("stream closed")

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.incoming.get()
            if chunk is None:
                raise ConnectionError("stream closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def close(self) -> None:
        if self.connection.streams.pop(self.local_id, None) is not None:
            self.connection.send(A_CLSE, self.local_id, self.remote_id)

    def run(self, service: str) -> None:
        try:
            if service == "sync:":
                self.sync()
            else:
                done = subprocess.run(["sh", "-c", service[len("shell:"):]], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                if done.stdout:
                    self.write(done.stdout)
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                self.close()
            except OSError:
                pass

    def request(self) -> tuple[bytes, bytes | int]:
        header = self.read(8)
        ident, length = header[:4], struct.unpack("<I", header[4:])[0]
        if ident in (b"DONE", b"QUIT"):
            return ident, length  # DONE carries an mtime, not a length
        return ident, self.read(length)

    def sync(self) -> None:
        while True:
            ident, payload = self.request()
            if ident == b"QUIT":
                return
            if ident == b"STAT":
                try:
                    info = os.stat(payload)
                    self.write(b"STAT" + struct.pack("<3I", info.st_mode, info.st_size & 0xFFFFFFFF,
                                                     int(info.st_mtime)))
                except OSError:
                    self.write(b"STAT" + struct.pack("<3I", 0, 0, 0))
            elif ident == b"SEND":
                path, _, _mode = payload.decode().rpartition(",")
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as target:
                    while True:
                        kind, chunk = self.request()
                        if kind == b"DATA":
                            target.write(chunk)
                        elif kind == b"DONE":
                            break
                        else:
                            raise ConnectionError(f"unexpected {kind!r} in SEND")
                self.write(b"OKAY" + struct.pack("<I", 0))
            elif ident == b"RECV":
                try:
                    data = Path(payload.decode()).read_bytes()
                except OSError as error:
                    message = str(error).encode()
                    self.write(b"FAIL" + struct.pack("<I", len(message)) + message)
                    continue
                for start in range(0, len(data), SYNC_CHUNK):
                    chunk = data[start:start + SYNC_CHUNK]
                    self.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
                self.write(b"DONE" + struct.pack("<I", 0))
            else:
                message = f"unsupported sync request {ident!r}".encode()
                self.write(b"FAIL" + struct.pack("<I", len(message)) + message)
                return


class AdbPeer:
    """Listens on 127.0.0.1:port; `adb connect 127.0.0.1:port` makes it a device named by that address."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.serial = f"127.0.0.1:{self.port}"
        self.connections: list[Connection] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            connection = Connection(sock)
            self.connections.append(connection)
            threading.Thread(target=connection.serve, daemon=True).start()

    def stop(self) -> None:
        """Unplug the phone: stop listening and drop every connection."""
        self.listener.close()
        for connection in self.connections:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
