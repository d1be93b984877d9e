"""A TCP proxy that can simulate an outage of whatever it fronts.

The local stack can put it between the functions and the Firestore emulator
(``dcm-status up --chaos``). While the flag file exists, every open connection
is cut and new ones are closed at once: to the client library it looks like
Firestore is down (UNAVAILABLE), while the emulator keeps its data.

    python -m infra.local.faultproxy --listen 4000 --target 127.0.0.1:8080 --flag /path/outage
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from pathlib import Path


class FaultProxy:
    def __init__(self, listen_port: int, target: tuple[str, int], flag: Path):
        self.listen_port = listen_port
        self.target = target
        self.flag = flag
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    def down(self) -> bool:
        return self.flag.exists()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close(src)
            self._close(dst)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _watch(self) -> None:
        while True:
            if self.down():
                with self._lock:
                    conns = list(self._conns)
                for c in conns:
                    self._close(c)
            time.sleep(0.05)

    def serve(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.listen_port))
        server.listen(128)
        threading.Thread(target=self._watch, daemon=True).start()
        while True:
            client, _ = server.accept()
            if self.down():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", required=True, help="HOST:PORT")
    parser.add_argument("--flag", required=True, help="outage while this file exists")
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    FaultProxy(args.listen, (host, int(port)), Path(args.flag)).serve()


if __name__ == "__main__":
    main()
