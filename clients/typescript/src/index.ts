/**
 * @reconciler/client is the TypeScript client for agent runtimes: it puts
 * every write tool call under the reconciler ledger, so a timeout retried by
 * the model loop, the harness and the HTTP client is still one side effect.
 * It mirrors the Go SDK (client/ in the reconciler repository):
 *
 * - `new Client({baseUrl, token})` with claim, report, get, list, compensate
 *   and resolve (admin) — the claim API's routes and bodies
 *   (api/openapi.yaml). Every API error is an ApiError subclass per code
 *   (NotFoundError, FingerprintMismatchError, UnavailableError, …).
 * - `client.do(claim, call)` claims the intent's key, calls the vendor only
 *   on proceed or retry_same_key, classifies and reports the answer
 *   (resending a lost report with the same body), replays a stored receipt,
 *   long-polls a key in flight elsewhere, and throws a StoppedError or an
 *   UnsettledError when the side effect did not (or may not have) happened.
 *   It never calls the vendor under a new key.
 * - do() of a tool that needs a human (await_approval) waits for the
 *   approver's decision, then calls once or throws a StoppedError
 *   (approval_denied, approval_expired); of an outbox tool (queued) it calls
 *   nothing and throws a QueuedError, or with `waitQueued` waits for the
 *   worker's result. `Worker` is that outbox worker: it handles the work
 *   items the runtime pulls from stream RECON_WORK.
 * - start, putTool/getTool/listTools/deleteTool and
 *   listApprovals/getApproval/approve/deny cover the worker's route, the
 *   tool registry and the approval gate.
 * - `traceparent` (a value or a function, per client, per request or per
 *   do()) sends a W3C traceparent header on every request.
 * - `scrub` and `scrubSchema` keep a model from choosing a write's identity:
 *   they remove idempotency_key, request_id, message_id-style fields from tool
 *   arguments and from the tool schema the model sees.
 * - `GuardedTool` is one write tool a model calls, under the ledger: the
 *   schema the model sees without key-like fields, the intent from the
 *   registry's intent_fields, the key placed where the vendor takes it, and
 *   every answer in words the model acts on. The subpath exports
 *   `@reconciler/client/ai`, `/openai-agents` and `/langchain` wrap it in
 *   each framework's own tool() (the frameworks are optional peer
 *   dependencies: this import needs none of them).
 * - `resultFromResponse` reads a vendor's fetch Response for do();
 *   `failureKind` tells a timeout from a network error.
 *
 * Imports: nothing at run time. The library uses only what Node ≥ 18, Deno,
 * Bun, browsers and edge runtimes share (fetch, AbortController, TextDecoder,
 * timers): no node: module, no Buffer, no process.
 *
 * Concurrency: a Client keeps no state between calls and may be shared; do()
 * runs the vendor call in the caller's task and leaves no timer behind.
 *
 * @packageDocumentation
 */
export {
  Client,
  DEFAULTS,
  type ClaimOptions,
  type ClientOptions,
  type RequestOptions,
  type Traceparent,
  validTraceparent,
} from "./client.js";
export type { CallContext, CallFunc, DoOptions, Outcome } from "./do.js";
export {
  AbortedError,
  ApiError,
  ApprovalDecidedError,
  ApprovalExpiredError,
  BodyTooLargeError,
  CompensationFailedError,
  CompensationPendingError,
  type DoErrorOptions,
  EscalatedError,
  FingerprintMismatchError,
  ForbiddenError,
  InternalError,
  InvalidInputError,
  InvalidResponseError,
  InvalidTransitionError,
  MethodNotAllowedError,
  NetworkError,
  NotFoundError,
  NotQueuedError,
  QueuedError,
  ReconcilerError,
  ReportFailedError,
  RequestRequiredError,
  StoppedError,
  ToolMismatchError,
  UnauthorizedError,
  UnavailableError,
  UnimplementedError,
  UnknownDecisionError,
  UnregisteredToolError,
  UnsettledError,
} from "./errors.js";
export {
  DEFAULT_MAX_DELAY_MS,
  DEFAULT_NAK_DELAY_MS,
  type HandleOptions,
  type WorkContext,
  type WorkHandler,
  type WorkOutcome,
  type WorkStatus,
  Worker,
  type WorkerOptions,
  parseWorkItem,
} from "./worker.js";
export { RESULT_HEADERS, failureKind, resultFromResponse, type CallResult } from "./result.js";
export {
  type GuardAnswer,
  type GuardCall,
  type GuardCallContext,
  type GuardCallResult,
  type GuardOptions,
  type GuardStatus,
  GuardedTool,
  type KeyPlacement,
  type ToolCallInfo,
  type ToolView,
  answerError,
  modelSchema,
  modelToolName,
} from "./guard.js";
export { DEFAULT_SCRUB_FIELDS, Scrubber, scrub, scrubSchema } from "./scrub.js";
export type {
  Approval,
  ApprovalDecision,
  ApprovalView,
  ApprovalsPage,
  ApprovalsQuery,
  Autonomy,
  ClaimRequest,
  ClaimResponse,
  Decision,
  ErrorBody,
  Expect,
  ListQuery,
  OutcomeKind,
  OutcomeReport,
  Page,
  ResolveRequest,
  Row,
  Status,
  Tool,
  ToolChange,
  ToolClass,
  ToolEntry,
  VendorRequest,
  WorkItem,
} from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
