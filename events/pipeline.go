package events

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Deleting held records: at most every deleteEvery, unless deleteBatch of
// them are due, in AckEvents calls of at most maxDelete records. Deletes
// are group commits that compete with ingest for the store's committer;
// batching them makes their cost a small fraction of the publishes'.
const (
	deleteEvery = 100 * time.Millisecond
	deleteBatch = 1000
	maxDelete   = 4096
)

// entry is one outbox record on its way through the relay.
type entry struct {
	rec     ledger.OutboxRecord
	key     string // orderKey(rec)
	subject string
	// until is the end of the record's lease (LeasingOutbox): a publish
	// starts only while PublishTimeout still fits before it. Zero without
	// a lease.
	until time.Time
	fut   jetstream.PubAckFuture
	// deadline is when the collector stops waiting for the PubAck (wall
	// clock: it bounds a wait on the network, not a lease).
	deadline time.Time
	ackedAt  time.Time // relay clock
	epoch    uint64    // the connection's reconnect count at the PubAck
	// span is the publish span of the message in flight (nil when the
	// relay does not trace): started in publish, ended in settle.
	span trace.Span
}

// outcome is a PubAck or the reason there is none.
type outcome struct {
	e   *entry
	ack *jetstream.PubAck
	err error
}

// keeperJob is store work the publishing must not wait for: a count, or
// holds (LeasingOutbox) and deletes. The keeper goroutine does one at a
// time; the entries stay the loop's, the keeper sees sequence numbers.
type keeperJob struct {
	count bool
	// hold are acknowledged records to mark held until holdUntil.
	hold      []*entry
	holdSeqs  []uint64
	holdUntil time.Time
	// doomed are deleted as they are; held are deleted only once the
	// server is shown to have stayed up past their SyncedAfter: it answers
	// a ping on the connection that carried their PubAcks (epoch).
	doomed   []uint64
	held     []*entry
	heldSeqs []uint64
	epoch    uint64
}

// keeperResult is what became of a keeperJob.
type keeperResult struct {
	job *keeperJob
	n   int // count
	err error
	// unproven: no answer to the ping, so the held records stay held;
	// reconnected: the connection was re-established since their PubAcks,
	// so they are published again. The doomed were deleted either way.
	unproven, reconnected bool
}

// pipeline is the relay's state. Every field is owned by the one Run or
// Drain running; it survives from one to the next, so a Drain after Run
// goes on where Run stopped.
type pipeline struct {
	// cursor is the highest sequence number read from a plain Outbox.
	cursor uint64
	// more: the outbox may hold records not read yet (a notification, a
	// tick, a read that returned a full batch).
	more bool
	// pending are read and not yet published, in sequence order; flying
	// are published and wait for their PubAck, in publish order (which is
	// the order the collector settles them in).
	pending, flying []*entry
	// busy holds the order keys with a record in flight: no later record
	// of such a key is published until that one's PubAck.
	busy map[string]bool
	// held are acknowledged and kept until SyncedAfter has passed, in ack
	// order; unheld are those of them a LeasingOutbox has not been told to
	// hold yet; doomed are deleted at once (acknowledged with SyncedAfter 0,
	// or invalid). keeping: a keeperJob is out.
	held    []*entry
	unheld  []*entry
	doomed  []uint64
	keeping bool
	// unread estimates the records of a plain Outbox beyond cursor: set by
	// a count, lowered by reads, zeroed by a read that returned less than a
	// batch. leaseDepth is a LeasingOutbox's count less what was published
	// since.
	unread, leaseDepth int
	// epoch is the connection's reconnect count as last seen.
	epoch uint64
	// started: the relay has caught up with the outbox or had a PubAck.
	started bool
	// readErr, pubErr and delErr are the failures not yet followed by a
	// success of the same kind; retryAt (wall clock) ends the backoff
	// after the last.
	readErr, pubErr, delErr error
	retryAt                 time.Time
	bo                      *backoff.ExponentialBackOff
	// failures counts failures, so a Drain can tell its own; lastErr is
	// the latest.
	failures int
	lastErr  error
	// reset: a delete or hold failed, so the relay cannot tell what the
	// store kept; once nothing is in flight it forgets everything and reads
	// the outbox from the start, as after a restart.
	reset bool
	// lastDelete (wall clock) paces the deletes.
	lastDelete time.Time
}

