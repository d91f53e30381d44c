// do(): one tool call under the ledger (the Go SDK's client/do.go, without
// the NATS wait: long polls only). Each claim decision has one handler in
// `decisions`; a decision the API grows (api/openapi.yaml, then npm run gen)
// is a type error there until it has one, and a decision a newer server
// sends that this build does not know is an UnknownDecisionError.
import type { Client, Settings, Traceparent } from "./client.js";
import {
  ApiError,
  EscalatedError,
  InvalidResponseError,
  QueuedError,
  ReportFailedError,
  StoppedError,
  UnknownDecisionError,
  UnsettledError,
} from "./errors.js";
import { type CallResult, classify } from "./result.js";
import { deadline, sleep } from "./signal.js";
import type { ClaimRequest, ClaimResponse, Decision, OutcomeKind, Row } from "./types.js";

/** CallContext is what one vendor call gets from do(). */
export interface CallContext {
  /** key is the ledger key: the row's identity. */
  readonly key: string;
  /**
   * vendorKey is what to send as the vendor's idempotency key
   * (Idempotency-Key, PayPal-Request-Id…): the claim answer's
   * `row.vendor_key` when the server derives one that fits the vendor, else
   * the key itself. The same on every retry of the row.
   */
  readonly vendorKey: string;
  /** localId goes into the vendor's metadata (metadata[metadata_local_id] for Stripe, custom_id for PayPal). */
  readonly localId: string;
  /** signal aborts with the caller's signal or when callTimeoutMs runs out; pass it to fetch. */
  readonly signal: AbortSignal;
}

/**
 * CallFunc makes the vendor call for one attempt. It returns the vendor's
 * answer — any answer, a refusal included (resultFromResponse) — and throws
 * only when no answer arrived (a timeout, a broken connection): do()
 * reports that as timeout or network_error.
 */
export type CallFunc = (call: CallContext) => Promise<CallResult> | CallResult;

/** DoOptions are the per-call options of do(). */
export interface DoOptions {
  /**
   * signal ends a wait (UnsettledError) and is passed to the vendor call. The
   * outcome report of a call already made still goes out, under its own
   * deadline (reportTimeoutMs).
   */
  signal?: AbortSignal;
  /**
   * waitQueued makes do() wait, on a queued key, until the outbox worker
   * settled it (polling the claim every pollIntervalMs) and return its
   * replay or throw its stop, instead of throwing a QueuedError at once.
   */
  waitQueued?: boolean;
  /** traceparent replaces the client's for every request of this do(). */
  traceparent?: Traceparent;
  /**
   * waitApproval false makes do() throw at once, on an await_approval
   * claim, an UnsettledError whose outcome has awaitedApproval set, instead
   * of waiting for the approver's decision (a model's tool call must not
   * hang on a person). Default true.
   */
  waitApproval?: boolean;
}

/**
 * Outcome is how do() ended: what it returns when the side effect happened,
 * and the `outcome` of its StoppedError, UnsettledError (and subclasses) or
 * UnknownDecisionError when it did not, or may not have.
 */
export interface Outcome {
  /** decision is the claim decision do() acted on last (proceed, retry_same_key or replay). */
  decision: Decision;
  key: string;
  localId: string;
  /** row is the row as do() last saw it: after the report, or as replayed. */
  row: Row | null;
  /** called is true when do() called the vendor; result is then its answer. */
  called: boolean;
  result: CallResult;
  /** kind is the outcome kind reported for the call. */
  kind?: OutcomeKind;
  /** replayed is true when the receipt came from the ledger without a call. */
  replayed: boolean;
  /** waited is true when the key was in flight elsewhere and do() waited. */
  waited: boolean;
  /** awaitedApproval is true when the claim answered await_approval and do() waited for a human's decision. */
  awaitedApproval: boolean;
  /** queued is true when the claim answered queued: the outbox worker makes the call, never this do(). */
  queued: boolean;
  /** receiptId is the vendor object id of the side effect, if known. */
  receiptId?: string;
}

/** Step is what a decision's handler ends with: do() is done, or it waited and has the next answer. */
type Step = { done: Outcome } | { next: ClaimResponse };

type Handler = (run: Run, resp: ClaimResponse, out: Outcome) => Promise<Step>;

