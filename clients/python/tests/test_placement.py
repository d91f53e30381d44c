"""place_key puts the vendor key where the vendor's profile says."""

import json
import unittest

from reconciler_client import place_key


class PlaceKeyTest(unittest.TestCase):
    def test_header_replaces_any_case(self) -> None:
        h, b = place_key("vk_1", headers={"idempotency-key": "model", "X": "y"}, header="Idempotency-Key")
        self.assertEqual(h, {"X": "y", "Idempotency-Key": "vk_1"})
        self.assertIsNone(b)

    def test_body_path_text(self) -> None:
        _, b = place_key("vk_2", body='{"amount_money":{"amount":100},"n":12345678901234567890}', body_path="idempotency_key")
        self.assertIsInstance(b, str)
        doc = json.loads(b)
        self.assertEqual(doc["idempotency_key"], "vk_2")
        self.assertEqual(doc["n"], 12345678901234567890)

    def test_nested_path_dict(self) -> None:
        body = {"query": "q", "variables": {"input": {"title": "t"}}}
        _, b = place_key("0f8fad5b-d9cb-469f-a165-70867728950e", body=body, body_path="variables.input.id")
        self.assertEqual(b["variables"]["input"], {"title": "t", "id": "0f8fad5b-d9cb-469f-a165-70867728950e"})
        self.assertNotIn("id", body["variables"]["input"], "the caller's dict must not change")

    def test_bytes_and_errors(self) -> None:
        _, b = place_key("k", body=b"", body_path="a.b")
        self.assertEqual(b, b'{"a":{"b":"k"}}')
        with self.assertRaises(ValueError):
            place_key("k", body="[1]", body_path="a")
        with self.assertRaises(ValueError):
            place_key("", header="K")


if __name__ == "__main__":
    unittest.main()