func (p *pipeline) init(r *Relay) {
	p.busy = map[string]bool{}
	p.epoch = r.reconnects()
	p.bo = backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.opts.MinBackoff),
		backoff.WithMaxInterval(r.opts.MaxBackoff),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0), // never give up: the outbox holds the events
	)
}

// reconnects is the connection's reconnect count (0 without a connection).
func (r *Relay) reconnects() uint64 {
	if r.nc == nil {
		return 0
	}
	return r.nc.Stats().Reconnects
}

func (p *pipeline) failure() error {
	switch {
	case p.readErr != nil:
		return p.readErr
	case p.pubErr != nil:
		return p.pubErr
	}
	return p.delErr
}

func (p *pipeline) health() error {
	if err := p.failure(); err != nil {
		return err
	}
	if !p.started {
		return ErrRelayNotStarted
	}
	return nil
}

// idle: nothing read is left to publish or delete now (held records may
// still wait for SyncedAfter).
func (p *pipeline) idle() bool {
	return !p.more && !p.reset && !p.keeping && len(p.pending) == 0 && len(p.flying) == 0 && len(p.unheld) == 0 && len(p.doomed) == 0
}

// failed records a failure of one kind (kind points at readErr, pubErr or
// delErr; the first error of a burst is kept) and, unless the relay is
// already backing off, starts the next backoff: no reads or publishes
// until it ends or Wake.
func (r *Relay) failed(kind *error, err error) {
	p := &r.p
	p.failures++
	p.lastErr = err
	if *kind == nil {
		*kind = err
	}
	if now := time.Now(); !now.Before(p.retryAt) {
		wait := p.bo.NextBackOff()
		p.retryAt = now.Add(wait)
		r.log.Warn("relay failed; retrying", "err", err, "retry_in", wait)
	}
}

// succeeded clears a kind of failure; once none is left the backoff starts
// from its beginning again.
func (r *Relay) succeeded(kind *error) {
	p := &r.p
	if *kind == nil {
		return
	}
	*kind = nil
	if p.failure() == nil {
		p.bo.Reset()
	}
}