/** decisions maps each claim decision to what do() does with it. */
const decisions: { readonly [D in Decision]: Handler } = {
  proceed: (run, resp, out) => run.attempt(needRow(resp), out),
  retry_same_key: (run, resp, out) => run.attempt(needRow(resp), out),
  replay: async (_run, resp, out) => {
    const row = needRow(resp);
    out.replayed = true;
    out.result = {};
    if (row.last_http_status) out.result.httpStatus = row.last_http_status;
    if (row.upstream_receipt_id) out.result.receiptId = row.upstream_receipt_id;
    return { done: out };
  },
  stop: async (_run, resp, out) => {
    throw new StoppedError(resp.code ?? "", out.key, resp.row, { outcome: out });
  },
  wait: async (run, resp, out) => {
    const row = needRow(resp);
    // A later claim of a key that awaits a human answers wait: without
    // waitApproval that is the same answer as the first claim's.
    if (!run.waitApproval && row.approval?.state === "requested") return decisions.await_approval(run, resp, out);
    return { next: await run.waitSettled(row, out, ["wait"], (r, cause) => new UnsettledError(r.key, r.status, { cause, outcome: out })) };
  },
  // The row's claims answer wait until a human decides (an await_approval
  // again is a wait too: only the first claim makes the request); the long
  // poll wakes at once on a decision made through the same server.
  await_approval: async (run, resp, out) => {
    out.awaitedApproval = true;
    if (!run.waitApproval) throw new UnsettledError(out.key, needRow(resp).status, { cause: new Error("the key awaits a human's approval"), outcome: out });
    const hold: readonly Decision[] = ["wait", "await_approval"];
    return {
      next: await run.waitSettled(needRow(resp), out, hold, (row, cause) =>
        new UnsettledError(row.key, row.status, { cause: cause ?? new Error("do() ended while the key awaited approval"), outcome: out }),
      ),
    };
  },
  // The agent's claims of a queued key answer queued until the row settles,
  // at once even with ?wait=: waiting polls.
  queued: async (run, resp, out) => {
    const row = needRow(resp);
    out.queued = true;
    if (!run.waitQueued) throw new QueuedError(row, { outcome: out });
    return { next: await run.waitSettled(row, out, ["queued"], (r, cause) => new QueuedError(r, { cause, outcome: out })) };
  },
};

/** withReceipt sets out.receiptId from the row, or else the call's answer. */
function withReceipt(out: Outcome): Outcome {
  const receipt = out.row?.upstream_receipt_id || out.result.receiptId;
  if (receipt) out.receiptId = receipt;
  return out;
}

/**
 * vendorKeyOf is the key to send to the vendor: the row's vendor_key when
 * the server sent one (a vendor whose keys are shorter than the ledger's),
 * else the ledger key.
 */
function vendorKeyOf(out: Outcome): string {
  const v = (out.row as { vendor_key?: unknown } | null)?.vendor_key;
  return typeof v === "string" && v !== "" ? v : out.key;
}

function needRow(resp: ClaimResponse): Row {
  if (resp.row === null) throw new InvalidResponseError(resp.httpStatus, `claim: ${resp.decision} without a row`);
  return resp.row;
}

/** RunOptions are a Run's per-call options: do()'s, or the Worker's. */
export interface RunOptions {
  signal?: AbortSignal | undefined;
  waitQueued?: boolean | undefined;
  traceparent?: Traceparent | undefined;
  waitApproval?: boolean | undefined;
}

/** newOutcome is the Outcome of a claim answer before do() acts on it. */
export function newOutcome(resp: ClaimResponse): Outcome {
  return {
    decision: resp.decision,
    key: resp.row?.key ?? "",
    localId: resp.row?.metadata_local_id ?? "",
    row: resp.row,
    called: false,
    result: {},
    replayed: false,
    waited: false,
    awaitedApproval: false,
    queued: false,
  };
}

/**
 * Run is one do(): the claim, the call and the client it goes through. The
 * Worker runs its attempt alone (claim undefined): one call, classified and
 * reported as do()'s.
 */
export class Run {
  private readonly signal: AbortSignal | undefined;
  private readonly traceparent: Traceparent | undefined;
  readonly waitQueued: boolean;
  readonly waitApproval: boolean;

  constructor(
    private readonly client: Client,
    private readonly settings: Settings,
    private readonly claim: ClaimRequest | undefined,
    private readonly call: CallFunc,
    opts: RunOptions = {},
  ) {
    this.signal = opts.signal;
    this.traceparent = opts.traceparent;
    this.waitQueued = opts.waitQueued ?? false;
    this.waitApproval = opts.waitApproval ?? true;
  }

