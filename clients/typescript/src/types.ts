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
 * status it came with: 201 proceed, 409 wait, 423 stop/tool_frozen, 200 the
 * rest. `row` is null only for a frozen tool with no row.
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
