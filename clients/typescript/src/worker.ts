// The runtime's outbox worker (docs/architecture.md §11): it makes the calls
// of tools whose autonomy is outbox, one work item at a time. It takes no
// NATS library: the runtime pulls the messages of stream RECON_WORK (subject
// recon_work.<tenant>.<tool>, e.g. with nats.js's consumer on
// recon_work.<tenant>.>), hands each one's data to handle() and acks or naks
// the message as the answer says. The attempt itself is do()'s (Run.attempt):
// one call, classified and reported the same way.
//
// The message only names the key: handle() reads the key's row first (GET
// /v1/claims/{key}) and terminates, calling nothing, an item that is not a
// work item, names another tenant than opts.tenant (or a key that is no row
// of the token's tenant), or disagrees with the row (tool, run, vendor,
// local id, request, expectation). The handler gets the row's request, as
// start returns it, never a body taken from the message.
//
// Two answers come back with a nak so that the call is made after all:
//   - start answers wait while an attempt's lease runs (pending_until ahead):
//     another worker's call in flight, or this item's own start whose answer
//     was lost (the client resent it after a transport error; the server had
//     granted attempt 1), where an ack would make no call at all. The delay
//     is the lease's remainder (plus a margin, at least 1 s, at most
//     maxDelayMs); afterwards start answers retry_same_key for a
//     write_idempotent tool and the worker calls with the same key, which
//     the vendor dedupes. A wait whose lease is over is the resolver's row
//     ("resolver"): ack.
//   - the call left the row pending (a vendor 429, a 409 without a receipt:
//     the lease ended, the vendor should be retried): nak with nakDelayMs;
//     the next start answers retry_same_key.
import { type Client, type Traceparent, settingsOf, validTraceparent } from "./client.js";
import { type CallContext, type Outcome, Run, newOutcome } from "./do.js";
import {
  AbortedError,
  ForbiddenError,
  InvalidInputError,
  InvalidResponseError,
  NotFoundError,
  NotQueuedError,
  ReportFailedError,
  StoppedError,
  UnauthorizedError,
  UnsettledError,
} from "./errors.js";
import type { CallResult } from "./result.js";
import type { ClaimResponse, Decision, Row, WorkItem } from "./types.js";

/** WorkContext is what a work item's handler gets: do()'s CallContext and the item. */
export interface WorkContext extends CallContext {
  /** item is the work item: item.work.request is the envelope to send, item.work.intent the claim's intent. */
  readonly item: WorkItem;
}

/**
 * WorkHandler makes the vendor call of one work item: send `key` as the
 * vendor's idempotency key (where the tool's key_placement says) and
 * `localId` in the vendor's metadata. It answers and throws as do()'s
 * CallFunc does.
 */
export type WorkHandler = (call: WorkContext) => Promise<CallResult> | CallResult;

/**
 * WorkStatus says what handle() did with a work item:
 *
 * - done: the handler was called and its answer reported (`outcome.row` says
 *   how it went; `error` is set when the row did not succeed). Ack, except
 *   when the row is still pending (a vendor 429, a 409 without a receipt:
 *   the vendor should be retried): nak with nakDelayMs, and the next start
 *   answers retry_same_key.
 * - not_queued: no outbox claim made the row. Ack.
 * - settled: the key is settled (replay or stop): nothing to call. Ack.
 * - in_flight: an attempt's lease runs (another worker's call, or this
 *   item's own start granted and its answer lost); nothing was called. Nak
 *   with the lease's remainder as the delay (at most maxDelayMs): after the
 *   lease start answers retry_same_key (the same key again) or the row is
 *   the resolver's.
 * - resolver: an attempt was made and its lease is over without an answer
 *   the ledger may retry: the resolver (or a human) closes the row. Ack.
 * - frozen: the kill switch covers the tool; nothing was started. Nak with a delay.
 * - no_handler: this worker has no handler for the tool; nothing was started. Nak.
 * - retry: the ledger failed (a 5xx, no answer, an answer not the API's)
 *   after the client's retries; nothing was called. Nak.
 * - refused: the worker's token may not start the row (401, 403, 404: no
 *   such row for its tenant): a configuration error, not the item's. Nak.
 * - invalid: the message is not a work item, or names a key the API
 *   refuses: it can never be handled. Term it (WorkOutcome.term).
 * - foreign: the item names another tenant than the Worker's (opts.tenant),
 *   or a key that is no row of the token's tenant; nothing was started or
 *   called. Term it.
 * - forged: the item disagrees with the row it names in the ledger (tool,
 *   run, vendor, local id, request, expectation): a message the relay did
 *   not make from the row. Nothing was started or called. Term it.
 */
