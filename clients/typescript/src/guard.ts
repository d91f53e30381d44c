// A write tool a model calls, put under the ledger: what every framework
// adapter (./ai, ./openai-agents, ./langchain) shares. The decisions are
// do()'s; this file only prepares the claim from the model's arguments and
// turns do()'s answer into words the model acts on.
import type { Client } from "./client.js";
import type { Outcome } from "./do.js";
import {
  ApiError,
  EscalatedError,
  QueuedError,
  ReconcilerError,
  ReportFailedError,
  StoppedError,
  UnknownDecisionError,
  UnsettledError,
} from "./errors.js";
import type { components } from "./generated/openapi.js";
import type { CallResult } from "./result.js";
import { DEFAULT_SCRUB_FIELDS, Scrubber } from "./scrub.js";
import { deadline } from "./signal.js";
import type { ClaimRequest, Expect, ToolClass, VendorRequest } from "./types.js";

/** KeyPlacement is where the vendor takes the key (the registry's key_placement). */
export type KeyPlacement = components["schemas"]["KeyPlacement"];

/**
 * ToolView is the registry's view of a write tool (PUT /v1/tools/{name}):
 * what a claim names, which arguments are the side effect, where the key
 * goes. `client.getTool(name)` returns one.
 */
export interface ToolView {
  /** name is the tool's registry name: every claim's `tool`. */
  name: string;
  vendor: string;
  /** class is a write class; a read tool changes nothing and needs no guard. */
  class: ToolClass | "read";
  /**
   * intent_fields are the arguments that define the side effect (to,
   * subject, amount…): the claim's intent is these and nothing else, so a
   * timestamp or an id the model invents on a retry does not make a new
   * write. Absent: every argument but the key-like ones (as the MCP gate).
   */
  intent_fields?: readonly string[] | undefined;
  /**
   * key_placement says where the vendor takes the key. A body_field,
   * argument or external_id_field is removed from the schema the model
   * sees and filled with the vendor key in the arguments `call` gets; a
   * header is for `call` to set from `vendorKey`.
   */
  key_placement?: KeyPlacement | undefined;
}

/** GuardCallContext is what the developer's call gets for one attempt. */
export interface GuardCallContext {
  /** key is the ledger key of the write. */
  readonly key: string;
  /** vendorKey is the key to send to the vendor (the row's vendor_key, else the key): the same on every attempt. */
  readonly vendorKey: string;
  /** localId goes into the vendor's metadata (a webhook carries it back to the row). */
  readonly localId: string;
  /** signal ends the call: the client's callTimeoutMs, the tool's timeoutMs, the framework's abort. Pass it to fetch. */
  readonly signal: AbortSignal;
}

/**
 * GuardCallResult is the vendor's answer (any answer, a refusal included:
 * see resultFromResponse). `output` is shown to the model when the write
 * succeeded (the vendor's object, trimmed to what the model needs).
 */
export interface GuardCallResult extends CallResult {
  output?: unknown;
}

/**
 * GuardCall makes the vendor call with the arguments the model wrote —
 * scrubbed, with the vendor key at the registry's placement — and returns
 * the vendor's answer. It throws only when no answer arrived (a timeout, a
 * broken connection): the ledger then holds the write as unknown.
 */
export type GuardCall<Args> = (args: Args, ctx: GuardCallContext) => Promise<GuardCallResult> | GuardCallResult;

/** ToolCallInfo is what a framework tells about one tool call. */
export interface ToolCallInfo {
  /** toolCallId is the model's id of the call (kept on the row; joins it to the agent trace). */
  toolCallId?: string | undefined;
  /** signal is the framework's abort signal for the call. */
  signal?: AbortSignal | undefined;
  /** context is the framework's per-run context (ai's experimental_context, the Agents SDK's RunContext.context, LangChain's config). */
  context?: unknown;
}

