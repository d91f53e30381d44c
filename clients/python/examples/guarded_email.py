"""An agent whose email tool sends once, however often the model retries it: a plain function
decorated with reconciler_client.guarded_tool, in an OpenAI-style tool loop. The same decorated
function goes to OpenAI Agents' function_tool or LangChain's @tool as it is.

Needs RECONCILER_TOKEN and RESEND_API_KEY; RECONCILER_URL and RESEND_URL when not the defaults (a local
reconciler, api.resend.com); RUN_ID resumes a run (the same id never sends again).
"""

import inspect
import json
import os
import urllib.request
import uuid

import reconciler_client as rc

#: The registry entry (PUT /v1/tools/email.send): what the guard reads.
EMAIL_SEND = {
    "vendor": "resend", "class": "write_idempotent", "side_effect": "email",
    "key_placement": {"header": "Idempotency-Key"},  # Resend keeps it 24 h
    "intent_fields": ["to", "subject", "text"],  # the email; never a timestamp or an id the model made up
    "autonomy": "autonomous",
    "checklist": {"side_effect_documented": True, "key_born_in_runtime": True, "ledger_or_unique_field": True,
                  "timeout_leaves_unknown": True, "error_classes_mapped": True, "duplicate_delivery_test": True,
                  "checked_by": "you@example.com"},
}


def email_tool(ledger, run_id):
    tool = ledger.put_tool("email.send", EMAIL_SEND).tool  # idempotent: an unchanged entry stays as it is

    @rc.guarded_tool(ledger, tool=tool, run_id=run_id)
    def send_email(to: str, subject: str, text: str, requested_at: str = "", idempotency_key: str = "",
                   *, ctx: rc.GuardContext) -> rc.Result:
        """Send an email. Calling it again with the same arguments never sends it twice."""
        # requested_at and idempotency_key are what models like to send: the first is not the intent, the
        # second is never shown to the model nor passed here (the key is ctx.vendor_key).
        body = json.dumps({"from": "Ops <ops@example.com>", "to": to, "subject": subject, "text": text,
                           "tags": [{"name": "metadata_local_id", "value": ctx.local_id}]}).encode()
        req = urllib.request.Request(os.environ.get("RESEND_URL", "https://api.resend.com") + "/emails", data=body,
                                     method="POST", headers={"Content-Type": "application/json",
                                                             "Idempotency-Key": ctx.vendor_key,
                                                             "Authorization": "Bearer " + os.environ.get("RESEND_API_KEY", "")})
        timeout = float(os.environ.get("VENDOR_TIMEOUT", "10"))  # a slower answer: unknown, and the model is told so
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # an HTTPError raised here is an answer too
            return rc.result_from_response(resp, json.load(resp)["id"])

    return send_email


def function_schema(fn):
    """The tool as an OpenAI-style function, from the decorated function's signature (no key in it)."""
    types = {str: "string", int: "integer", float: "number", bool: "boolean"}
    params = inspect.signature(fn).parameters
    return {"type": "function", "function": {"name": fn.__name__, "description": fn.__doc__, "parameters": {
        "type": "object", "properties": {n: {"type": types[p.annotation]} for n, p in params.items()},
        "required": [n for n, p in params.items() if p.default is inspect.Parameter.empty]}}}


def model(messages, tools):
    """Stands in for client.chat.completions.create: it calls the tool with a key and a timestamp of its
    own; told the outcome is unknown, it calls again anyway (a new key, a new timestamp), then answers."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if results and not results[-1].startswith("timeout"):
        return {"role": "assistant", "content": "Done: " + results[-1].split("\n")[0]}
    args = {"to": "bob@example.com", "subject": "Your refund", "text": "Your refund of $10.50 is on its way.",
            "requested_at": f"2026-12-03T08:00:0{len(results)}Z", "idempotency_key": uuid.uuid4().hex}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{len(results)}", "type": "function",
            "function": {"name": tools[0]["function"]["name"], "arguments": json.dumps(args)}}]}


def main():
    ledger = rc.Client(os.environ.get("RECONCILER_URL", "http://127.0.0.1:8080"), os.environ["RECONCILER_TOKEN"])
    run_id = os.environ.get("RUN_ID") or "run_" + uuid.uuid4().hex[:12]
    send_email = email_tool(ledger, run_id)
    tools = [function_schema(send_email)]
    messages = [{"role": "user", "content": "Email bob@example.com that his refund is on its way."}]
    for _ in range(5):
        msg = model(messages, tools)
        messages.append(msg)
        if not msg.get("tool_calls"):
            print(msg["content"])
            return
        for call in msg["tool_calls"]:
            result = send_email(**json.loads(call["function"]["arguments"]))  # text the model acts on
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


if __name__ == "__main__":
    main()
