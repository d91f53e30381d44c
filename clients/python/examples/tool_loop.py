"""An OpenAI-style tool loop whose write tool charges once, however often the model retries it.

Needs RECONCILER_TOKEN and STRIPE_API_KEY (a test key), and RECONCILER_URL and VENDOR_URL when not the
defaults (a local reconciler, api.stripe.com).
"""

import json
import os
import urllib.parse
import urllib.request
import uuid

import reconciler_client as rc

TOOLS = [{"type": "function", "function": {"name": "create_payment", "parameters": {
    "type": "object", "required": ["amount", "currency", "customer"],
    "properties": {"amount": {"type": "integer"}, "currency": {"type": "string"},
                   "customer": {"type": "string"}, "idempotency_key": {"type": "string"}}}}}]


def model(messages, tools):
    """Stands in for client.chat.completions.create: it calls the tool twice, each time with an
    idempotency_key of its own (as a model retrying after a timeout does), then answers."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if len(results) == 2:
        return {"role": "assistant", "content": "Done: " + results[-1]}
    args = {"amount": 1050, "currency": "usd", "customer": "cus_123", "idempotency_key": uuid.uuid4().hex}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{len(results)}", "type": "function",
            "function": {"name": "create_payment", "arguments": json.dumps(args)}}]}


def create_payment(key, local_id, args):
    """The vendor call: the ledger's key as Idempotency-Key, its local id in the metadata."""
    body = urllib.parse.urlencode(dict(args, **{"metadata[metadata_local_id]": local_id})).encode()
    req = urllib.request.Request(os.environ.get("VENDOR_URL", "https://api.stripe.com") + "/v1/payment_intents",
                                 data=body, method="POST", headers={
                                     "Idempotency-Key": key, "Authorization": "Bearer " + os.environ.get("STRIPE_API_KEY", "")})
    with urllib.request.urlopen(req, timeout=10) as resp:  # an HTTPError raised here is reported too
        return rc.result_from_response(resp, json.load(resp)["id"])


def execute(ledger, run_id, call):
    args = rc.scrub(json.loads(call["function"]["arguments"]))  # the key belongs to the ledger
    claim = rc.ClaimRequest(run_id=run_id, tool="stripe.payment_intents.create", tool_call_id=call["id"],
                            vendor="stripe", tool_class=rc.ToolClass.WRITE_IDEMPOTENT, intent=args)
    try:
        out = ledger.do(claim, lambda key, local_id: create_payment(key, local_id, args), timeout=120)
    except rc.Stopped as e:  # refused (declined, frozen tool): do not retry this intent
        return {"error": "refused: " + e.code}
    except rc.Unsettled:  # not known yet (or escalated to a human): never retry under a new key
        return {"error": "the payment's outcome is not known yet; do not retry it"}
    return {"payment_intent": out.receipt_id, "replayed": out.replayed}


def main():
    ledger = rc.Client(os.environ.get("RECONCILER_URL", "http://127.0.0.1:8080"), os.environ["RECONCILER_TOKEN"])
    run_id = os.environ.get("RUN_ID") or "run_" + uuid.uuid4().hex[:12]
    tools = [rc.scrub_schema(t) for t in TOOLS]  # the model never sees a key field
    messages = [{"role": "user", "content": "Charge cus_123 $10.50."}]
    while True:
        msg = model(messages, tools)
        messages.append(msg)
        if not msg.get("tool_calls"):
            print(msg["content"])
            return
        for call in msg["tool_calls"]:
            result = execute(ledger, run_id, call)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})


if __name__ == "__main__":
    main()