export type WorkStatus =
  | "done"
  | "not_queued"
  | "settled"
  | "in_flight"
  | "resolver"
  | "frozen"
  | "no_handler"
  | "retry"
  | "refused"
  | "invalid"
  | "foreign"
  | "forged";

/** WorkOutcome is how handle() ended and what to do with the message. */
export interface WorkOutcome {
  status: WorkStatus;
  /** ack: true to ack the message (it is finished), false to nak it. */
  ack: boolean;
  key: string;
  /** decision is the start's ("" when nothing was started). */
  decision: Decision | "";
  /** row is the row as last seen. */
  row: Row | null;
  /** outcome is how the call went, when handle() made one (status done). */
  outcome?: Outcome;
  /** error says why the row did not succeed, or why the item comes back. */
  error?: unknown;
  /** delayMs is the nak delay handle() suggests (0 for an ack). */
  delayMs: number;
  /**
   * term: terminate the message (nats.js msg.term()) rather than ack it: it
   * is not a work item of this tenant's ledger (invalid, foreign, forged)
   * and must never come back. ack is true as well, for a runtime that only acks.
   */
  term: boolean;
}

/** WorkerOptions configure a Worker. */
export interface WorkerOptions {
  /**
   * callTimeoutMs bounds a handler (default: the client's callTimeoutMs).
   * One that runs past it is reported as a timeout: the row becomes unknown
   * and the resolver settles it from the vendor.
   */
  callTimeoutMs?: number;
  /** nakDelayMs is the delay a nak suggests (default 5 s). */
  nakDelayMs?: number;
  /** maxDelayMs caps the delay of a nak that waits out a lease, status in_flight (default 30 s). */
  maxDelayMs?: number;
  /** tenant is the Worker's tenant: an item of another is terminated without a request (status foreign). */
  tenant?: string;
}

/** HandleOptions are the per-item options of handle(). */
export interface HandleOptions {
  /** signal aborts the start and the call (the call is then reported as a timeout). */
  signal?: AbortSignal;
  /** traceparent (the message's header, say) goes on every request; without one, the item's own. */
  traceparent?: Traceparent;
}

/** DEFAULT_NAK_DELAY_MS is the pause a nak suggests when the item should come back later. */
export const DEFAULT_NAK_DELAY_MS = 5_000;

/** DEFAULT_MAX_DELAY_MS is the longest nak delay that waits out a lease, as the Go Worker's nak backoff cap. */
export const DEFAULT_MAX_DELAY_MS = 30_000;

/** LEASE_MARGIN_MS is what a nak that waits out a lease adds to its end: the lease is the server's clock, the delay this machine's. */
const LEASE_MARGIN_MS = 500;

/**
 * parseWorkItem reads a work item: the message's data (a string or bytes)
 * or its decoded JSON. It throws an InvalidResponseError for anything else.
 */
export function parseWorkItem(data: unknown): WorkItem {
  let v = data;
  if (v instanceof Uint8Array) v = new TextDecoder("utf-8", { fatal: true }).decode(v);
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch (err) {
      throw new InvalidResponseError(0, "work item: not JSON", { cause: err });
    }
  }
  const o = v as Record<string, unknown> | null;
  const w = o?.["work"] as Record<string, unknown> | null | undefined;
  const str = (x: unknown) => typeof x === "string" && x !== "";
  if (
    o === null || typeof o !== "object" || Array.isArray(o) || !str(o["key"]) || !str(o["tool"]) ||
    w === null || typeof w !== "object" || Array.isArray(w) || !str(w["metadata_local_id"])
  ) {
    throw new InvalidResponseError(0, "work item: want key, tool and work.metadata_local_id");
  }
  return o as unknown as WorkItem;
}

/**
 * Worker handles work items with a client (a tenant token) and one handler
 * per tool name. Handling one item twice, or two workers handling it at
 * once, makes one call: only one start proceeds (the other naks until the
 * lease ends). It keeps no state but its
 * handlers, so one Worker may handle any number of items concurrently.
 */
export class Worker {
  readonly #client: Client;
  readonly #handlers = new Map<string, WorkHandler>();
  readonly #callTimeoutMs: number | undefined;
  readonly #nakDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #tenant: string;

