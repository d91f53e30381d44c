// Keeping a model from choosing a write's identity (the Go SDK's
// client/scrub.go, with the same field list and matching rules).

/**
 * DEFAULT_SCRUB_FIELDS are the argument names scrub removes: fields through
 * which a model could choose (or re-invent on every retry) the identity of a
 * write. Names match case- and separator-insensitively, so "idempotency_key"
 * also removes "Idempotency-Key", "idempotencyKey" and "IDEMPOTENCY KEY".
 */
export const DEFAULT_SCRUB_FIELDS: readonly string[] = Object.freeze([
  "idempotency_key", "x_idempotency_key", "idempotence_key",
  "request_id", "x_request_id", "client_request_id",
  "message_id", "paypal_request_id", "dedup_id", "deduplication_id",
  // The join fields belong to the ledger too: a model that fills them (with
  // another row's local id, say) sends a vendor object whose webhook would
  // settle the wrong row.
  "metadata_local_id", "custom_id",
]);

/**
 * normalize folds case and drops everything but letters and digits:
 * "PayPal-Request-Id" and "paypal_request_id" are one name. Like Go's
 * unicode.ToLower it maps one code point to one (İ → i), where JavaScript's
 * full case mapping would add a combining dot.
 */
function normalize(name: string): string {
  let out = "";
  for (const ch of name) {
    if (!/^[\p{L}\p{Nd}]$/u.test(ch)) continue;
    out += [...ch.toLowerCase()][0] ?? "";
  }
  return out;
}

type Json = unknown;

/**
 * put sets an own property, even "__proto__" (JSON.parse makes one), which
 * plain assignment would take as the object's prototype.
 */
function put(obj: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * Scrubber removes idempotency fields from tool arguments and tool schemas.
 * The key of a write belongs to the ledger: a model that supplies one may
 * mint a fresh one on each retry and turn one intent into two charges.
 * It is read-only after construction.
 */
export class Scrubber {
  readonly #names: ReadonlySet<string>;

  /** A scrubber of the given field names (case and separators do not matter). */
  constructor(fields: readonly string[] = DEFAULT_SCRUB_FIELDS) {
    const names = new Set<string>();
    for (const f of fields) {
      const n = normalize(f);
      if (n !== "") names.add(n);
    }
    this.#names = names;
  }

  /** match reports whether name is one of the scrubbed fields. */
  match(name: string): boolean {
    return this.#names.has(normalize(name));
  }

  /**
   * scrub returns a copy of args without the scrubbed fields, at any depth
   * (nested objects and objects inside arrays). args itself is not changed;
   * null and undefined come back as they are.
   */
  scrub<T extends Record<string, unknown> | null | undefined>(args: T): T {
    if (args === null || args === undefined) return args;
    return this.#value(args) as T;
  }

  #value(v: Json): Json {
    if (Array.isArray(v)) return v.map((x) => this.#value(x));
    if (!isPlainObject(v)) return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      if (!this.match(k)) put(out, k, this.#value(x));
    }
    return out;
  }

  /**
   * scrubSchema returns a copy of a JSON Schema shown to a model without the
   * scrubbed fields: every matching name under "properties" (at any depth:
   * nested objects, items, $defs, anyOf…) and its entry in the sibling
   * "required". A boolean schema comes back as it is; anything else but an
   * object is a TypeError.
   */
  scrubSchema<T extends Record<string, unknown> | boolean>(schema: T): T {
    if (typeof schema === "boolean") return schema;
    if (!isPlainObject(schema)) throw new TypeError("scrub schema: want an object (or a boolean schema)");
    return this.#schema(schema) as T;
  }

  #schema(v: Json): Json {
    if (Array.isArray(v)) return v.map((x) => this.#schema(x));
    if (!isPlainObject(v)) return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) put(out, k, x);
    const props = out["properties"];
    if (isPlainObject(props)) {
      const kept: Record<string, unknown> = {};
      for (const [name, x] of Object.entries(props)) {
        if (!this.match(name)) put(kept, name, x);
      }
      out["properties"] = kept;
      const req = out["required"];
      if (Array.isArray(req)) {
        out["required"] = req.filter((r) => !(typeof r === "string" && this.match(r)));
      }
    }
    for (const [k, x] of Object.entries(out)) put(out, k, this.#schema(x));
    return out;
  }
}

const defaultScrubber = new Scrubber();

/** scrub removes DEFAULT_SCRUB_FIELDS from args (see Scrubber.scrub). */
export function scrub<T extends Record<string, unknown> | null | undefined>(args: T): T {
  return defaultScrubber.scrub(args);
}

/** scrubSchema deletes DEFAULT_SCRUB_FIELDS from a tool's JSON Schema (see Scrubber.scrubSchema). */
export function scrubSchema<T extends Record<string, unknown> | boolean>(schema: T): T {
  return defaultScrubber.scrubSchema(schema);
}
