package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// dropper is a proxy in front of the API that drops the connection of the
// first n outcome reports: before forwarding them (the report is lost) or
// after (the report is applied, its answer is lost). It records each body.
type dropper struct {
	srv    *httptest.Server
	mu     sync.Mutex
	n      int
	after  bool
	bodies []string
}

func newDropper(t *testing.T, target string, n int, after bool) *dropper {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	d := &dropper{n: n, after: after}
	proxy := httputil.NewSingleHostReverseProxy(u)
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/outcome") {
			proxy.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		d.mu.Lock()
		d.bodies = append(d.bodies, string(body))
		drop := d.n > 0
		d.n--
		d.mu.Unlock()
		if !drop {
			proxy.ServeHTTP(w, r)
			return
		}
		if d.after {
			proxy.ServeHTTP(httptest.NewRecorder(), r) // applied; the answer goes nowhere
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *dropper) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.bodies...)
}

// TestReportRetried: a lost outcome report is resent with the same body,
// whether the loss came before or after the API applied it.
func TestReportRetried(t *testing.T) {
	tests := []struct {
		name  string
		drops int
		after bool
	}{
		{name: "connection dropped before the api", drops: 2},
		{name: "connection dropped after the api applied it", drops: 1, after: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			v := newFakeStripe(t)
			p := newDropper(t, e.srv.URL, tt.drops, tt.after)
			c := newClient(t, p.srv.URL, tokenAcme)
			out, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0)))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if got := e.row(t, out.Key); got.Status != ledger.StatusSucceeded || got.UpstreamReceiptID != "pi_1" {
				t.Errorf("row = %s %s, want succeeded pi_1", got.Status, got.UpstreamReceiptID)
			}
			bodies := p.seen()
			if len(bodies) != tt.drops+1 {
				t.Fatalf("reports sent = %d, want %d", len(bodies), tt.drops+1)
			}
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("resent report %s differs from the first %s", b, bodies[0])
				}
			}
			// The report names the attempt it is for, so a late copy cannot
			// end a later attempt's lease.
			if !strings.Contains(bodies[0], `"attempt":1`) {
				t.Errorf("report %s does not name attempt 1", bodies[0])
			}
			if got := v.ObjectCount(); got != 1 {
				t.Errorf("vendor objects = %d, want 1", got)
			}
		})
	}
}

// TestReportLostForGood: when every report is lost, Do says so and the row
// stays pending under its lease; a second Do of the intent waits instead of
// calling again, under the same key or a new one.
func TestReportLostForGood(t *testing.T) {
	e := newEnv(t)
	v := newFakeStripe(t)
	p := newDropper(t, e.srv.URL, 1000, false)
	c := newClient(t, p.srv.URL, tokenAcme)
	out, err := c.Do(context.Background(), chargeClaim(1050), v.httpCall(keyedHTTP(0)))
	if !errors.Is(err, client.ErrReportFailed) || !errors.Is(err, client.ErrUnsettled) {
		t.Fatalf("Do error = %v, want report failed and unsettled", err)
	}
	if got := e.row(t, out.Key).Status; got != ledger.StatusPending {
		t.Errorf("row status = %s, want pending", got)
	}
	// The second Do would wait out the 15 min lease; give it a moment only.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	second, err := c.Do(ctx, chargeClaim(1050), v.httpCall(keyedHTTP(0)))
	if !errors.Is(err, client.ErrUnsettled) || second.Decision != ledger.DecisionWait || second.Key != out.Key {
		t.Errorf("second Do = %s %s, %v; want wait on %s, unsettled", second.Decision, second.Key, err, out.Key)
	}
	if second.Called {
		t.Error("second Do called the vendor while the first attempt's row was pending")
	}
	if got := len(v.received()); got != 1 {
		t.Errorf("vendor posts = %d, want 1", got)
	}
}

// TestReportResult: a result reported with the outcome comes back,
// verbatim, with the row and with a replaying claim.
func TestReportResult(t *testing.T) {
	ctx := context.Background()
	c := newEnv(t).client(t)
	const result = `{"content":[{"type":"text","text":"pi_1 for 10.50 USD"}]}`
	resp, err := c.Claim(ctx, chargeClaim(1050))
	if err != nil {
		t.Fatal(err)
	}
	row, err := c.ReportOutcome(ctx, resp.Key(), client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: result, Attempt: 1})
	if err != nil || row.Result != result {
		t.Fatalf("ReportOutcome = %q, %v", row.Result, err)
	}
	again, err := c.Claim(ctx, chargeClaim(1050))
	if err != nil || again.Decision != ledger.DecisionReplay || again.Row.Result != result {
		t.Fatalf("replay = %+v, %v", again, err)
	}
	big := `"` + strings.Repeat("r", ledger.MaxResultLen) + `"`
	other, err := c.Claim(ctx, chargeClaim(2000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReportOutcome(ctx, other.Key(), client.OutcomeReport{Kind: ledger.OutcomeResponse, HTTPStatus: 200, Result: big}); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("a result past the cap = %v, want ErrInvalidInput", err)
	}
}
