"""scrub and scrub_schema: the Go SDK's table (client/scrub_test.go), case
for case, so both clients remove the same fields and write the same schema."""

from __future__ import annotations

import copy
import json
import unittest

from reconciler_client import DEFAULT_SCRUB_FIELDS, Client, Scrubber, scrub, scrub_schema


class ScrubTest(unittest.TestCase):
    def test_scrub(self) -> None:
        cases = [
            ("snake, kebab, camel and spaced spellings", None,
             '{"amount":1050,"idempotency_key":"a","Idempotency-Key":"b","idempotencyKey":"c","IDEMPOTENCY KEY":"d"}',
             '{"amount":1050}'),
            ("request and message ids", None,
             '{"to":"ap@example.com","request_id":"r","X-Request-Id":"x","messageId":"m","PayPal-Request-Id":"p"}',
             '{"to":"ap@example.com"}'),
            ("nested objects and arrays", None,
             '{"order":{"idempotency_key":"a","items":[{"sku":"1","request_id":"r"},"text",2]},'
             '"options":{"headers":{"Idempotency-Key":"k","Accept":"json"}}}',
             '{"order":{"items":[{"sku":"1"},"text",2]},"options":{"headers":{"Accept":"json"}}}'),
            ("the ledger's join fields", None,
             '{"amount":1050,"metadata":{"metadata_local_id":"rl_other","order":"7"},"purchase_units":[{"custom_id":"rl_x","amount":1}]}',
             '{"amount":1050,"metadata":{"order":"7"},"purchase_units":[{"amount":1}]}'),
            ("look-alikes stay", None,
             '{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}',
             '{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}'),
            ("every default field, in another spelling", None,
             json.dumps({f.upper().replace("_", "-"): 1 for f in DEFAULT_SCRUB_FIELDS} | {"amount": 1}),
             '{"amount":1}'),
            ("non-ASCII case folds one letter at a time", ["ΣKEY"], '{"σkey":1,"ςkey":2}', '{"ςkey":2}'),
            ("configured list replaces the defaults", ["dedupe_token"],
             '{"DedupeToken":"a","idempotency_key":"kept"}', '{"idempotency_key":"kept"}'),
        ]
        for name, fields, given, want in cases:
            with self.subTest(name):
                args = json.loads(given)
                orig = copy.deepcopy(args)
                if fields is None:
                    got = scrub(args)
                else:
                    got = Client("http://127.0.0.1:1", "t", scrub_fields=fields).scrub(args)
                self.assertEqual(got, json.loads(want))
                self.assertEqual(args, orig, "scrub changed its input")
        self.assertIsNone(scrub(None))
        with self.assertRaises(TypeError):
            scrub(["idempotency_key"])  # type: ignore[arg-type]

    def test_match(self) -> None:
        s = Scrubber()
        for name, want in [("Idempotency-Key", True), ("x-request-id", True), ("MESSAGE_ID", True),
                           ("customId", True), ("key", False), ("", False), ("request", False)]:
            with self.subTest(name):
                self.assertEqual(s.match(name), want)

    def test_scrub_schema_text(self) -> None:
        cases = [
            ("property and its required entry",
             '{"type":"object","properties":{"amount":{"type":"integer"},"idempotency_key":{"type":"string"}},"required":["amount","idempotency_key"]}',
             '{"properties":{"amount":{"type":"integer"}},"required":["amount"],"type":"object"}'),
            ("nested in an openai function tool, items and $defs",
             '{"type":"function","function":{"name":"send","parameters":{"type":"object","properties":{'
             '"message":{"type":"object","properties":{"to":{"type":"string"},"messageId":{"type":"string"}},"required":["to","messageId"]},'
             '"lines":{"type":"array","items":{"$ref":"#/$defs/line"}}},'
             '"$defs":{"line":{"type":"object","properties":{"Request-Id":{"type":"string"},"qty":{"type":"number","maximum":1.50}}}}}}}',
             '{"function":{"name":"send","parameters":{"$defs":{"line":{"properties":{"qty":{"maximum":1.50,"type":"number"}},"type":"object"}},'
             '"properties":{"lines":{"items":{"$ref":"#/$defs/line"},"type":"array"},"message":{"properties":{"to":{"type":"string"}},"required":["to"],"type":"object"}},"type":"object"}},"type":"function"}'),
            ("a schema without such fields is unchanged but for key order",
             '{"type":"object","properties":{"b":{},"a":{}}}',
             '{"properties":{"a":{},"b":{}},"type":"object"}'),
            ("html and non-ASCII text as written", '{"description":"<a & b> é"}', '{"description":"<a & b> é"}'),
            ("a boolean schema", "true", "true"),
        ]
        for name, given, want in cases:
            with self.subTest(name):
                self.assertEqual(scrub_schema(given), want)
                self.assertEqual(scrub_schema(given.encode()), want)

    def test_scrub_schema_rejects(self) -> None:
        for name, given in [("not json", '{"type":'), ("not an object", "[1,2]"), ("trailing data", "{} {}"),
                            ("NaN", '{"maximum":NaN}')]:
            with self.subTest(name), self.assertRaises(ValueError):
                scrub_schema(given)
        with self.assertRaises(ValueError):
            scrub_schema([1])  # type: ignore[call-overload]

    def test_scrub_schema_dict(self) -> None:
        schema = {"type": "object", "properties": {"to": {"type": "string"}, "Idempotency-Key": {"type": "string"}},
                  "required": ["to", "Idempotency-Key"], "anyOf": [{"properties": {"request_id": {}}, "required": ["request_id"]}]}
        orig = copy.deepcopy(schema)
        got = scrub_schema(schema)
        self.assertEqual(got, {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"],
                               "anyOf": [{"properties": {}, "required": []}]})
        self.assertEqual(schema, orig, "scrub_schema changed its input")


if __name__ == "__main__":
    unittest.main()
