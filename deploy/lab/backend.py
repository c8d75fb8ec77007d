#!/usr/bin/python3
"""A lab backend: answers HTTP on port 80 with its own name (GET /healthz -> "ok", for the health checks; GET /bytes/N
-> N bytes that every backend serves alike, SHAKE-128 of BLOB_SEED, for transfers whose sha256 a test checks) and UDP
on port 53 with "NAME: " + the datagram, on every address of its namespace (its own and any VIP on its loopback, for
dsr). Runs until killed.

usage: backend.py NAME"""

import functools
import hashlib
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = sys.argv[1]
BLOB_SEED = b"sluice lab"
MAX_BLOB = 256 << 20


@functools.lru_cache(maxsize=2)
def blob(size):
    return hashlib.shake_128(BLOB_SEED).digest(size)


class Http(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        kind = "text/plain"
        if self.path == "/healthz":
            body = b"ok\n"
        elif self.path.startswith("/bytes/") and self.path[7:].isdigit() and int(self.path[7:]) <= MAX_BLOB:
            body, kind = blob(int(self.path[7:])), "application/octet-stream"
        else:
            body = f"{NAME}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet: the lab's tests make thousands of requests
        pass


class Udp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(f"{NAME}: ".encode() + data, self.client_address)


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


udp = socketserver.ThreadingUDPServer(("0.0.0.0", 53), Udp)
threading.Thread(target=udp.serve_forever, daemon=True).start()
http = HttpServer(("0.0.0.0", 80), Http)
print(f"{NAME} listening on :80/tcp and :53/udp", flush=True)
http.serve_forever()
