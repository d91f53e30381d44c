"""guarded_tool: a write tool a model calls, put under the ledger.

A decorator over a plain function, sync or async, so any framework that
builds a tool from a function's signature (OpenAI Agents' ``function_tool``,
LangChain's ``@tool``) or a hand-rolled loop gets, by default, what a
developer otherwise writes by hand around ``Client.do``:

- the signature the framework reads (and shows the model) has no key-like
  parameter (idempotency_key, request_id…, and the registry's key
  placement field) and no ``ctx``; one the model sends anyway is dropped;
- the claim's intent is the registry's ``intent_fields`` of the arguments
  (every argument when it names none), so a timestamp or an id the model
  invents on a retry does not make a new write;
- the vendor key is placed where the registry says: a parameter named as
  ``key_placement``'s body_field, argument or external_id_field gets it;
  ``ctx.vendor_key`` has it for a header;
- the function returns the vendor's answer (a Result; or a tuple of the
  Result and what to show the model on success) and the decorated
  function returns text the model acts on: ``timeout: outcome unknown — do
  not retry with new arguments``…, never a traceback; an approval or an
  outbox answer says the write waits for a person or is queued.

The decisions are ``Client.do``'s; this module only prepares the claim and
words the answer. Standard library only.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Union

from .client import Client, current_attempt_row
from .errors import (
    APIError,
    Escalated,
    QueuedError,
    ReconcilerError,
    ReportFailed,
    Stopped,
    UnknownDecision,
    Unsettled,
)
from .models import ApprovalState, ClaimRequest, Expect, Outcome, OutcomeKind, Request, Result, StopCode, Tool
from .scrub import DEFAULT_SCRUB_FIELDS, Scrubber

__all__ = ["GuardContext", "GuardAnswer", "guarded_tool", "answer_error", "model_tool_name"]

#: The default bound of one guarded call, a wait for the same write in
#: flight elsewhere included, in seconds.
DEFAULT_GUARD_TIMEOUT = 30.0

_WRITE_CLASSES = ("write_idempotent", "write_ledger", "write_irreversible")
_UNKNOWN_ADVICE = "do not retry with new arguments"


@dataclass(frozen=True)
class GuardContext:
    """GuardContext is what the decorated function gets as ``ctx`` for one
    attempt: the ledger key, the key to send to the vendor (the row's
    vendor_key, else the key; the same on every attempt) and the local id
    to put in the vendor's metadata."""

    key: str
    vendor_key: str
    local_id: str


@dataclass
class GuardAnswer:
    """GuardAnswer is how a guarded call ended: ``status`` in one word,
    ``text`` for the model, ``outcome`` and ``error`` for the program."""

    status: str
    text: str
    outcome: Optional[Outcome] = None
    error: Optional[BaseException] = None


@dataclass(frozen=True)
class _View:
    name: str
    vendor: str
    tool_class: str
    intent_fields: Tuple[str, ...]
    key_field: str


def _view(tool: Union[Tool, Mapping[str, Any]]) -> _View:
    if isinstance(tool, Tool):
        name, vendor, cls = tool.name, tool.vendor, tool.tool_class
        fields, placement = tool.intent_fields, tool.key_placement
    elif isinstance(tool, Mapping):
        name, vendor = str(tool.get("name") or ""), str(tool.get("vendor") or "")
        cls = str(tool.get("class") or tool.get("tool_class") or "")
        fields, placement = tool.get("intent_fields") or [], tool.get("key_placement") or {}
    else:
        raise TypeError("guarded_tool: tool must be a Tool (client.get_tool) or a mapping of the registry entry")
    if not name:
        raise TypeError("guarded_tool: tool name is required (the registry name)")
    if not vendor:
        raise TypeError(f"guarded_tool {name}: tool vendor is required")
    if cls == "read":
        raise TypeError(f"guarded_tool {name}: a read tool changes nothing; give it to the framework as it is")
    if cls not in _WRITE_CLASSES:
        raise TypeError(f"guarded_tool {name}: tool class {cls!r}: want write_idempotent, write_ledger or write_irreversible")
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise TypeError(f"guarded_tool {name}: intent_fields must be a list of names")
    key_field = ""
    if isinstance(placement, Mapping):
        for where in ("body_field", "argument", "external_id_field"):
            if placement.get(where):
                key_field = str(placement[where])
                break
    return _View(name, vendor, cls, tuple(fields), key_field)


