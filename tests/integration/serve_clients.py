"""Misbehaving HTTP clients for test_serve_transport.sh, on raw sockets bound to
chosen loopback addresses (Linux routes all of 127.0.0.0/8 to lo, so 127.0.0.N
is a different client address to the server).

    python3 serve_clients.py crowd PORT --count 200 --slow-from 127.0.0.2 --want-open N
    python3 serve_clients.py late PORT --deadline S
    python3 serve_clients.py full PORT --deadline S --addresses A --per N
    python3 serve_clients.py gone PORT BODY
    python3 serve_clients.py framing PORT

Each scenario checks what the server must do, prints one line per finding and
exits 0 when every check holds, 1 otherwise. Every wait is bounded (a scenario
ends within about 20 s whatever the server does).
"""
import argparse
import json
import select
import socket
import sys
import time

# A request that never ends, sent a byte at a time.
SLOW_HEAD = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nX-Padding: " + b"x" * 400)

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def connect(port, source, timeout=3.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(s):
    """True when the server has closed s (end of file or reset); never blocks."""
    r, _, _ = select.select([s], [], [], 0)
    if not r:
        return False
    try:
        return s.recv(4096, socket.MSG_PEEK) == b""
    except OSError:
        return True


def exchange(port, source, raw, timeout=5.0):
    """Send raw bytes, read until the server closes or timeout: (bytes, closed)."""
    s = connect(port, source, timeout)
    out = b""
    closed = False
    try:
        s.sendall(raw)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            if not d:
                closed = True
                break
            out += d
    except OSError:
        closed = True
    finally:
        s.close()
    return out, closed


def get(port, source, path="/health", timeout=5.0):
    """A plain GET: the status, or None when the connection failed."""
    raw = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").encode()
    try:
        out, _ = exchange(port, source, raw, timeout)
    except OSError:
        return None
    if not out.startswith(b"HTTP/1.1 "):
        return None
    return int(out[9:12])


class Slow:
    """Connections that send SLOW_HEAD a byte per tick and never finish."""

    def __init__(self, port, sources, per_source, budget=8.0):
        self.socks = []
        self.refused = 0
        end = time.monotonic() + budget  # connects that hang must not add up
        for src in sources:
            for _ in range(per_source):
                try:
                    if time.monotonic() > end:
                        raise OSError("out of time")
                    self.socks.append([connect(port, src, 1.0), 0])
                except OSError:
                    self.refused += 1
        for s, _ in self.socks:
            s.setblocking(False)

    def tick(self):
        for entry in self.socks:
            s, sent = entry
            if sent is None:
                continue
            if closed_by_server(s):
                entry[1] = None
                continue
            try:
                s.send(SLOW_HEAD[sent % len(SLOW_HEAD):][:1])
                entry[1] = sent + 1
            except OSError:
                entry[1] = None

    def open_count(self):
        return sum(1 for _, sent in self.socks if sent is not None)

    def close(self):
        for s, _ in self.socks:
            s.close()


def crowd(a):
    """Many slow clients from one address hold at most --max-per-client
    connections, and a client from another address is answered at once."""
    slow = Slow(a.port, [a.slow_from], a.count)
    try:
        # at least 1.5 s of trickling; then until the server has refused the
        # connections over the limit (it accepts them one by one)
        t0 = time.monotonic()
        while time.monotonic() < t0 + 1.5 or (slow.open_count() > a.want_open and
                                               time.monotonic() < t0 + 6):
            slow.tick()
            time.sleep(0.25)
        t0 = time.monotonic()
        status = get(a.port, a.probe_from)
        took = time.monotonic() - t0
        check(status == 200, f"GET /health from {a.probe_from} beside {a.count} slow clients "
              f"from {a.slow_from}: status {status} in {took:.2f} s")
        slow.tick()
        n = slow.open_count()
        check(n == a.want_open, f"{n} of the {a.count} slow connections from {a.slow_from} "
              f"are still open (want {a.want_open}: the per-client limit)")
    finally:
        slow.close()


def late(a):
    """A slow header and a slow body are both cut off at the deadline; a prompt
    request on another connection meanwhile is answered."""
    head = connect(a.port, "127.0.0.3")
    body = connect(a.port, "127.0.0.4")
    body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 400\r\n\r\n{")
    t0 = time.monotonic()
    socks = {"a slow header": [head, None, 0], "a slow body": [body, None, 1]}
    for s, _, _ in socks.values():
        s.setblocking(False)
    give_up = t0 + a.deadline + 8
    while time.monotonic() < give_up and any(v[1] is None for v in socks.values()):
        for v in socks.values():
            if v[1] is not None:
                continue
            if closed_by_server(v[0]):
                v[1] = time.monotonic() - t0
                continue
            try:
                v[0].send(SLOW_HEAD[v[2] % len(SLOW_HEAD):][:1] if v[0] is head else b" ")
                v[2] += 1
            except OSError:
                v[1] = time.monotonic() - t0
        time.sleep(0.2)
    status = get(a.port, "127.0.0.5")
    check(status == 200, f"GET /health meanwhile: status {status}")
    for name, (s, when, _) in socks.items():
        s.close()
        check(when is not None and a.deadline - 0.5 <= when <= a.deadline + 3,
              f"{name} closed by the server after "
              f"{'never' if when is None else f'{when:.2f} s'} (--request-timeout {a.deadline})")


def full(a):
    """Slow clients from several addresses fill every connection slot; the
    deadline frees them, and a normal client gets in."""
    sources = [f"127.0.0.{10 + i}" for i in range(a.addresses)]
    slow = Slow(a.port, sources, a.per)
    try:
        t0 = time.monotonic()
        slow.tick()
        n = slow.open_count()
        check(n == a.addresses * a.per, f"{n} slow connections from {a.addresses} addresses "
              f"hold the slots (want {a.addresses * a.per})")
        status = None
        while time.monotonic() < t0 + a.deadline + 6:
            slow.tick()
            status = get(a.port, "127.0.0.1", timeout=1.0)
            if status == 200:
                break
            time.sleep(0.25)
        took = time.monotonic() - t0
        check(status == 200 and took < a.deadline + 4,
              f"a normal client got in after {took:.2f} s (status {status}; --request-timeout "
              f"{a.deadline})")
        # connected over a moment, they are dropped over a scan or two
        while slow.open_count() and time.monotonic() < t0 + a.deadline + 4:
            slow.tick()
            time.sleep(0.1)
        check(slow.open_count() == 0, f"{slow.open_count()} slow connections still open "
              f"{time.monotonic() - t0:.2f} s after they connected")
    finally:
        slow.close()


def gone(a):
    """Send a request and go away before its answer."""
    body = a.body.encode()
    s = connect(a.port, "127.0.0.1")
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.5)
    s.close()
    check(True, "sent the request and closed the connection after 0.5 s")


def slowread(a):
    """A streamed answer read a few bytes at a time, slowly, while a client from another
    address is answered at once: the stream arrives whole (its chunks, then [DONE])."""
    body = a.body.encode()
    s = connect(a.port, "127.0.0.1", timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(1.0)  # the answer is ready and waits on a full socket
    t0 = time.monotonic()
    code = get(a.port, "127.0.0.4")
    check(code == 200 and time.monotonic() - t0 < 3, "another client answered while the stream "
          "waits for its reader")
    data = b""
    while True:
        chunk = s.recv(64)
        if not chunk:
            break
        data += chunk
        if data.endswith(b"data: [DONE]\n\n"):
            break
        time.sleep(0.002)
    s.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    events = [e for e in payload.split(b"\n\n") if e.startswith(b"data: ")]
    check(b"200 OK" in head and b"text/event-stream" in head, "HTTP 200, text/event-stream")
    check(events and events[-1] == b"data: [DONE]" and len(events) == a.chunks + 1,
          f"{len(events) - 1} chunks then [DONE] (want {a.chunks}), read slowly")


def framing(a):
    """Content-Length headers that differ, or beside Transfer-Encoding: 400
    with an error object and the connection closed; nothing after the first
    length is read as a second request. Identical ones are one length."""
    body = b'{"prompt": [1, 2], "max_tokens": 1}'
    n = str(len(body)).encode()
    cases = [
        ("lengths that differ, the full one first", 400,
         b"Content-Length: " + n + b"\r\nContent-Length: 5\r\n", body),
        ("lengths that differ, the short one first", 400,
         b"Content-Length: 5\r\nContent-Length: " + n + b"\r\n", body),
        ("a length beside chunked", 400,
         b"Content-Length: " + n + b"\r\nTransfer-Encoding: chunked\r\n",
         b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"),
        ("the same length twice", 200,
         b"Content-Length: " + n + b"\r\nContent-Length: " + n + b"\r\n", body),
    ]
    for name, want, headers, payload in cases:
        raw = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n" + payload
        # a second request after it: read as one only when the framing was clear
        raw += b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        out, closed = exchange(a.port, "127.0.0.1", raw)
        answers = out.count(b"HTTP/1.1 ")
        status = int(out[9:12]) if out.startswith(b"HTTP/1.1 ") else None
        if want == 200:
            check(status == 200 and answers == 2, f"{name}: status {status}, {answers} answers "
                  "(want 200, then /health's)")
            continue
        head, _, rest = out.partition(b"\r\n\r\n")
        try:
            err = json.loads(rest)["error"]
            good = err["code"] == 400 and "framing" in err["message"]
        except (ValueError, KeyError, TypeError):
            good = False
        check(status == 400 and good and answers == 1 and closed and
              b"connection: close" in head.lower(),
              f"{name}: status {status}, {answers} answer(s), closed {closed}: "
              f"{out[:300]!r}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("crowd")
    c.add_argument("port", type=int)
    c.add_argument("--count", type=int, default=200)
    c.add_argument("--slow-from", default="127.0.0.2")
    c.add_argument("--probe-from", default="127.0.0.1")
    c.add_argument("--want-open", type=int, required=True)
    c = sub.add_parser("late")
    c.add_argument("port", type=int)
    c.add_argument("--deadline", type=float, required=True)
    c = sub.add_parser("full")
    c.add_argument("port", type=int)
    c.add_argument("--deadline", type=float, required=True)
    c.add_argument("--addresses", type=int, required=True)
    c.add_argument("--per", type=int, required=True)
    c = sub.add_parser("gone")
    c.add_argument("port", type=int)
    c.add_argument("body")
    c = sub.add_parser("slowread")
    c.add_argument("port", type=int)
    c.add_argument("body")
    c.add_argument("--chunks", type=int, required=True)
    c = sub.add_parser("framing")
    c.add_argument("port", type=int)
    a = p.parse_args()
    {"crowd": crowd, "late": late, "full": full, "gone": gone, "framing": framing,
     "slowread": slowread}[a.cmd](a)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
