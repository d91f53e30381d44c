package apierror

import "unicode/utf8"

// Body is the JSON of every error answer.
type Body struct {
	Error Detail `json:"error"`
}

// Detail says what went wrong: Code is stable and snake_case, for programs
// to branch on; Message is for people and may change.
type Detail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// maxMessage caps a message: some quote the caller's input (an invalid
// field's value), which may be long.
const maxMessage = 300

// New returns the body of an error answer, its message cut at maxMessage
// bytes (on a character boundary).
func New(code, message string) Body {
	if len(message) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut] + "…"
	}
	return Body{Error: Detail{Code: code, Message: message}}
}

// The codes that more than one writer sends, or that the client maps to its
// sentinels. A writer's own codes (the webhook handlers' bad_signature,
// stale, …) stay with it.
const (
	CodeNotFound            = "not_found"            // 404
	CodeFingerprintMismatch = "fingerprint_mismatch" // 422
	CodeInvalidTransition   = "invalid_transition"   // 409
	CodeCompensationPending = "compensation_pending" // 409
	CodeCompensationFailed  = "compensation_failed"  // 422
	CodeInvalidInput        = "invalid_input"        // 400: a field or parameter the ledger or the API refuses
	CodeBadJSON             = "bad_json"             // 400: the body is not the JSON the route takes
	CodeBadBody             = "bad_body"             // 400: the body could not be read
	CodeBodyTooLarge        = "body_too_large"       // 413
	CodeUnauthorized        = "unauthorized"         // 401
	CodeForbidden           = "forbidden"            // 403
	CodeMethodNotAllowed    = "method_not_allowed"   // 405
	CodeUnavailable         = "unavailable"          // 503: retry later
	CodeInternal            = "internal"             // 500
	CodeNotImplemented      = "not_implemented"      // 501: the server runs without the feature
	CodeToolMismatch        = "tool_mismatch"        // 422: the claim names a registered tool with another vendor or class
	CodeUnregisteredTool    = "unregistered_tool"    // 422: registry.strict and the tool is not registered
	CodeApprovalDecided     = "approval_decided"     // 409: the approval was granted, denied or expired before
	CodeApprovalExpired     = "approval_expired"     // 409: the approval request's time ran out
	CodeRequestRequired     = "request_required"     // 422: an outbox tool's claim without the request envelope
	CodeNotQueued           = "not_queued"           // 409: a worker's start of a row that was not queued
	// The Idempotency-Key header's (README "A lost answer").
	CodeIdempotencyKeyInFlight = "idempotency_key_in_flight" // 409: the first send with this value is still being answered; resend shortly
	CodeIdempotencyKeyReused   = "idempotency_key_reused"    // 422: the value was sent before with another request
)
