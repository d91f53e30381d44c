package drill

import (
	"errors"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// ProtocolVersion is the version of the runner protocol (see the package
// documentation) that this harness speaks. A runner greets with the
// version it speaks; any other is refused before a drill starts.
const ProtocolVersion = 1

// The operations of the runner protocol. A new kind of drill step (an
// approval decision, an outbox worker) is a new op: a runner that does not
// know an op answers the error class errUnsupported, so an older runner
// fails that drill with a clear message instead of guessing.
const (
	opDo         = "do"         // claim, call on proceed/retry_same_key, report: the SDK's Do
	opClaim      = "claim"      // one claim, nothing called
	opCall       = "call"       // the vendor call alone, with a given key and local id
	opReport     = "report"     // one outcome report
	opCompensate = "compensate" // claim the compensation of a key
	opGet        = "get"        // read a row
	opScrub      = "scrub"      // scrub a model's tool-call arguments
)

// The capabilities a runner may announce in its greeting: protocol steps
// beyond the version's base that its client implements. A drill that needs
// one the runtime lacks is skipped (reported as such, with the reason),
// never failed and never passed.
const (
	// capAwaitApproval: do faces await_approval as the Go SDK's Do does —
	// it waits (long polls) until a human decides, then proceeds once with
	// the same key, or answers error class stopped with code
	// approval_denied or approval_expired; its outcome carries
	// awaited_approval. A do that runs out of time while the approval is
	// requested answers error class awaiting_approval.
	capAwaitApproval = "await_approval"
	// capQueued: do faces queued (an outbox tool) as the Go SDK's Do does —
	// it calls nothing and answers error class queued with the key; with
	// "wait_queued": true it waits until the row is closed (the worker
	// called and reported) and answers as a replay (outcome.queued true),
	// or stopped.
	capQueued = "queued"
)

// capabilities are every capability this harness knows, which the Go
// runtime has.
var capabilities = []string{capAwaitApproval, capQueued}

// op is one operation asked of an agent runtime: a line on a runner's
// stdin. Agent names the client instance (each agent is one client, with
// its own base URL: see apiWatch); which other fields are set depends on Op.
type op struct {
	ID      uint64                `json:"id"`
	Op      string                `json:"op"`
	Agent   string                `json:"agent"`
	Claim   *client.ClaimRequest  `json:"claim,omitempty"`
	Call    *vendorCall           `json:"call,omitempty"`
	Key     string                `json:"key,omitempty"`
	LocalID string                `json:"local_id,omitempty"`
	Action  string                `json:"action,omitempty"`
	Outcome *client.OutcomeReport `json:"outcome,omitempty"`
	Args    map[string]any        `json:"args,omitempty"`
	// WaitQueued asks do to wait for a queued call's result (capQueued).
	WaitQueued bool `json:"wait_queued,omitempty"`
}

// reply is a runtime's answer to one op: a line on a runner's stdout,
// matched to its op by ID (answers may come in any order: ops run at
// once). Error is how the op failed, in the runtime's own terms; the other
// fields are set as the op returns them (do returns its outcome with an
// error too, as the SDKs do).
type reply struct {
	ID      uint64         `json:"id"`
	Outcome *wireOutcome   `json:"outcome,omitempty"` // do
	Claim   *wireClaim     `json:"claim,omitempty"`   // claim, compensate
	Result  *wireResult    `json:"result,omitempty"`  // call
	Row     *ledger.Row    `json:"row,omitempty"`     // report, get
	Args    map[string]any `json:"args,omitempty"`    // scrub
	Error   *wireError     `json:"error,omitempty"`
}

// hello is a runner's first line.
type hello struct {
	Protocol int    `json:"protocol"`
	Runtime  string `json:"runtime"`
	// Client names the client library and its version, for the log.
	Client string `json:"client"`
	// Capabilities lists the protocol steps beyond the base the runner
	// implements (capAwaitApproval, capQueued); absent: none.
	Capabilities []string `json:"capabilities,omitempty"`
}

// wireOutcome is client.Outcome on the wire.
type wireOutcome struct {
	Decision ledger.Decision    `json:"decision"`
	Key      string             `json:"key"`
	LocalID  string             `json:"local_id"`
	Row      *ledger.Row        `json:"row,omitempty"`
	Called   bool               `json:"called"`
	Result   wireResult         `json:"result"`
	Kind     ledger.OutcomeKind `json:"kind,omitempty"`
	Replayed bool               `json:"replayed"`
	Waited   bool               `json:"waited"`
	// AwaitedApproval and Queued are capAwaitApproval's and capQueued's.
	AwaitedApproval bool `json:"awaited_approval,omitempty"`
	Queued          bool `json:"queued,omitempty"`
}

// wireResult is client.Result on the wire.
type wireResult struct {
	HTTPStatus int               `json:"http_status,omitempty"`
	ReceiptID  string            `json:"receipt_id,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
}

// wireClaim is client.ClaimResponse on the wire, its HTTP status included.
type wireClaim struct {
	Decision   ledger.Decision `json:"decision"`
	Code       string          `json:"code,omitempty"`
	Row        *ledger.Row     `json:"row"`
	HTTPStatus int             `json:"http_status"`
}

// The error classes of the protocol: what the drills tell apart. Each
// SDK's own errors map onto them (client.StopError → stopped, an
// *client.UnsettledError matching ErrEscalated → escalated, …).
const (
	errStopped         = "stopped"           // Code: failed_poison, tool_frozen, approval_denied, approval_expired
	errAwaiting        = "awaiting_approval" // Key: do ran out of time while a human had not decided
	errQueued          = "queued"            // Key: the call is the outbox worker's; nothing was called
	errUnsettled       = "unsettled"         // RowStatus: the row as last seen
	errEscalated       = "escalated"         // a human was paged for the key
	errReportFailed    = "report_failed"     // the outcome report never arrived
	errUnknownDecision = "unknown_decision"  // Code: the decision
	errAPI             = "api"               // an error answer: Status and Code
	errTransport       = "transport"         // no answer (from the API, or from the vendor for op call)
	errProtocol        = "protocol"          // an answer that is not the API's
	errUnsupported     = "unsupported"       // an op this runner does not know
	errOther           = "error"             // anything else, a runner's own bug included
)

// wireError is how an op failed. Message is the runtime's message of the
// error; for class api it is the API's own message (the body's), which
// the SDKs keep apart from their formatting of the error.
type wireError struct {
	Class     string        `json:"class"`
	Code      string        `json:"code,omitempty"`
	Status    int           `json:"status,omitempty"`
	Key       string        `json:"key,omitempty"`
	RowStatus ledger.Status `json:"row_status,omitempty"`
	Message   string        `json:"message"`
}

// err is e as an error the drills read with the Go SDK's sentinels and
// types, whatever the runtime: its message is the runtime's own. A nil e
// is no error.
func (e *wireError) err() error {
	if e == nil {
		return nil
	}
	return &runtimeError{*e}
}

// runtimeError is how an op failed, read back from the wire: it matches
// the Go SDK's sentinels of its class (errors.Is) and gives the SDK's
// error types (errors.As), so one check reads every runtime's failure.
type runtimeError struct{ w wireError }

func (e *runtimeError) Error() string {
	if e.w.Class == errAPI {
		return e.api().Error()
	}
	return e.w.Message
}

// Is matches the sentinels of e's class, as the Go SDK's errors do:
// ErrUnsettled for an unsettled, escalated, report_failed, queued or
// awaiting_approval op; ErrEscalated, ErrReportFailed, ErrQueued,
// ErrAwaitingApproval, ErrStopped; and an API error's code sentinel
// (client.Error's own Is).
func (e *runtimeError) Is(target error) bool {
	switch e.w.Class {
	case errStopped:
		return target == client.ErrStopped
	case errUnsettled:
		return target == client.ErrUnsettled
	case errEscalated:
		return target == client.ErrUnsettled || target == client.ErrEscalated
	case errReportFailed:
		return target == client.ErrUnsettled || target == client.ErrReportFailed
	case errAPI:
		return e.api().Is(target)
	case errUnsupported:
		return target == errOpUnsupported
	case errAwaiting:
		return target == client.ErrUnsettled || target == client.ErrAwaitingApproval
	case errQueued:
		return target == client.ErrUnsettled || target == client.ErrQueued
	}
	return false
}

// As gives the SDK's error type of e's class: *client.Error,
// *client.StopError, *client.QueuedError, *client.AwaitingApprovalError or
// *client.UnsettledError.
func (e *runtimeError) As(target any) bool {
	switch t := target.(type) {
	case **client.Error:
		if e.w.Class == errAPI {
			*t = e.api()
			return true
		}
	case **client.StopError:
		if e.w.Class == errStopped {
			*t = &client.StopError{Code: e.w.Code, Key: e.w.Key}
			return true
		}
	case **client.QueuedError:
		if e.w.Class == errQueued {
			*t = &client.QueuedError{Key: e.w.Key}
			return true
		}
	case **client.AwaitingApprovalError:
		if e.w.Class == errAwaiting {
			*t = &client.AwaitingApprovalError{Key: e.w.Key}
			return true
		}
	case **client.UnsettledError:
		switch e.w.Class {
		case errUnsettled, errEscalated, errReportFailed:
			*t = &client.UnsettledError{Key: e.w.Key, Status: e.w.RowStatus}
			return true
		}
	}
	return false
}

func (e *runtimeError) api() *client.Error {
	return &client.Error{Status: e.w.Status, Code: e.w.Code, Message: e.w.Message}
}

// errOpUnsupported is a runner's answer to an op it does not know.
var errOpUnsupported = errors.New("the runtime does not support this operation")

// wireErrorOf classifies a Go SDK error as the protocol does, so the Go
// runtime's answers are read by the same code as a runner's.
func wireErrorOf(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Class: errOther, Message: err.Error()}
	var (
		stop      *client.StopError
		unsettled *client.UnsettledError
		apiErr    *client.Error
		queued    *client.QueuedError
		awaiting  *client.AwaitingApprovalError
	)
	switch {
	case errors.As(err, &queued):
		w.Class, w.Key = errQueued, queued.Key
	case errors.As(err, &awaiting):
		w.Class, w.Key = errAwaiting, awaiting.Key
	case errors.As(err, &stop):
		w.Class, w.Code, w.Key = errStopped, stop.Code, stop.Key
	case errors.As(err, &unsettled):
		w.Class, w.Key, w.RowStatus = errUnsettled, unsettled.Key, unsettled.Status
		if errors.Is(err, client.ErrEscalated) {
			w.Class = errEscalated
		} else if errors.Is(err, client.ErrReportFailed) {
			w.Class = errReportFailed
		}
	case errors.As(err, &apiErr):
		w.Class, w.Code, w.Status, w.Message = errAPI, apiErr.Code, apiErr.Status, apiErr.Message
	case errors.Is(err, errOpUnsupported):
		w.Class = errUnsupported
	}
	return w
}

func wireOutcomeOf(o client.Outcome) *wireOutcome {
	w := &wireOutcome{
		Decision: o.Decision, Key: o.Key, LocalID: o.LocalID, Called: o.Called,
		Result: wireResultOf(o.Result), Kind: o.Kind, Replayed: o.Replayed, Waited: o.Waited,
		AwaitedApproval: o.AwaitedApproval, Queued: o.Queued,
	}
	if o.Row.Key != "" {
		row := o.Row
		w.Row = &row
	}
	return w
}

func (w *wireOutcome) outcome() client.Outcome {
	if w == nil {
		return client.Outcome{}
	}
	o := client.Outcome{
		Decision: w.Decision, Key: w.Key, LocalID: w.LocalID, Called: w.Called,
		Result: w.Result.result(), Kind: w.Kind, Replayed: w.Replayed, Waited: w.Waited,
		AwaitedApproval: w.AwaitedApproval, Queued: w.Queued,
	}
	if w.Row != nil {
		o.Row = *w.Row
	}
	return o
}

func wireResultOf(r client.Result) wireResult {
	return wireResult{HTTPStatus: r.HTTPStatus, ReceiptID: r.ReceiptID, Headers: r.Headers}
}

func (w wireResult) result() client.Result {
	return client.Result{HTTPStatus: w.HTTPStatus, ReceiptID: w.ReceiptID, Headers: w.Headers}
}

func wireClaimOf(r client.ClaimResponse) *wireClaim {
	return &wireClaim{Decision: r.Decision, Code: r.Code, Row: r.Row, HTTPStatus: r.HTTPStatus}
}

func (w *wireClaim) response() client.ClaimResponse {
	if w == nil {
		return client.ClaimResponse{}
	}
	return client.ClaimResponse{Decision: w.Decision, Code: w.Code, Row: w.Row, HTTPStatus: w.HTTPStatus}
}
