"""A real S3-compatible server on loopback for the object-store tests: moto's standalone server
(``moto[server]``) behind a small HTTP proxy that counts every request and can misbehave on
purpose (fail the first N requests of an object, deny an object). Everything listens on
127.0.0.1 only and stops with the fixture."""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
    "<RequestId>dtrace-test</RequestId></Error>"
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Proxy"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        length = str(len(body))
        for k, v in headers:
            if k.lower() == "content-length" and self.command == "HEAD":
                length = v  # a HEAD response states the object's length, without a body
            elif k.lower() not in _HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        body = self._body()
        path = urlsplit(self.path).path
        fault = self.server.fault(self.command, path)
        if fault is not None:
            status, code = fault
            self._reply(status, [("Content-Type", "application/xml")], _ERROR.format(code=code, message=code).encode())
            return
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"host"}}
            headers["Host"] = "%s:%d" % self.server.upstream
            if self.headers.get("Transfer-Encoding"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self._reply(resp.status, resp.getheaders(), data)
        finally:
            conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self.denied: set[str] = set()

    def fault(self, method: str, path: str) -> tuple[int, str] | None:
        with self.lock:
            self.requests.append((method, path))
            if path in self.denied:
                return 403, "AccessDenied"
            queue = self.failures.get(path)
            if method == "GET" and queue:
                return queue.pop(0)
        return None


class S3Server:
    """moto on 127.0.0.1 behind a counting proxy; ``endpoint`` is the proxy's URL."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self.moto_endpoint = f"http://{host}:{port}"
        self._proxy = _Proxy((host, port))
        self._thread = threading.Thread(target=self._proxy.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = "http://127.0.0.1:%d" % self._proxy.server_address[1]

    def client(self):
        """A boto3 client straight to moto (test set-up; not counted)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.moto_endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    # -- what the proxy saw and does -----------------------------------------------------------
    def reset(self) -> None:
        with self._proxy.lock:
            self._proxy.requests.clear()
            self._proxy.failures.clear()
            self._proxy.denied.clear()

    def counts(self, method: str = "GET", objects_only: bool = True) -> Counter:
        """Requests of ``method`` per path since the last reset (object paths ``/bucket/key`` only)."""
        with self._proxy.lock:
            reqs = list(self._proxy.requests)
        return Counter(p for m, p in reqs if m == method and (not objects_only or p.strip("/").count("/") >= 1))

    def fail_first(self, bucket: str, key: str, n: int, status: int = 503, code: str = "SlowDown") -> None:
        with self._proxy.lock:
            self._proxy.failures[f"/{bucket}/{key}"] = [(status, code)] * n

    def deny(self, bucket: str, key: str) -> None:
        with self._proxy.lock:
            self._proxy.denied.add(f"/{bucket}/{key}")

    def stop(self) -> None:
        self._proxy.shutdown()
        self._proxy.server_close()
        self._moto.stop()
