package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// Webhook-mode targets, both routes of the one real server.
const (
	// TargetVerifyOnly is POST /webhooks/stripe-verify-only/{endpoint}: the
	// Stripe handler over a store that keeps nothing (registerVerifyOnly).
	TargetVerifyOnly = "webhook_verify_only"
	// TargetDurable is POST /webhooks/stripe/{endpoint}: verify, then the
	// store's Ingest (inbox + match + flip + outbox in one group commit).
	TargetDurable = "webhook_durable"
)

// The targets for webhook mode: durable at least 60 % of
// verify-only's req/s, with a p99 of at most 20 ms.
const (
	WebhookRatioTarget = 0.6
	WebhookP99TargetMS = 20.0
)

// webhookFixture is the delivery every request sends, with its ids replaced.
const webhookFixture = "stripe/2024-06-20/payment_intent.succeeded"

// setupConns is how many goroutines claim the rows before the load: enough
// for large groups in the store's committer.
const setupConns = 256

// WebhookResult is webhook mode's setup and its check of the store.
type WebhookResult struct {
	// Rows were claimed and reported timeout (status unknown) before the
	// load, in SetupMS; their setup events were cleared from the outbox.
	Rows    int     `json:"rows"`
	SetupMS float64 `json:"setup_ms"`
	// Used rows were sent a durable delivery (warm-up included); Acked
	// answered 200 "accepted"; Flipped of those read back from the store as
	// succeeded with the delivery's object id as receipt. NotFlipped must
	// be 0.
	Used       int `json:"used"`
	Acked      int `json:"acked"`
	Flipped    int `json:"flipped"`
	NotFlipped int `json:"not_flipped"`
	// Exhausted is true when the rows ran out before the durable target's
	// time: its window is then shorter than the verify-only one's.
	Exhausted bool `json:"exhausted"`
	// OutboxDepthAtEnd is the outbox's records when the load stopped: the
	// flips' events not yet published, and those published but held until
	// the server has synced them (events.RelayOptions.SyncedAfter).
	OutboxDepthAtEnd int `json:"outbox_depth_at_end"`
}

// rowRef is one pre-claimed row.
type rowRef struct{ key, localID string }

// ackedDelivery is a durable delivery that answered 200 "accepted".
type ackedDelivery struct {
	row     int
	receipt string // the event's data.object.id
}

// delivery is the webhook a worker prepared for its next request; its body
// is in the worker's buf.
type delivery struct {
	row     int
	receipt string
}

// Template slots, in the order of webhookMarkers.
const (
	slotEvent = iota
	slotObject
	slotLocalID
	slotKey
	numSlots
)

// webhookMarkers stand in the template where the per-request values go.
var webhookMarkers = [numSlots]string{
	"evt_HTTPLOAD_EVENT_ID", "pi_HTTPLOAD_OBJECT_ID", "rl_HTTPLOAD_LOCAL_ID", "HTTPLOAD_IDEMPOTENCY_KEY",
}

// webhookTemplate is the fixture cut at its markers: parts[i] precedes
// slots[i], and the last part ends the body.
type webhookTemplate struct {
	parts [][]byte
	slots []int
}

// newWebhookTemplate loads the fixture and marks its event id, object id,
// metadata_local_id and echoed idempotency key.
func newWebhookTemplate() (*webhookTemplate, error) {
	body, err := fixtures.Lookup(webhookFixture)
	if err != nil {
		return nil, err
	}
	for _, set := range []struct{ name, value string }{
		{"id", webhookMarkers[slotEvent]},
		{"data.object.id", webhookMarkers[slotObject]},
		{"metadata_local_id", webhookMarkers[slotLocalID]},
		{"idempotency_key", webhookMarkers[slotKey]},
	} {
		if body, err = fixtures.Set(body, set.name, set.value); err != nil {
			return nil, fmt.Errorf("webhook template: %w", err)
		}
	}
	t := &webhookTemplate{}
	for {
		at, slot := -1, -1
		for i, m := range webhookMarkers {
			if j := bytes.Index(body, []byte(m)); j >= 0 && (at < 0 || j < at) {
				at, slot = j, i
			}
		}
		if at < 0 {
			break
		}
		t.parts = append(t.parts, body[:at])
		t.slots = append(t.slots, slot)
		body = body[at+len(webhookMarkers[slot]):]
	}
	t.parts = append(t.parts, body)
	var seen [numSlots]bool
	for _, s := range t.slots {
		seen[s] = true
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("webhook template: marker %s not found", webhookMarkers[i])
		}
	}
	return t, nil
}