  async run(): Promise<Outcome> {
    if (!this.claim) throw new TypeError("do: no claim");
    let resp = await this.client.claim(this.claim, { signal: this.signal, traceparent: this.traceparent });
    let waited = false;
    let approval = false;
    let queued = false;
    for (;;) {
      const out: Outcome = { ...newOutcome(resp), waited, awaitedApproval: approval, queued };
      const handler = Object.hasOwn(decisions, resp.decision) ? decisions[resp.decision] : undefined;
      if (!handler) throw new UnknownDecisionError(resp.decision, out.key, out);
      const step = await handler(this, resp, out);
      if ("done" in step) return withReceipt(step.done);
      waited = true;
      approval ||= resp.decision === "await_approval";
      queued ||= resp.decision === "queued";
      resp = step.next;
    }
  }

  /** attempt calls the vendor once and reports what happened. */
  async attempt(row: Row, out: Outcome): Promise<Step> {
    out.called = true;
    const { result, threw, error } = await this.#call(out);
    const rep = classify(result, threw, error);
    rep.attempt = row.attempt;
    out.result = result;
    out.kind = rep.kind;
    // The report has its own deadline, detached from the caller's signal: a
    // call that used up the caller's time is exactly the one whose timeout
    // must reach the ledger.
    const dl = deadline(this.settings.reportTimeoutMs);
    let reported: Row;
    try {
      reported = await this.client.report(out.key, rep, { signal: dl.signal, traceparent: this.traceparent });
    } catch (err) {
      throw new ReportFailedError(out.key, err, error, withReceipt(out));
    } finally {
      dl.done();
    }
    out.row = reported;
    const cause = threw ? error : new Error(`vendor answered ${result.httpStatus ?? "nothing"}`);
    switch (reported.status) {
      case "succeeded":
        return { done: out };
      case "failed_poison":
        throw new StoppedError("failed_poison", out.key, reported, { cause, outcome: withReceipt(out) });
    }
    throw new UnsettledError(out.key, reported.status, { cause, outcome: withReceipt(out) });
  }

  /**
   * call runs the vendor call under callTimeoutMs and the caller's signal.
   * It stops waiting when the signal aborts, even for a call that ignores
   * it: what the call does after that is not known, which is a timeout.
   */
  async #call(out: Outcome): Promise<{ result: CallResult; threw: boolean; error: unknown }> {
    const dl = deadline(this.settings.callTimeoutMs, this.signal);
    try {
      const pending = Promise.resolve().then(() => this.call({ key: out.key, vendorKey: vendorKeyOf(out), localId: out.localId, signal: dl.signal }));
      pending.catch(() => {}); // a call abandoned below may still fail later
      const aborted = new Promise<never>((_, reject) => {
        if (dl.signal.aborted) reject(dl.signal.reason);
        dl.signal.addEventListener("abort", () => reject(dl.signal.reason), { once: true });
      });
      aborted.catch(() => {});
      const result = await Promise.race([pending, aborted]);
      return { result: result ?? {}, threw: false, error: undefined };
    } catch (error) {
      return { result: {}, threw: true, error };
    } finally {
      dl.done();
    }
  }

  /**
   * waitSettled long-polls the claim until it answers a decision not in
   * hold (wait; or queued), a human is paged for the row, or the signal
   * aborts (ended's error for the row as last seen).
   */
  async waitSettled(
    row: Row,
    out: Outcome,
    hold: readonly Decision[],
    ended: (row: Row, cause: unknown) => Error,
  ): Promise<ClaimResponse> {
    if (!this.claim) throw new TypeError("do: no claim");
    if (row.paged_at) throw new EscalatedError(row, { outcome: out });
    for (;;) {
      const start = Date.now();
      let resp: ClaimResponse | undefined;
      let err: unknown;
      try {
        resp = await this.client.claim(this.claim, { signal: this.signal, waitMs: this.settings.waitMs, traceparent: this.traceparent });
      } catch (e) {
        err = e;
      }
      if (resp && !hold.includes(resp.decision)) return resp;
      if (resp?.row) row = out.row = resp.row;
      if (this.signal?.aborted) throw ended(row, this.signal.reason);
      // A revoked token, a key gone: asking again cannot help.
      if (err instanceof ApiError && !err.retryable) throw err;
      if (resp?.row?.paged_at) throw new EscalatedError(resp.row, { outcome: out });
      // A long poll that waited: ask again at once.
      if (resp && Date.now() - start >= this.settings.pollIntervalMs) continue;
      // A failed poll (the client already retried it), or a wait answered
      // at once (a server shutting down): pause so the loop never spins.
      try {
        await sleep(this.settings.pollIntervalMs, this.signal);
      } catch {
        throw ended(row, this.signal?.reason);
      }
    }
  }
}
