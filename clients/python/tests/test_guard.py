"""guarded_tool against the real binary, driven by a hand-rolled tool loop
through the double-email story (issue 28): an email.send times out after the
email API sent the message; the model re-emits the call with a new
idempotency_key of its own and a changed requested_at; the run is resumed
from scratch with the same run id. One email, one key (the ledger's, never
the model's), and the resumed run reads the stored receipt without a call —
and with scrubbing off (the negative control) the same story sends two.
Sync and async tools both. (No agent framework is installed here: there is
no PyPI; the decorated function is what function_tool or @tool would wrap.)"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import re
import subprocess
import sys
import threading
import time
import typing
import unittest
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable, Dict, List, Optional

import reconciler_client as rc

from . import support

def mailer_config(vendor: str) -> str:
    """mailer_config gives an email vendor a replay window (a Standard Webhooks sender's)."""
    return f"""tenants:
  - id: {support.TENANT}
    tokens: ["{support.TOKEN}"]
    approver_tokens: ["{support.APPROVER_TOKEN}"]
admin_tokens: ["{support.ADMIN_TOKEN}"]
standard:
  endpoints:
    - name: {vendor}
      tenant: {support.TENANT}
      secrets: ["whsec_{base64.b64encode(b"mailer-webhook-secret-0123456789").decode()}"]
      local_id_path: data.metadata_local_id
      vendor: {vendor}
      replay_window: 24h
"""


MAILER_CONFIG = mailer_config("mailer")

CHECKLIST = {
    "side_effect_documented": True, "key_born_in_runtime": True, "ledger_or_unique_field": True,
    "timeout_leaves_unknown": True, "error_classes_mapped": True, "duplicate_delivery_test": True,
    "checked_by": "py-tests",
}

#: email.send's registry entry: the message is the intent, the key goes in the body.
EMAIL_TOOL = {
    "vendor": "mailer", "class": "write_idempotent", "side_effect": "email",
    "key_placement": {"body_field": "idempotency_key"}, "intent_fields": ["to", "subject", "text"],
    "autonomy": "autonomous", "checklist": CHECKLIST,
}

_server: Optional[support.Server] = None
_lock = threading.Lock()


def mailer_server() -> support.Server:
    """mailer_server gives vendor "mailer" a replay window, so an unknown email is retried with its key."""
    global _server
    with _lock:
        if _server is None:
            _server = support.Server(config=MAILER_CONFIG)
            import atexit

            atexit.register(_server.stop)
        return _server


class Mailer(support.HTTPFake):
    """Mailer is a fake email API that really sends: POST /emails with a JSON
    body; it remembers an Idempotency-Key header (as Resend) or else a body
    idempotency_key (as Square) (the same key and message:
    the first answer again; the same key, another message: 409; a new key
    or none: a new email). The first email is answered only after `late`
    seconds when late is set: a caller that gave up never learns it was sent."""

    def __init__(self, late: float = 0.0) -> None:
        self.late = late
        self.lock = threading.Lock()
        self.posts: List[Dict[str, Any]] = []
        self.stored: Dict[str, Any] = {}
        self.sent = 0
        super().__init__()

    def handle(self, h: Any, body: bytes) -> None:
        try:
            msg = json.loads(body or b"{}")
        except ValueError:
            support.reply(h, 422, {"error": "validation_error"})
            return
        key = h.headers.get("Idempotency-Key") or msg.pop("idempotency_key", None) or None
        msg.pop("idempotency_key", None)
        late = 0.0
        with self.lock:
            self.posts.append({"key": key, "message": msg})
            if not isinstance(msg.get("to"), str) or not isinstance(msg.get("subject"), str):
                status, answer, hdrs = 422, {"error": "validation_error"}, {}
            elif key is not None and key in self.stored:
                first, eid = self.stored[key]
                if first != msg:
                    status, answer, hdrs = 409, {"error": "invalid_idempotent_request"}, {}
                else:
                    status, answer, hdrs = 200, {"id": eid}, {"Idempotent-Replayed": "true"}
            else:
                self.sent += 1
                eid = f"em_{self.sent}"
                if key is not None:
                    self.stored[key] = (msg, eid)
                status, answer, hdrs = 200, {"id": eid}, {}
                if self.sent == 1:
                    late = self.late
        if late:
            time.sleep(late)
        try:
            support.reply(h, status, answer, hdrs)
        except OSError:
            pass  # the caller gave up


def email_tool(client: rc.Client, run_id: str, mailer: Mailer, scrub: bool = True, use_async: bool = False) -> Callable[..., Any]:
    """email_tool is the developer's function, decorated: the vendor's fields of
    the arguments, the key the guard put in idempotency_key (the registry's body field)."""

    def post(to: str, subject: str, text: str, idempotency_key: str, local_id: str) -> rc.Result:
        body = json.dumps({"from": "ops@example.com", "to": to, "subject": subject, "text": text,
                           "idempotency_key": idempotency_key, "metadata_local_id": local_id}).encode()
        req = urllib.request.Request(mailer.url + "/emails", data=body, method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1.5) as resp:  # an HTTPError is an answer too
            return rc.result_from_response(resp, json.load(resp)["id"])

    guard = rc.guarded_tool(client, tool=client.get_tool("email.send"), run_id=run_id, scrub=scrub)
    if use_async:

        @guard
        async def send_email(to: str, subject: str, text: str, requested_at: str = "", idempotency_key: str = "",
                             *, ctx: rc.GuardContext) -> rc.Result:
            """Send an email."""
            return await asyncio.get_running_loop().run_in_executor(None, post, to, subject, text, idempotency_key, ctx.local_id)

        return send_email

    @guard
    def send_email_sync(to: str, subject: str, text: str, requested_at: str = "", idempotency_key: str = "",
                        *, ctx: rc.GuardContext) -> rc.Result:
        """Send an email."""
        return post(to, subject, text, idempotency_key, ctx.local_id)

    return send_email_sync


class EmailModel:
    """EmailModel is the model of the incident: it calls email_send with an
    idempotency_key and requested_at of its own; told the outcome is
    unknown it re-emits the call anyway, a new key, a new timestamp; told it
    is done, it answers."""

    def __init__(self) -> None:
        self.keys: List[str] = []

    def __call__(self, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if results and not results[-1].startswith(("timeout", "network_error", "vendor_error", "in_progress")):
            return {"role": "assistant", "content": "Done: " + results[-1].split("\n")[0]}
        if len(results) >= 3:
            return {"role": "assistant", "content": "I could not send it."}
        key = "model-" + uuid.uuid4().hex
        self.keys.append(key)
        args = {"to": "bob@example.com", "subject": "Your refund", "text": "Your refund of $10.50 is on its way.",
                "requested_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + len(results))) + f".{len(results)}Z",
                "idempotency_key": key}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{len(results)}", "type": "function", "function": {"name": "email_send", "arguments": json.dumps(args)}}]}


def tool_loop(tool: Callable[..., Any], model: EmailModel) -> List[str]:
    """tool_loop is a hand-rolled agent loop (the OpenAI chat format); it returns the tool results the model read."""
    messages: List[Dict[str, Any]] = [{"role": "user", "content": "Email Bob that his refund is on its way."}]
    for _ in range(6):
        msg = model(messages)
        messages.append(msg)
        if not msg.get("tool_calls"):
            break
        for call in msg["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            out = tool(**args)
            if inspect.isawaitable(out):
                out = asyncio.run(out)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
    return [m["content"] for m in messages if m["role"] == "tool"]


class GuardedToolStoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = mailer_server()
        rc.Client(cls.srv.url, support.TOKEN).put_tool("email.send", EMAIL_TOOL)

    def story(self, scrub: bool, use_async: bool) -> None:
        """story runs the double-email story and asserts its outcome."""
        mailer = Mailer(late=5.0)  # the client gives up after 1.5 s: wide margins for a loaded machine
        self.addCleanup(mailer.close)
        client = rc.Client(self.srv.url, support.TOKEN, retries=2)
        run_id = support.run_id()
        first, again = EmailModel(), EmailModel()
        run1 = tool_loop(email_tool(client, run_id, mailer, scrub, use_async), first)
        posts_after_run1 = len(mailer.posts)
        # Resumed from scratch: a new tool, a new model, the same run id.
        run2 = tool_loop(email_tool(client, run_id, mailer, scrub, use_async), again)

        self.assertEqual(mailer.sent, 1, f"one email is sent (the email API sent {mailer.sent}; keys {[p['key'] for p in mailer.posts]})")
        keys = {p["key"] for p in mailer.posts}
        self.assertEqual(len(keys), 1, f"every attempt carried the same key: {keys}")
        key = keys.pop()
        self.assertNotIn(key, first.keys + again.keys, "the key is the ledger's, never the model's")
        rows = client.list(run_id=run_id).rows
        self.assertEqual(len(rows), 1)
        self.assertEqual(key, rows[0].raw.get("vendor_key") or rows[0].key, "the key sent is the row's vendor key")
        self.assertEqual(rows[0].status, "succeeded")
        self.assertEqual(rows[0].upstream_receipt_id, "em_1")
        self.assertEqual(posts_after_run1, 2, "the first run tried twice")
        self.assertEqual(len(run1), 2, run1)
        self.assertTrue(run1[0].startswith("timeout: outcome unknown — do not retry with new arguments"), run1[0])
        self.assertNotIn("Traceback", run1[0])
        self.assertTrue(run1[1].startswith("done: email.send succeeded (receipt em_1)"), run1[1])
        self.assertEqual(len(mailer.posts), posts_after_run1, "the resumed run called nothing")
        self.assertEqual(len(run2), 1, run2)
        self.assertTrue(run2[0].startswith("already_done: email.send already succeeded earlier for these arguments (receipt em_1)"), run2[0])

    def test_story_sync(self) -> None:
        self.story(scrub=True, use_async=False)

    def test_story_async(self) -> None:
        self.story(scrub=True, use_async=True)

    def test_negative_control_unscrubbed_sends_two_emails(self) -> None:
        for use_async in (False, True):
            with self.subTest(use_async=use_async):
                with self.assertRaises(AssertionError) as cm:
                    self.story(scrub=False, use_async=use_async)
                self.assertRegex(str(cm.exception), r"one email is sent \(the email API sent [2-9];")

    def test_signature_a_framework_reads(self) -> None:
        client = rc.Client(self.srv.url, support.TOKEN)
        mailer = Mailer()
        self.addCleanup(mailer.close)
        for use_async in (False, True):
            tool = email_tool(client, support.run_id(), mailer, use_async=use_async)
            self.assertEqual(tool.__name__, "email_send")
            self.assertEqual(tool.__doc__, "Send an email.")
            self.assertEqual(list(inspect.signature(tool).parameters), ["to", "subject", "text", "requested_at"])
            hints = typing.get_type_hints(tool)
            self.assertEqual(hints, {"to": str, "subject": str, "text": str, "requested_at": str, "return": str})
            self.assertEqual(inspect.iscoroutinefunction(tool), use_async)
        unscrubbed = email_tool(client, support.run_id(), mailer, scrub=False)
        self.assertEqual(list(inspect.signature(unscrubbed).parameters), ["to", "subject", "text", "requested_at", "idempotency_key"])

    def test_approval_answers_at_once_and_bad_arguments_are_words(self) -> None:
        client = rc.Client(self.srv.url, support.TOKEN, retries=2)
        approver = rc.Client(self.srv.url, support.APPROVER_TOKEN, retries=2)
        client.put_tool("py.guard.approval.email", dict(EMAIL_TOOL, autonomy="approval"))
        mailer = Mailer()
        self.addCleanup(mailer.close)

        @rc.guarded_tool(client, tool=client.get_tool("py.guard.approval.email"), run_id=support.run_id())
        def send(to: str, subject: str, text: str, idempotency_key: str = "", *, ctx: rc.GuardContext) -> rc.Result:
            req = urllib.request.Request(mailer.url + "/emails", method="POST", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"to": to, "subject": subject, "text": text, "idempotency_key": idempotency_key}).encode())
            with urllib.request.urlopen(req, timeout=2) as resp:
                return rc.result_from_response(resp, json.load(resp)["id"]), {"id": "shown to the model"}

        args = {"to": "bob@example.com", "subject": "Hi", "text": "Hello"}
        start = time.monotonic()
        a = send(**args, idempotency_key="model-1")
        b = send(**args)
        self.assertLess(time.monotonic() - start, 10, "neither call waited for the person (it would wait timeout, 30 s)")
        for text in (a, b):
            self.assertRegex(text, r"^awaiting_approval: this py\.guard\.approval\.email call (still )?waits for a person to approve it \(key [0-9a-f]{64}\); nothing was sent yet\.")
        self.assertEqual(mailer.posts, [])
        view = next(v for v in approver.list_approvals().approvals if v.row.tool == "py.guard.approval.email" and v.row.intent_fingerprint)
        approver.approve(view.approval.id, "alice", "ok")
        done = send(**args)
        self.assertTrue(done.startswith("done: py.guard.approval.email succeeded (receipt em_1).\nresult: {\"id\": \"shown to the model\"}"), done)
        self.assertTrue(send(**args).startswith("already_done:"))
        self.assertEqual(mailer.sent, 1)
        bad = send(to="bob@example.com", subject="Hi", text="x", cc="eve@example.com")
        self.assertTrue(bad.startswith("validation_failed: got an unexpected keyword argument 'cc'"), bad)


class GuardedToolWordsTest(unittest.TestCase):
    def test_bad_views_are_refused_when_decorating(self) -> None:
        client = rc.Client("http://127.0.0.1:1", "tok")
        base = {"name": "email.send", "vendor": "mailer", "class": "write_idempotent", "intent_fields": ["to"]}
        for change, want in [
            ({"class": "read"}, "a read tool changes nothing"),
            ({"class": "write"}, "want write_idempotent"),
            ({"name": ""}, "tool name is required"),
            ({"intent_fields": ["to", "request_id"]}, "intent field 'request_id' is key-like"),
            ({"intent_fields": ["to", "ref"], "key_placement": {"external_id_field": "ref"}}, "intent field 'ref' is key-like"),
        ]:
            with self.subTest(change=change):
                with self.assertRaisesRegex(TypeError, want):
                    rc.guarded_tool(client, tool=dict(base, **change), run_id="r")
        with self.assertRaisesRegex(TypeError, "must take a keyword parameter ctx"):
            rc.guarded_tool(client, tool=base, run_id="r")(lambda to: rc.Result())

        def keyed(to: str, request_id: str, *, ctx: rc.GuardContext) -> rc.Result:
            return rc.Result()

        with self.assertRaisesRegex(TypeError, "parameter 'request_id' is key-like, so the model never fills it"):
            rc.guarded_tool(client, tool=base, run_id="r")(keyed)
        # Named in the registry's placement, the guard fills it.
        placed = rc.guarded_tool(client, tool=dict(base, key_placement={"body_field": "request_id"}), run_id="r")(keyed)
        self.assertEqual(list(inspect.signature(placed).parameters), ["to"])

    def test_words(self) -> None:
        row = rc.Row(key="k1", status="failed_poison", last_http_status=422)
        cases = [
            (rc.Stopped("failed_poison", "k1", row), "validation_failed: the vendor refused this request (HTTP 422)"),
            (rc.Stopped("failed_poison", "k1", rc.Row(key="k1", last_http_status=402)), "refused: the vendor refused this request (HTTP 402)"),
            (rc.Stopped("tool_frozen", "", None), "frozen: an operator has switched email.send off; nothing was sent — do not retry."),
            (rc.Stopped("approval_denied", "k1", row), "denied: a person denied this email.send call (key k1)"),
            (rc.Stopped("approval_expired", "k1", row), "expired: nobody approved this email.send call in time (key k1)"),
            (rc.QueuedError("k1", row, "r"), "queued: this email.send call is queued for the outbox worker (key k1)"),
            (rc.Unavailable(503, "unavailable", "down"), "error: the ledger is unavailable (unavailable); nothing was sent"),
            (rc.TransportError("refused"), "error: the ledger could not be reached (TransportError); nothing was sent"),
            (rc.Unsettled("k1", "pending"), "in_progress: the same email.send call is in flight or its outcome is not known yet (status pending)"),
        ]
        for err, want in cases:
            with self.subTest(err=type(err).__name__):
                a = rc.answer_error("email.send", err)
                self.assertTrue(a.text.startswith(want), a.text)
                self.assertIs(a.error, err)

    def test_vendor_key_of_the_claim_answer_is_placed_and_sent(self) -> None:
        key = "a" * 64

        def row(status: str) -> Dict[str, Any]:
            return {"key": key, "status": status, "attempt": 1, "metadata_local_id": "rl_0123", "vendor_key": "vk_45chars_for_square"}

        class API(support.HTTPFake):
            """A server with vendor profiles: every row carries vendor_key."""

            def __init__(self) -> None:
                self.bodies: List[Any] = []
                super().__init__()

            def handle(self, h: Any, body: bytes) -> None:
                self.bodies.append(json.loads(body or b"null"))
                if h.path.endswith("/outcome"):
                    support.reply(h, 200, {"row": row("succeeded")})
                else:
                    support.reply(h, 201, {"decision": "proceed", "row": row("pending")})

        api = API()
        self.addCleanup(api.close)
        seen: List[Any] = []

        @rc.guarded_tool(rc.Client(api.url, "tok", retries=0), run_id="run_1",
                         tool={"name": "square.payments.create", "vendor": "square", "class": "write_idempotent",
                               "intent_fields": ["amount"], "key_placement": {"body_field": "idempotency_key"}})
        def pay(amount: int, idempotency_key: str = "", *, ctx: rc.GuardContext) -> rc.Result:
            seen.append((amount, idempotency_key, ctx))
            return rc.Result(http_status=200, receipt_id="pay_1")

        text = pay(amount=100, idempotency_key="model-1")
        self.assertTrue(text.startswith("done: square.payments.create succeeded (receipt pay_1)."), text)
        self.assertEqual(seen, [(100, "vk_45chars_for_square", rc.GuardContext(key=key, vendor_key="vk_45chars_for_square", local_id="rl_0123"))])
        self.assertEqual(api.bodies[0]["intent"], {"amount": 100}, "neither key is in the intent")

    def test_no_ledger_nothing_sent(self) -> None:
        called: List[str] = []

        @rc.guarded_tool(rc.Client(f"http://127.0.0.1:{support.free_port()}", "tok", retries=1),
                         tool={"name": "email.send", "vendor": "mailer", "class": "write_idempotent"}, run_id="r")
        def send(to: str, *, ctx: rc.GuardContext) -> rc.Result:
            called.append(to)
            return rc.Result(http_status=200)

        self.assertRegex(send(to="bob"), r"^error: the ledger could not be reached \(TransportError\); nothing was sent")
        self.assertEqual(called, [])


class GuardedEmailExampleTest(unittest.TestCase):
    """examples/guarded_email.py runs as written: the double-email story against a fake Resend."""

    def test_readme_shows_the_example(self) -> None:
        with open(os.path.join(support.PY_ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        m = re.search(r"<!-- python-guard-example:begin -->\n```python\n(.*?)```\n<!-- python-guard-example:end -->", readme, re.S)
        self.assertIsNotNone(m, "clients/python/README.md has no python-guard-example block")
        with open(os.path.join(support.PY_ROOT, "examples", "guarded_email.py"), encoding="utf-8") as f:
            self.assertEqual(m.group(1), f.read(), "the README's guarded_tool example is not examples/guarded_email.py")

    def test_example_runs_and_resumes(self) -> None:
        srv = support.Server(config=mailer_config("resend"))
        self.addCleanup(srv.stop)
        mailer = Mailer(late=5.0)
        self.addCleanup(mailer.close)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
        env.update(RECONCILER_URL=srv.url, RECONCILER_TOKEN=support.TOKEN, RESEND_URL=mailer.url, RESEND_API_KEY="re_test",
                   RUN_ID=support.run_id(), VENDOR_TIMEOUT="1.5",
                   PYTHONPATH=os.pathsep.join(filter(None, [support.PY_ROOT, os.environ.get("PYTHONPATH")])))
        example = os.path.join(support.PY_ROOT, "examples", "guarded_email.py")
        first = subprocess.run([sys.executable, example], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(first.stdout, "Done: done: email.send succeeded (receipt em_1). The vendor had already done it on an earlier attempt: it happened once.\n")
        self.assertEqual(len(mailer.posts), 2, "the timeout, then the model's second call")
        resumed = subprocess.run([sys.executable, example], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual(resumed.stdout, "Done: already_done: email.send already succeeded earlier for these arguments (receipt em_1); "
                                         "it was not sent again. Do not call it again for this request.\n")
        self.assertEqual(mailer.sent, 1, "one email")
        self.assertEqual(len(mailer.posts), 2, "the resumed run sent nothing")
        keys = {p["key"] for p in mailer.posts}
        self.assertEqual(len(keys), 1)
        self.assertRegex(keys.pop(), r"^[0-9a-f]{64}$", "the ledger's key, in the Idempotency-Key header")
        for p in mailer.posts:
            self.assertNotIn("requested_at", p["message"])
            self.assertEqual(p["message"]["tags"][0]["name"], "metadata_local_id")
            self.assertTrue(p["message"]["tags"][0]["value"].startswith("rl_"))


if __name__ == "__main__":
    unittest.main()