// write writes the body with vals in the slots. The values are ids made of
// JSON-safe characters, so they go in unescaped.
func (t *webhookTemplate) write(buf *bytes.Buffer, vals *[numSlots]string) {
	buf.Reset()
	for i, s := range t.slots {
		buf.Write(t.parts[i])
		buf.WriteString(vals[s])
	}
	buf.Write(t.parts[len(t.parts)-1])
}

// webhookLoad is the state the webhook iterations share: the rows (read
// only), the next unused row, and each worker's acknowledged deliveries
// (acked[i] is written only by worker i, read after the load).
type webhookLoad struct {
	tmpl      *webhookTemplate
	secret    string
	now       func() time.Time
	rows      []rowRef
	next      atomic.Int64
	exhausted atomic.Bool
	acked     [][]ackedDelivery
	// tracker times each durable delivery's 2xx against its event's arrival.
	tracker *lagTracker
}

// prepare writes and signs the next delivery into w, the way Stripe would:
// a fresh event id, the row's local id and key, signed at now.
func (wl *webhookLoad) prepare(w *worker, phase string, seq, row int) {
	suffix := phase + "_" + strconv.Itoa(w.id) + "_" + strconv.Itoa(seq)
	vals := [numSlots]string{
		slotEvent:   "evt_" + suffix,
		slotObject:  "pi_" + suffix,
		slotLocalID: wl.rows[row].localID,
		slotKey:     wl.rows[row].key,
	}
	wl.tmpl.write(&w.buf, &vals)
	w.stripeSig = fixtures.SignStripe(w.buf.Bytes(), wl.now(), wl.secret)
	w.next = delivery{row: row, receipt: vals[slotObject]}
}

// prepDurable takes the next unused row; errStop when none is left.
func (wl *webhookLoad) prepDurable(_ context.Context, w *worker, phase string, seq int) error {
	i := int(wl.next.Add(1) - 1)
	if i >= len(wl.rows) {
		wl.exhausted.Store(true)
		return errStop
	}
	wl.prepare(w, phase, seq, i)
	return nil
}

// prepVerify signs a delivery for some row without using it up: the
// verify-only route never reaches the store, and the body has the same size.
func (wl *webhookLoad) prepVerify(_ context.Context, w *worker, phase string, seq int) error {
	wl.prepare(w, phase, seq, (w.id*7919+seq)%len(wl.rows))
	return nil
}

type webhookAck struct {
	Result string `json:"result"`
}

func (wl *webhookLoad) sendDurable(ctx context.Context, w *worker, _ string, _ int) error {
	var ack webhookAck
	if err := w.post(ctx, "/webhooks/stripe/"+webhookEndpoint, w.buf.Bytes(), http.StatusOK, &ack); err != nil {
		return err
	}
	if ack.Result != string(ledger.IngestAccepted) {
		return fmt.Errorf("durable webhook: result %q, want %q", ack.Result, ledger.IngestAccepted)
	}
	wl.tracker.ack(wl.rows[w.next.row].key, wl.now())
	wl.acked[w.id] = append(wl.acked[w.id], ackedDelivery{row: w.next.row, receipt: w.next.receipt})
	return nil
}

func (wl *webhookLoad) sendVerify(ctx context.Context, w *worker, _ string, _ int) error {
	var ack webhookAck
	if err := w.post(ctx, verifyOnlyRoute+"/"+webhookEndpoint, w.buf.Bytes(), http.StatusOK, &ack); err != nil {
		return err
	}
	if ack.Result != verifiedResult {
		return fmt.Errorf("verify-only webhook: result %q, want %q", ack.Result, verifiedResult)
	}
	return nil
}

