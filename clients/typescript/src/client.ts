// The claim API over fetch: one method per route, each request retried when
// sending it again cannot make things worse (the Go SDK's client/api.go and
// client/client.go).
import {
  AbortedError,
  ApiError,
  ApprovalDecidedError,
  InvalidResponseError,
  NetworkError,
  apiError,
} from "./errors.js";
import { type CallFunc, type DoOptions, type Outcome, Run } from "./do.js";
import { failureKind } from "./result.js";
import { Scrubber } from "./scrub.js";
import { type Deadline, deadline, sleep } from "./signal.js";
import type {
  ApprovalDecision,
  ApprovalView,
  ApprovalsPage,
  ApprovalsQuery,
  ClaimRequest,
  ClaimResponse,
  ListQuery,
  OutcomeReport,
  Page,
  ResolveRequest,
  Row,
  Tool,
  ToolChange,
  ToolEntry,
} from "./types.js";

/**
 * Traceparent is where a request's W3C `traceparent` header comes from: the
 * header's value, or a function returning the current one (asked once per
 * request), e.g. OpenTelemetry's propagator:
 *
 *     traceparent: () => { const c: Record<string, string> = {}; propagation.inject(context.active(), c); return c["traceparent"]; }
 *
 * A value that is not a valid traceparent is not sent; a function that
 * throws sends none.
 */
export type Traceparent = string | (() => string | null | undefined);

const traceparentRe = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$/;

/**
 * validTraceparent reports whether v is a W3C traceparent the client sends:
 * lower-case hex fields, version not ff (version 00 exactly 55 characters),
 * trace id and parent id not all zero.
 */
export function validTraceparent(v: unknown): v is string {
  if (typeof v !== "string" || v.length > 512) return false;
  const m = traceparentRe.exec(v);
  if (!m) return false;
  const [, version, traceId, spanId, rest] = m;
  if (version === "ff" || (version === "00" && rest !== undefined)) return false;
  return /[^0]/.test(traceId!) && /[^0]/.test(spanId!);
}

/** Defaults of a Client (the Go SDK's). */
export const DEFAULTS = Object.freeze({
  /** timeoutMs bounds one API request; a long poll gets its wait on top. */
  timeoutMs: 10_000,
  /** waitMs is how long one long-polling claim (?wait=) holds: the API's maximum. */
  waitMs: 30_000,
  /** pollIntervalMs is the pause between long polls that failed or came back at once. */
  pollIntervalMs: 2_000,
  /** retries is how often a failed request is sent again (so 1+4 sends). */
  retries: 4,
  /** backoffMs is the first pause between sends (doubling, jittered, at most 2 s). */
  backoffMs: 100,
  /**
   * reportTimeoutMs bounds an outcome report with all its retries. It runs
   * even when the caller's signal has aborted: the vendor call that used up
   * the caller's time is exactly the one whose outcome must reach the ledger.
   */
  reportTimeoutMs: 30_000,
  /** maxResponseBytes caps an API answer the client reads. */
  maxResponseBytes: 4 << 20,
});

const maxBackoffMs = 2_000;

/** ClientOptions configure a Client; only baseUrl and token are required. */
export interface ClientOptions {
  /** baseUrl is the API's root: http(s)://host[:port][/prefix]. */
  baseUrl: string;
  /** token is a tenant token, or an admin token for resolve and admin reads. */
  token: string;
  /** timeoutMs bounds one API request (default 10 s). */
  timeoutMs?: number;
  /** fetch replaces the global fetch (a proxy agent, a test double). */
  fetch?: typeof fetch;
  /** tenant names the tenant an admin token reads (get and list add ?tenant=). */
  tenant?: string;
  /** retries is how often a failed request is sent again (default 4). */
  retries?: number;
  /** backoffMs is the first pause between sends (default 100 ms). */
  backoffMs?: number;
  /** waitMs is how long one long-polling claim holds (default and most 30 s). */
  waitMs?: number;
  /** pollIntervalMs is the pause between long polls that failed or came back at once (default 2 s). */
  pollIntervalMs?: number;
  /** reportTimeoutMs bounds an outcome report with its retries (default 30 s). */
  reportTimeoutMs?: number;
  /**
   * callTimeoutMs bounds the vendor call inside do() (default: none beyond
   * the caller's signal). A call that runs past it is reported as a
   * timeout: the row becomes unknown.
   */
  callTimeoutMs?: number;
  /** maxResponseBytes caps an answer the client reads (default 4 MiB); a larger one is refused, not cut. */
  maxResponseBytes?: number;
  /** scrubFields replaces the field names client.scrub removes (see DEFAULT_SCRUB_FIELDS). */
  scrubFields?: readonly string[];
  /**
   * traceparent is sent as the W3C `traceparent` header on every request
   * (a value, or a function returning the current one), so the server's
   * spans join the caller's trace. A request's own option wins.
   */
  traceparent?: Traceparent;
}