// loop is Run (drain false: until ctx ends, backing off after failures)
// and Drain (drain true: until the outbox is empty, the first failure or
// ctx's end, whose errors it returns).
func (r *Relay) loop(ctx context.Context, drain bool) error {
	p := &r.p
	sent := make(chan *entry, r.opts.Window)
	done := make(chan outcome, r.opts.Window)
	jobs := make(chan *keeperJob, 1)
	kept := make(chan keeperResult, 1)
	stopped := make(chan struct{}, 2)
	// The collector and the keeper are owned by this call: they exit once
	// sent and jobs are closed, which happens only when nothing is in
	// flight and no job is out.
	go func() {
		defer func() { stopped <- struct{}{} }()
		r.collect(sent, done)
	}()
	go func() {
		defer func() { stopped <- struct{}{} }()
		r.keep(ctx, jobs, kept)
	}()
	defer func() {
		close(sent)
		close(jobs)
		<-stopped
		<-stopped
	}()

	failuresBefore := p.failures
	finalJob := false // ending: the last deletes were handed to the keeper
	ticker := time.NewTicker(r.opts.Interval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	notify := r.out.Notify()
	p.more = true
	if !drain {
		r.startJob(jobs, &keeperJob{count: true})
	}

	for {
		stopping := ctx.Err() != nil
		// A Drain ends at its first failure; Run backs off and retries.
		drainFailed := drain && p.failures > failuresBefore
		r.checkEpoch()
		if !stopping && !drainFailed && !p.reset && (drain || !time.Now().Before(p.retryAt)) {
			r.fill(ctx)
			r.dispatch(ctx, sent)
		}
		if p.reset && len(p.flying) == 0 && !p.keeping {
			p.forget()
		}
		// Ending (ctx done, or a Drain's failure): once nothing flies, one
		// last job deletes what may be deleted, then the loop returns.
		ending := (stopping || drainFailed) && len(p.flying) == 0
		switch {
		case ending && !p.keeping && !finalJob:
			r.flush(jobs, true)
			finalJob = true
		case !ending:
			r.flush(jobs, drain && len(p.flying) == 0)
		}
		if !p.started && p.idle() && p.failure() == nil {
			p.started = true
		}
		r.report()
		r.setHealth(p.health())
		if len(p.flying) == 0 && !p.keeping {
			switch {
			case finalJob && stopping && drain:
				return ctx.Err()
			case finalJob && stopping:
				return nil
			case finalJob:
				return p.lastErr
			case drain && p.idle():
				return nil
			}
		}

		timer.Reset(r.nextWake(stopping))
		ctxDone := ctx.Done()
		if stopping {
			ctxDone = nil // only the publishes in flight and the last job matter now
		}
		select {
		case o := <-done:
			r.settle(o)
			for more := true; more; {
				select {
				case o := <-done:
					r.settle(o)
				default:
					more = false
				}
			}
			r.report()
		case res := <-kept:
			r.kept(res)
		case <-notify:
			p.more = true
		case <-ticker.C:
			p.more = true
			if !p.keeping && !stopping {
				r.startJob(jobs, &keeperJob{count: true})
			}
		case <-r.wake:
			// An operator asked (POST /v1/admin/redrive): retry now, and
			// back off from the start if it fails again.
			p.more, p.retryAt = true, time.Time{}
			p.bo.Reset()
		case <-timer.C:
		case <-ctxDone:
		}
	}
}

// nextWake is how long the loop may sleep when nothing arrives: until the
// backoff ends (wall clock) or the oldest held record may be deleted
// (SyncedAfter on the relay's clock, deletes at most every deleteEvery).
func (r *Relay) nextWake(stopping bool) time.Duration {
	p := &r.p
	d := time.Hour
	if wall := time.Now(); !stopping && wall.Before(p.retryAt) {
		d = p.retryAt.Sub(wall)
	}
	if len(p.held) > 0 && !p.reset && !p.keeping { // a job's end wakes the loop anyway
		due := p.held[0].ackedAt.Add(r.opts.SyncedAfter).Sub(r.now())
		d = min(d, max(due, time.Until(p.lastDelete.Add(deleteEvery))))
	}
	return max(d, time.Millisecond)
}

// fill reads the outbox while it may hold more and the relay has room: a
// full window in flight and a batch waiting behind it.
func (r *Relay) fill(ctx context.Context) {
	p := &r.p
	for p.more && len(p.pending)+len(p.flying) < r.opts.Window+r.opts.Batch {
		recs, until, err := r.read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.failed(&p.readErr, fmt.Errorf("read outbox: %w", err))
			}
			return
		}
		r.succeeded(&p.readErr)
		p.more = len(recs) == r.opts.Batch
		if !p.more {
			p.unread = 0
		} else {
			p.unread = max(p.unread-len(recs), 0)
		}
		if !p.more && len(recs) == 0 && len(p.pending) == 0 && len(p.flying) == 0 {
			p.started = true // caught up with an empty outbox
		}
		for _, rec := range recs {
			p.pending = append(p.pending, &entry{rec: rec, key: orderKey(rec), until: until})
		}
	}
}

// read returns the next batch: leased until the returned time from a
// LeasingOutbox, else read after the cursor (zero time: no lease).
func (r *Relay) read(ctx context.Context) ([]ledger.OutboxRecord, time.Time, error) {
	if r.lease == nil {
		recs, err := r.out.EventsAfter(ctx, r.p.cursor, r.opts.Batch)
		if n := len(recs); err == nil && n > 0 {
			r.p.cursor = recs[n-1].Seq
		}
		return recs, time.Time{}, err
	}
	now := r.now()
	recs, err := r.lease.ClaimEvents(ctx, now, r.opts.Batch, r.opts.Lease)
	return recs, now.Add(r.opts.Lease), err
}

