"""The classification helpers, on the answer objects of the common HTTP
libraries (duck-typed stand-ins where the library is not installed)."""

from __future__ import annotations

import io
import socket
import unittest
import urllib.error
from email.message import Message
from typing import Any, Dict, Optional

from reconciler_client import OutcomeKind, Result, classify, is_timeout, result_from_exception, result_from_response, stripe_result


def message(headers: Dict[str, str]) -> Message:
    m = Message()
    for k, v in headers.items():
        m[k] = v
    return m


class RequestsResponse:
    """The attributes of a requests.Response (and an httpx.Response)."""

    def __init__(self, status_code: int, headers: Dict[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


class RequestsHTTPError(IOError):
    def __init__(self, response: Optional[RequestsResponse]) -> None:
        super().__init__("http error")
        self.response = response


class ReadTimeout(IOError):
    """As requests.exceptions.ReadTimeout: an IOError named for a timeout."""


class StripeResponse:
    def __init__(self, code: int, headers: Dict[str, str]) -> None:
        self.code = code
        self.headers = headers


class StripeObject(dict):
    """As stripe-python's StripeObject: a dict with attributes."""

    def __init__(self, oid: str, last_response: Optional[StripeResponse]) -> None:
        super().__init__(id=oid)
        self.last_response = last_response


class CardError(Exception):
    """As stripe.error.CardError: http_status, headers, and error naming the object."""

    def __init__(self, status: int, headers: Dict[str, str], error: Any) -> None:
        super().__init__("Your card was declined.")
        self.http_status = status
        self.headers = headers
        self.error = error


class ResultsTest(unittest.TestCase):
    def test_result_from_response(self) -> None:
        cases = [
            ("urllib-style headers", RequestsResponse(200, {}), "pi_1", Result(200, "pi_1", {})),
            ("Message headers, any case", type("R", (), {"status": 201, "headers": message({"idempotent-replayed": "true", "X-Other": "1"})})(),
             "pi_2", Result(201, "pi_2", {"Idempotent-Replayed": "true"})),
            ("plain dict headers, any case", RequestsResponse(402, {"stripe-should-retry": "false"}), "",
             Result(402, "", {"Stripe-Should-Retry": "false"})),
            ("urllib HTTPError", urllib.error.HTTPError("http://v", 409, "Conflict", message({"Idempotent-Replayed": "false"}), io.BytesIO(b"")),
             "pi_3", Result(409, "pi_3", {"Idempotent-Replayed": "false"})),
            ("no answer", None, "", Result()),
        ]
        for name, resp, receipt, want in cases:
            with self.subTest(name):
                self.assertEqual(result_from_response(resp, receipt), want)

    def test_result_from_exception(self) -> None:
        decline = CardError(402, {"Stripe-Should-Retry": "false"}, StripeObject("", None))
        decline.error["payment_intent"] = StripeObject("pi_9", None)
        cases = [
            ("urllib HTTPError", urllib.error.HTTPError("http://v", 500, "err", message({}), io.BytesIO(b"")), Result(500, "", {})),
            ("requests HTTPError", RequestsHTTPError(RequestsResponse(429, {})), Result(429, "", {})),
            ("requests error without a response", RequestsHTTPError(None), None),
            ("stripe card error names the PaymentIntent", decline, Result(402, "pi_9", {"Stripe-Should-Retry": "false"})),
            ("stripe connection error", CardError(None, None, None), None),  # type: ignore[arg-type]
            ("timeout", socket.timeout("timed out"), None),
            ("refused", ConnectionRefusedError(), None),
        ]
        for name, exc, want in cases:
            with self.subTest(name):
                self.assertEqual(result_from_exception(exc), want)

    def test_stripe_result(self) -> None:
        cases = [
            ("object with its response", StripeObject("pi_1", StripeResponse(200, {"Idempotent-Replayed": "true"})),
             Result(200, "pi_1", {"Idempotent-Replayed": "true"})),
            ("object without a response", StripeObject("pi_2", None), Result(0, "pi_2", {})),
        ]
        for name, obj, want in cases:
            with self.subTest(name):
                self.assertEqual(stripe_result(obj), want)

    def test_is_timeout(self) -> None:
        wrapped = ConnectionError("read failed")
        wrapped.__cause__ = TimeoutError()
        cases = [
            ("socket.timeout", socket.timeout(), True),
            ("TimeoutError", TimeoutError(), True),
            ("URLError of a timeout", urllib.error.URLError(socket.timeout("timed out")), True),
            ("a library's timeout class", ReadTimeout(), True),
            ("a cause that is a timeout", wrapped, True),
            ("refused", ConnectionRefusedError(), False),
            ("URLError of a refusal", urllib.error.URLError(ConnectionRefusedError()), False),
            ("none", None, False),
        ]
        for name, err, want in cases:
            with self.subTest(name):
                self.assertEqual(is_timeout(err), want)

    def test_classify(self) -> None:
        cases = [
            ("an answer is a response, whatever the error", Result(500), ValueError("x"), OutcomeKind.RESPONSE, 500),
            ("a receipt without a status is a 200", Result(0, "pi_1"), None, OutcomeKind.RESPONSE, 200),
            ("a receipt with an error is not an answer", Result(0, "pi_1"), ConnectionResetError(), OutcomeKind.NETWORK_ERROR, 0),
            ("a timeout", Result(), socket.timeout(), OutcomeKind.TIMEOUT, 0),
            ("no status, no receipt, no error: unknown, never a success", Result(), None, OutcomeKind.NETWORK_ERROR, 0),
        ]
        for name, res, err, kind, status in cases:
            with self.subTest(name):
                rep = classify(res, err)
                self.assertEqual((rep.kind, rep.http_status), (kind, status))


if __name__ == "__main__":
    unittest.main()
