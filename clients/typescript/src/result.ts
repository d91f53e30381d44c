// What one vendor call answered, and how do() turns it into the outcome
// report (the Go SDK's Result, ResultFromResponse and classify).
import type { OutcomeReport } from "./types.js";

/**
 * CallResult is what one vendor call answered: its HTTP status, the vendor's
 * object id, and the vendor headers the ledger's classification reads. A call
 * that got no answer throws instead of returning one.
 */
export interface CallResult {
  httpStatus?: number;
  receiptId?: string;
  headers?: Record<string, string>;
}

/** RESULT_HEADERS are the vendor headers a CallResult keeps (the classification reads them). */
export const RESULT_HEADERS: readonly string[] = ["Idempotent-Replayed", "Stripe-Should-Retry"];

/**
 * resultFromResponse turns a vendor's fetch Response into a CallResult: its
 * status, receiptId (the object id the caller read from the body) and the
 * headers the classification reads. It does not read the body.
 */
export function resultFromResponse(resp: Response, receiptId?: string): CallResult {
  const out: CallResult = { httpStatus: resp.status };
  if (receiptId) out.receiptId = receiptId;
  for (const name of RESULT_HEADERS) {
    const v = resp.headers.get(name);
    if (v) (out.headers ??= {})[name] = v;
  }
  return out;
}

/** Timeouts of undici (Node's fetch), found in a TypeError's cause. */
const timeoutCodes = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"]);

/**
 * failureKind classifies a vendor call that threw instead of answering: a
 * deadline (a TimeoutError, as AbortSignal.timeout raises, or a connect,
 * headers or body timeout of the fetch implementation) is "timeout";
 * anything else — an abort, a refused or reset connection (fetch's
 * TypeError) — is "network_error". Both leave the row unknown: the vendor
 * may have committed.
 */
export function failureKind(err: unknown): "timeout" | "network_error" {
  // Walk the cause chain: fetch wraps its network errors in a TypeError.
  for (let e = err, depth = 0; e !== null && typeof e === "object" && depth < 8; depth++) {
    const { name, code } = e as { name?: unknown; code?: unknown };
    if (name === "TimeoutError" || (typeof code === "string" && timeoutCodes.has(code))) return "timeout";
    e = (e as { cause?: unknown }).cause;
  }
  return "network_error";
}

/**
 * classify turns a call's return into the report. A result with a status
 * is a response; a returned result without one but with a receipt is a 200
 * (an SDK that hides the status); with neither it is a network error —
 * unknown, never a success. A call that threw is a timeout or a network error.
 */
export function classify(res: CallResult, threw: boolean, err: unknown): OutcomeReport {
  if (res.httpStatus) {
    return withOptional({ kind: "response", http_status: res.httpStatus }, res);
  }
  if (!threw && res.receiptId) {
    return withOptional({ kind: "response", http_status: 200 }, res);
  }
  return { kind: threw ? failureKind(err) : "network_error" };
}

function withOptional(rep: OutcomeReport, res: CallResult): OutcomeReport {
  if (res.receiptId) rep.receipt_id = res.receiptId;
  if (res.headers && Object.keys(res.headers).length > 0) rep.headers = res.headers;
  return rep;
}