// dispatch publishes pending records in sequence order, skipping those
// whose key has an earlier record in flight or waiting, until the window
// is full, a publish cannot be sent, or ctx ends. With a lease it starts a
// publish only while PublishTimeout still fits in the lease, so every
// publish ends before another relay can be handed the record or a later
// record of its row: that is what keeps each row's events in order across
// relays. Records it leaves for that reason come back when the lease ends.
func (r *Relay) dispatch(ctx context.Context, sent chan<- *entry) {
	p := &r.p
	if len(p.pending) == 0 {
		return
	}
	kept := p.pending[:0]
	waiting := map[string]bool{} // keys with an earlier record kept back in this pass
	dropped := 0
	for i, e := range p.pending {
		if e == nil { // dropped with an earlier record of its key
			continue
		}
		if ctx.Err() != nil || len(p.flying) == r.opts.Window {
			kept = append(kept, p.pending[i:]...)
			break
		}
		if p.busy[e.key] || waiting[e.key] {
			waiting[e.key] = true
			kept = append(kept, e)
			continue
		}
		if !e.until.IsZero() && r.now().Add(r.opts.PublishTimeout).After(e.until) {
			// Later records of the key go too: they must not overtake it.
			waiting[e.key] = true
			dropped += dropKey(p.pending[i+1:], e.key) + 1
			continue
		}
		if err := r.publish(e, sent); err != nil {
			// Not sent: NATS is unreachable. It and the rest wait for
			// the backoff.
			kept = append(kept, p.pending[i:]...)
			break
		}
	}
	p.pending = slices.DeleteFunc(kept, func(e *entry) bool { return e == nil })
	if dropped > 0 {
		r.log.Warn("relay lease running out; leaving records for after it", "left", dropped)
	}
}

// dropKey nils out the records of key in rest (dispatch deletes them) and
// returns how many there were.
func dropKey(rest []*entry, key string) int {
	n := 0
	for i, e := range rest {
		if e != nil && e.key == key {
			rest[i] = nil
			n++
		}
	}
	return n
}

// publish sends e: the one place a message leaves the relay (settle is
// where its outcome arrives). An error means e was not sent and stays
// pending; without one e is in flight, or was invalid and is dropped.
func (r *Relay) publish(e *entry, sent chan<- *entry) error {
	p := &r.p
	msg, stream, err := r.message(e.rec)
	if err != nil {
		// Retrying cannot fix it and keeping it would stall every event of
		// its key behind it; the row itself still holds the truth (Await's
		// WithLedger poll sees it).
		r.met.CountResult(ResultInvalid)
		r.log.Error("dropping outbox record that cannot be published", "seq", e.rec.Seq, "key", e.rec.Event.Key, "err", err)
		p.doomed = append(p.doomed, e.rec.Seq)
		return nil
	}
	e.subject = msg.Subject
	if r.tracer != nil {
		r.startPublish(e, msg, stream)
	}
	fut, err := r.pub.PublishMsgAsync(msg, jetstream.WithExpectStream(stream))
	if err != nil {
		r.met.CountResult(ResultError)
		endPublish(e, ResultError, err)
		err = fmt.Errorf("publish %s: %w", msg.Subject, err)
		r.failed(&p.pubErr, err)
		return err
	}
	e.fut, e.deadline = fut, time.Now().Add(r.opts.PublishTimeout)
	p.busy[e.key] = true
	p.flying = append(p.flying, e)
	sent <- e // never blocks: sent holds Window and at most Window fly
	return nil
}

// collect waits for each PubAck in publish order, at most until its
// deadline, and hands the outcome to the loop. JetStream answers one
// connection's publishes to one stream in order, so waiting in order
// costs nothing; an answer out of order only waits for the one before.
func (r *Relay) collect(sent <-chan *entry, done chan<- outcome) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for e := range sent {
		t.Reset(time.Until(e.deadline))
		o := outcome{e: e}
		select {
		case o.ack = <-e.fut.Ok():
		case o.err = <-e.fut.Err():
		case <-t.C:
			o.err = errPublishTimeout
		}
		done <- o
	}
}