def model_tool_name(name: str) -> str:
    """model_tool_name is the name a model calls the tool by: the registry
    name with every character a function name may not hold made "_"
    (email.send → email_send)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in name)[:64]


def guarded_tool(
    client: Client,
    *,
    tool: Union[Tool, Mapping[str, Any]],
    run_id: Union[str, Callable[[], str]],
    name: Optional[str] = None,
    expect: Optional[Callable[[Dict[str, Any]], Optional[Expect]]] = None,
    request: Optional[Callable[[Dict[str, Any]], Optional[Request]]] = None,
    timeout: float = DEFAULT_GUARD_TIMEOUT,
    scrub_fields: Optional[Iterable[str]] = None,
    scrub: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """guarded_tool returns a decorator that puts a function's calls under
    the ledger (see the module's doc).

    The function takes the model's arguments as parameters and a keyword
    ``ctx`` (a GuardContext); it makes the vendor call and returns its
    answer as a Result (``result_from_response``…), or ``(Result, output)``
    with what the model is shown when the write succeeded. It raises only
    when no answer arrived (a timeout, a broken connection); it must bound
    its own time (urlopen's ``timeout=``). An ``async def`` function makes
    an async tool: the ledger's blocking requests run in the loop's default
    executor, the function itself on the loop.

    ``tool`` is the registry's view of the tool (``client.get_tool(name)``,
    or the entry's JSON form); ``run_id`` names the agent run, or is a
    callable asked per call: a run resumed with the same id replays instead
    of writing again. ``name`` is the function name the framework shows
    (default: the registry name with "." as "_"). ``expect`` and
    ``request`` build the claim's expected amount and vendor envelope from
    the arguments. ``timeout`` bounds the claim and any wait (seconds).
    ``scrub=False`` shows the model the key-like parameters and passes its
    values through, placing no key: it exists for a negative control (a
    test showing what scrubbing prevents), never for an agent.
    """
    view = _view(tool)
    fields = list(DEFAULT_SCRUB_FIELDS if scrub_fields is None else scrub_fields)
    if view.key_field:
        fields.append(view.key_field)
    scrubber = Scrubber(fields)
    for f in view.intent_fields:
        if scrubber.match(f):
            raise TypeError(f"guarded_tool {view.name}: intent field {f!r} is key-like: the key belongs to the ledger")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        if "ctx" not in sig.parameters:
            raise TypeError(f"guarded_tool {view.name}: {fn.__name__} must take a keyword parameter ctx (a GuardContext)")
        hidden = {"ctx"}
        if scrub:
            hidden |= {p for p in sig.parameters if scrubber.match(p)}
        key_param = view.key_field if scrub and view.key_field in sig.parameters else ""
        for n in sorted(hidden - {"ctx", key_param}):
            if sig.parameters[n].default is inspect.Parameter.empty:
                # Nobody fills it: the model is not shown it, and the guard drops the model's value.
                raise TypeError(f"guarded_tool {view.name}: parameter {n!r} is key-like, so the model never fills it: "
                                f"give it a default, or name it in the registry's key_placement")
        shown = [p for n, p in sig.parameters.items() if n not in hidden]
        public = sig.replace(parameters=shown, return_annotation=str)

        def prepare(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Union[GuardAnswer, Tuple[ClaimRequest, Dict[str, Any]]]:
            if scrub:
                kwargs = {k: v for k, v in kwargs.items() if not scrubber.match(k)}
            try:
                bound = public.bind(*args, **kwargs)
            except TypeError as e:
                return GuardAnswer("validation_failed", f"validation_failed: {e}; nothing was sent — call again with the tool's arguments.")
            bound.apply_defaults()
            model_args = dict(bound.arguments)
            intent = {f: model_args[f] for f in view.intent_fields if f in model_args} if view.intent_fields else dict(model_args)
            claim = ClaimRequest(
                run_id=run_id() if callable(run_id) else run_id,
                tool=view.name,
                vendor=view.vendor,
                tool_class=view.tool_class,
                intent=intent,
            )
            if expect is not None:
                claim.expect = expect(model_args)
            if request is not None:
                claim.request = request(model_args)
            return claim, model_args

        def context(key: str, local_id: str) -> GuardContext:
            # do() hands call() the vendor key as ``key``; the context
            # carries the ledger's key and the vendor's apart.
            row = current_attempt_row()
            vk = row.raw.get("vendor_key") if row is not None else None
            ledger_key = row.key if row is not None and row.key else key
            return GuardContext(key=ledger_key, vendor_key=vk if isinstance(vk, str) and vk else key, local_id=local_id)

        def call_kwargs(model_args: Dict[str, Any], ctx: GuardContext) -> Dict[str, Any]:
            kw = dict(model_args)
            if key_param:
                kw[key_param] = ctx.vendor_key
            kw["ctx"] = ctx
            return kw

        def unpack(ret: Any, out_holder: Dict[str, Any]) -> Any:
            # (Result, output): the output is what the model is shown on success.
            if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[0], Result):
                out_holder["output"] = ret[1]
                return ret[0]
            return ret

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> str:
                prepared = prepare(args, kwargs)
                if isinstance(prepared, GuardAnswer):
                    return prepared.text
                claim, model_args = prepared
                loop = asyncio.get_running_loop()
                out_holder: Dict[str, Any] = {}

                def call(key: str, local_id: str) -> Any:
                    kw = call_kwargs(model_args, context(key, local_id))
                    return unpack(asyncio.run_coroutine_threadsafe(fn(**kw), loop).result(), out_holder)

                answer = await loop.run_in_executor(None, functools.partial(_run, client, view.name, claim, call, timeout, out_holder))
                return answer.text

            # Any: the attributes set below are a function's, which Callable does not name.
            wrapper: Any = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> str:
                prepared = prepare(args, kwargs)
                if isinstance(prepared, GuardAnswer):
                    return prepared.text
                claim, model_args = prepared
                out_holder: Dict[str, Any] = {}

                def call(key: str, local_id: str) -> Any:
                    return unpack(fn(**call_kwargs(model_args, context(key, local_id))), out_holder)

                return _run(client, view.name, claim, call, timeout, out_holder).text

            wrapper = sync_wrapper

        # What a framework reads to build the tool: the name, the doc, the
        # signature and the annotations without ctx and the key-like
        # parameters (functools.wraps copied the function's; __wrapped__
        # stays, so typing.get_type_hints resolves the annotations in the
        # function's own module, and inspect stops at __signature__).
        wrapper.__name__ = name or model_tool_name(view.name)
        wrapper.__qualname__ = wrapper.__name__
        wrapper.__signature__ = public
        wrapper.__annotations__ = {
            k: v for k, v in getattr(fn, "__annotations__", {}).items() if k not in hidden and k != "return"
        }
        wrapper.__annotations__["return"] = str
        wrapper.guard_scrubber = scrubber
        return wrapper

    return decorate


def _run(client: Client, tool: str, claim: ClaimRequest, call: Callable[[str, str], Any], timeout: float, holder: Dict[str, Any]) -> GuardAnswer:
    """_run is one guarded call through do(), worded for the model."""
    try:
        out = client.do(claim, call, timeout=timeout, wait_approval=False)
    except ReconcilerError as e:
        return answer_error(tool, e)
    receipt = f" (receipt {out.receipt_id})" if out.receipt_id else ""
    if out.replayed:
        return GuardAnswer(
            "already_done",
            f"already_done: {tool} already succeeded earlier for these arguments{receipt}; it was not sent again. "
            "Do not call it again for this request.",
            out,
        )
    text = f"done: {tool} succeeded{receipt}."
    if out.row is not None and out.row.idempotent_replayed:
        text += " The vendor had already done it on an earlier attempt: it happened once."
    if "output" in holder and holder["output"] is not None:
        o = holder["output"]
        text += "\nresult: " + (o if isinstance(o, str) else json.dumps(o, default=str))
    return GuardAnswer("done", text, out)


def answer_error(tool: str, err: ReconcilerError) -> GuardAnswer:
    """answer_error words what do() raised. An outcome that is not known is
    never "failed": a model retries a failure with new arguments, which is
    how one email becomes two."""
    out: Optional[Outcome] = getattr(err, "outcome", None)
    key = getattr(err, "key", "") or (out.key if out is not None else "")
    key_text = f" (key {key})" if key else ""

    def a(status: str, text: str) -> GuardAnswer:
        return GuardAnswer(status, text, out, err)

    if isinstance(err, Stopped):
        if err.code == StopCode.FAILED_POISON:
            http = (out.result.http_status if out is not None else 0) or (err.row.last_http_status if err.row is not None else 0)
            status = "validation_failed" if http in (400, 422) else "refused"
            return a(
                status,
                f"{status}: the vendor refused this request{f' (HTTP {http})' if http else ''}; it will be refused again "
                "if retried unchanged — do not retry it. Correct the arguments, or tell the user.",
            )
        if err.code == StopCode.TOOL_FROZEN:
            return a("frozen", f"frozen: an operator has switched {tool} off; nothing was sent — do not retry. Tell the user.")
        if err.code == StopCode.APPROVAL_DENIED:
            return a("denied", f"denied: a person denied this {tool} call{key_text}; nothing was sent — do not retry it.")
        if err.code == StopCode.APPROVAL_EXPIRED:
            return a("expired", f"expired: nobody approved this {tool} call in time{key_text}; nothing was sent — do not retry it. Tell the user.")
        return a("refused", f"refused: the ledger stopped this call ({err.code}){key_text}; nothing was sent — do not retry it.")
    if isinstance(err, QueuedError):
        return a("queued", f"queued: this {tool} call is queued for the outbox worker{key_text}; nothing more to do here — calling again does not queue it twice.")
    if isinstance(err, Escalated):
        return a("escalated", f"escalated: a person is checking this {tool} call{key_text}; {_UNKNOWN_ADVICE} — stop and tell the user.")
    if isinstance(err, ReportFailed):
        return a(
            "unrecorded",
            f"unrecorded: the call was made but its outcome could not be recorded; outcome unknown — {_UNKNOWN_ADVICE}. "
            "The same arguments later are safe: they never repeat the write.",
        )
    if isinstance(err, Unsettled):
        if out is not None and out.awaited_approval and not out.called:
            return a(
                "awaiting_approval",
                f"awaiting_approval: this {tool} call waits for a person to approve it{key_text}; nothing was sent yet. "
                "Tell the user; call again with the same arguments once it is approved (a denial stops it).",
            )
        safe = f"Calling {tool} again with the same arguments is safe: it never repeats the write."
        if out is not None and out.called:
            if out.kind == OutcomeKind.TIMEOUT:
                return a("timeout", f"timeout: outcome unknown — {_UNKNOWN_ADVICE}. The vendor may have done it; the ledger holds it as unknown{key_text}. {safe}")
            if out.kind == OutcomeKind.NETWORK_ERROR:
                return a("network_error", f"network_error: outcome unknown — {_UNKNOWN_ADVICE}. The connection broke; the vendor may have done it{key_text}. {safe}")
            if out.kind == OutcomeKind.RESPONSE:
                return a(
                    "vendor_error",
                    f"vendor_error: the vendor answered HTTP {out.result.http_status or '?'}; outcome {err.status or 'unknown'} — {_UNKNOWN_ADVICE}. {safe}",
                )
        row = out.row if out is not None else None
        if row is not None and row.approval is not None and row.approval.state == ApprovalState.REQUESTED:
            return a("awaiting_approval", f"awaiting_approval: this {tool} call still waits for a person to approve it{key_text}; nothing was sent yet. Tell the user.")
        return a(
            "in_progress",
            f"in_progress: the same {tool} call is in flight or its outcome is not known yet (status {err.status or 'unknown'}){key_text} — "
            f"{_UNKNOWN_ADVICE}. Call again later with the same arguments.",
        )
    if isinstance(err, UnknownDecision):
        return a("error", f'error: the ledger answered "{err.decision}", which this client does not know; nothing was sent — do not retry. Tell the user.')
    if isinstance(err, APIError):
        if err.status == 429 or err.status >= 500:
            return a("error", f"error: the ledger is unavailable ({err.code}); nothing was sent — try the same call again later.")
        return a("error", f"error: the ledger refused the call ({err.code}); nothing was sent — do not retry. Tell the user.")
    return a("error", f"error: the ledger could not be reached ({type(err).__name__}); nothing was sent — try the same call again later.")
