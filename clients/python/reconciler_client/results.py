"""Turning a vendor call's answer into a Result, and a Result into a report.

``result_from_response`` reads any HTTP answer object of the common
libraries (``http.client.HTTPResponse`` from ``urllib.request.urlopen``,
``urllib.error.HTTPError``, ``requests.Response``, ``httpx.Response``);
``result_from_exception`` reads the answer an exception carries (an
``HTTPError``, a requests/httpx error with ``.response``, a stripe-python
``StripeError``); ``stripe_result`` reads a stripe-python object. None of
them imports those libraries: they read the attributes.

``classify`` is the Go SDK's: an answer with a status is a response,
whatever the error; without one, a timeout is ``timeout`` and anything else
``network_error`` (both leave the row unknown). A call that returned no
status but a receipt is a 200 (an SDK that hides the status); one with
neither is unknown, never a success.
"""

from __future__ import annotations

import socket
from typing import Any, Dict, Optional, Sequence

from .models import OutcomeKind, OutcomeReport, Result

__all__ = [
    "RESULT_HEADERS",
    "result_from_response",
    "result_from_exception",
    "stripe_result",
    "classify",
    "is_timeout",
]

#: The vendor headers a Result keeps: the ledger's classification reads
#: them, others are not reported.
RESULT_HEADERS: Sequence[str] = ("Idempotent-Replayed", "Stripe-Should-Retry")


def result_from_response(resp: Any, receipt_id: str = "") -> Result:
    """result_from_response turns a vendor's HTTP answer into a Result: its
    status, receipt_id (the object id the caller decoded from the body) and
    the headers the classification reads. It does not read or close the
    body. None gives an empty Result (no answer)."""
    if resp is None:
        return Result()
    return Result(http_status=_status_of(resp), receipt_id=receipt_id, headers=pick_headers(getattr(resp, "headers", None)))


def result_from_exception(exc: BaseException) -> Optional[Result]:
    """result_from_exception returns the vendor's answer an exception
    carries, or None when it carries none (a timeout, a refused or broken
    connection).

    It reads ``urllib.error.HTTPError`` (``.code``, ``.headers``), an error
    with a ``.response`` (requests, httpx) and stripe-python's
    ``StripeError`` (``.http_status``, ``.headers``, and the object it names:
    the PaymentIntent of a declined card, as the Go SDK's StripeResult).
    """
    status = _status(getattr(exc, "http_status", None))  # stripe-python
    if status:
        return Result(http_status=status, receipt_id=_stripe_error_object(exc), headers=pick_headers(getattr(exc, "headers", None)))
    resp = getattr(exc, "response", None)  # requests, httpx
    if resp is not None and _status_of(resp):
        return result_from_response(resp)
    if _status(getattr(exc, "code", None)) and hasattr(exc, "headers"):  # urllib.error.HTTPError
        return result_from_response(exc)
    return None


def stripe_result(obj: Any) -> Result:
    """stripe_result turns a stripe-python object (a PaymentIntent, a
    Refund…) into a Result: its ``id`` and its ``last_response`` (status,
    Idempotent-Replayed). An object without a last_response gives a Result
    with the id alone, which do() reports as a 200 (the object came back).
    For a StripeError let the exception leave the call: do() reads it with
    result_from_exception."""
    receipt = _get(obj, "id")
    resp = getattr(obj, "last_response", None)
    if resp is None:
        return Result(receipt_id=receipt if isinstance(receipt, str) else "")
    return Result(
        http_status=_status(getattr(resp, "code", None)) or _status_of(resp),
        receipt_id=receipt if isinstance(receipt, str) else "",
        headers=pick_headers(getattr(resp, "headers", None)),
    )


def classify(res: Result, err: Optional[BaseException]) -> OutcomeReport:
    """classify turns what a call returned (a Result, or the exception it
    raised and the Result that exception carries) into the report."""
    rep = OutcomeReport(kind="", http_status=res.http_status, receipt_id=res.receipt_id, headers=dict(res.headers) or None)
    if res.http_status:
        rep.kind = OutcomeKind.RESPONSE
    elif err is None and res.receipt_id:
        rep.kind, rep.http_status = OutcomeKind.RESPONSE, 200
    elif is_timeout(err):
        rep.kind = OutcomeKind.TIMEOUT
    else:
        rep.kind = OutcomeKind.NETWORK_ERROR
    if rep.kind != OutcomeKind.RESPONSE:
        rep.http_status = 0
    return rep


def is_timeout(err: Optional[BaseException]) -> bool:
    """is_timeout reports whether err, or an error it wraps (``__cause__``,
    ``__context__``, URLError's ``reason``), is a timeout: TimeoutError,
    socket.timeout, or a library's timeout class (requests' ReadTimeout,
    httpx's TimeoutException, urllib3's ReadTimeoutError…)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (TimeoutError, socket.timeout)):
            return True
        if any("timeout" in c.__name__.lower() for c in type(err).__mro__ if c is not object):
            return True
        reason = getattr(err, "reason", None)
        if isinstance(reason, BaseException):
            err = reason
        else:
            err = err.__cause__ or err.__context__
    return False


def pick_headers(headers: Any) -> Dict[str, str]:
    """pick_headers keeps RESULT_HEADERS from any header mapping (an
    email.message.Message, a case-insensitive dict, a plain dict), named as
    RESULT_HEADERS spells them."""
    out: Dict[str, str] = {}
    if headers is None:
        return out
    get = getattr(headers, "get", None)
    for name in RESULT_HEADERS:
        v = get(name) if get is not None else None
        if v is None and hasattr(headers, "items"):
            # A plain dict is case-sensitive: find the name in any spelling.
            for k, x in headers.items():
                if isinstance(k, str) and k.lower() == name.lower():
                    v = x
                    break
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        if isinstance(v, str) and v != "":
            out[name] = v
    return out


def _status_of(resp: Any) -> int:
    """_status_of is the HTTP status of an answer object, 0 if it has none."""
    for attr in ("status_code", "status", "code"):
        v = _status(getattr(resp, attr, None))
        if v:
            return v
    getcode = getattr(resp, "getcode", None)
    return _status(getcode()) if callable(getcode) else 0


def _status(v: Any) -> int:
    """_status is v if it is an HTTP status, else 0."""
    if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599:
        return v
    return 0


def _get(obj: Any, name: str) -> Any:
    """_get reads a field of a stripe-python object (a dict subclass in older
    versions, attributes in newer ones) or of a plain dict."""
    if isinstance(obj, dict) and name in obj:
        return obj[name]
    return getattr(obj, name, None)


def _stripe_error_object(exc: BaseException) -> str:
    """_stripe_error_object is the id of the object a Stripe error names:
    the PaymentIntent, the SetupIntent or the charge."""
    e = getattr(exc, "error", None)
    for name in ("payment_intent", "setup_intent"):
        o = _get(e, name) if e is not None else None
        oid = _get(o, "id") if o is not None else None
        if isinstance(oid, str) and oid:
            return oid
    charge = _get(e, "charge") if e is not None else None
    if isinstance(charge, str) and charge:
        return charge
    return ""