// settle takes one outcome: a PubAck makes the record held (or doomed with
// SyncedAfter 0); no PubAck puts it back among the pending, ahead of every
// later record of its key, to be published again after the backoff.
func (r *Relay) settle(o outcome) {
	p := &r.p
	e := p.flying[0]
	p.flying = p.flying[1:]
	delete(p.busy, e.key)
	if o.err == nil && o.ack == nil {
		o.err = fmt.Errorf("%w: empty pub ack", jetstream.ErrInvalidJSAck)
	}
	if o.err != nil {
		r.met.CountResult(ResultError)
		endPublish(e, ResultError, o.err)
		p.requeue(e)
		err := fmt.Errorf("publish %s: %w", e.subject, o.err)
		if streamFull(o.err) {
			err = fmt.Errorf("publish %s: %w (%w)", e.subject, ErrStreamFull, o.err)
		}
		r.failed(&p.pubErr, err)
		return
	}
	if o.ack.Duplicate {
		r.met.CountResult(ResultDuplicate)
		endPublish(e, ResultDuplicate, nil)
	} else {
		r.met.CountResult(ResultPublished)
		endPublish(e, ResultPublished, nil)
	}
	now := r.now()
	if !e.rec.Event.At.IsZero() {
		r.met.ObserveLag(max(now.Sub(e.rec.Event.At), 0))
	}
	r.succeeded(&p.pubErr)
	p.started = true
	p.leaseDepth = max(p.leaseDepth-1, 0)
	e.fut = nil
	if r.opts.SyncedAfter == 0 {
		p.doomed = append(p.doomed, e.rec.Seq)
		return
	}
	e.ackedAt, e.epoch = now, p.epoch
	p.held = append(p.held, e)
	if r.lease != nil {
		p.unheld = append(p.unheld, e)
	}
}

// requeue puts e back among the pending records in sequence order.
func (p *pipeline) requeue(e *entry) {
	i, _ := slices.BinarySearchFunc(p.pending, e.rec.Seq, func(x *entry, seq uint64) int {
		switch {
		case x.rec.Seq < seq:
			return -1
		case x.rec.Seq > seq:
			return 1
		}
		return 0
	})
	p.pending = slices.Insert(p.pending, i, e)
}

// checkEpoch publishes the held records again after the connection was
// re-established: the server may have restarted and lost what it had not
// synced, and only the outbox still has it. The duplicates window drops
// whatever the server kept.
func (r *Relay) checkEpoch() {
	p := &r.p
	n := r.reconnects()
	if n == p.epoch {
		return
	}
	p.epoch = n
	again := 0
	p.held = slices.DeleteFunc(p.held, func(e *entry) bool {
		if e.epoch == n {
			return false
		}
		p.requeue(e)
		again++
		return true
	})
	p.unheld = slices.DeleteFunc(p.unheld, func(e *entry) bool { return e.epoch != n })
	if again > 0 {
		r.log.Info("nats reconnected; publishing held events again", "events", again)
	}
}

// flush hands the keeper what the store must hear: holds for a
// LeasingOutbox, the doomed records, and the held ones whose SyncedAfter
// has passed, batched (final: now, whatever is due). It reports whether it
// started a job.
func (r *Relay) flush(jobs chan<- *keeperJob, final bool) bool {
	p := &r.p
	if p.keeping || p.reset {
		return false
	}
	now := r.now()
	due := 0
	for due < len(p.held) && !p.held[due].ackedAt.Add(r.opts.SyncedAfter).After(now) {
		due++
	}
	if due > 0 && !final && due < deleteBatch && time.Since(p.lastDelete) < deleteEvery {
		due = 0 // not yet: batch them
	}
	if len(p.unheld) == 0 && len(p.doomed) == 0 && due == 0 {
		return false
	}
	job := &keeperJob{doomed: p.doomed, epoch: p.epoch}
	if len(p.unheld) > 0 {
		job.hold, job.holdUntil = p.unheld, now.Add(r.opts.SyncedAfter+r.opts.Lease)
		for _, e := range p.unheld {
			job.holdSeqs = append(job.holdSeqs, e.rec.Seq)
		}
		p.unheld = nil
	}
	if due > 0 {
		job.held = slices.Clone(p.held[:due])
		for _, e := range job.held {
			job.heldSeqs = append(job.heldSeqs, e.rec.Seq)
		}
		p.held = slices.Delete(p.held, 0, due)
		p.lastDelete = time.Now()
	}
	p.doomed = nil
	r.startJob(jobs, job)
	return true
}

func (r *Relay) startJob(jobs chan<- *keeperJob, job *keeperJob) {
	r.p.keeping = true
	jobs <- job // never blocks: one job at a time, and jobs holds one
}

