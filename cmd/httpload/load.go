package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxErrorSamples is how many distinct error texts a phase keeps.
const maxErrorSamples = 5

// newClient returns an HTTP/1.1 client that keeps one connection per worker
// alive: MaxIdleConnsPerHost = MaxConnsPerHost = conns, so no request ever
// waits for or opens an extra connection after the first round.
func newClient(conns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// worker is one connection's sender: it owns a body buffer and its
// latencies, so the hot path shares nothing with other workers.
type worker struct {
	id     int
	client *http.Client
	base   string
	token  string
	buf    bytes.Buffer
	// stripeSig, when set, is sent as the Stripe-Signature header.
	stripeSig string
	// idemPrefix, when set, starts an Idempotency-Key sent with every
	// request, whose value ends with idemN, counted per request.
	idemPrefix string
	idemN      int
	// next is the webhook prepared for the next iteration (see phaseSpec.prep).
	next delivery
}

// post sends body to path and fails unless the answer has status want;
// with out non-nil the answer is decoded into it. The answer is always read
// to the end so the connection is reused; a wrong status quotes its start.
func (w *worker) post(ctx context.Context, path string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	if w.stripeSig != "" {
		req.Header.Set("Stripe-Signature", w.stripeSig)
	}
	if w.idemPrefix != "" {
		w.idemN++
		req.Header.Set("Idempotency-Key", w.idemPrefix+strconv.Itoa(w.idemN))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", route(path), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("post %s: status %d, want %d: %s", route(path), resp.StatusCode, want, bytes.TrimSpace(head))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("post %s: decode answer: %w", route(path), err)
		}
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("post %s: read answer: %w", route(path), err)
	}
	return nil
}

// route names a path without its key, so error samples group by route.
func route(path string) string {
	if strings.HasPrefix(path, "/v1/claims/") && strings.HasSuffix(path, "/outcome") {
		return "/v1/claims/{key}/outcome"
	}
	if strings.HasPrefix(path, "/webhooks/") && strings.Count(path, "/") == 3 {
		return path[:strings.LastIndexByte(path, '/')] + "/{endpoint}"
	}
	return path
}

// claimBody writes a claim that no other request of the run repeats: the
// run_id carries the phase, worker and sequence, so every claim mints a new
// key and inserts a row.
func (w *worker) claimBody(phase string, seq int) []byte {
	w.buf.Reset()
	w.buf.WriteString(`{"run_id":"`)
	w.buf.WriteString(phase)
	w.buf.WriteString("-w")
	w.buf.WriteString(strconv.Itoa(w.id))
	w.buf.WriteString("-")
	w.buf.WriteString(strconv.Itoa(seq))
	w.buf.WriteString(`","tool":"stripe.create_payment_intent","tool_call_id":"call_`)
	w.buf.WriteString(strconv.Itoa(seq))
	w.buf.WriteString(`","vendor":"stripe","tool_class":"write_idempotent",` +
		`"intent":{"amount":1050,"currency":"usd","customer":"cus_4QFJOjw2pOmAGJ"}}`)
	return w.buf.Bytes()
}

// iteration is one unit of load (a claim, or a claim and its outcome).
// phase is the spec's name, which makes run_ids unique across phases and
// rounds.
type iteration func(ctx context.Context, w *worker, phase string, seq int) error

// errStop, from a phaseSpec.prep, ends the worker without counting an
// error (the webhook row pool ran out).
var errStop = errors.New("stop")

// phaseSpec is one phase (or one round of it): a target, its client and
// its timing.
type phaseSpec struct {
	name     string // also the run_id prefix, so it must differ per round
	base     string
	token    string
	client   *http.Client // shared by the rounds of a target, so connections stay warm
	conns    int
	warmup   time.Duration
	duration time.Duration
	limit    rate.Limit // 0: unlimited
	now      func() time.Time
	iter     iteration
	// idemKey sends an Idempotency-Key with each request, a new value
	// each (issue 34: what the header costs a claim).
	idemKey bool
	// prep, when set, runs before each iteration outside its timing (the
	// client signing a webhook, which is not the server's cost). errStop
	// ends the worker; another error counts as a failed iteration.
	prep iteration
}

// phaseResult is what one phase measured; the rounds of a target add up.
type phaseResult struct {
	latencies []time.Duration // measured window only; sorted by targetResult
	errors    int64
	samples   []string
	window    time.Duration // measured time
	spans     []span        // when it was measured: one per round
	done      int           // ops completed, warm-up included
	// wall is the phase's time, warm-up included; cpu is the process's CPU
	// time over it and runQueue its threads' time waiting for a CPU. cpuOK
	// and rqOK say whether the platform could tell.
	wall, cpu, runQueue time.Duration
	cpuOK, rqOK         bool
}

