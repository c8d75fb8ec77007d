"""Runs inside sl-client: real TCP (HTTP) and UDP clients against the lab's VIPs; prints one JSON line.

  lab_client.py http URL COUNT [--source ADDR]         COUNT new connections, one GET each
  lab_client.py udp HOST PORT COUNT                   COUNT new UDP flows, one datagram each
  lab_client.py http-until URL STOPFILE               new connections without pause until STOPFILE exists
  lab_client.py keepalive URL SECONDS                 one connection, a GET every 0.1 s for SECONDS
  lab_client.py idle URL STOPFILE                     one connection: a GET, its local port printed ({"port": N}),
                                                      idle until STOPFILE exists, then a second GET
"""

import http.client
import json
import os
import socket
import sys
import time
from collections import Counter
from urllib.parse import urlparse


def get(url, source=None, timeout=3):
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("GET", u.path or "/")
        return conn.getresponse().read().decode().strip()
    finally:
        conn.close()


def main():
    mode = sys.argv[1]
    answers, errors = Counter(), []
    started = time.monotonic()
    if mode == "http":
        url, count = sys.argv[2], int(sys.argv[3])
        source = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--source" else None
        for _ in range(count):
            try:
                answers[get(url, source)] += 1
            except Exception as e:  # noqa: BLE001 - every failure is reported
                errors.append(f"{type(e).__name__}: {e}")
    elif mode == "udp":
        host, port, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        for i in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(3)
            try:
                s.sendto(b"ping %d" % i, (host, port))
                answers[s.recv(200).decode().split(":")[0]] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {e}")
            finally:
                s.close()
    elif mode == "http-until":
        url, stopfile = sys.argv[2], sys.argv[3]
        while not os.path.exists(stopfile):
            try:
                answers[get(url)] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"{time.monotonic() - started:.2f}s {type(e).__name__}: {e}")
    elif mode == "keepalive":
        url, seconds = sys.argv[2], float(sys.argv[3])
        u = urlparse(url)
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=3)
        first = None
        while time.monotonic() - started < seconds:
            try:
                conn.request("GET", u.path or "/")
                name = conn.getresponse().read().decode().strip()
                if first is None:
                    first = name
                    print(json.dumps({"first": name}), flush=True)  # the test picks another backend to stop
                answers[name] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"{time.monotonic() - started:.2f}s {type(e).__name__}: {e}")
                break
            time.sleep(0.1)
    elif mode == "idle":
        url, stopfile = sys.argv[2], sys.argv[3]
        u = urlparse(url)
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=3)
        for request in range(2):
            try:
                conn.request("GET", u.path or "/")
                answers[conn.getresponse().read().decode().strip()] += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {e}")
                break
            if request == 0:
                print(json.dumps({"port": conn.sock.getsockname()[1]}), flush=True)
                while not os.path.exists(stopfile):
                    time.sleep(0.05)
    print(json.dumps({"answers": answers, "errors": errors[:20], "error_count": len(errors),
                      "seconds": round(time.monotonic() - started, 2)}))


if __name__ == "__main__":
    main()