  constructor(client: Client, handlers: Readonly<Record<string, WorkHandler>> = {}, opts: WorkerOptions = {}) {
    this.#client = client;
    settingsOf(client); // a Client, or a TypeError now rather than at the first item
    if (opts.callTimeoutMs !== undefined && !(opts.callTimeoutMs > 0)) throw new RangeError("reconciler worker: callTimeoutMs must be positive");
    if (opts.nakDelayMs !== undefined && !(opts.nakDelayMs >= 0)) throw new RangeError("reconciler worker: nakDelayMs must be ≥ 0");
    this.#callTimeoutMs = opts.callTimeoutMs;
    if (opts.maxDelayMs !== undefined && !(opts.maxDelayMs > 0)) throw new RangeError("reconciler worker: maxDelayMs must be positive");
    this.#nakDelayMs = opts.nakDelayMs ?? DEFAULT_NAK_DELAY_MS;
    this.#maxDelayMs = opts.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
    this.#tenant = opts.tenant ?? "";
    for (const [tool, h] of Object.entries(handlers)) this.register(tool, h);
  }

  /** register sets the handler of the tool named tool (replacing one). */
  register(tool: string, handler: WorkHandler): void {
    if (typeof tool !== "string" || tool === "") throw new TypeError("reconciler worker: a handler needs a tool name");
    if (typeof handler !== "function") throw new TypeError(`reconciler worker: the handler of ${tool} is not a function`);
    this.#handlers.set(tool, handler);
  }

