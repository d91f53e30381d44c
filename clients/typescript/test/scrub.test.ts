// scrub and scrubSchema: the Go SDK's cases (client/scrub_test.go), and
// what JavaScript adds (a __proto__ key, class instances, case mapping).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, DEFAULT_SCRUB_FIELDS, Scrubber, scrub, scrubSchema } from "@reconciler/client";

describe("scrub", () => {
  const cases: { name: string; fields?: string[]; in: string; want: string }[] = [
    {
      name: "snake, kebab, camel and spaced spellings",
      in: `{"amount":1050,"idempotency_key":"a","Idempotency-Key":"b","idempotencyKey":"c","IDEMPOTENCY KEY":"d"}`,
      want: `{"amount":1050}`,
    },
    {
      name: "request and message ids",
      in: `{"to":"ap@example.com","request_id":"r","X-Request-Id":"x","messageId":"m","PayPal-Request-Id":"p"}`,
      want: `{"to":"ap@example.com"}`,
    },
    {
      name: "nested objects and arrays",
      in: `{"order":{"idempotency_key":"a","items":[{"sku":"1","request_id":"r"},"text",2]},"options":{"headers":{"Idempotency-Key":"k","Accept":"json"}}}`,
      want: `{"order":{"items":[{"sku":"1"},"text",2]},"options":{"headers":{"Accept":"json"}}}`,
    },
    {
      name: "the ledger's join fields",
      in: `{"amount":1050,"metadata":{"metadata_local_id":"rl_other","order":"7"},"purchase_units":[{"custom_id":"rl_x","amount":1}]}`,
      want: `{"amount":1050,"metadata":{"order":"7"},"purchase_units":[{"amount":1}]}`,
    },
    {
      name: "look-alikes stay",
      in: `{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}`,
      want: `{"customer_request_id_note":"keep","key":"keep","request":"keep","idempotency":"keep"}`,
    },
    {
      name: "configured list replaces the defaults",
      fields: ["dedupe_token"],
      in: `{"DedupeToken":"a","idempotency_key":"kept"}`,
      want: `{"idempotency_key":"kept"}`,
    },
    {
      // The Go SDK's answer for the same input: İ lowers to i (one code
      // point, as unicode.ToLower), look-alikes of other scripts and widths stay.
      name: "case folding as Go's unicode.ToLower",
      in: `{"İdempotency_Key":"a","dedup_İd":"b","ＲＥＱＵＥＳＴ＿ＩＤ":"c","request_id٣":"keep","ΜΕSSAGE_ID":"x"}`,
      want: `{"ＲＥＱＵＥＳＴ＿ＩＤ":"c","request_id٣":"keep","ΜΕSSAGE_ID":"x"}`,
    },
    {
      name: "a __proto__ key stays an own property",
      in: `{"__proto__":{"idempotency_key":"a","x":1},"amount":1}`,
      want: `{"__proto__":{"x":1},"amount":1}`,
    },
  ];
  for (const tc of cases) {
    test(tc.name, () => {
      const input = JSON.parse(tc.in) as Record<string, unknown>;
      const orig = JSON.stringify(input);
      const got = tc.fields
        ? new Client({ baseUrl: "http://127.0.0.1:1", token: "t", scrubFields: tc.fields }).scrub(input)
        : scrub(input);
      assert.equal(JSON.stringify(got), tc.want);
      assert.deepEqual(got, JSON.parse(tc.want));
      assert.equal(JSON.stringify(input), orig, "scrub changed its input");
      assert.equal(Object.getPrototypeOf(got), Object.prototype);
    });
  }

  test("null and undefined come back as they are; class instances are left alone", () => {
    assert.equal(scrub(null), null);
    assert.equal(scrub(undefined), undefined);
    const when = new Date(0);
    const got = scrub({ when, request_id: "r" });
    assert.deepEqual(Object.keys(got), ["when"]);
    assert.equal(got["when"], when);
  });

  test("the default list is the Go SDK's", () => {
    assert.deepEqual(DEFAULT_SCRUB_FIELDS, [
      "idempotency_key", "x_idempotency_key", "idempotence_key",
      "request_id", "x_request_id", "client_request_id",
      "message_id", "paypal_request_id", "dedup_id", "deduplication_id",
      "metadata_local_id", "custom_id",
    ]);
    assert.ok(Object.isFrozen(DEFAULT_SCRUB_FIELDS));
    const s = new Scrubber();
    assert.ok(s.match("Client-Request-ID") && s.match("x.idempotency.key") && !s.match("idempotency"));
    assert.ok(!new Scrubber(["", "--"]).match(""), "an empty name matches nothing");
  });
});

describe("scrubSchema", () => {
  test("property and its required entry", () => {
    const schema = {
      type: "object",
      properties: { amount: { type: "integer" }, idempotency_key: { type: "string" } },
      required: ["amount", "idempotency_key"],
    };
    const orig = structuredClone(schema);
    assert.deepEqual(scrubSchema(schema), { type: "object", properties: { amount: { type: "integer" } }, required: ["amount"] });
    assert.deepEqual(schema, orig, "scrubSchema changed its input");
  });

  test("nested in an openai function tool, items and $defs", () => {
    const schema = JSON.parse(`{"type":"function","function":{"name":"send","parameters":{"type":"object","properties":{
      "message":{"type":"object","properties":{"to":{"type":"string"},"messageId":{"type":"string"}},"required":["to","messageId"]},
      "lines":{"type":"array","items":{"$ref":"#/$defs/line"}}},
      "$defs":{"line":{"type":"object","properties":{"Request-Id":{"type":"string"},"qty":{"type":"number","maximum":1.50}}}}}}}`) as Record<string, unknown>;
    assert.deepEqual(scrubSchema(schema), {
      type: "function",
      function: {
        name: "send",
        parameters: {
          type: "object",
          properties: {
            message: { type: "object", properties: { to: { type: "string" } }, required: ["to"] },
            lines: { type: "array", items: { $ref: "#/$defs/line" } },
          },
          $defs: { line: { type: "object", properties: { qty: { type: "number", maximum: 1.5 } } } },
        },
      },
    });
  });

  test("required is filtered only beside properties; anyOf branches are walked", () => {
    const schema = {
      required: ["request_id"],
      anyOf: [{ properties: { request_id: {}, a: {} }, required: ["request_id", "a"] }, { properties: { custom_id: {} } }],
    };
    assert.deepEqual(scrubSchema(schema), {
      required: ["request_id"],
      anyOf: [{ properties: { a: {} }, required: ["a"] }, { properties: {} }],
    });
  });

  test("a schema without such fields is unchanged; a boolean schema too; anything else is refused", () => {
    const schema = { type: "object", properties: { b: {}, a: {} } };
    assert.deepEqual(scrubSchema(schema), schema);
    assert.equal(scrubSchema(true), true);
    assert.throws(() => scrubSchema([1, 2] as unknown as Record<string, unknown>), TypeError);
    assert.throws(() => scrubSchema("{}" as unknown as Record<string, unknown>), TypeError);
  });
});