// add accumulates another round of the same target.
func (p *phaseResult) add(q phaseResult) {
	first := p.wall == 0
	p.latencies = append(p.latencies, q.latencies...)
	p.errors += q.errors
	for _, s := range q.samples {
		if len(p.samples) < maxErrorSamples && !slices.Contains(p.samples, s) {
			p.samples = append(p.samples, s)
		}
	}
	p.window += q.window
	p.spans = append(p.spans, q.spans...)
	p.done += q.done
	p.wall += q.wall
	p.cpu += q.cpu
	p.runQueue += q.runQueue
	p.cpuOK = q.cpuOK && (first || p.cpuOK)
	p.rqOK = q.rqOK && (first || p.rqOK)
}

// workerResult is one worker's share of a phase.
type workerResult struct {
	done    int
	lat     []time.Duration
	errors  int64
	samples []string
}

// drive runs spec.conns workers, each looping over spec.iter until
// warmup + duration has passed or ctx is done. Only iterations started after
// the warm-up are timed; every error counts.
func drive(ctx context.Context, spec phaseSpec) phaseResult {
	var lim *rate.Limiter
	if spec.limit > 0 {
		// A burst of one connection's worth keeps the start from spiking.
		lim = rate.NewLimiter(spec.limit, max(1, min(spec.conns, int(spec.limit))))
	}
	cpu0, cpuOK := cpuTime()
	rq0, rqOK := runQueueWait()
	start := spec.now()
	warmEnd := start.Add(spec.warmup)
	stopAt := warmEnd.Add(spec.duration)
	// Waiting on the limiter must end at stopAt; requests themselves use the
	// parent ctx so one in flight at stopAt finishes (bounded by the client's
	// timeout) rather than being counted as an error.
	waitCtx, cancel := context.WithDeadline(ctx, stopAt)
	defer cancel()

	results := make([]workerResult, spec.conns)
	var wg sync.WaitGroup
	for i := range spec.conns {
		wg.Add(1)
		go func() { // owner: drive; exits at stopAt or when ctx is done
			defer wg.Done()
			w := &worker{id: i, client: spec.client, base: spec.base, token: spec.token}
			if spec.idemKey {
				// Unique per run, phase and worker; 16 or more characters.
				w.idemPrefix = fmt.Sprintf("httpload-%x-%s-%d-", start.UnixNano(), spec.name, i)
			}
			res := &results[i]
			for seq := 0; ; seq++ {
				if ctx.Err() != nil || !spec.now().Before(stopAt) {
					return
				}
				if lim != nil {
					if err := lim.Wait(waitCtx); err != nil {
						return
					}
				}
				var err error
				if spec.prep != nil {
					err = spec.prep(ctx, w, spec.name, seq)
					if errors.Is(err, errStop) {
						return
					}
				}
				t0 := spec.now()
				if err == nil {
					err = spec.iter(ctx, w, spec.name, seq)
				}
				d := spec.now().Sub(t0)
				if err != nil {
					res.errors++
					if len(res.samples) < maxErrorSamples {
						res.samples = append(res.samples, err.Error())
					}
					continue
				}
				res.done++
				if !t0.Before(warmEnd) {
					res.lat = append(res.lat, d)
				}
			}
		}()
	}
	wg.Wait()
	end := spec.now()

	out := phaseResult{wall: end.Sub(start)}
	if cpu1, ok := cpuTime(); ok && cpuOK {
		out.cpu, out.cpuOK = cpu1-cpu0, true
	}
	if rq1, ok := runQueueWait(); ok && rqOK {
		out.runQueue, out.rqOK = max(rq1-rq0, 0), true
	}
	for _, r := range results {
		out.latencies = append(out.latencies, r.lat...)
		out.errors += r.errors
		out.done += r.done
		for _, s := range r.samples {
			if len(out.samples) < maxErrorSamples && !slices.Contains(out.samples, s) {
				out.samples = append(out.samples, s)
			}
		}
	}
	// The window is the measured duration, or less when ctx ended early.
	out.window = min(spec.duration, max(end.Sub(warmEnd), 0))
	out.spans = []span{{from: warmEnd, to: warmEnd.Add(out.window)}}
	return out
}

// span is a measured window of time.
type span struct{ from, to time.Time }

func (s span) contains(t time.Time) bool { return !t.Before(s.from) && t.Before(s.to) }

// percentile returns the q-quantile (0 < q ≤ 1) of sorted by the
// nearest-rank method; 0 for an empty slice.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
