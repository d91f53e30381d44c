/**
 * placeKey puts the vendor key where the vendor's profile places it: a
 * header (Idempotency-Key: Resend, Zendesk, Adyen) and/or a dotted path in a
 * JSON object body (idempotency_key: Square; variables.input.id: Linear's
 * client-chosen id). The key is the one a CallFunc gets as call.vendorKey
 * (the row's vendor_key). It is the Go SDK's client.Transport for fetch.
 */
export interface Placement {
  /** header names the header that carries the key. */
  header?: string;
  /** bodyPath is a dotted path in the JSON object body. */
  bodyPath?: string;
}

/**
 * placeKey returns new headers and body with vendorKey placed: the header
 * replaces any of its name (whatever the case: a model may have invented
 * one); the body (JSON text, or empty) comes back as JSON text.
 */
export function placeKey(
  vendorKey: string,
  placement: Placement,
  headers: Record<string, string> = {},
  body?: string,
): { headers: Record<string, string>; body: string | undefined } {
  if (!vendorKey) throw new TypeError("placeKey: empty vendor key");
  const out: Record<string, string> = {};
  const h = placement.header;
  for (const [k, v] of Object.entries(headers)) {
    if (!h || k.toLowerCase() !== h.toLowerCase()) out[k] = v;
  }
  if (h) out[h] = vendorKey;
  if (!placement.bodyPath) return { headers: out, body };
  const doc: unknown = body && body.trim() !== "" ? JSON.parse(body) : {};
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new TypeError("placeKey: the body is not a JSON object");
  }
  const parts = placement.bodyPath.split(".");
  let cur = doc as Record<string, unknown>;
  for (const seg of parts.slice(0, -1)) {
    let next = cur[seg];
    if (next === undefined || next === null) {
      next = {};
      cur[seg] = next;
    }
    if (typeof next !== "object" || Array.isArray(next)) {
      throw new TypeError(`placeKey: ${seg} in ${placement.bodyPath} is not an object`);
    }
    cur = next as Record<string, unknown>;
  }
  cur[parts[parts.length - 1] as string] = vendorKey;
  return { headers: out, body: JSON.stringify(doc) };
}
