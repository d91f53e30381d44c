// Package ledger is the domain of reconciler: the idempotency ledger row, its
// statuses, the claim decisions, the transition rules, the outcome
// classification, key minting and the intent fingerprint, and the Store
// interface that every storage backend implements.
//
// It imports only the standard library (make lint checks this), so the rules
// read the same for every store and every caller. The functions here are pure:
// they take the current time as an argument and never block, so a store can
// run them inside a transaction and re-run them when a group commit retries.
//
// Write autonomy (docs/architecture.md §11) is here as data and rules: the
// registry entry (Tool, its validation and EffectiveAutonomy), the approval
// record on a row and its transitions (DecideApproval), the work item of a
// queued key, and the claim decisions await_approval and queued. A claim's
// Gate — what the registry and the tool's policy decided for it — is
// computed outside the ledger and handed in with the claim, as Frozen is.
//
// Invalid input is refused before anything is stored, as an *InvalidError
// (one of the ErrInvalid… values, perhaps with a detail from With) that
// matches ErrInvalid: callers test errors.Is(err, ErrInvalid), and branch
// on a single ErrInvalid… where they care which input it was.
//
// # For store authors
//
// A store provides a Tx, the handful of reads and writes of one
// transaction (PutRow keeps every index in step with the row: the local
// id, the approval id, and the open approvals by expiry — Row.ApprovalOpen),
// and an Updater, which runs a func(Tx) error in one durable write
// transaction. Embedding Flows{Update: …, Policy: …} then gives it the
// write methods of Store (Claim, Report, Apply, Ingest, Escalate,
// Reschedule, RedriveOrphans, DecideApproval), each the ledger's one flow
// in one transaction, so every store applies the same rules in the same
// order; Flows.InTx runs a bare transaction for tests and repairs. The
// store writes the rest itself: the reads (Get, List with EncodeListCursor
// and DecodeListCursor, Due, PendingEvents, EventsAfter, CountEvents, ListFreezes, GetApproval,
// ListApprovals with EncodeApprovalCursor and DecodeApprovalCursor,
// CountRows over Statuses), AckEvents,
// PruneInbox, Notify, PutFreeze, DeleteFreeze, the registry (PutTool
// with NextTool inside its write transaction, GetTool, DeleteTool,
// ListTools), retention (ExpiredRows, DeleteExpired, OldestSettled, with
// Expired and Unchanged deciding what a row alone says) and Close. It
// passes ledger/storetest.
//
// Every store of the repo also offers, beside Store: IdempotencyTx and
// JournalTx on its Tx (the flows write Idempotency-Key records and the row
// journal through them, in the action's transaction; DeleteExpired drops a
// row's journal with it), Journals (RowJournal), Finder (FindRows: the
// complete search by local, receipt or tool call id) and Revocations (the
// console's sign-outs).
//
// Concurrency: the types are plain values; Store implementations document
// their own guarantees (every Store must pass ledger/storetest).
package ledger