// keep runs keeperJobs, one at a time, off the publishing path: a store
// commit that stalls (an fsync on a busy disk) delays deletes, never a
// publish. Writes run even when ctx is done: the records are on the
// stream, and a restart would only publish them again.
func (r *Relay) keep(ctx context.Context, jobs <-chan *keeperJob, kept chan<- keeperResult) {
	for job := range jobs {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.PublishTimeout)
		kept <- r.runJob(sctx, job)
		cancel()
	}
}

func (r *Relay) runJob(ctx context.Context, job *keeperJob) keeperResult {
	res := keeperResult{job: job}
	if job.count {
		res.n, res.err = r.out.CountEvents(ctx)
		return res
	}
	if len(job.holdSeqs) > 0 {
		if err := r.lease.HoldEvents(ctx, job.holdUntil, job.holdSeqs...); err != nil {
			res.err = fmt.Errorf("hold outbox records: %w", err)
			return res
		}
	}
	seqs := job.doomed
	if len(job.heldSeqs) > 0 {
		// The server syncs every interval while it runs; a ping answered
		// on the connection that carried the PubAcks, after SyncedAfter,
		// shows it ran through one. A new connection may be a restarted
		// server that lost them.
		switch {
		case r.nc != nil && r.nc.FlushTimeout(r.opts.PublishTimeout) != nil:
			res.unproven = true
		case r.reconnects() != job.epoch:
			res.reconnected = true
		default:
			seqs = append(slices.Clip(seqs), job.heldSeqs...)
		}
	}
	for len(seqs) > 0 {
		n := min(len(seqs), maxDelete)
		if err := r.out.AckEvents(ctx, seqs[:n]...); err != nil {
			res.err = fmt.Errorf("ack outbox: %w", err)
			return res
		}
		seqs = seqs[n:]
	}
	return res
}

// kept takes a keeperResult back into the pipeline.
func (r *Relay) kept(res keeperResult) {
	p := &r.p
	p.keeping = false
	job := res.job
	if job.count {
		if res.err != nil {
			r.log.Debug("relay: counting the outbox failed", "err", res.err)
			return
		}
		if r.lease != nil {
			p.leaseDepth = max(res.n-len(p.unheld)-len(p.doomed), 0)
			return
		}
		p.unread = max(res.n-len(p.pending)-len(p.flying)-len(p.held)-len(p.doomed), 0)
		return
	}
	if res.err != nil {
		// The relay no longer knows what the store kept, so it starts over
		// once nothing is in flight: what it published is published again
		// and dropped as a duplicate.
		r.failed(&p.delErr, res.err)
		p.reset = true
		return
	}
	r.succeeded(&p.delErr)
	for _, e := range job.hold {
		e.until = job.holdUntil
	}
	switch {
	case res.unproven:
		r.log.Debug("relay: nats did not answer a ping; keeping held events", "events", len(job.held))
		p.held = append(job.held, p.held...)
	case res.reconnected:
		for _, e := range job.held {
			p.requeue(e)
		}
		r.log.Info("nats reconnected; publishing held events again", "events", len(job.held))
	}
}

// forget drops everything the relay read, so it reads the outbox again
// from the start; leased records come back when their leases end.
func (p *pipeline) forget() {
	p.pending, p.held, p.unheld, p.doomed = nil, nil, nil, nil
	clear(p.busy)
	p.cursor, p.unread, p.more, p.reset = 0, 0, true, false
}

// report publishes the backlog to the metrics and Backlog.
func (r *Relay) report() {
	p := &r.p
	depth := len(p.pending) + len(p.flying) + p.unread
	if r.lease != nil {
		depth = max(p.leaseDepth, len(p.pending)+len(p.flying))
	}
	// The oldest record is first in flight or first pending: both are in
	// (nearly) sequence order, which is commit order.
	var oldest time.Duration
	for _, list := range [][]*entry{p.flying, p.pending} {
		if len(list) > 0 && !list[0].rec.Event.At.IsZero() {
			oldest = max(oldest, r.now().Sub(list[0].rec.Event.At))
		}
	}
	r.depth.Store(int64(depth))
	r.oldest.Store(int64(oldest))
	r.met.SetOutboxDepth(depth)
	r.met.SetOutboxOldest(oldest)
}