  /**
   * handle starts, calls and reports one work item — the message's data
   * (string, bytes), its decoded JSON, or a WorkItem — and says whether to
   * ack or nak the message. It throws only an AbortedError (the signal).
   */
  async handle(data: unknown, opts: HandleOptions = {}): Promise<WorkOutcome> {
    let item: WorkItem;
    try {
      item = parseWorkItem(data);
    } catch (error) {
      return this.#end("invalid", "", null, { error });
    }
    if (this.#tenant !== "" && item.tenant !== this.#tenant) return this.#end("foreign", item.key, null, {});
    let tp: Traceparent | undefined = opts.traceparent;
    if (typeof tp === "string" && !validTraceparent(tp)) tp = undefined;
    tp ??= validTraceparent(item.traceparent) ? item.traceparent : undefined;

    // The ledger's row, not the message, says what to call: read it before
    // the start, so a forged item takes no lease.
    let stored: Row;
    try {
      stored = await this.#client.get(item.key, { signal: opts.signal, traceparent: tp });
    } catch (error) {
      if (error instanceof AbortedError) throw error;
      if (error instanceof NotFoundError) return this.#end("foreign", item.key, null, { error });
      if (error instanceof UnauthorizedError || error instanceof ForbiddenError) return this.#end("refused", item.key, null, { error });
      if (error instanceof InvalidInputError || error instanceof TypeError) return this.#end("invalid", item.key, null, { error });
      return this.#end("retry", item.key, null, { error });
    }
    if (mismatch(item, stored) !== "") return this.#end("forged", item.key, stored, {});
    const handler = this.#handlers.get(stored.tool);
    if (!handler) return this.#end("no_handler", item.key, null, {});

    let resp: ClaimResponse;
    try {
      resp = await this.#client.start(item.key, { signal: opts.signal, traceparent: tp });
    } catch (error) {
      if (error instanceof AbortedError) throw error;
      if (error instanceof NotQueuedError) return this.#end("not_queued", item.key, null, { error });
      if (error instanceof UnauthorizedError || error instanceof ForbiddenError || error instanceof NotFoundError) {
        return this.#end("refused", item.key, null, { error });
      }
      if (error instanceof InvalidInputError || error instanceof TypeError) return this.#end("invalid", item.key, null, { error });
      return this.#end("retry", item.key, null, { error }); // a 5xx, no answer, an answer not the API's
    }
    const row = resp.row;
    const d = resp.decision;
    if ((d === "proceed" || d === "retry_same_key") && row) {
      // The row changed between the read and the start: the item comes
      // back under the row's lease and is checked again.
      if (mismatch(item, row) !== "") return this.#end("retry", item.key, row, { decision: d });
      return this.#call(itemOf(row, item), handler, resp, row, opts.signal, tp);
    }
    if (d === "replay" || d === "stop") return this.#end("settled", item.key, row, { decision: d });
    if (d === "wait" && row) {
      // At attempt 0 the kill switch holds the tool before any call: later.
      if (row.attempt === 0) return this.#end("frozen", item.key, row, { decision: d });
      const left = Date.parse(row.pending_until ?? "") - Date.now();
      if (left > 0) {
        // A lease runs: another worker's call, or this item's own start
        // whose answer was lost. An ack would drop the call; after the
        // lease start answers retry_same_key (the same key: the vendor
        // dedupes) or the row is the resolver's.
        const delayMs = Math.min(Math.max(left + LEASE_MARGIN_MS, 1_000), this.#maxDelayMs);
        return this.#end("in_flight", item.key, row, { decision: d, delayMs });
      }
      // The lease is over (or the row has none) and start may not retry: the resolver's row.
      return this.#end("resolver", item.key, row, { decision: d });
    }
    const error = new InvalidResponseError(resp.httpStatus, `start answered ${JSON.stringify(d)}, which this worker does not act on`);
    return this.#end("retry", item.key, row, { decision: d, error });
  }

  async #call(item: WorkItem, handler: WorkHandler, resp: ClaimResponse, row: Row, signal: AbortSignal | undefined, tp: Traceparent | undefined): Promise<WorkOutcome> {
    const base = settingsOf(this.#client);
    const settings = { ...base, callTimeoutMs: this.#callTimeoutMs ?? base.callTimeoutMs };
    const run = new Run(this.#client, settings, undefined, (c) => handler({ ...c, item }), { signal, traceparent: tp });
    const out = newOutcome(resp);
    try {
      const step = await run.attempt(row, out);
      const done = "done" in step ? step.done : out;
      return this.#end("done", item.key, done.row, { decision: resp.decision, outcome: done });
    } catch (error) {
      // The call was made: a row that did not succeed, or a report that
      // failed (its lease keeps a redelivered item from a second call, and
      // the resolver settles the row after it), is finished for the worker.
      if (error instanceof UnsettledError && !(error instanceof ReportFailedError) && out.row?.status === "pending") {
        // The vendor should be retried (a 429, a 409 without a receipt):
        // the ledger ended the lease, so the item's next start answers
        // retry_same_key.
        return this.#end("done", item.key, out.row, { decision: resp.decision, outcome: error.outcome ?? out, error, ack: false });
      }
      if (error instanceof StoppedError || error instanceof UnsettledError) {
        return this.#end("done", item.key, out.row, { decision: resp.decision, outcome: error.outcome ?? out, error });
      }
      throw error;
    }
  }

  #end(
    status: WorkStatus,
    key: string,
    row: Row | null,
    more: { decision?: Decision; outcome?: Outcome; error?: unknown; ack?: boolean; delayMs?: number },
  ): WorkOutcome {
    const term = status === "invalid" || status === "foreign" || status === "forged";
    const ack = more.ack ?? (term || status === "done" || status === "not_queued" || status === "settled" || status === "resolver");
    const w: WorkOutcome = { status, ack, key, decision: more.decision ?? "", row, delayMs: ack ? 0 : (more.delayMs ?? this.#nakDelayMs), term };
    if (more.outcome) w.outcome = more.outcome;
    if ("error" in more) w.error = more.error;
    return w;
  }
}

/** sameJSON compares two JSON values field by field (key order aside). */
function sameJSON(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return (a ?? null) === (b ?? null);
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a as object).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const kb = Object.keys(b as object).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => sameJSON((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

/**
 * mismatch names the first field in which a work item disagrees with the
 * row it names ("" when it agrees): a message the relay made from the row
 * agrees in all of them. The intent is not compared (the row keeps only its
 * RFC 8785 fingerprint): build the vendor call from the request.
 */
function mismatch(item: WorkItem, row: Row): string {
  const checks: Array<[string, unknown, unknown]> = [
    ["key", item.key, row.key],
    ["tenant", item.tenant, row.tenant],
    ["tool", item.tool, row.tool],
    ["run_id", item.run_id, row.run_id],
    ["tool_call_id", item.tool_call_id ?? "", row.tool_call_id ?? ""],
    ["vendor", item.work.vendor, row.vendor],
    ["tool_class", item.work.tool_class, row.tool_class],
    ["metadata_local_id", item.work.metadata_local_id, row.metadata_local_id],
    ["request", item.work.request ?? null, row.request ?? null],
    ["expect", item.work.expect ?? null, row.expect ?? null],
  ];
  for (const [name, got, want] of checks) if (!sameJSON(got, want)) return name;
  return "";
}

/**
 * itemOf is the work item a handler gets: the row's, as start returned it
 * (the request to send is the ledger's, never the message's), with the
 * message's intent and trace context.
 */
function itemOf(row: Row, item: WorkItem): WorkItem {
  const work: WorkItem["work"] = {
    vendor: row.vendor,
    tool_class: row.tool_class,
    metadata_local_id: row.metadata_local_id,
    intent: item.work.intent,
    request: row.request ?? null,
  };
  if (row.expect) work.expect = row.expect;
  const rwu = row.replay_window_until ?? item.work.replay_window_until;
  if (rwu) work.replay_window_until = rwu;
  const out: WorkItem = { key: row.key, tenant: row.tenant, run_id: row.run_id, tool: row.tool, status: item.status, work };
  if (row.tool_call_id) out.tool_call_id = row.tool_call_id;
  if (item.source !== undefined) out.source = item.source;
  if (item.at !== undefined) out.at = item.at;
  if (item.traceparent !== undefined) out.traceparent = item.traceparent;
  return out;
}