/** GuardOptions are what every framework adapter takes, besides the framework's own fields (description, schema). */
export interface GuardOptions<Args> {
  client: Client;
  /**
   * runId names the agent run (1–128 of [A-Za-z0-9_-]): together with the
   * tool and the intent it makes the write's key, so a run resumed from
   * scratch with the same id replays instead of writing again. A function
   * reads it per call (from the framework's context, say).
   */
  runId: string | ((call: ToolCallInfo) => string);
  /** tool is the registry's view of the tool (or `await client.getTool(name)`). */
  tool: ToolView;
  /** call makes the vendor call (see GuardCall). */
  call: GuardCall<Args>;
  /** expect is the amount the call means to move (a mismatch alert compares the vendor's). */
  expect?: ((args: Args) => Expect | undefined) | undefined;
  /** request is the vendor call's envelope, kept so the resolver can replay it with the same key. */
  request?: ((args: Args) => VendorRequest | undefined) | undefined;
  /**
   * timeoutMs bounds one tool call in all, a wait for the same write in
   * flight elsewhere included (default 30 s); then the model is told the
   * outcome is not known yet. The vendor call itself is bounded by the
   * client's callTimeoutMs.
   */
  timeoutMs?: number | undefined;
  /** scrubFields replaces DEFAULT_SCRUB_FIELDS (the key placement's field is always added). */
  scrubFields?: readonly string[] | undefined;
  /**
   * scrub false passes the model's arguments through as it wrote them: the
   * schema keeps key-like fields, `call` gets the model's values and no key
   * is placed in them. It exists for a negative control (a test showing
   * what scrubbing prevents): never turn it off in an agent.
   */
  scrub?: boolean | undefined;
}

/** GuardStatus is how a guarded call ended, in one word (the start of the text the model reads). */
export type GuardStatus =
  | "done"
  | "already_done"
  | "timeout"
  | "network_error"
  | "vendor_error"
  | "in_progress"
  | "unrecorded"
  | "escalated"
  | "awaiting_approval"
  | "queued"
  | "validation_failed"
  | "refused"
  | "frozen"
  | "denied"
  | "expired"
  | "error";

/** GuardAnswer is a guarded call's result: the text for the model, and the facts for the program. */
export interface GuardAnswer {
  status: GuardStatus;
  /** text is what the model reads: the status, what it means, what to do next. Never a stack trace. */
  text: string;
  /** outcome is do()'s, when do() got that far. */
  outcome?: Outcome | undefined;
  /** error is what do() threw, for the program's logs (never shown to the model). */
  error?: unknown;
}

const DEFAULT_TIMEOUT_MS = 30_000;