// runWebhook is Run in ModeWebhook.
func runWebhook(ctx context.Context, cfg Config, rep *Report) (err error) {
	log := cfg.Logger
	rep.Mode = ModeWebhook
	tmpl, err := newWebhookTemplate()
	if err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	sec := make([]byte, 24)
	if _, err := rand.Read(sec); err != nil {
		return fmt.Errorf("httpload: webhook secret: %w", err)
	}
	secret := "whsec_" + hex.EncodeToString(sec)

	rt, err := startReal(ctx, cfg.Dir, realOptions{apiLog: cfg.APILog, unsafeNoSync: cfg.UnsafeNoSync, noWAL: cfg.NoWAL, pgURL: cfg.Store, stripeSecret: secret, deferRelay: true, now: cfg.Now}, log)
	if err != nil {
		return fmt.Errorf("httpload: real target: %w", err)
	}
	defer func() {
		if cerr := rt.close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("httpload: close real target: %w", cerr))
		}
	}()

	log.Info("claiming rows", "rows", cfg.WebhookRows)
	t0 := cfg.Now()
	rows, err := preclaim(ctx, rt.store, cfg.WebhookRows, cfg.Now)
	if err != nil {
		return fmt.Errorf("httpload: setup: %w", err)
	}
	// The setup's timeout events are not part of the measurement: clear
	// them, then let the relay publish the flips' events as serve would.
	if err := clearOutbox(ctx, rt.store); err != nil {
		return fmt.Errorf("httpload: setup: %w", err)
	}
	rt.startRelay(ctx)
	wr := &WebhookResult{Rows: len(rows), SetupMS: ms(cfg.Now().Sub(t0))}
	rep.Webhook = wr
	tracker := newLagTracker()
	obs, err := startObserver(ctx, rt.ns.ClientURL(), tracker, cfg.Now, log)
	if err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	defer obs.stop()

	if cfg.BeforeLoad != nil {
		if err := cfg.BeforeLoad(); err != nil {
			return fmt.Errorf("httpload: before load: %w", err)
		}
	}
	wl := &webhookLoad{tmpl: tmpl, secret: secret, now: cfg.Now, rows: rows, acked: make([][]ackedDelivery, cfg.Conns), tracker: tracker}
	peak, err := measureWebhook(ctx, cfg, rt, wl, rep)
	if err != nil {
		return err
	}
	var half []span
	if cfg.HalfDuration > 0 {
		if half, err = measureHalf(ctx, cfg, rt, wl, rep); err != nil {
			return err
		}
	}
	loadEnd := cfg.Now()
	if cfg.AfterLoad != nil {
		cfg.AfterLoad()
	}
	if wr.OutboxDepthAtEnd, err = rt.outboxDepth(ctx); err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	if err := measureEvents(ctx, cfg, rt, tracker, rep, peak, half, loadEnd); err != nil {
		return err
	}

	// Every acknowledged delivery must have flipped its row.
	wr.Used = min(int(wl.next.Load()), len(rows))
	wr.Exhausted = wl.exhausted.Load()
	var acked []ackedDelivery
	for _, a := range wl.acked {
		acked = append(acked, a...)
	}
	wr.Acked = len(acked)
	for _, a := range acked {
		row, err := rt.store.Get(ctx, tenant, rows[a.row].key)
		if err != nil {
			return fmt.Errorf("httpload: check row: %w", err)
		}
		if row.Status == ledger.StatusSucceeded && row.UpstreamReceiptID == a.receipt {
			wr.Flipped++
		} else {
			wr.NotFlipped++
		}
	}
	if cfg.afterWebhook != nil {
		cfg.afterWebhook(ctx, rt.store, rows, acked)
	}
	if wr.NotFlipped > 0 {
		return fmt.Errorf("httpload: %d of %d acknowledged deliveries did not flip their row", wr.NotFlipped, wr.Acked)
	}
	return nil
}