/** RequestOptions are the per-call options of every method. */
export interface RequestOptions {
  /** signal aborts the request (and its retries) with an AbortedError. */
  signal?: AbortSignal;
  /** traceparent replaces the client's for this request. */
  traceparent?: Traceparent | undefined;
}

/** ClaimOptions add the long poll to a claim. */
export interface ClaimOptions extends RequestOptions {
  /** waitMs holds an in-flight row's claim up to this long (at most 30 s) before the answer is wait. */
  waitMs?: number;
}

/** Settings are what do() reads of the client's options. */
export interface Settings {
  readonly waitMs: number;
  readonly pollIntervalMs: number;
  readonly reportTimeoutMs: number;
  readonly callTimeoutMs: number | undefined;
}

/** request is one API round trip. */
/**
 * IDEMPOTENCY_KEY_HEADER is the header every POST carries (README "A lost
 * answer"): one value per logical call, sent again unchanged with each
 * resend of that call.
 */
export const IDEMPOTENCY_KEY_HEADER = "Idempotency-Key";

/** newIdempotencyKey is 128 random bits in hex (Web Crypto where the runtime has it). */
export function newIdempotencyKey(): string {
  const b = new Uint8Array(16);
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (c?.getRandomValues) c.getRandomValues(b);
  else for (let i = 0; i < b.length; i++) b[i] = Math.floor(Math.random() * 256);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

interface Request {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** path is already escaped. */
  path: string;
  query?: Record<string, string>;
  body?: unknown;
  /** extraMs is added to the request timeout (a long poll). */
  extraMs?: number;
  /** accept are the non-2xx statuses whose body is a normal answer (a claim's 409 wait, 423 stop). */
  accept?: readonly number[];
  /** emptyOk takes a 2xx without a body as the answer (a DELETE's 204). */
  emptyOk?: boolean;
  traceparent?: Traceparent | undefined;
}

/** settingsOf hands the Worker a client's do() settings without making them public. */
const settings = new WeakMap<Client, Settings>();
export function settingsOf(c: Client): Settings {
  const s = settings.get(c);
  if (!s) throw new TypeError("reconciler client: not a Client");
  return s;
}

/**
 * Client talks to the reconciler claim API. It keeps no state between
 * calls, so one client may serve any number of concurrent calls.
 */
export class Client {
  readonly #base: string;
  readonly #token: string;
  readonly #tenant: string | undefined;
  readonly #fetch: (url: string, init: RequestInit) => Promise<Response>;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #maxResponse: number;
  readonly #scrubber: Scrubber;
  readonly #settings: Settings;
  readonly #traceparent: Traceparent | undefined;

  constructor(opts: ClientOptions) {
    let u: URL;
    try {
      u = new URL(opts.baseUrl);
    } catch {
      throw new TypeError(`reconciler client: base url ${JSON.stringify(opts.baseUrl)}: want http(s)://host[:port][/prefix]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "" || u.search !== "" || u.hash !== "") {
      throw new TypeError(`reconciler client: base url ${JSON.stringify(opts.baseUrl)}: want http(s)://host[:port][/prefix]`);
    }
    if (typeof opts.token !== "string" || opts.token.trim() === "" || /\s/.test(opts.token)) {
      throw new TypeError("reconciler client: token is empty or contains white space");
    }
    this.#base = u.href.replace(/\/+$/, "");
    this.#token = opts.token;
    this.#tenant = opts.tenant || undefined;
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("reconciler client: no fetch: pass options.fetch");
    // Called as a plain function: a runtime's fetch refuses another `this`.
    this.#fetch = (url, init) => f(url, init);
    this.#timeoutMs = positive("timeoutMs", opts.timeoutMs ?? DEFAULTS.timeoutMs);
    this.#retries = opts.retries ?? DEFAULTS.retries;
    if (!Number.isInteger(this.#retries) || this.#retries < 0) throw new RangeError("reconciler client: retries must be a whole number ≥ 0");
    this.#backoffMs = positive("backoffMs", opts.backoffMs ?? DEFAULTS.backoffMs);
    this.#maxResponse = positive("maxResponseBytes", opts.maxResponseBytes ?? DEFAULTS.maxResponseBytes);
    const waitMs = positive("waitMs", opts.waitMs ?? DEFAULTS.waitMs);
    if (waitMs > DEFAULTS.waitMs) throw new RangeError(`reconciler client: waitMs must be at most ${DEFAULTS.waitMs}`);
    this.#settings = Object.freeze({
      waitMs,
      pollIntervalMs: positive("pollIntervalMs", opts.pollIntervalMs ?? DEFAULTS.pollIntervalMs),
      reportTimeoutMs: positive("reportTimeoutMs", opts.reportTimeoutMs ?? DEFAULTS.reportTimeoutMs),
      callTimeoutMs: opts.callTimeoutMs === undefined ? undefined : positive("callTimeoutMs", opts.callTimeoutMs),
    });
    this.#scrubber = new Scrubber(opts.scrubFields);
    if (opts.traceparent !== undefined && typeof opts.traceparent !== "string" && typeof opts.traceparent !== "function") {
      throw new TypeError("reconciler client: traceparent must be a string or a function returning one");
    }
    this.#traceparent = opts.traceparent;
    settings.set(this, this.#settings);
  }

  /**
   * claim asks for a key before a vendor call. Every decision is an answer,
   * not an error: proceed (201), replay, retry_same_key, stop (200), wait
   * (409) and stop/tool_frozen (423). A network failure or a 5xx is retried:
   * a resent claim finds the row the first one made. If the first claim's
   * answer was lost after it inserted the row, the resent claim answers
   * wait (the row's lease is held) — never a second proceed. With waitMs, an
   * in-flight row is waited on for up to that long before the answer is wait.
   */
  async claim(req: ClaimRequest, opts: ClaimOptions = {}): Promise<ClaimResponse> {
    if (req?.intent === undefined || req.intent === null) throw new TypeError("claim: intent is required");
    if (req.key !== undefined && !addressable(req.key)) throw unaddressable(req.key);
    const r: Request = { method: "POST", path: "/v1/claims", body: req, accept: [409, 423], traceparent: opts.traceparent };
    if (opts.waitMs !== undefined && opts.waitMs > 0) {
      r.query = { wait: formatWait(opts.waitMs) };
      r.extraMs = opts.waitMs;
    }
    const { status, body } = await this.#send(r, opts.signal);
    return claimAnswer("claim", status, body);
  }

  /**
   * start is the outbox worker's claim of a queued key (POST
   * /v1/claims/{key}/start, no body: what to call is the row's). The first
   * start of a queued row answers proceed (attempt 1, the lease), exactly
   * once across workers; a start while that attempt is in flight answers
   * wait (409; waitMs long-polls it); later ones follow the claim table
   * (retry_same_key, replay, stop). NotFoundError when the tenant has no such
   * row, NotQueuedError when no outbox claim inserted it. Resent on a
   * network failure or a 5xx: a resent start whose first answer was lost
   * finds the lease held (wait), never a second proceed. Worker.handle does
   * all of it.
   */
  async start(key: string, opts: ClaimOptions = {}): Promise<ClaimResponse> {
    const r: Request = { method: "POST", path: keyPath(key, "/start"), accept: [409], traceparent: opts.traceparent };
    if (opts.waitMs !== undefined && opts.waitMs > 0) {
      r.query = { wait: formatWait(opts.waitMs) };
      r.extraMs = opts.waitMs;
    }
    const { status, body } = await this.#send(r, opts.signal);
    return claimAnswer(`start ${key}`, status, body);
  }

  /**
   * report reports one vendor call. It is resent with the same body on a
   * network failure or a 5xx: the ledger applies a repeated report once.
   * When it finally fails the row stays pending for the resolver.
   */
  async report(key: string, outcome: OutcomeReport, opts: RequestOptions = {}): Promise<Row> {
    const { status, body } = await this.#send(
      { method: "POST", path: keyPath(key, "/outcome"), body: outcome, traceparent: opts.traceparent },
      opts.signal,
    );
    return rowAnswer(`report outcome of ${key}`, status, body);
  }

  /** get returns the row of key. */
  async get(key: string, opts: RequestOptions = {}): Promise<Row> {
    const query = this.#tenant ? { tenant: this.#tenant } : undefined;
    const r: Request = { method: "GET", path: keyPath(key, ""), traceparent: opts.traceparent };
    if (query) r.query = query;
    const { status, body } = await this.#send(r, opts.signal);
    return rowAnswer(`get ${key}`, status, body);
  }

  /** list returns a page of rows, newest first. */
  async list(q: ListQuery = {}, opts: RequestOptions = {}): Promise<Page> {
    const query: Record<string, string> = {};
    if (this.#tenant) query["tenant"] = this.#tenant;
    if (q.status) query["status"] = q.status;
    if (q.run_id) query["run_id"] = q.run_id;
    if (q.limit !== undefined && q.limit > 0) query["limit"] = String(q.limit);
    if (q.cursor) query["cursor"] = q.cursor;
    const { status, body } = await this.#send({ method: "GET", path: "/v1/claims", query, traceparent: opts.traceparent }, opts.signal);
    if (!isObject(body) || !Array.isArray(body["rows"]) || !body["rows"].every(isRow)) {
      throw new InvalidResponseError(status, "list: answer without rows");
    }
    return body as Page;
  }

  /**
   * compensate claims the derived key that undoes key's side effect (refund,
   * void). It answers like a claim; a second request finds the first
   * compensation row. CompensationPendingError while the original is open,
   * CompensationFailedError when it failed.
   */
  async compensate(key: string, action: string, opts: RequestOptions = {}): Promise<ClaimResponse> {
    const { status, body } = await this.#send(
      { method: "POST", path: keyPath(key, "/compensations"), body: { action }, accept: [409, 423], traceparent: opts.traceparent },
      opts.signal,
    );
    return claimAnswer(`compensate ${key}`, status, body);
  }

  /**
   * resolve closes a row by hand (admin token): succeeded or failed_poison,
   * with a note saying why and the row's tenant (an admin token has none).
   */
  async resolve(key: string, req: ResolveRequest, opts: RequestOptions = {}): Promise<Row> {
    const { status, body } = await this.#send(
      { method: "POST", path: keyPath(key, "/resolve"), body: req, traceparent: opts.traceparent },
      opts.signal,
    );
    return rowAnswer(`resolve ${key}`, status, body);
  }

  /**
   * putTool registers the tool `name` in the token's tenant's registry, or
   * replaces its entry (docs/architecture.md §11). An entry equal to the
   * stored one changes nothing (changed false, same version). A PUT is
   * idempotent, so it is resent on a network failure or a 5xx. A bad entry
   * is an InvalidInputError naming the field.
   */
  async putTool(name: string, entry: ToolEntry, opts: RequestOptions = {}): Promise<ToolChange> {
    const { status, body } = await this.#send(
      { method: "PUT", path: segmentPath("/v1/tools/", "tool name", name), body: entry, traceparent: opts.traceparent },
      opts.signal,
    );
    if (!isObject(body) || !isObject(body["tool"]) || typeof body["changed"] !== "boolean") {
      throw new InvalidResponseError(status, `put tool ${name}: answer without tool and changed`);
    }
    return { tool: body["tool"] as Tool, changed: body["changed"], created: status === 201 };
  }

  /** getTool returns the registry entry of name (NotFoundError when it is not registered). */
  async getTool(name: string, opts: RequestOptions = {}): Promise<Tool> {
    const r: Request = { method: "GET", path: segmentPath("/v1/tools/", "tool name", name), traceparent: opts.traceparent };
    if (this.#tenant) r.query = { tenant: this.#tenant };
    const { status, body } = await this.#send(r, opts.signal);
    if (!isObject(body) || !isObject(body["tool"])) throw new InvalidResponseError(status, `get tool ${name}: answer without a tool`);
    return body["tool"] as Tool;
  }

  /** listTools returns the tenant's registry, by name. */
  async listTools(opts: RequestOptions = {}): Promise<Tool[]> {
    const r: Request = { method: "GET", path: "/v1/tools", traceparent: opts.traceparent };
    if (this.#tenant) r.query = { tenant: this.#tenant };
    const { status, body } = await this.#send(r, opts.signal);
    if (!isObject(body) || !Array.isArray(body["tools"]) || !body["tools"].every(isObject)) {
      throw new InvalidResponseError(status, "list tools: answer without tools");
    }
    return body["tools"] as Tool[];
  }

  /**
   * deleteTool removes the registry entry of name: its claims are then
   * served as an unregistered tool's. NotFoundError when it is not
   * registered — also when a resent DELETE finds the first one's work done.
   */
  async deleteTool(name: string, opts: RequestOptions = {}): Promise<void> {
    await this.#send(
      { method: "DELETE", path: segmentPath("/v1/tools/", "tool name", name), emptyOk: true, traceparent: opts.traceparent },
      opts.signal,
    );
  }

  /**
   * listApprovals returns a page of the open approval requests, soonest to
   * expire first (a tenant, approver or admin token; an admin token lists
   * every tenant's, or the client's `tenant`'s).
   */
  async listApprovals(q: ApprovalsQuery = {}, opts: RequestOptions = {}): Promise<ApprovalsPage> {
    const query: Record<string, string> = {};
    if (this.#tenant) query["tenant"] = this.#tenant;
    if (q.limit !== undefined && q.limit > 0) query["limit"] = String(q.limit);
    if (q.cursor) query["cursor"] = q.cursor;
    const { status, body } = await this.#send({ method: "GET", path: "/v1/approvals", query, traceparent: opts.traceparent }, opts.signal);
    if (!isObject(body) || !Array.isArray(body["approvals"]) || !body["approvals"].every(isApprovalView)) {
      throw new InvalidResponseError(status, "list approvals: answer without approvals");
    }
    return body as ApprovalsPage;
  }

  /** getApproval returns one approval, in any state, with its row. */
  async getApproval(id: string, opts: RequestOptions = {}): Promise<ApprovalView> {
    const { status, body } = await this.#send(
      { method: "GET", path: segmentPath("/v1/approvals/", "approval id", id), traceparent: opts.traceparent },
      opts.signal,
    );
    return approvalAnswer(`get approval ${id}`, status, body);
  }

  /**
   * approve grants an approval request: an approver token of the tenant or an
   * admin token, never the token that made the claim (ForbiddenError). The
   * key's next claim answers proceed, once. ApprovalDecidedError when it was
   * decided before, ApprovalExpiredError when its expires_at has passed.
   */
  approve(id: string, decision: ApprovalDecision, opts: RequestOptions = {}): Promise<ApprovalView> {
    return this.#decide(id, "/approve", "granted", decision, opts);
  }

  /**
   * deny denies an approval request (`note`, saying why, is required): the
   * row becomes failed_poison and the key's claims stop with
   * approval_denied. Errors as approve.
   */
  deny(id: string, decision: ApprovalDecision, opts: RequestOptions = {}): Promise<ApprovalView> {
    return this.#decide(id, "/deny", "denied", decision, opts);
  }

  async #decide(id: string, verb: string, want: string, d: ApprovalDecision, opts: RequestOptions): Promise<ApprovalView> {
    const path = segmentPath("/v1/approvals/", "approval id", id) + verb;
    try {
      const { status, body } = await this.#send({ method: "POST", path, body: d, traceparent: opts.traceparent }, opts.signal);
      return approvalAnswer(`decide approval ${id}`, status, body);
    } catch (err) {
      if (!(err instanceof ApprovalDecidedError)) throw err;
      // A resent decision whose first answer was lost finds its own work
      // done: that is this call's success, not a conflict.
      const view = await this.getApproval(id, opts);
      const a = view.approval;
      if (a.state === want && a.actor === d.actor && (a.note ?? "") === (d.note ?? "")) return view;
      throw err;
    }
  }

  /**
   * do runs one tool call under the ledger:
   *
   * - it claims the intent's key;
   * - on proceed or retry_same_key it calls `call` with the key, the local id
   *   and a signal, classifies what happened — an answer (status, receipt,
   *   vendor headers), a timeout, a network error — and reports it,
   *   resending the same report if it is lost;
   * - on replay it returns the stored receipt without calling;
   * - on wait it long-polls the claim (`?wait=30s`) until the row settles,
   *   a human is paged for it (EscalatedError) or the signal aborts
   *   (UnsettledError), then acts on the new decision;
   * - on stop it throws a StoppedError;
   * - on await_approval (the tool needs a human for this claim) it calls
   *   nothing and long-polls the claim as on wait until a human decides: a
   *   grant makes the next claim proceed, once, and do() calls then
   *   (`outcome.awaitedApproval`); a denial or an expiry throws a
   *   StoppedError with code approval_denied or approval_expired; the signal
   *   aborting first throws an UnsettledError (the request stays open);
   * - on queued (the tool's calls go through the outbox worker) it calls
   *   nothing and throws a QueuedError, an UnsettledError to park the run
   *   on; with `waitQueued` it polls the claim until the worker settled the
   *   key and returns its replay (or throws a StoppedError), or a QueuedError
   *   when the signal aborts first;
   * - on a decision it does not know it throws UnknownDecisionError.
   *
   * A returned Outcome means the side effect happened (row.status
   * succeeded). A StoppedError means the ledger or the vendor refused the
   * intent. An UnsettledError means nobody knows yet (timeout, 5xx, a lost
   * report): the row stays pending or unknown, and the resolver, a webhook
   * or a later do() with the same intent closes it — never call the vendor
   * again under a new key. If the process dies between the call and the
   * report, the row stays pending for its lease (pending_until), then a
   * retry of the same intent gets retry_same_key (same key, so the vendor
   * replays) or the resolver settles it from vendor truth.
   */
  do(claim: ClaimRequest, call: CallFunc, opts: DoOptions = {}): Promise<Outcome> {
    return new Run(this, this.#settings, claim, call, opts).run();
  }

  /** scrub removes model-supplied idempotency fields from args with the client's field list. */
  scrub<T extends Record<string, unknown> | null | undefined>(args: T): T {
    return this.#scrubber.scrub(args);
  }

  /**
   * send sends r, again after a failure a resend cannot make worse (no
   * answer, a 429 or a 5xx), and decodes a 2xx (or accepted) answer.
   */
  async #send(r: Request, signal: AbortSignal | undefined): Promise<{ status: number; body: unknown }> {
    const body = r.body === undefined ? undefined : JSON.stringify(r.body);
    const what = `${r.method} ${r.path}`;
    // One Idempotency-Key per logical call, the same on every resend of it:
    // a resend whose first answer was lost gets that answer.
    const key = r.method === "POST" ? newIdempotencyKey() : undefined;
    let last: unknown;
    for (let i = 0; i <= this.#retries; i++) {
      if (i > 0) {
        try {
          await sleep(this.#pause(i), signal);
        } catch {
          throw new AbortedError(`${what}: aborted (last error: ${errorText(last)})`, { cause: signal?.reason });
        }
      }
      try {
        return await this.#once(r, what, body, signal, key);
      } catch (err) {
        last = err;
        if (err instanceof AbortedError || (err instanceof ApiError && !err.retryable)) throw err;
      }
    }
    throw last;
  }

  /** pause is the jittered backoff before send number i+1. */
  #pause(i: number): number {
    const d = Math.min(this.#backoffMs * 2 ** (i - 1), maxBackoffMs);
    // Jitter: many runtimes retrying after one outage must not stampede.
    return d / 2 + Math.random() * (d / 2);
  }

  async #once(r: Request, what: string, body: string | undefined, signal: AbortSignal | undefined, idempotencyKey?: string) {
    const dl = deadline(this.#timeoutMs + (r.extraMs ?? 0), signal);
    try {
      let url = this.#base + r.path;
      if (r.query && Object.keys(r.query).length > 0) url += "?" + new URLSearchParams(r.query).toString();
      const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: "application/json" };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      if (idempotencyKey !== undefined) headers[IDEMPOTENCY_KEY_HEADER] = idempotencyKey;
      const tp = currentTraceparent(r.traceparent ?? this.#traceparent);
      if (tp) headers["traceparent"] = tp;
      const init: RequestInit = { method: r.method, headers, signal: dl.signal };
      if (body !== undefined) init.body = body;
      let resp: Response;
      try {
        resp = await this.#fetch(url, init);
      } catch (err) {
        throw noAnswer(what, err, dl, signal);
      }
      let data: { text: string; over: boolean };
      try {
        data = await readCapped(resp, this.#maxResponse);
      } catch (err) {
        throw noAnswer(`${what}: read answer`, err, dl, signal);
      }
      const status = resp.status;
      const ok = (status >= 200 && status < 300) || (r.accept?.includes(status) ?? false);
      if (r.emptyOk && status >= 200 && status < 300 && data.text.trim() === "") return { status, body: null };
      if (ok && !isErrorBody(data.text)) {
        if (data.over) throw new InvalidResponseError(status, `${what}: answer larger than ${this.#maxResponse} bytes`);
        try {
          return { status, body: JSON.parse(data.text) as unknown };
        } catch (err) {
          throw new InvalidResponseError(status, `${what}: answer is not JSON: ${snippet(data.text)}`, { cause: err });
        }
      }
      throw decodeError(status, data.text);
    } finally {
      dl.done();
    }
  }
}

/** currentTraceparent is the header's value from src, or undefined when it gives none that is valid. */
function currentTraceparent(src: Traceparent | undefined): string | undefined {
  let v: unknown = src;
  if (typeof src === "function") {
    try {
      v = src();
    } catch {
      return undefined; // tracing must never fail a write
    }
  }
  return validTraceparent(v) ? v : undefined;
}

/** segmentPath is prefix + one escaped path segment; a name of dots only is refused (see addressable). */
function segmentPath(prefix: string, what: string, name: string): string {
  if (typeof name !== "string" || name === "" || /^\.+$/.test(name)) {
    throw new TypeError(`reconciler client: ${what} ${JSON.stringify(name)} is not a name`);
  }
  return prefix + encodeURIComponent(name);
}

function isApprovalView(v: unknown): v is ApprovalView {
  return isObject(v) && isObject(v["approval"]) && typeof v["approval"]["id"] === "string" && isRow(v["row"]);
}

function approvalAnswer(what: string, status: number, body: unknown): ApprovalView {
  if (!isApprovalView(body)) throw new InvalidResponseError(status, `${what}: answer without approval and row`);
  return body;
}

function positive(name: string, v: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) throw new RangeError(`reconciler client: ${name} must be a positive number of milliseconds`);
  return v;
}

/** formatWait writes a wait as a Go duration, the form the API documents (30s, 1500ms). */
function formatWait(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}

/**
 * addressable reports whether a key can be put in a path. A business key may
 * hold "/", "?", "#" or "%", all of which encodeURIComponent encodes; but a
 * WHATWG URL — the only kind fetch sends — resolves "." and ".." as dot
 * segments even percent-encoded (%2E), so /v1/claims/%2E/outcome would
 * reach another route. Such keys are refused before anything is sent.
 */
function addressable(key: string): boolean {
  return key !== "." && key !== "..";
}

const unaddressable = (key: string) =>
  new TypeError(`reconciler client: key ${JSON.stringify(key)} is a dot segment, which no fetch can put in a path; choose another business key`);

/** keyPath is the escaped path of a claim's route. */
function keyPath(key: string, suffix: string): string {
  if (!addressable(key)) throw unaddressable(key);
  return `/v1/claims/${encodeURIComponent(key)}${suffix}`;
}

function noAnswer(what: string, err: unknown, dl: Deadline, signal: AbortSignal | undefined): Error {
  if (signal?.aborted) return new AbortedError(`${what}: aborted`, { cause: signal.reason });
  if (dl.timedOut()) return new NetworkError(`${what}: no answer in time`, true, { cause: err });
  return new NetworkError(`${what}: ${errorText(err)}`, failureKind(err) === "timeout", { cause: err });
}

/** readCapped reads the body, at most max bytes (one more tells a complete answer from a cut one). */
async function readCapped(resp: Response, max: number): Promise<{ text: string; over: boolean }> {
  if (resp.body === null) return { text: "", over: false };
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let over = false;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size > max) {
      over = true;
      await reader.cancel().catch(() => {});
      break;
    }
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return { text: new TextDecoder().decode(all), over };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function isRow(v: unknown): v is Row {
  return isObject(v) && typeof v["key"] === "string" && typeof v["status"] === "string";
}

/** isErrorBody reports whether text is the API's error shape; a 409 answers a decision (wait) or an error (compensation_pending). */
function isErrorBody(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    return isObject(v) && v["error"] !== undefined && v["error"] !== null;
  } catch {
    return false;
  }
}