/** keyField is the argument that carries the key to the vendor, if the placement names one. */
function keyField(p: KeyPlacement | undefined): string | undefined {
  return p?.body_field || p?.argument || p?.external_id_field || undefined;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * GuardedTool is one write tool under the ledger, framework-free: `schema`
 * is what the model may see, `run` one call of it. The adapters wrap it in
 * their framework's tool(); a hand-rolled loop may use it as it is.
 */
export class GuardedTool<Args = Record<string, unknown>> {
  readonly #opts: GuardOptions<Args>;
  readonly #scrubber: Scrubber;
  readonly #keyField: string | undefined;
  readonly #scrub: boolean;

  constructor(opts: GuardOptions<Args>) {
    const t = opts.tool;
    if (!t || typeof t.name !== "string" || t.name === "") throw new TypeError("guarded tool: tool.name is required (the registry name)");
    if (typeof t.vendor !== "string" || t.vendor === "") throw new TypeError(`guarded tool ${t.name}: tool.vendor is required`);
    if (t.class === "read") throw new TypeError(`guarded tool ${t.name}: a read tool changes nothing; give it to the framework as it is`);
    if (!["write_idempotent", "write_ledger", "write_irreversible"].includes(t.class)) {
      throw new TypeError(`guarded tool ${t.name}: tool.class ${JSON.stringify(t.class)}: want write_idempotent, write_ledger or write_irreversible`);
    }
    if (typeof opts.call !== "function") throw new TypeError(`guarded tool ${t.name}: call is required`);
    this.#opts = opts;
    this.#keyField = keyField(t.key_placement);
    const fields = [...(opts.scrubFields ?? DEFAULT_SCRUB_FIELDS), ...(this.#keyField ? [this.#keyField] : [])];
    this.#scrubber = new Scrubber(fields);
    this.#scrub = opts.scrub ?? true;
    for (const f of t.intent_fields ?? []) {
      // A key in the intent would make every retry a new write.
      if (this.#scrubber.match(f)) throw new TypeError(`guarded tool ${t.name}: intent field ${JSON.stringify(f)} is key-like: the key belongs to the ledger`);
    }
  }

  /** name is the registry name. */
  get name(): string {
    return this.#opts.tool.name;
  }

  /** scrubber removes the key-like fields this tool's model must not write (the defaults and the key placement's field). */
  get scrubber(): Scrubber {
    return this.#scrubber;
  }

  /** scrubs reports whether scrubbing is on (it is, unless the options turned it off for a negative control). */
  get scrubs(): boolean {
    return this.#scrub;
  }

  /** schema returns a JSON Schema for the model: without key-like properties (unless scrubbing is off). */
  schema<S extends Record<string, unknown>>(jsonSchema: S): S {
    return this.#scrub ? this.#scrubber.scrubSchema(jsonSchema) : jsonSchema;
  }

  /** intent is the claim's intent for the model's (scrubbed) arguments: the intent fields, or every argument. */
  intent(args: Record<string, unknown>): Record<string, unknown> {
    const fields = this.#opts.tool.intent_fields;
    if (!fields || fields.length === 0) return { ...args };
    const out: Record<string, unknown> = {};
    for (const f of fields) if (Object.hasOwn(args, f)) out[f] = args[f];
    return out;
  }

  /**
   * run is one tool call: it claims the intent, calls the vendor through
   * do() only when the ledger says so, and answers in words the model acts
   * on. It never throws for what the ledger or the vendor answered; only
   * a programming error (a bad option) escapes.
   */
  async run(input: unknown, info: ToolCallInfo = {}): Promise<GuardAnswer> {
    const t = this.#opts.tool;
    if (!isPlainObject(input)) {
      return { status: "validation_failed", text: "validation_failed: the arguments must be a JSON object; nothing was sent — call again with the tool's arguments." };
    }
    const args = this.#scrub ? this.#scrubber.scrub(input) : { ...input };
    const claim: ClaimRequest = {
      run_id: typeof this.#opts.runId === "function" ? this.#opts.runId(info) : this.#opts.runId,
      tool: t.name,
      vendor: t.vendor,
      tool_class: t.class as ToolClass,
      intent: this.intent(args),
    };
    if (info.toolCallId && /^[\x21-\x7e]{1,255}$/.test(info.toolCallId)) claim.tool_call_id = info.toolCallId;
    const typed = args as Args;
    const expect = this.#opts.expect?.(typed);
    if (expect) claim.expect = expect;
    const request = this.#opts.request?.(typed);
    if (request) claim.request = request;

    let output: unknown;
    const dl = deadline(this.#opts.timeoutMs ?? DEFAULT_TIMEOUT_MS, info.signal);
    try {
      const out = await this.#opts.client.do(
        claim,
        async (ctx) => {
          const callArgs = this.#scrub && this.#keyField ? { ...args, [this.#keyField]: ctx.vendorKey } : args;
          const res = await this.#opts.call(callArgs as Args, ctx);
          output = res?.output;
          return res ?? {};
        },
        { signal: dl.signal, waitApproval: false },
      );
      return answerDone(t.name, out, output);
    } catch (err) {
      return answerError(t.name, err);
    } finally {
      dl.done();
    }
  }
}

/** answerDone words a write that happened: by this call, or before (a replay). */
function answerDone(tool: string, out: Outcome, output: unknown): GuardAnswer {
  const receipt = out.receiptId ? ` (receipt ${out.receiptId})` : "";
  if (out.replayed) {
    return {
      status: "already_done",
      text: `already_done: ${tool} already succeeded earlier for these arguments${receipt}; it was not sent again. Do not call it again for this request.`,
      outcome: out,
    };
  }
  let text = `done: ${tool} succeeded${receipt}.`;
  if (out.row?.idempotent_replayed) text += " The vendor had already done it on an earlier attempt: it happened once.";
  if (output !== undefined) text += `\nresult: ${typeof output === "string" ? output : JSON.stringify(output)}`;
  return { status: "done", text, outcome: out };
}

const UNKNOWN_ADVICE = "do not retry with new arguments";

/**
 * answerError words what do() threw. The words tell an LLM what to do: an
 * outcome that is not known is never "failed" (a model retries a failure
 * with new arguments, which is how one email becomes two).
 */
export function answerError(tool: string, err: unknown): GuardAnswer {
  const out = (err as { outcome?: Outcome }).outcome;
  const key = (err as { key?: string }).key;
  const keyText = key ? ` (key ${key})` : "";
  const a = (status: GuardStatus, text: string): GuardAnswer => ({ status, text, outcome: out, error: err });
  if (err instanceof StoppedError) {
    switch (err.code) {
      case "failed_poison": {
        const http = out?.result.httpStatus ?? err.row?.last_http_status;
        const status: GuardStatus = http === 400 || http === 422 ? "validation_failed" : "refused";
        return a(
          status,
          `${status}: the vendor refused this request${http ? ` (HTTP ${http})` : ""}; it will be refused again if retried unchanged — do not retry it. Correct the arguments, or tell the user.`,
        );
      }
      case "tool_frozen":
        return a("frozen", `frozen: an operator has switched ${tool} off; nothing was sent — do not retry. Tell the user.`);
      case "approval_denied":
        return a("denied", `denied: a person denied this ${tool} call${keyText}; nothing was sent — do not retry it.`);
      case "approval_expired":
        return a("expired", `expired: nobody approved this ${tool} call in time${keyText}; nothing was sent — do not retry it. Tell the user.`);
    }
    return a("refused", `refused: the ledger stopped this call (${err.code})${keyText}; nothing was sent — do not retry it.`);
  }
  if (err instanceof QueuedError) {
    return a("queued", `queued: this ${tool} call is queued for the outbox worker${keyText}; nothing more to do here — calling again does not queue it twice.`);
  }
  if (err instanceof EscalatedError) {
    return a("escalated", `escalated: a person is checking this ${tool} call${keyText}; ${UNKNOWN_ADVICE} — stop and tell the user.`);
  }
  if (err instanceof ReportFailedError) {
    return a(
      "unrecorded",
      `unrecorded: the call was made but its outcome could not be recorded; outcome unknown — ${UNKNOWN_ADVICE}. The same arguments later are safe: they never repeat the write.`,
    );
  }
  if (err instanceof UnsettledError) {
    if (out?.awaitedApproval && !out.called) {
      return a(
        "awaiting_approval",
        `awaiting_approval: this ${tool} call waits for a person to approve it${keyText}; nothing was sent yet. Tell the user; call again with the same arguments once it is approved (a denial stops it).`,
      );
    }
    const safe = `Calling ${tool} again with the same arguments is safe: it never repeats the write.`;
    if (out?.called) {
      switch (out.kind) {
        case "timeout":
          return a("timeout", `timeout: outcome unknown — ${UNKNOWN_ADVICE}. The vendor may have done it; the ledger holds it as unknown${keyText}. ${safe}`);
        case "network_error":
          return a("network_error", `network_error: outcome unknown — ${UNKNOWN_ADVICE}. The connection broke; the vendor may have done it${keyText}. ${safe}`);
        case "response":
          return a(
            "vendor_error",
            `vendor_error: the vendor answered HTTP ${out.result.httpStatus ?? "?"}; outcome ${err.status ?? "unknown"} — ${UNKNOWN_ADVICE}. ${safe}`,
          );
      }
    }
    if (out?.row?.approval?.state === "requested") {
      return a("awaiting_approval", `awaiting_approval: this ${tool} call still waits for a person to approve it${keyText}; nothing was sent yet. Tell the user.`);
    }
    return a(
      "in_progress",
      `in_progress: the same ${tool} call is in flight or its outcome is not known yet (status ${err.status ?? "unknown"})${keyText} — ${UNKNOWN_ADVICE}. Call again later with the same arguments.`,
    );
  }
  if (err instanceof UnknownDecisionError) {
    return a("error", `error: the ledger answered "${err.decision}", which this client does not know; nothing was sent — do not retry. Tell the user.`);
  }
  if (err instanceof ApiError) {
    if (err.retryable) return a("error", `error: the ledger is unavailable (${err.code}); nothing was sent — try the same call again later.`);
    return a("error", `error: the ledger refused the call (${err.code}); nothing was sent — do not retry. Tell the user.`);
  }
  if (err instanceof ReconcilerError) {
    return a("error", `error: the ledger could not be reached (${err.name}); nothing was sent — try the same call again later.`);
  }
  throw err;
}

/**
 * ZodObjectLike is the part of a zod object schema (zod 3 or 4) the
 * adapters use: its shape, to find key-like properties, and omit, to drop
 * them. Duck-typed: the core imports no zod.
 */
export interface ZodObjectLike {
  shape: Record<string, unknown>;
  omit(mask: Record<string, true>): unknown;
  safeParse(v: unknown): unknown;
}

/** isZodObject reports whether s is a zod object schema. */
export function isZodObject(s: unknown): s is ZodObjectLike {
  if (s === null || typeof s !== "object") return false;
  const z = s as Partial<ZodObjectLike>;
  return typeof z.safeParse === "function" && typeof z.omit === "function" && z.shape !== null && typeof z.shape === "object";
}

/**
 * modelSchema is the schema a framework shows the model: a zod object
 * without its key-like properties (zod's parse then drops one a model sends
 * anyway), or a JSON Schema without them at any depth. Anything else is a
 * TypeError: a schema the guard cannot read could show the model a key.
 */
export function modelSchema<S>(g: GuardedTool<any>, schema: S, opts: { strict?: boolean } = {}): S {
  if (isZodObject(schema)) {
    if (!g.scrubs) return schema;
    const drop = Object.keys(schema.shape).filter((k) => g.scrubber.match(k));
    if (drop.length === 0) return schema;
    return schema.omit(Object.fromEntries(drop.map((k) => [k, true as const]))) as S;
  }
  if (isPlainObject(schema)) {
    if (!g.scrubs) return schema;
    // A model may send a key the schema no longer shows (it was trained on
    // schemas that had one); the guard drops it from the arguments. So an
    // object that lost a key-like property stops refusing extra ones, or
    // the framework's validation would fail the call before the guard runs.
    // A strict tool keeps additionalProperties false (the OpenAI API needs
    // it there), and a strict model sends only what the schema lists.
    return g.schema((opts.strict ? schema : tolerateKeys(schema, g.scrubber)) as Record<string, unknown>) as S;
  }
  throw new TypeError(`guarded tool ${g.name}: the input schema must be a zod object or a JSON Schema object`);
}

/** tolerateKeys returns a copy of schema without additionalProperties false on the objects that list a key-like property. */
function tolerateKeys(v: unknown, s: Scrubber): unknown {
  if (Array.isArray(v)) return v.map((x) => tolerateKeys(x, s));
  if (!isPlainObject(v)) return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    Object.defineProperty(out, k, { value: tolerateKeys(x, s), enumerable: true, writable: true, configurable: true });
  }
  const props = v["properties"];
  if (v["additionalProperties"] === false && isPlainObject(props) && Object.keys(props).some((k) => s.match(k))) {
    delete out["additionalProperties"];
  }
  return out;
}

/**
 * modelToolName is the name the model calls the tool by: the registry name
 * with every character a function name may not hold (OpenAI and Anthropic
 * take [A-Za-z0-9_-], at most 64) made "_": email.send → email_send.
 */
export function modelToolName(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64);
}
