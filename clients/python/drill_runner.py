#!/usr/bin/env python3
"""drill_runner.py is the Python agent runtime of ``reconciler drill
--runtime python``: it drives reconciler_client exactly as an agent
runtime would, on the harness's orders.

It speaks the runner protocol of drill/doc.go (version 1): it greets with
one JSON line on stdout, then reads one op per line on stdin and writes one
answer per line on stdout, each op on a thread of its own, so answers come
in any order, matched by ``id``. Nothing else is written to stdout. At the
end of stdin it exits. The harness sets its environment:
RECONCILER_DRILL_URL (agent ``a``'s API base URL is that + ``/a``),
RECONCILER_DRILL_TOKEN, and the client settings RECONCILER_DRILL_POLL_MS,
_WAIT_MS, _RETRIES and _BACKOFF_MS.

It announces the protocol steps ``await_approval`` and ``queued``
(CAPABILITIES): ``do`` is the client's own ``Client.do``, which waits out
an approval and raises QueuedError on an outbox tool's claim, or with the
op's ``wait_queued`` waits for the worker's result; the runner only maps
what it returns or raises onto the protocol.

Standard library only, as the client; not part of the installed package.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional

import reconciler_client as rc

PROTOCOL = 1
# The protocol steps beyond the base this runner implements (drill/doc.go).
CAPABILITIES = ["await_approval", "queued"]

_out_lock = threading.Lock()
_clients_lock = threading.Lock()
_clients: Dict[str, rc.Client] = {}
# The vendor is on loopback: no proxy of the machine's, no redirects.
_vendor = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def write(line: Dict[str, Any]) -> None:
    data = json.dumps(line, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(data + "\n")
        sys.stdout.flush()


def client(agent: str) -> rc.Client:
    """client is the agent's Client, made on first use."""
    with _clients_lock:
        c = _clients.get(agent)
        if c is None:
            env = os.environ
            c = rc.Client(
                env["RECONCILER_DRILL_URL"] + "/" + agent,
                env["RECONCILER_DRILL_TOKEN"],
                poll_interval=int(env.get("RECONCILER_DRILL_POLL_MS", "50")) / 1000,
                wait=int(env.get("RECONCILER_DRILL_WAIT_MS", "2000")) / 1000,
                retries=int(env.get("RECONCILER_DRILL_RETRIES", "2")),
                backoff=int(env.get("RECONCILER_DRILL_BACKOFF_MS", "20")) / 1000,
            )
            _clients[agent] = c
        return c


def claim_of(d: Dict[str, Any]) -> rc.ClaimRequest:
    req = d.get("request")
    exp = d.get("expect")
    return rc.ClaimRequest(
        run_id=d["run_id"],
        tool=d["tool"],
        vendor=d["vendor"],
        tool_class=d["tool_class"],
        intent=d["intent"],
        tool_call_id=d.get("tool_call_id", ""),
        key=d.get("key", ""),
        request=rc.Request(**req) if req else None,
        expect=rc.Expect(**exp) if exp else None,
    )


def receipt_of(body: bytes, paths: List[str]) -> str:
    """receipt_of is the first non-empty string at one of paths (dotted)
    of the JSON answer body."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return ""
    for path in paths:
        v: Any = doc
        for name in path.split("."):
            v = v.get(name) if isinstance(v, dict) else None
        if isinstance(v, str) and v:
            return v
    return ""


def vendor_call(spec: Dict[str, Any], key: str, local_id: str) -> rc.Result:
    """vendor_call makes the call spec describes with key and local_id.
    Every answer is a Result, a refusal too; no answer raises."""
    form = dict(spec.get("form") or {})
    if spec.get("local_id_field"):
        form[spec["local_id_field"]] = local_id
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if spec.get("key_header"):
        headers[spec["key_header"]] = key
    req = urllib.request.Request(
        spec["url"], data=urllib.parse.urlencode(form).encode("ascii"), method=spec.get("method", "POST"), headers=headers
    )
    try:
        resp = _vendor.open(req, timeout=spec.get("timeout_ms", 10000) / 1000)
    except urllib.error.HTTPError as e:
        resp = e  # an answer with an error status
    with resp:
        body = resp.read()
    return rc.result_from_response(resp, receipt_of(body, spec.get("receipt") or []))


def row_json(row: Optional[rc.Row]) -> Optional[Dict[str, Any]]:
    return row.raw if row is not None else None


def result_json(res: rc.Result) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if res.http_status:
        out["http_status"] = res.http_status
    if res.receipt_id:
        out["receipt_id"] = res.receipt_id
    if res.headers:
        out["headers"] = dict(res.headers)
    return out


def outcome_json(out: rc.Outcome) -> Dict[str, Any]:
    return {
        "decision": out.decision,
        "key": out.key,
        "local_id": out.local_id,
        "row": row_json(out.row),
        "called": out.called,
        "result": result_json(out.result),
        "kind": out.kind,
        "replayed": out.replayed,
        "waited": out.waited,
        "awaited_approval": out.awaited_approval,
        "queued": out.queued,
    }


def claim_json(resp: rc.ClaimResponse) -> Dict[str, Any]:
    return {"decision": resp.decision, "code": resp.code, "row": row_json(resp.row), "http_status": resp.http_status}


def error_json(e: BaseException) -> Dict[str, Any]:
    """error_json is e in the protocol's error classes."""
    d: Dict[str, Any] = {"message": str(e) or type(e).__name__}
    if isinstance(e, rc.QueuedError):  # before Unsettled: it is one
        d["class"], d["key"] = "queued", e.key
        return d
    if awaiting_approval(e):
        d["class"], d["key"] = "awaiting_approval", e.key
        return d
    if isinstance(e, rc.Escalated):  # before Unsettled: it is one
        d["class"] = "escalated"
    elif isinstance(e, rc.ReportFailed):
        d["class"] = "report_failed"
    elif isinstance(e, rc.Unsettled):
        d["class"] = "unsettled"
    elif isinstance(e, rc.Stopped):
        d["class"], d["code"] = "stopped", e.code
    elif isinstance(e, rc.UnknownDecision):
        d["class"], d["code"] = "unknown_decision", e.decision
    elif isinstance(e, rc.APIError):
        d["class"], d["code"], d["status"], d["message"] = "api", e.code, e.status, e.message
    elif isinstance(e, rc.TransportError):
        d["class"] = "transport"
    elif isinstance(e, rc.ProtocolError):
        d["class"] = "protocol"
    else:
        d["class"] = "error"
        d["message"] = "".join(traceback.format_exception_only(type(e), e)).strip()
    if isinstance(e, rc.Unsettled):
        d["key"], d["row_status"] = e.key, e.status
    elif isinstance(e, rc.Stopped):
        d["key"] = e.key
    return d


