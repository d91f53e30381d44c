package ledger_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

func TestNewClaimBuildsRow(t *testing.T) {
	req := validClaimRequest()
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Row{
		Tenant: "acme", Key: vecKeyAcme, IntentFingerprint: vecFingerprint,
		MetadataLocalID: "rl_38af6fb5b479712bbaf3bf71cf2e82f3",
		RunID:           "run-1", Tool: "stripe.charge", ToolCallID: "call_01", Vendor: "stripe",
		ToolClass: ledger.ClassWriteIdempotent, Status: ledger.StatusPending, Attempt: 1,
		VendorKey:   vecKeyAcme, // no profile rule: the key itself
		FirstSeenAt: t0, UpdatedAt: t0,
		PendingUntil:      t0.Add(15 * time.Minute),
		NextCheckAt:       t0.Add(60 * time.Second),
		ReplayWindowUntil: t0.Add(24 * time.Hour),
		Request:           &ledger.Request{Method: "POST", Path: "/v1/payment_intents", ContentType: "application/x-www-form-urlencoded", Body: "amount=1050&currency=usd"},
		Expect:            &ledger.Expect{Amount: 1050, Currency: "usd"}, // lower-cased
	}
	if !reflect.DeepEqual(c.Row, want) {
		t.Fatalf("NewClaim row:\n got %+v\nwant %+v", c.Row, want)
	}
	if c.Frozen || !c.At.Equal(t0) {
		t.Fatalf("NewClaim = frozen %v at %v, want false at %v", c.Frozen, c.At, t0)
	}

	t.Run("the row owns its request and expect", func(t *testing.T) {
		req.Request.Path = "/changed"
		req.Expect.Amount = 1
		if c.Row.Request.Path != "/v1/payment_intents" || c.Row.Expect.Amount != 1050 {
			t.Fatalf("changing the request changed the claim: %+v %+v", c.Row.Request, c.Row.Expect)
		}
	})
}

