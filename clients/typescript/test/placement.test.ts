import assert from "node:assert/strict";
import { test } from "node:test";

import { placeKey } from "../src/index.js";

test("placeKey sets the header whatever the case the model used", () => {
  const got = placeKey("vk_1", { header: "Idempotency-Key" }, { "idempotency-key": "model", X: "y" });
  assert.deepEqual(got.headers, { X: "y", "Idempotency-Key": "vk_1" });
  assert.equal(got.body, undefined);
});

test("placeKey sets a dotted body path and keeps the rest", () => {
  const got = placeKey("0f8fad5b-d9cb-469f-a165-70867728950e", { bodyPath: "variables.input.id" }, {}, '{"query":"q","variables":{"input":{"title":"t"}}}');
  assert.deepEqual(JSON.parse(got.body ?? ""), {
    query: "q",
    variables: { input: { title: "t", id: "0f8fad5b-d9cb-469f-a165-70867728950e" } },
  });
  assert.equal(placeKey("k", { bodyPath: "idempotency_key" }).body, '{"idempotency_key":"k"}');
  assert.throws(() => placeKey("k", { bodyPath: "a" }, {}, "[1]"), TypeError);
  assert.throws(() => placeKey("", { header: "K" }), TypeError);
});