def awaiting_approval(e: BaseException) -> bool:
    """awaiting_approval tells a do() that ran out of time while a human had
    not decided: the client raises a plain Unsettled for it, whose outcome
    says it awaited approval and called nothing (a call after the grant that
    did not settle is Unsettled too, but called)."""
    if type(e) is not rc.Unsettled:
        return False
    out = e.outcome
    return out is not None and out.awaited_approval and not out.called


def op_do(req: Dict[str, Any]) -> Dict[str, Any]:
    spec = req["call"]
    try:
        out = client(req["agent"]).do(
            claim_of(req["claim"]),
            lambda key, local_id: vendor_call(spec, key, local_id),
            wait_queued=bool(req.get("wait_queued")),
        )
    except rc.ReconcilerError as e:
        a = {"error": error_json(e)}
        outcome = getattr(e, "outcome", None)
        if outcome is not None:
            a["outcome"] = outcome_json(outcome)
        return a
    return {"outcome": outcome_json(out)}


def op_claim(req: Dict[str, Any]) -> Dict[str, Any]:
    return {"claim": claim_json(client(req["agent"]).claim(claim_of(req["claim"])))}


def op_call(req: Dict[str, Any]) -> Dict[str, Any]:
    try:
        res = vendor_call(req["call"], req.get("key", ""), req.get("local_id", ""))
    except Exception as e:  # no answer: a timeout, a broken connection
        return {"result": {}, "error": {"class": "transport", "message": str(e) or type(e).__name__}}
    return {"result": result_json(res)}


def op_report(req: Dict[str, Any]) -> Dict[str, Any]:
    o = req["outcome"]
    rep = rc.OutcomeReport(
        kind=o["kind"],
        http_status=o.get("http_status", 0),
        receipt_id=o.get("receipt_id", ""),
        headers=o.get("headers"),
        attempt=o.get("attempt", 0),
    )
    return {"row": row_json(client(req["agent"]).report(req["key"], rep))}


def op_compensate(req: Dict[str, Any]) -> Dict[str, Any]:
    return {"claim": claim_json(client(req["agent"]).compensate(req["key"], req["action"]))}


def op_get(req: Dict[str, Any]) -> Dict[str, Any]:
    return {"row": row_json(client(req["agent"]).get(req["key"]))}


def op_scrub(req: Dict[str, Any]) -> Dict[str, Any]:
    return {"args": rc.scrub(req.get("args") or {})}


OPS: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    "do": op_do,
    "claim": op_claim,
    "call": op_call,
    "report": op_report,
    "compensate": op_compensate,
    "get": op_get,
    "scrub": op_scrub,
}


def serve(req: Dict[str, Any]) -> None:
    handler = OPS.get(req.get("op", ""))
    try:
        if handler is None:
            a: Dict[str, Any] = {"error": {"class": "unsupported", "message": f"op {req.get('op')!r}"}}
        else:
            a = handler(req)
    except Exception as e:  # the op's failure, in the protocol's classes
        a = {"error": error_json(e)}
    a["id"] = req.get("id", 0)
    write(a)


def main() -> int:
    write(
        {
            "protocol": PROTOCOL,
            "runtime": "python",
            "client": "reconciler_client " + rc.__version__,
            "capabilities": CAPABILITIES,
        }
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        # A daemon thread: at the end of stdin the harness is done, and an
        # op still in flight (a drill that timed out) is abandoned.
        threading.Thread(target=serve, args=(req,), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
