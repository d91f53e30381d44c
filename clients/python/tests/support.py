"""Test support: the real reconciler binary, a fake vendor that really
commits, a fake API and a fault-injecting proxy.

The binary comes from $RECONCILER_BIN (``make test-python`` builds one and
sets it) or ``bin/reconciler`` of the checkout (``make build``); without
either, the tests that need it skip and say how to get one.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PY_ROOT = os.path.dirname(HERE)  # clients/python
REPO = os.path.dirname(os.path.dirname(PY_ROOT))

from reconciler_client import Result, result_from_response

TOKEN = "py-tenant-token-0123456789"
ADMIN_TOKEN = "py-admin-token-0123456789"
APPROVER_TOKEN = "py-approver-token-0123456789"
TENANT = "default"


def binary() -> str:
    """binary returns the reconciler binary, or skips the test."""
    path = os.environ.get("RECONCILER_BIN", "")
    if path:
        if not os.access(path, os.X_OK):
            raise unittest.SkipTest(f"RECONCILER_BIN={path} is not an executable file")
        return path
    path = os.path.join(REPO, "bin", "reconciler")
    if os.access(path, os.X_OK):
        return path
    raise unittest.SkipTest(
        "no reconciler binary: run `make test-python`, or set RECONCILER_BIN to a binary built "
        "with `go build -o /tmp/reconciler ./cmd/reconciler` (or run `make build`)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Server is `reconciler serve` on a temp data dir, HTTP on a free port,
    embedded NATS on another. Its URL comes from the JSON log line
    "listening" (key "http")."""

    def __init__(self, extra_args: Sequence[str] = (), config: str = "", env: Optional[Dict[str, str]] = None) -> None:
        self.binary = binary()
        self.data = tempfile.mkdtemp(prefix="reconciler-py-")
        self.extra_env = dict(env or {})
        if config:
            path = os.path.join(self.data, "reconciler.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(config)
            extra_args = ["--config", path, *extra_args]
        self.log: Deque[str] = deque(maxlen=200)
        self.url = ""
        last = ""
        for _ in range(3):  # the NATS port is chosen before it is bound: retry a lost race
            try:
                self._start(extra_args)
                return
            except RuntimeError as e:
                last = str(e)
        shutil.rmtree(self.data, ignore_errors=True)
        raise RuntimeError(last)

    def _start(self, extra_args: Sequence[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
        env.update(RECONCILER_TOKEN=TOKEN, RECONCILER_ADMIN_TOKEN=ADMIN_TOKEN)
        env.update(self.extra_env)
        args = [
            self.binary, "serve",
            "--data", self.data,
            "--http", "127.0.0.1:0",
            "--nats-listen", f"127.0.0.1:{free_port()}",
            *extra_args,
        ]
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        listening = threading.Event()

        def drain() -> None:  # owner: this Server; ends when the process closes stderr
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.log.append(line)
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening" and rec.get("http"):
                    self.url = "http://" + rec["http"]
                    listening.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + 60
        while not listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self._drain.join(5)
                if self.proc.stderr is not None:
                    self.proc.stderr.close()
                raise RuntimeError("reconciler serve did not start:\n" + "\n".join(self.log))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.data, ignore_errors=True)

    def admin(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Tuple[int, Any]:
        """admin sends a request with the admin token (the kill switch has no
        client method)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + ADMIN_TOKEN})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


_shared: Optional[Server] = None
_shared_lock = threading.Lock()


def server() -> Server:
    """server returns the server the tests share (started once, stopped at
    exit). Its resolver runs every 200 ms with next to no grace, so a row no lookup
    can settle is paged at once; every test uses its own run id."""
    global _shared
    with _shared_lock:
        if _shared is None:
            # (Grace 0 means the default, 60 s: 10 ms is the shortest that counts.)
            _shared = Server(["--resolver-interval", "200ms", "--resolver-grace", "10ms"])
            atexit.register(_shared.stop)
        return _shared


_autonomy: Optional[Server] = None

#: The autonomy server's config: the tenant of the shared server's tokens,
#: with an approver token (a file-only setting).
AUTONOMY_CONFIG = f"""tenants:
  - id: {TENANT}
    tokens: ["{TOKEN}"]
    approver_tokens: ["{APPROVER_TOKEN}"]
admin_tokens: ["{ADMIN_TOKEN}"]
"""


def autonomy_server() -> Server:
    """autonomy_server is a server with an approver token for the tenant,
    tracing on (spans to its stdout, which nobody reads) so a claim's
    traceparent header shows in the row it inserts. The write-autonomy
    tests share it."""
    global _autonomy
    with _shared_lock:
        if _autonomy is None:
            _autonomy = Server(config=AUTONOMY_CONFIG, env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "reconciler-py-test"})
            atexit.register(_autonomy.stop)
        return _autonomy


def run_id() -> str:
    return "py_" + uuid.uuid4().hex[:16]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left is what some tests do


class HTTPFake:
    """HTTPFake is a local http.server in a thread, handing each request to
    handle(handler, body)."""

    def __init__(self) -> None:
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.handle(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self.httpd = _QuietServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(h: BaseHTTPRequestHandler, status: int, body: Any, headers: Optional[Dict[str, str]] = None,
          content_type: str = "application/json") -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


def drop(h: BaseHTTPRequestHandler) -> None:
    """drop closes the connection without an answer."""
    h.close_connection = True
    try:
        h.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


# Faults of the fake vendor, one per request in order; past the list every
# request is answered normally.
OK = "ok"
HANG = "hang"  # commit, then answer only after the caller gave up
RESET = "reset"  # commit, then close the connection without an answer
E500 = "500"  # no commit, 500
E429 = "429"  # no commit, 429
E409 = "409"  # the object already exists: 409 naming it
DECLINE = "decline"  # commit a declined PaymentIntent, 402 with Stripe-Should-Retry: false


def parse_params(content_type: str, body: bytes) -> Dict[str, Any]:
    """parse_params reads a JSON body, or a form body as Stripe takes it
    (metadata[name]=value becomes {"metadata": {name: value}})."""
    if content_type.startswith("application/json"):
        try:
            v = json.loads(body or b"{}")
        except ValueError:
            return {}
        return v if isinstance(v, dict) else {}
    out: Dict[str, Any] = {}
    for k, v in urllib.parse.parse_qsl(body.decode("utf-8", "replace")):
        outer, _, inner = k.partition("[")
        if inner.endswith("]"):
            out.setdefault(outer, {})[inner[:-1]] = v
        else:
            out[k] = int(v) if v.isdigit() else v
    return out


class FakeVendor(HTTPFake):
    """FakeVendor is a Stripe-like vendor that really commits: POST
    /v1/payment_intents with an Idempotency-Key creates one object per key
    and replays the stored answer for a key it has seen, with
    Idempotent-Replayed: true, as Stripe does."""

    def __init__(self, *faults: str, hang: float = 1.5) -> None:
        self.faults: List[str] = list(faults)
        self.hang = hang
        self.lock = threading.Lock()
        self.posts: List[Tuple[str, Dict[str, Any]]] = []  # (Idempotency-Key, body)
        self.answers: Dict[str, Tuple[int, Dict[str, Any], Dict[str, str]]] = {}
        self.objects: Dict[str, Dict[str, Any]] = {}
        super().__init__()

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        key = h.headers.get("Idempotency-Key") or ""
        params = parse_params(h.headers.get("Content-Type") or "", body)
        with self.lock:
            self.posts.append((key, params))
            fault = self.faults.pop(0) if self.faults else OK
            if not key:
                status, obj, hdrs = 400, {"error": {"message": "an Idempotency-Key is required"}}, {}
            elif key in self.answers:
                status, obj, hdrs = self.answers[key]
                hdrs = dict(hdrs, **{"Idempotent-Replayed": "true"})
                fault = OK
            elif fault == E500:
                status, obj, hdrs = 500, {"error": {"type": "api_error"}}, {}
            elif fault == E429:
                status, obj, hdrs = 429, {"error": {"type": "rate_limit"}}, {}
            else:
                pid = "pi_%d" % (len(self.objects) + 1)
                if fault == DECLINE:
                    self.objects[pid] = dict(params, id=pid, status="requires_payment_method")
                    status, hdrs = 402, {"Stripe-Should-Retry": "false"}
                    obj = {"error": {"type": "card_error", "code": "card_declined", "payment_intent": {"id": pid}}}
                elif fault == E409:
                    self.objects[pid] = dict(params, id=pid, status="succeeded")
                    status, obj, hdrs = 409, {"id": pid, "error": {"type": "idempotency_error"}}, {}
                else:
                    self.objects[pid] = dict(params, id=pid, status="succeeded")
                    status, obj, hdrs = 200, self.objects[pid], {}
                self.answers[key] = (status, obj, hdrs)
        if fault == HANG:
            time.sleep(self.hang)
        if fault == RESET:
            drop(h)
            return
        try:
            reply(h, status, obj, hdrs)
        except OSError:
            pass  # the caller timed out and left

    def object_count(self) -> int:
        with self.lock:
            return len(self.objects)

    def keys(self) -> List[str]:
        with self.lock:
            return [k for k, _ in self.posts]


def vendor_call(vendor: FakeVendor, amount: int = 1050, timeout: float = 1.0,
                raise_errors: bool = False) -> Callable[[str, str], Result]:
    """vendor_call is a CallFunc creating a PaymentIntent with urllib, the
    ledger key as Idempotency-Key and the local id in the metadata. An error
    answer is returned as a Result naming the object the body names, or
    raised as urllib's HTTPError when raise_errors (do() reads it)."""

    def call(key: str, local_id: str) -> Result:
        body = json.dumps({"amount": amount, "currency": "usd", "metadata": {"metadata_local_id": local_id}})
        req = urllib.request.Request(vendor.url + "/v1/payment_intents", data=body.encode(), method="POST",
                                     headers={"Idempotency-Key": key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return result_from_response(resp, json.loads(resp.read())["id"])
        except urllib.error.HTTPError as e:
            with e:  # closed also when raised: do() keeps the exception as a cause
                if raise_errors:
                    raise
                obj = json.loads(e.read() or b"{}")
                receipt = obj.get("id") or obj.get("error", {}).get("payment_intent", {}).get("id", "")
                return result_from_response(e, receipt)

    return call


def never_called(test: unittest.TestCase) -> Callable[[str, str], Result]:
    def call(key: str, local_id: str) -> Result:
        test.fail(f"the vendor was called (key {key})")
        raise AssertionError

    return call


def poll(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """poll waits until cond() is true, instead of a sleep."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Seen:
    """Seen is one request a Proxy or an API fake received."""

    def __init__(self, method: str, target: str, body: bytes, headers: Optional[Dict[str, str]] = None) -> None:
        self.method = method
        self.path, _, self.query = target.partition("?")
        self.body = body
        #: The request's headers, names in lower case.
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}

    @property
    def wait_query(self) -> bool:
        return "wait=" in self.query


class _Answer:
    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        self.status, self.body, self.content_type = status, body, content_type


def answer(status: int, body: Any, content_type: str = "application/json") -> _Answer:
    """answer is a Proxy rule's canned answer: a JSON value, or bytes as they are."""
    return _Answer(status, body if isinstance(body, bytes) else json.dumps(body).encode(), content_type)


DROP_BEFORE = "drop before"  # close the connection; the upstream never sees the request
DROP_AFTER = "drop after"  # forward, then close without passing the answer on

Rule = Callable[[Seen], Any]


class Proxy(HTTPFake):
    """Proxy forwards to upstream, except where rule(seen) returns an answer
    (sent instead), DROP_BEFORE or DROP_AFTER. It keeps what it saw."""

    def __init__(self, upstream: str, rule: Rule) -> None:
        self.upstream = upstream
        self.rule = rule
        self.lock = threading.Lock()
        self.seen: List[Seen] = []
        super().__init__()

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        seen = Seen(h.command, h.path, body, dict(h.headers.items()))
        with self.lock:
            self.seen.append(seen)
        action = self.rule(seen) or None
        if isinstance(action, _Answer):
            reply(h, action.status, action.body, content_type=action.content_type)
            return
        if action == DROP_BEFORE:
            drop(h)
            return
        # From seen, which a rule may change (strip a header).
        headers = {k: v for k, v in seen.headers.items() if k.lower() in ("authorization", "content-type", "accept", "traceparent", "idempotency-key")}
        req = urllib.request.Request(self.upstream + h.path, data=body if h.command != "GET" else None,
                                     method=h.command, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=40) as resp:
                status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        if action == DROP_AFTER:
            drop(h)
            return
        reply(h, status, data, content_type=ctype)

    def count(self, method: str, path_suffix: str) -> List[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == method and s.path.endswith(path_suffix)]