// measureWebhook alternates verify-only and durable rounds on the one
// server, as measure alternates bare and real, and returns the durable
// rounds' measured windows: the peak phase of the events.
func measureWebhook(ctx context.Context, cfg Config, rt *realTarget, wl *webhookLoad, rep *Report) ([]span, error) {
	log := cfg.Logger
	// One client per route, so each keeps its own warm connections.
	verifyClient := newClient(cfg.Conns, cfg.RequestTimeout)
	defer verifyClient.CloseIdleConnections()
	durableClient := newClient(cfg.Conns, cfg.RequestTimeout)
	defer durableClient.CloseIdleConnections()

	var verifyRes, durableRes phaseResult
	var boltSum bolt.Stats
	var boltWall time.Duration
	perRound := cfg.Duration / time.Duration(cfg.Rounds)
	for r := range cfg.Rounds {
		spec := phaseSpec{conns: cfg.Conns, duration: perRound, now: cfg.Now, base: rt.http.url}
		if r == 0 {
			spec.warmup = cfg.Warmup
		}
		suffix := ""
		if cfg.Rounds > 1 {
			suffix = "-r" + strconv.Itoa(r)
		}
		if !cfg.SkipBare {
			s := spec
			s.name, s.client, s.prep, s.iter = TargetVerifyOnly+suffix, verifyClient, wl.prepVerify, wl.sendVerify
			log.Info("measuring", "target", TargetVerifyOnly, "round", r, "conns", cfg.Conns, "warmup", s.warmup, "duration", s.duration)
			verifyRes.add(drive(ctx, s))
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("httpload: %w", err)
		}
		s := spec
		s.name, s.client, s.prep, s.iter = TargetDurable+suffix, durableClient, wl.prepDurable, wl.sendDurable
		log.Info("measuring", "target", TargetDurable, "round", r, "conns", cfg.Conns, "warmup", s.warmup, "duration", s.duration)
		st0, t0 := rt.stats(), cfg.Now()
		durableRes.add(drive(ctx, s))
		boltSum = addStats(boltSum, rt.stats(), st0)
		boltWall += cfg.Now().Sub(t0)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("httpload: %w", err)
		}
	}
	if !cfg.SkipBare {
		rep.Targets = append(rep.Targets, targetResult(TargetVerifyOnly, cfg.Conns, 1, verifyRes))
	}
	dr := targetResult(TargetDurable, cfg.Conns, 1, durableRes)
	rep.Targets = append(rep.Targets, dr)
	rep.Bolt = boltStats(boltSum, boltWall)
	if !cfg.SkipBare && rep.Targets[0].OpsPerSec > 0 {
		rep.DurableOverVerify = dr.OpsPerSec / rep.Targets[0].OpsPerSec
	}
	return durableRes.spans, nil
}

// measureHalf sends durable deliveries at half the peak's durable rate for
// Config.HalfDuration and returns its measured window.
func measureHalf(ctx context.Context, cfg Config, rt *realTarget, wl *webhookLoad, rep *Report) ([]span, error) {
	peak := rep.target(TargetDurable)
	if peak == nil || peak.OpsPerSec <= 0 {
		return nil, errors.New("httpload: half phase: the peak phase measured no rate")
	}
	limit := peak.OpsPerSec / 2
	client := newClient(cfg.Conns, cfg.RequestTimeout)
	defer client.CloseIdleConnections()
	cfg.Logger.Info("measuring", "target", TargetDurableHalf, "conns", cfg.Conns, "duration", cfg.HalfDuration, "rate", limit)
	res := drive(ctx, phaseSpec{
		name: TargetDurableHalf, base: rt.http.url, client: client, conns: cfg.Conns, duration: cfg.HalfDuration,
		limit: rate.Limit(limit), now: cfg.Now, prep: wl.prepDurable, iter: wl.sendDurable,
	})
	rep.Targets = append(rep.Targets, targetResult(TargetDurableHalf, cfg.Conns, 1, res))
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("httpload: %w", err)
	}
	return res.spans, nil
}

