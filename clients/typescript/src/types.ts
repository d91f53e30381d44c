// The wire types of the claim API, named after the schemas of
// api/openapi.yaml. They come from src/generated/openapi.ts (npm run gen), so
// a field the API adds or renames shows up here as a type error, not as a
// silently missing value.
import type { components, operations } from "./generated/openapi.js";

type Schemas = components["schemas"];

/** Row is a ledger row: one per key. */
export type Row = Schemas["Row"];
/** Status is what the ledger knows about a key's side effect. */
export type Status = Schemas["Status"];
/** Decision is a claim's answer: what the runtime may do next. */
export type Decision = Schemas["Decision"];
/** ToolClass says how far the vendor can be trusted with a retry. */
export type ToolClass = Schemas["ToolClass"];
/** VendorRequest is the vendor call's envelope, kept so the resolver can replay it. */
export type VendorRequest = Schemas["Request"];
/** Expect is the amount a call means to move. */
export type Expect = Schemas["Expect"];

/**
 * ClaimRequest is the body of POST /v1/claims. The tenant comes from the
 * token, never from here. `intent` holds only the fields that define the
 * side effect (amount, currency, customer; to, template_id…) — never a
 * timestamp or an id the model invented, or every retry would be a new intent.
 */
export type ClaimRequest = Schemas["ClaimBody"];

/**
 * ClaimResponse is the answer to a claim or a compensation, with the HTTP
 * status it came with: 201 proceed, 202 await_approval and queued, 409
 * wait, 423 stop/tool_frozen, 200 the rest. `row` is null only for a frozen
 * tool with no row.
 */
export type ClaimResponse = Schemas["ClaimResponse"] & { httpStatus: number };

/** OutcomeReport is the body of POST /v1/claims/{key}/outcome: what one vendor call did. */
export type OutcomeReport = Schemas["OutcomeBody"];
/** OutcomeKind is response, timeout or network_error. */
export type OutcomeKind = OutcomeReport["kind"];

/** ResolveRequest is the body of POST /v1/claims/{key}/resolve (admin token). */
export type ResolveRequest = Schemas["ResolveBody"];

/**
 * ListQuery filters GET /v1/claims. An admin token names the tenant with
 * the client's `tenant` option, as the Go SDK's WithTenant does.
 */
export type ListQuery = Omit<NonNullable<operations["listClaims"]["parameters"]["query"]>, "tenant">;

/** Page is a page of rows, newest first; next_cursor is absent on the last page. */
export type Page = Schemas["ListResponse"];

/** ErrorBody is the JSON of every error answer. */
export type ErrorBody = Schemas["Error"];

/** Approval is the approval record of a row whose claim needed a human (`row.approval`). */
export type Approval = Schemas["Approval"];
/** ApprovalView is one approval request and the row it gates. */
export type ApprovalView = Schemas["ApprovalView"];
/** ApprovalsPage is a page of open approval requests, soonest to expire first. */
export type ApprovalsPage = Schemas["ApprovalsResponse"];
/** ApprovalDecision is the body of approve and deny: who decides, and why (required to deny). */
export type ApprovalDecision = Schemas["ApprovalBody"];
/** ApprovalsQuery pages GET /v1/approvals (an admin token names the tenant with the client's `tenant` option). */
export type ApprovalsQuery = Pick<NonNullable<operations["listApprovals"]["parameters"]["query"]>, "limit" | "cursor">;
/** Autonomy is how far a registered tool may act without a human. */
export type Autonomy = Schemas["Autonomy"];
/** ToolEntry is the body of PUT /v1/tools/{name}: a registry entry in its JSON form. */
export type ToolEntry = Schemas["ToolBody"];
/** Tool is a registry entry as stored (with its tenant, version and times). */
export type Tool = Schemas["Tool"];
/** ToolChange is the answer of putTool: the entry as stored, whether the PUT changed it, and whether it registered it (201). */
export type ToolChange = Schemas["ToolResponse"] & { created: boolean };

/**
 * WorkItem is one message of stream RECON_WORK (subject
 * `recon_work.<tenant>.<tool>`): the event JSON of a queued key
 * (schema/event.schema.json), status `queued`, with its `work` object — what
 * the outbox worker calls. Consumers ignore fields they do not know.
 */
export interface WorkItem {
  key: string;
  tenant: string;
  run_id: string;
  tool: string;
  tool_call_id?: string;
  status: string;
  source?: string;
  at?: string;
  /** traceparent is the W3C trace context of the claim that queued the key, when the service traces. */
  traceparent?: string;
  work: {
    vendor: string;
    tool_class: ToolClass;
    metadata_local_id: string;
    /** intent is the claim's intent object. */
    intent: Record<string, unknown>;
    /** request is the envelope of the call to send. */
    request: VendorRequest | null;
    expect?: Expect;
    /** replay_window_until is when the vendor forgets the key; absent when it does not replay. */
    replay_window_until?: string;
  };
}
