// Every failure of the client is a ReconcilerError: an answer of the API
// that is an error (ApiError and its per-code subclasses), an answer that
// is not the API's (InvalidResponseError), no answer (NetworkError), the
// caller's abort (AbortedError), or how do() ended without a side effect
// known to have happened (StoppedError, UnsettledError and its subclasses).
// Branch with instanceof; a subclass per code, so a wrapped or re-thrown
// error keeps its meaning (the Go SDK's errors.Is on sentinels).
import type { Outcome } from "./do.js";
import type { Row, Status } from "./types.js";

/**
 * DoErrorOptions are the options of do()'s errors: `cause`, and `outcome`,
 * how do() ended (its last decision, whether it called, what it reported,
 * the row as it last saw it), as the Go SDK returns its Outcome beside the
 * error and the Python client's exceptions carry `outcome`.
 */
export interface DoErrorOptions {
  cause?: unknown;
  outcome?: Outcome;
}

/** ReconcilerError is the base class of every error the client throws. */
export class ReconcilerError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * ApiError is an error answer of the API — `{"error": {"code", "message"}}`
 * — and its HTTP status. An answer without that body (a proxy's HTML page)
 * gets a code from its status (`bad_gateway`, `http_599`). The subclass
 * follows the code; a 502, 503 or 504 without the API's body is an
 * UnavailableError too, being as retryable.
 */
export class ApiError extends ReconcilerError {
  readonly status: number;
  readonly code: string;
  /** message is the API's message: for people; the code is for programs. */
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /**
   * retryable reports whether the same request may be sent again: the API
   * (or a proxy in front of it) was unavailable, overloaded or failed inside,
   * or the first send of this call is still being answered.
   */
  get retryable(): boolean {
    // idempotency_key_in_flight: the first send of this call is still being
    // answered; the resend (same value) gets its answer.
    return this.status === 429 || this.status >= 500 || this.code === "idempotency_key_in_flight";
  }
}

/** 404 not_found: no row with this key for the token's tenant (another tenant's key too). */
export class NotFoundError extends ApiError {}
/** 422 fingerprint_mismatch: the key holds a different intent, or a claim of another tool, class or vendor. */
export class FingerprintMismatchError extends ApiError {}
/** 409 invalid_transition: the rules forbid this change (succeeded → failed_poison). */
export class InvalidTransitionError extends ApiError {}
/** 409 compensation_pending: the original row is still pending or unknown. */
export class CompensationPendingError extends ApiError {}
/** 422 compensation_failed: the original failed, so there is nothing to compensate. */
export class CompensationFailedError extends ApiError {}
/** 400 invalid_input, bad_json or bad_body: the request was refused as it is; `code` says which. */
export class InvalidInputError extends ApiError {}
/** 413 body_too_large. */
export class BodyTooLargeError extends ApiError {}
/** 401 unauthorized: a missing or unknown token. */
export class UnauthorizedError extends ApiError {}
/** 403 forbidden: the token's role may not use the route. */
export class ForbiddenError extends ApiError {}
/** 405 method_not_allowed. */
export class MethodNotAllowedError extends ApiError {}
/** 503 unavailable (and a 502/504 from a proxy): retry later. */
export class UnavailableError extends ApiError {}
/** 500 internal: the cause is in the server's log, never in the answer. */
export class InternalError extends ApiError {}
/** 501 not_implemented: the server does not offer the feature (the kill switch, the registry). */
export class UnimplementedError extends ApiError {}
/** 409 not_queued: a worker's start of a row no outbox claim inserted (the agent calls it itself). */
export class NotQueuedError extends ApiError {}
/**
 * 409 approval_decided: the approval was granted, denied or expired before
 * (approve and deny return a resent decision whose first answer was lost).
 */
export class ApprovalDecidedError extends ApiError {}
/** 409 approval_expired: the approval's expires_at has passed. */
export class ApprovalExpiredError extends ApiError {}
/** 422 tool_mismatch: the tool is registered with another vendor or class than the claim names. */
export class ToolMismatchError extends ApiError {}
/** 422 unregistered_tool: the server runs with registry.strict and the tool is not registered. */
export class UnregisteredToolError extends ApiError {}
/** 422 request_required: an outbox tool's claim needs the request envelope, which the worker sends. */
export class RequestRequiredError extends ApiError {}

/** API error codes (apierror/apierror.go) → their class. */
const codeClasses: Readonly<Record<string, typeof ApiError>> = {
  not_found: NotFoundError,
  fingerprint_mismatch: FingerprintMismatchError,
  invalid_transition: InvalidTransitionError,
  compensation_pending: CompensationPendingError,
  compensation_failed: CompensationFailedError,
  invalid_input: InvalidInputError,
  bad_json: InvalidInputError,
  bad_body: InvalidInputError,
  body_too_large: BodyTooLargeError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  method_not_allowed: MethodNotAllowedError,
  unavailable: UnavailableError,
  internal: InternalError,
  not_implemented: UnimplementedError,
  not_queued: NotQueuedError,
  approval_decided: ApprovalDecidedError,
  approval_expired: ApprovalExpiredError,
  tool_mismatch: ToolMismatchError,
  unregistered_tool: UnregisteredToolError,
  request_required: RequestRequiredError,
};

/** apiError builds the ApiError subclass of an error answer. */
export function apiError(status: number, code: string, message: string): ApiError {
  const cls = Object.hasOwn(codeClasses, code) ? codeClasses[code] : undefined;
  if (cls) return new cls(status, code, message);
  if (status === 502 || status === 503 || status === 504) return new UnavailableError(status, code, message);
  return new ApiError(status, code, message);
}

/**
 * InvalidResponseError is an answer that is not what the route returns: not
 * JSON, JSON of another shape, or larger than `maxResponseBytes`. Nothing
 * in it is taken as a success.
 */
export class InvalidResponseError extends ReconcilerError {
  readonly status: number;
  constructor(status: number, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.status = status;
  }
}

/**
 * NetworkError means no answer arrived from the API: the connection was
 * refused or broke, or the request ran past its timeout (`timedOut`). The
 * request may have reached the server; a claim or a report is safe to send
 * again, and the client already did.
 */
export class NetworkError extends ReconcilerError {
  readonly timedOut: boolean;
  constructor(message: string, timedOut: boolean, options?: { cause?: unknown }) {
    super(message, options);
    this.timedOut = timedOut;
  }
}

/** AbortedError means the caller's AbortSignal ended the request; `cause` is its reason. */
export class AbortedError extends ReconcilerError {}

/**
 * StoppedError is do()'s answer when the ledger says not to call the vendor:
 * `code` failed_poison (the vendor refused this intent; a new intent needs a
 * new key), tool_frozen (the kill switch covers the tool), approval_denied
 * (an approver said no) or approval_expired (nobody decided in time). `cause` is the
 * vendor call's own failure when this do() made the call that was refused.
 */
export class StoppedError extends ReconcilerError {
  readonly code: string;
  readonly key: string;
  /** The row that stopped the call; null for a frozen tool with no row. */
  readonly row: Row | null;
  /** How do() ended (set by do()). */
  readonly outcome: Outcome | undefined;
  constructor(code: string, key: string, row: Row | null, options?: DoErrorOptions) {
    super(`reconciler: stop: ${code}${key ? ` (key ${key})` : ""}${causeText(options?.cause)}`, errorOptions(options));
    this.code = code;
    this.key = key;
    this.row = row;
    this.outcome = options?.outcome;
  }
}

/**
 * UnsettledError is do()'s answer when the side effect's fate is not known:
 * the vendor timed out, the connection broke, it answered 5xx, 429 or a 409
 * for a key in use, the wait was aborted, or the report itself could not be
 * delivered. `status` is the row's status as last seen (pending or unknown;
 * undefined when the report never arrived). The row stays open until the
 * resolver, a webhook or a later do() with the same intent closes it:
 * never call the vendor again under a new key.
 */
export class UnsettledError extends ReconcilerError {
  readonly key: string;
  readonly status: Status | undefined;
  /** How do() ended (set by do()): what it called and reported, the row as last seen. */
  readonly outcome: Outcome | undefined;
  constructor(key: string, status: Status | undefined, options?: DoErrorOptions) {
    super(`reconciler: key ${key} not settled${status ? ` (row ${status})` : ""}${causeText(options?.cause)}`, errorOptions(options));
    this.key = key;
    this.status = status;
    this.outcome = options?.outcome;
  }
}

/**
 * EscalatedError means a human was paged for the key while do() waited (its
 * replay window closed while the row was open); only the human, or a late
 * webhook, will settle it. It is an UnsettledError.
 */
export class EscalatedError extends UnsettledError {
  readonly row: Row;
  constructor(row: Row, options?: { outcome?: Outcome }) {
    super(row.key, row.status, options);
    this.message = `reconciler: key ${row.key} escalated to a human (row ${row.status})`;
    this.row = row;
  }
}

/**
 * ReportFailedError means the outcome report could not be delivered after
 * its retries (`cause`); the row stays pending for the resolver. `callError`
 * is what the vendor call threw, if it threw. It is an UnsettledError.
 */
export class ReportFailedError extends UnsettledError {
  readonly callError: unknown;
  constructor(key: string, reportError: unknown, callError: unknown, outcome?: Outcome) {
    super(key, undefined, { cause: reportError, ...(outcome && { outcome }) });
    this.message = `reconciler: key ${key} not settled: outcome report failed${causeText(reportError)}`;
    this.callError = callError;
  }
}

/**
 * QueuedError is do()'s answer to a `queued` claim: the tool's calls go
 * through the runtime's outbox worker, so this do() called nothing. The
 * worker takes the key's work item from stream RECON_WORK, starts it, calls
 * and reports; park the run on the key (its events on
 * `recon.<tenant>.<run_id>.>`, or a later do() with `waitQueued`) and carry
 * on when it settles. It is an UnsettledError: the row is open and must never
 * be called under a new key. With `waitQueued` it is also the answer when the
 * signal aborts before the worker settled the key.
 */
export class QueuedError extends UnsettledError {
  /** row is the queued row as last seen. */
  readonly row: Row;
  readonly runId: string;
  constructor(row: Row, options?: DoErrorOptions) {
    super(row.key, row.status, options);
    this.message = `reconciler: key ${row.key} queued for the outbox worker${causeText(options?.cause)}`;
    this.row = row;
    this.runId = row.run_id;
  }
}

/**
 * UnknownDecisionError is a claim decision this client does not know (a
 * server newer than the client). do() calls nothing for it: acting on a
 * decision it cannot read could repeat a side effect.
 */
export class UnknownDecisionError extends ReconcilerError {
  readonly decision: string;
  readonly key: string;
  /** How do() ended (set by do()): nothing was called. */
  readonly outcome: Outcome | undefined;
  constructor(decision: string, key: string, outcome?: Outcome) {
    super(`reconciler: claim decision ${JSON.stringify(decision)} unknown to this client${key ? ` (key ${key})` : ""}; upgrade @reconciler/client`);
    this.decision = decision;
    this.key = key;
    this.outcome = outcome;
  }
}

/** errorOptions is what Error's constructor takes of options: the cause, when there is one. */
function errorOptions(options: DoErrorOptions | undefined): { cause?: unknown } | undefined {
  return options && "cause" in options ? { cause: options.cause } : undefined;
}

function causeText(cause: unknown): string {
  if (cause === undefined) return "";
  return `: ${cause instanceof Error ? cause.message : String(cause)}`;
}