// measureEvents waits for every acknowledged delivery's event and for the
// outbox to empty (the relay holds each record SyncedAfter past its
// PubAck), then fills rep.Events: each phase's ingest and relay rates and
// lags side by side. Events missing after the drain timeout are
// ErrEventsMissing.
func measureEvents(ctx context.Context, cfg Config, rt *realTarget, t *lagTracker, rep *Report, peak, half []span, loadEnd time.Time) error {
	drained := waitDrained(ctx, t, rt, cfg.DrainTimeout)
	er := &EventsResult{SyncedAfterMS: ms(rt.syncedAfter)}
	rep.Events = er
	var err error
	if er.OutboxAfterDrain, err = rt.outboxDepth(ctx); err != nil {
		return fmt.Errorf("httpload: %w", err)
	}
	s := t.snapshot()
	er.Acked, er.Delivered, er.Missing, er.Duplicates = s.acked, len(s.lags), s.missing, s.dupes
	if !s.last.IsZero() {
		er.DrainMS = ms(max(s.last.Sub(loadEnd), 0))
	}
	if tr := rep.target(TargetDurable); tr != nil {
		er.Phases = append(er.Phases, eventsPhase(PhasePeak, 0, *tr, peak, s, PeakLagP99TargetMS))
	}
	if tr := rep.target(TargetDurableHalf); tr != nil {
		limit := 0.0
		if p := rep.target(TargetDurable); p != nil {
			limit = p.OpsPerSec / 2
		}
		er.Phases = append(er.Phases, eventsPhase(PhaseHalf, limit, *tr, half, s, HalfLagP99TargetMS))
	}
	er.Met = er.Missing == 0 && er.Duplicates == 0 && len(er.Phases) > 0
	for _, ph := range er.Phases {
		er.Met = er.Met && ph.Met
	}
	if !drained || er.Missing > 0 || er.OutboxAfterDrain > 0 {
		return fmt.Errorf("httpload: %w: %d of %d deliveries have no event on the stream and %d records are still in the outbox after %s",
			ErrEventsMissing, er.Missing, er.Acked, er.OutboxAfterDrain, cfg.DrainTimeout)
	}
	return nil
}

// preclaim claims n rows and reports each one's outcome as a timeout, so
// all are unknown, from setupConns goroutines (the store groups their
// commits). It returns each row's key and local id.
func preclaim(ctx context.Context, st ledger.Store, n int, now func() time.Time) ([]rowRef, error) {
	rows := make([]rowRef, n)
	var next atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, min(setupConns, n))
	var wg sync.WaitGroup
	for g := range errs {
		wg.Add(1)
		go func() { // owner: preclaim; exits when the rows are done or one fails
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if rows[i], errs[g] = claimUnknown(ctx, st, i, now); errs[g] != nil {
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rows, nil
}

// setupIntent is what the API's claims in claim mode carry.
var setupIntent = json.RawMessage(`{"amount":1050,"currency":"usd","customer":"cus_4QFJOjw2pOmAGJ"}`)

// claimUnknown claims row i as the API would and reports a timeout.
func claimUnknown(ctx context.Context, st ledger.Store, i int, now func() time.Time) (rowRef, error) {
	c, err := ledger.NewClaim(ledger.ClaimRequest{
		Tenant: tenant, RunID: "setup-" + strconv.Itoa(i), Tool: "stripe.create_payment_intent",
		ToolCallID: "call_" + strconv.Itoa(i), Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
		Intent: setupIntent, ReplayWindow: 24 * time.Hour,
	}, ledger.DefaultPolicy(), now())
	if err != nil {
		return rowRef{}, fmt.Errorf("claim %d: %w", i, err)
	}
	res, err := st.Claim(ctx, c)
	if err != nil {
		return rowRef{}, fmt.Errorf("claim %d: %w", i, err)
	}
	if res.Decision != ledger.DecisionProceed || !res.Inserted {
		return rowRef{}, fmt.Errorf("claim %d: decision %s, want a new row", i, res.Decision)
	}
	row, _, err := st.Report(ctx, tenant, res.Row.Key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: now()})
	if err != nil {
		return rowRef{}, fmt.Errorf("report %d: %w", i, err)
	}
	if row.Status != ledger.StatusUnknown {
		return rowRef{}, fmt.Errorf("report %d: status %s, want %s", i, row.Status, ledger.StatusUnknown)
	}
	return rowRef{key: row.Key, localID: row.MetadataLocalID}, nil
}

// clearOutbox acknowledges every outbox record, as if published.
func clearOutbox(ctx context.Context, st ledger.Store) error {
	for {
		recs, err := st.PendingEvents(ctx, 10000)
		if err != nil {
			return fmt.Errorf("clear outbox: %w", err)
		}
		if len(recs) == 0 {
			return nil
		}
		seqs := make([]uint64, len(recs))
		for i, r := range recs {
			seqs[i] = r.Seq
		}
		if err := st.AckEvents(ctx, seqs...); err != nil {
			return fmt.Errorf("clear outbox: %w", err)
		}
	}
}