/** Status texts of the answers a proxy in front of the API sends without the API's body. */
const statusCodes: Readonly<Record<number, string>> = {
  400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
  408: "request_timeout", 409: "conflict", 413: "request_entity_too_large", 422: "unprocessable_entity",
  429: "too_many_requests", 500: "internal_server_error", 501: "not_implemented", 502: "bad_gateway",
  503: "service_unavailable", 504: "gateway_timeout",
};

/** decodeError builds the ApiError of an error answer; a body that is not the API's gets a code from the status. */
function decodeError(status: number, text: string): ApiError {
  try {
    const v: unknown = JSON.parse(text);
    if (isObject(v) && isObject(v["error"])) {
      const { code, message } = v["error"];
      if (typeof code === "string" && code !== "") return apiError(status, code, typeof message === "string" ? message : "");
    }
  } catch {
    // not JSON: a proxy's page
  }
  return apiError(status, statusCodes[status] ?? `http_${status}`, snippet(text));
}

function snippet(text: string): string {
  const t = text.trim();
  return t.length > 200 ? t.slice(0, 200) + "…" : t;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function claimAnswer(what: string, status: number, body: unknown): ClaimResponse {
  if (!isObject(body) || typeof body["decision"] !== "string" || body["decision"] === "") {
    throw new InvalidResponseError(status, `${what}: answer without a decision`);
  }
  const row = body["row"];
  if (row !== undefined && row !== null && !isRow(row)) throw new InvalidResponseError(status, `${what}: answer with a malformed row`);
  return { ...(body as Omit<ClaimResponse, "httpStatus">), row: row ?? null, httpStatus: status };
}

function rowAnswer(what: string, status: number, body: unknown): Row {
  if (!isObject(body) || !isRow(body["row"])) throw new InvalidResponseError(status, `${what}: answer without a row`);
  return body["row"];
}