func TestNewClaimVariants(t *testing.T) {
	tests := []struct {
		name   string
		change func(*ledger.ClaimRequest)
		p      ledger.Policy
		now    time.Time
		check  func(t *testing.T, c ledger.Claim)
	}{
		{
			name:   "business key is kept and hidden from the local id",
			change: func(r *ledger.ClaimRequest) { r.Key = "cart-42" },
			check: func(t *testing.T, c ledger.Claim) {
				if c.Row.Key != "cart-42" || c.Row.MetadataLocalID != "rl_bb38e9f7e60b7e3d45f65fa3436c1068" {
					t.Fatalf("key %s local id %s", c.Row.Key, c.Row.MetadataLocalID)
				}
			},
		},
		{
			name: "same intent spelled differently mints the same key",
			change: func(r *ledger.ClaimRequest) {
				r.Intent = json.RawMessage(`{"currency":"usd","amount":1.05e1,"to":"cus_123"}`)
			},
			check: func(t *testing.T, c ledger.Claim) {
				if c.Row.Key != vecKeyAcme {
					t.Fatalf("key %s, want %s", c.Row.Key, vecKeyAcme)
				}
			},
		},
		{
			name:   "other tenant mints another key",
			change: func(r *ledger.ClaimRequest) { r.Tenant = "globex" },
			check: func(t *testing.T, c ledger.Claim) {
				if c.Row.Key != vecKeyGlobex {
					t.Fatalf("key %s, want %s", c.Row.Key, vecKeyGlobex)
				}
			},
		},
		{
			name:   "frozen is carried",
			change: func(r *ledger.ClaimRequest) { r.Frozen = true },
			check: func(t *testing.T, c ledger.Claim) {
				if !c.Frozen {
					t.Fatal("Frozen = false")
				}
			},
		},
		{
			name:   "no replay window leaves replay_window_until zero",
			change: func(r *ledger.ClaimRequest) { r.ReplayWindow = 0 },
			check: func(t *testing.T, c ledger.Claim) {
				if !c.Row.ReplayWindowUntil.IsZero() {
					t.Fatalf("ReplayWindowUntil = %v", c.Row.ReplayWindowUntil)
				}
			},
		},
		{
			name: "policy timings",
			p:    ledger.Policy{PendingTTL: time.Minute, Grace: 5 * time.Second},
			check: func(t *testing.T, c ledger.Claim) {
				if !c.Row.PendingUntil.Equal(t0.Add(time.Minute)) || !c.Row.NextCheckAt.Equal(t0.Add(5*time.Second)) {
					t.Fatalf("pending_until %v next_check_at %v", c.Row.PendingUntil, c.Row.NextCheckAt)
				}
			},
		},
		{
			name: "negative policy falls back to defaults",
			p:    ledger.Policy{PendingTTL: -time.Minute, Grace: -time.Second},
			check: func(t *testing.T, c ledger.Claim) {
				if !c.Row.PendingUntil.Equal(t0.Add(15*time.Minute)) || !c.Row.NextCheckAt.Equal(t0.Add(time.Minute)) {
					t.Fatalf("pending_until %v next_check_at %v", c.Row.PendingUntil, c.Row.NextCheckAt)
				}
			},
		},
		{
			name: "time is stored in UTC",
			now:  t0.In(time.FixedZone("CET", 3600)),
			check: func(t *testing.T, c ledger.Claim) {
				for _, ts := range []time.Time{c.At, c.Row.FirstSeenAt, c.Row.UpdatedAt, c.Row.PendingUntil, c.Row.NextCheckAt, c.Row.ReplayWindowUntil} {
					if ts.Location() != time.UTC {
						t.Fatalf("time %v is not UTC", ts)
					}
				}
				if !c.Row.FirstSeenAt.Equal(t0) {
					t.Fatalf("first_seen_at %v, want %v", c.Row.FirstSeenAt, t0)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validClaimRequest()
			if tt.change != nil {
				tt.change(&req)
			}
			now := t0
			if !tt.now.IsZero() {
				now = tt.now
			}
			c, err := ledger.NewClaim(req, tt.p, now)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// claimAt is the claim of validClaimRequest made at now, with class and frozen set.
func claimAt(t *testing.T, now time.Time, class ledger.ToolClass, frozen bool) ledger.Claim {
	t.Helper()
	req := validClaimRequest()
	req.ToolClass, req.Frozen = class, frozen
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDecideClaim(t *testing.T) {
	p := ledger.DefaultPolicy()
	// existing is a row first claimed at t0 (lease to t0+15m, replay window
	// to t0+24h); cases change it and claim again at "now".
	existing := func(class ledger.ToolClass, status ledger.Status) *ledger.Row {
		r := claimAt(t, t0, class, false).Row
		r.Status = status
		if status == ledger.StatusSucceeded {
			r.UpstreamReceiptID, r.SucceededAt, r.NextCheckAt = "pi_1", t0, time.Time{}
		}
		return &r
	}
	leaseEnd := t0.Add(15 * time.Minute)
	idem, ledg, irrev := ledger.ClassWriteIdempotent, ledger.ClassWriteLedger, ledger.ClassWriteIrreversible
	pending, unknown := ledger.StatusPending, ledger.StatusUnknown

	tests := []struct {
		name     string
		existing *ledger.Row
		change   func(*ledger.Row)
		now      time.Time
		frozen   bool
		want     ledger.Decision
		wantCode string
		wantErr  error
	}{
		{name: "new key proceeds", now: t0, want: ledger.DecisionProceed},
		{name: "new key, tool frozen: stop, nothing inserted", now: t0, frozen: true, want: ledger.DecisionStop, wantCode: ledger.CodeToolFrozen},
		{name: "different fingerprint", existing: existing(idem, pending), change: func(r *ledger.Row) { r.IntentFingerprint = "other" }, now: t0, wantErr: ledger.ErrFingerprintMismatch},
		{name: "another tool class", existing: existing(irrev, unknown), change: func(r *ledger.Row) { r.ToolClass = idem }, now: leaseEnd, wantErr: ledger.ErrFingerprintMismatch},
		{name: "another tool", existing: existing(idem, unknown), change: func(r *ledger.Row) { r.Tool = "other.tool" }, now: leaseEnd, wantErr: ledger.ErrFingerprintMismatch},
		{name: "another vendor", existing: existing(idem, ledger.StatusSucceeded), change: func(r *ledger.Row) { r.Vendor = "paypal" }, now: leaseEnd, wantErr: ledger.ErrFingerprintMismatch},
		{name: "different fingerprint on a succeeded row", existing: existing(idem, ledger.StatusSucceeded), change: func(r *ledger.Row) { r.IntentFingerprint = "other" }, now: t0, wantErr: ledger.ErrFingerprintMismatch},
		{name: "succeeded replays", existing: existing(idem, ledger.StatusSucceeded), now: leaseEnd, want: ledger.DecisionReplay},
		{name: "succeeded replays while frozen", existing: existing(irrev, ledger.StatusSucceeded), now: t0, frozen: true, want: ledger.DecisionReplay},
		{name: "failed_poison stops", existing: existing(idem, ledger.StatusFailedPoison), now: leaseEnd, want: ledger.DecisionStop, wantCode: ledger.CodeFailedPoison},
		{name: "failed_poison stops while frozen", existing: existing(idem, ledger.StatusFailedPoison), now: t0, frozen: true, want: ledger.DecisionStop, wantCode: ledger.CodeFailedPoison},
		{name: "pending inside the lease waits", existing: existing(idem, pending), now: leaseEnd.Add(-time.Nanosecond), want: ledger.DecisionWait},
		{name: "pending at lease end retries", existing: existing(idem, pending), now: leaseEnd, want: ledger.DecisionRetrySameKey},
		{name: "pending after lease retries", existing: existing(idem, pending), now: leaseEnd.Add(time.Hour), want: ledger.DecisionRetrySameKey},
		{name: "pending after lease, frozen, waits", existing: existing(idem, pending), now: leaseEnd, frozen: true, want: ledger.DecisionWait},
		{name: "pending after lease, write_ledger, waits", existing: existing(ledg, pending), now: leaseEnd, want: ledger.DecisionWait},
		{name: "pending after lease, write_irreversible, waits", existing: existing(irrev, pending), now: leaseEnd, want: ledger.DecisionWait},
		{name: "pending, replay window just closed, waits", existing: existing(idem, pending), now: t0.Add(24 * time.Hour), want: ledger.DecisionWait},
		{name: "pending, replay window open by 1ns, retries", existing: existing(idem, pending), now: t0.Add(24*time.Hour - time.Nanosecond), want: ledger.DecisionRetrySameKey},
		{name: "pending, no replay window, waits", existing: existing(idem, pending), change: func(r *ledger.Row) { r.ReplayWindowUntil = time.Time{} }, now: leaseEnd, want: ledger.DecisionWait},
		{name: "pending, last answer 500, waits", existing: existing(idem, pending), change: func(r *ledger.Row) { r.LastHTTPStatus = 500 }, now: leaseEnd, want: ledger.DecisionWait},
		{name: "pending, last answer 503, waits", existing: existing(idem, pending), change: func(r *ledger.Row) { r.LastHTTPStatus = 503 }, now: leaseEnd, want: ledger.DecisionWait},
		{name: "pending, last answer 429, retries", existing: existing(idem, pending), change: func(r *ledger.Row) { r.LastHTTPStatus = 429 }, now: leaseEnd, want: ledger.DecisionRetrySameKey},
		{name: "pending, last answer 499, retries", existing: existing(idem, pending), change: func(r *ledger.Row) { r.LastHTTPStatus = 499 }, now: leaseEnd, want: ledger.DecisionRetrySameKey},
		{name: "unknown retries", existing: existing(idem, unknown), now: leaseEnd, want: ledger.DecisionRetrySameKey},
		// The lease also guards an unknown row that was just granted a
		// retry, so concurrent claims do not all call the vendor.
		{name: "unknown inside the lease waits", existing: existing(idem, unknown), now: leaseEnd.Add(-time.Nanosecond), want: ledger.DecisionWait},
		{name: "unknown whose lease a timeout ended retries", existing: existing(idem, unknown), change: func(r *ledger.Row) { r.PendingUntil = t0.Add(time.Minute) }, now: t0.Add(time.Minute), want: ledger.DecisionRetrySameKey},
		{name: "unknown, frozen, waits", existing: existing(idem, unknown), now: leaseEnd, frozen: true, want: ledger.DecisionWait},
		{name: "unknown, write_ledger, waits", existing: existing(ledg, unknown), now: leaseEnd, want: ledger.DecisionWait},
		{name: "unknown, write_irreversible, waits", existing: existing(irrev, unknown), now: leaseEnd, want: ledger.DecisionWait},
		{name: "unknown, last answer 502, waits", existing: existing(idem, unknown), change: func(r *ledger.Row) { r.LastHTTPStatus = 502 }, now: leaseEnd, want: ledger.DecisionWait},
		{name: "unknown, window closed, waits", existing: existing(idem, unknown), now: t0.Add(25 * time.Hour), want: ledger.DecisionWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := ledger.ClassWriteIdempotent
			if tt.existing != nil {
				class = tt.existing.ToolClass
				if tt.change != nil {
					tt.change(tt.existing)
				}
			}
			c := claimAt(t, tt.now, class, tt.frozen)
			var before ledger.Row
			if tt.existing != nil {
				before = tt.existing.Clone()
			}

			res, write, err := ledger.DecideClaim(tt.existing, c, p)

			if tt.existing != nil && !reflect.DeepEqual(*tt.existing, before) {
				t.Fatalf("DecideClaim changed the existing row:\n got %+v\nwant %+v", *tt.existing, before)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || write != nil {
					t.Fatalf("DecideClaim = %+v, %v, %v; want %v and nothing to write", res, write, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecideClaim: %v", err)
			}
			if res.Decision != tt.want || res.Code != tt.wantCode {
				t.Fatalf("DecideClaim = %s/%q, want %s/%q", res.Decision, res.Code, tt.want, tt.wantCode)
			}
			switch tt.want {
			case ledger.DecisionProceed:
				if write == nil || !res.Inserted || !reflect.DeepEqual(*write, c.Row) || !reflect.DeepEqual(res.Row, c.Row) {
					t.Fatalf("proceed: inserted %v write %+v row %+v, want the claim's row", res.Inserted, write, res.Row)
				}
				write.Request.Path = "/changed"
				if c.Row.Request.Path == "/changed" || res.Row.Request.Path == "/changed" {
					t.Fatal("the row to write shares memory with the claim or the result")
				}
			case ledger.DecisionRetrySameKey:
				want := before.Clone()
				want.Attempt++
				want.UpdatedAt = tt.now
				want.PendingUntil = tt.now.Add(p.PendingTTL)
				want.NextCheckAt = tt.now.Add(p.Grace)
				if write == nil || !reflect.DeepEqual(*write, want) || !reflect.DeepEqual(res.Row, want) {
					t.Fatalf("retry:\n write %+v\n   row %+v\n  want %+v", write, res.Row, want)
				}
				if res.Inserted {
					t.Fatal("retry reports Inserted")
				}
				write.Request.Path = "/changed"
				if res.Row.Request.Path == "/changed" || tt.existing.Request.Path == "/changed" {
					t.Fatal("the row to write shares memory with the result or the existing row")
				}
			default:
				if write != nil || res.Inserted {
					t.Fatalf("%s wrote %+v (inserted %v), want nothing", tt.want, write, res.Inserted)
				}
				if tt.existing == nil {
					if !reflect.DeepEqual(res.Row, ledger.Row{}) {
						t.Fatalf("stop on a new key returned row %+v, want none", res.Row)
					}
				} else if !reflect.DeepEqual(res.Row, before) {
					t.Fatalf("%s returned row %+v, want the existing row", tt.want, res.Row)
				}
			}
		})
	}
}

func TestRetryAllowed(t *testing.T) {
	base := claimAt(t, t0, ledger.ClassWriteIdempotent, false).Row
	tests := []struct {
		name   string
		change func(*ledger.Row)
		now    time.Time
		want   bool
	}{
		{name: "pending in window", now: t0.Add(time.Hour), want: true},
		{name: "unknown in window", change: func(r *ledger.Row) { r.Status = ledger.StatusUnknown }, now: t0.Add(time.Hour), want: true},
		{name: "succeeded", change: func(r *ledger.Row) { r.Status = ledger.StatusSucceeded }, now: t0.Add(time.Hour)},
		{name: "failed_poison", change: func(r *ledger.Row) { r.Status = ledger.StatusFailedPoison }, now: t0.Add(time.Hour)},
		{name: "write_ledger", change: func(r *ledger.Row) { r.ToolClass = ledger.ClassWriteLedger }, now: t0.Add(time.Hour)},
		{name: "write_irreversible", change: func(r *ledger.Row) { r.ToolClass = ledger.ClassWriteIrreversible }, now: t0.Add(time.Hour)},
		{name: "window end", now: t0.Add(24 * time.Hour)},
		{name: "last 500", change: func(r *ledger.Row) { r.LastHTTPStatus = 500 }, now: t0.Add(time.Hour)},
		{name: "last 409", change: func(r *ledger.Row) { r.LastHTTPStatus = 409 }, now: t0.Add(time.Hour), want: true},
		// A gated row a runtime reported on without a grant: never replayed.
		{name: "unknown at attempt 0", change: func(r *ledger.Row) { r.Status, r.Attempt = ledger.StatusUnknown, 0 }, now: t0.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base.Clone()
			if tt.change != nil {
				tt.change(&r)
			}
			if got := ledger.RetryAllowed(r, tt.now); got != tt.want {
				t.Fatalf("RetryAllowed = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAfterOrphans(t *testing.T) {
	tests := []struct {
		name     string
		decision ledger.Decision
		status   ledger.Status
		want     ledger.Decision
		wantCode string
	}{
		{name: "still pending proceeds", decision: ledger.DecisionProceed, status: ledger.StatusPending, want: ledger.DecisionProceed},
		{name: "settled by a success replays", decision: ledger.DecisionProceed, status: ledger.StatusSucceeded, want: ledger.DecisionReplay},
		{name: "settled by a failure stops", decision: ledger.DecisionProceed, status: ledger.StatusFailedPoison, want: ledger.DecisionStop, wantCode: ledger.CodeFailedPoison},
		{name: "unknown waits", decision: ledger.DecisionProceed, status: ledger.StatusUnknown, want: ledger.DecisionWait},
		{name: "other decisions untouched", decision: ledger.DecisionWait, status: ledger.StatusSucceeded, want: ledger.DecisionWait},
		{name: "replay untouched", decision: ledger.DecisionReplay, status: ledger.StatusFailedPoison, want: ledger.DecisionReplay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ledger.ClaimResult{Decision: tt.decision, Row: ledger.Row{Status: tt.status}}
			res.AfterOrphans()
			if res.Decision != tt.want || res.Code != tt.wantCode {
				t.Fatalf("AfterOrphans = %s/%q, want %s/%q", res.Decision, res.Code, tt.want, tt.wantCode)
			}
		})
	}
}

func TestNewCompensation(t *testing.T) {
	orig := claimAt(t, t0, ledger.ClassWriteIdempotent, false).Row
	orig.Status, orig.UpstreamReceiptID = ledger.StatusSucceeded, "pi_1"
	const compKey = "99e3d0167a77a3714dfc0fa8ec8ee3cdc5f6540dbf6e23491536e144da872d87"
	// printf '{"action":"refund","compensate":"<vecKeyAcme>"}' | sha256sum
	const compFingerprint = "a50e2cc854e65f02ee415eb631c3181c428514084d4f328a0b034e75373e1f04"

	tests := []struct {
		name   string
		status ledger.Status
		action string
		want   error
	}{
		{name: "succeeded original", status: ledger.StatusSucceeded, action: "refund"},
		{name: "pending original", status: ledger.StatusPending, action: "refund", want: ledger.ErrCompensationPending},
		{name: "unknown original", status: ledger.StatusUnknown, action: "refund", want: ledger.ErrCompensationPending},
		{name: "failed original", status: ledger.StatusFailedPoison, action: "refund", want: ledger.ErrCompensationFailed},
		{name: "bad action", status: ledger.StatusSucceeded, action: "re fund", want: ledger.ErrInvalidAction},
		{name: "empty action", status: ledger.StatusSucceeded, action: "", want: ledger.ErrInvalidAction},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := orig.Clone()
			o.Status = tt.status
			if err := ledger.CheckCompensable(o); tt.want != ledger.ErrInvalidAction && !errors.Is(err, tt.want) {
				t.Fatalf("CheckCompensable = %v, want %v", err, tt.want)
			}
			c, err := ledger.NewCompensation(o, tt.action, time.Hour, true, ledger.DefaultPolicy(), t0.Add(time.Hour))
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("NewCompensation = %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := c.Row
			if r.Key != compKey || r.CompensationOf != vecKeyAcme || r.CompensationAction != "refund" || r.IntentFingerprint != compFingerprint {
				t.Fatalf("compensation row key %s of %s action %s fingerprint %s", r.Key, r.CompensationOf, r.CompensationAction, r.IntentFingerprint)
			}
			if r.MetadataLocalID != ledger.LocalID(o.Tenant, compKey, false) || r.Tenant != o.Tenant || r.RunID != o.RunID || r.Vendor != o.Vendor || r.ToolClass != o.ToolClass {
				t.Fatalf("compensation row does not inherit the original: %+v", r)
			}
			if !c.Frozen || !r.ReplayWindowUntil.Equal(t0.Add(2*time.Hour)) || r.Status != ledger.StatusPending {
				t.Fatalf("compensation claim frozen %v window %v status %s", c.Frozen, r.ReplayWindowUntil, r.Status)
			}
			again, err := ledger.NewCompensation(o, tt.action, time.Hour, true, ledger.DefaultPolicy(), t0.Add(2*time.Hour))
			if err != nil || again.Row.Key != r.Key || again.Row.IntentFingerprint != r.IntentFingerprint {
				t.Fatalf("a second compensation request derives %s/%s, %v; want the same key and intent", again.Row.Key, again.Row.IntentFingerprint, err)
			}
		})
	}
}

// TestClaimLifecycle runs the pure rules the way a store does: claim,
// timeout, retry with the same key, a concurrent claim, success, replay.
func TestClaimLifecycle(t *testing.T) {
	p := ledger.DefaultPolicy()
	t1 := t0.Add(10 * time.Second)
	claim := func(now time.Time, existing *ledger.Row) (ledger.ClaimResult, *ledger.Row) {
		t.Helper()
		res, write, err := ledger.DecideClaim(existing, claimAt(t, now, ledger.ClassWriteIdempotent, false), p)
		if err != nil {
			t.Fatal(err)
		}
		return res, write
	}
	report := func(row *ledger.Row, o ledger.Outcome) ledger.Change {
		t.Helper()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		ch, err := ledger.Apply(row, ledger.Classify(o), p)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}

	res, write := claim(t0, nil)
	if res.Decision != ledger.DecisionProceed {
		t.Fatalf("first claim: %s", res.Decision)
	}
	row := *write

	if ch := report(&row, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: t1}); row.Status != ledger.StatusUnknown || !ch.Changed {
		t.Fatalf("after a timeout: %s", row.Status)
	}
	res, write = claim(t1, &row)
	if res.Decision != ledger.DecisionRetrySameKey || write.Attempt != 2 || write.Key != row.Key {
		t.Fatalf("claim after the timeout: %s attempt %d", res.Decision, res.Row.Attempt)
	}
	row = *write

	if res, _ := claim(t1.Add(time.Second), &row); res.Decision != ledger.DecisionWait {
		t.Fatalf("a concurrent claim during the retry: %s, want wait", res.Decision)
	}
	if ch := report(&row, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "pi_1", Headers: map[string]string{"Idempotent-Replayed": "true"}, At: t1.Add(2 * time.Second)}); ch.To != ledger.StatusSucceeded {
		t.Fatalf("after the retry answered: %s", row.Status)
	}
	res, write = claim(t1.Add(time.Hour), &row)
	if res.Decision != ledger.DecisionReplay || write != nil || res.Row.UpstreamReceiptID != "pi_1" || !res.Row.IdempotentReplayed {
		t.Fatalf("claim after success: %s receipt %q", res.Decision, res.Row.UpstreamReceiptID)
	}
}

func TestNewClaimVendorKey(t *testing.T) {
	req := validClaimRequest()
	req.VendorKey = func(k string) string { return "vk-" + k[:8] }
	c, err := ledger.NewClaim(req, ledger.DefaultPolicy(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Row.VendorKey, "vk-"+vecKeyAcme[:8]; got != want {
		t.Errorf("vendor key %q, want %q", got, want)
	}
	if got := (ledger.Row{Key: "k"}).WireKey(); got != "k" {
		t.Errorf("WireKey of a row without a vendor key = %q, want its key", got)
	}
}
