package replicas

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/fakestripe"
	"github.com/agentledger/reconciler/internal/pgtest"
	"github.com/agentledger/reconciler/ledger"
)

// TestReplicaKilledMidResolveTakenOver: two replicas on one PostgreSQL
// database; a few rows left unknown (a timeout reported, the charge made
// in the fake Stripe) are leased by one replica's resolver, whose Stripe
// lookups hang (a proxy holds them); that replica is SIGKILLed while it
// holds the leases. The other replica, running throughout, leaves the rows
// alone until their lease ends (next_check_at, as the dead replica set
// it), then looks them up itself and settles them.
func TestReplicaKilledMidResolveTakenOver(t *testing.T) {
	skipUnlessReplicas(t)
	// Mostly a wait for the lease: alongside TestNATSNodeLost, after the
	// package's other tests.
	t.Parallel()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	bin := sharedBinary(t)
	dbURL := pgtest.Database(t)
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	stream, prefix := "RT_"+strings.ToUpper(run), "rt"+run
	natsJS(t, stream)
	stripe := fakestripe.New(t, fakestripe.Options{})
	proxy := newSearchHold(t, stripe.URL())

	c := newCluster(t, bin, dbURL, stream, prefix, proxy.URL(), 2)
	// A resolver's vendor time is its interval: 5 s for a lookup that
	// hangs leaves ample time to kill its replica while it holds the rows;
	// their lease is that plus 20 s.
	c.resolverIntervalArg = "5s"
	for i := range 2 {
		c.start(i)
	}
	t.Logf("two replicas ready after %s", time.Since(start).Round(time.Millisecond))
	cl := newClient(c.addrs())

	// Fewer rows than a resolver's workers: a pass looks them all up at once.
	const rows = 6
	keys := map[string]string{} // by local id
	for i := range rows {
		body := fmt.Sprintf(`{"run_id":"run_to_%s","tool":"stripe.payment_intents.create","tool_call_id":"call_%d",
			"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd","customer":"cus_%d"}}`, run, i, i)
		code, b, err := cl.api(ctx, i%2, http.MethodPost, "/v1/claims", body)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("claim %d: %d %s %v", i, code, b, err)
		}
		row, err := rowOf(b)
		if err != nil {
			t.Fatal(err)
		}
		charge(stripe, row.MetadataLocalID)
		if code, b, err := cl.api(ctx, i%2, http.MethodPost, "/v1/claims/"+row.Key+"/outcome", `{"kind":"timeout"}`); err != nil || code != http.StatusOK {
			t.Fatalf("outcome %d: %d %s %v", i, code, b, err)
		}
		keys[row.MetadataLocalID] = row.Key
	}

	// The rows are leased by a resolver whose lookups now hang (by two,
	// if their passes split them); the replica holding most dies.
	held := proxy.waitHeld(t, ctx, rows)
	victim, most := -1, 0
	for who, ids := range held {
		var i, gen int
		if _, err := fmt.Sscanf(who, "r%d_g%d", &i, &gen); err != nil {
			t.Fatalf("lookup by %q", who)
		}
		if len(ids) > most {
			victim, most = i, len(ids)
		}
	}
	dead := c.kill(victim)
	killedAt := time.Now()
	proxy.releaseAllBut(dead.id())
	survivor := 1 - victim
	t.Logf("SIGKILLed %s holding %d of the %d rows (%v)", dead.id(), most, rows, held)

	// The leases as the dead replica wrote them.
	leaseEnd := map[string]time.Time{}
	for _, local := range held[dead.id()] {
		code, b, err := cl.api(ctx, survivor, http.MethodGet, "/v1/claims/"+keys[local], "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("get %s: %d %s %v", keys[local], code, b, err)
		}
		row, err := rowOf(b)
		if err != nil {
			t.Fatal(err)
		}
		if !row.NextCheckAt.After(killedAt) {
			t.Fatalf("row %s: next check %s, not after the kill at %s: its holder did not hold it when it died",
				row.Key, row.NextCheckAt.Format(time.RFC3339Nano), killedAt.Format(time.RFC3339Nano))
		}
		leaseEnd[local] = row.NextCheckAt
	}

	// Every row settles: the survivor's resolver found each charge.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		settled := 0
		for _, key := range keys {
			code, b, err := cl.api(ctx, survivor, http.MethodGet, "/v1/claims/"+key, "")
			if err != nil || code != http.StatusOK {
				t.Fatalf("get %s: %d %s %v", key, code, b, err)
			}
			if row, err := rowOf(b); err == nil && row.Status == ledger.StatusSucceeded {
				settled++
			}
		}
		if settled == rows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows succeeded 90s after the kill; lookups %v", settled, rows, proxy.lookups())
		}
	}
	t.Logf("every row settled %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	lookups := proxy.lookups()
	for _, local := range held[dead.id()] {
		var by []string
		took := false
		for _, l := range lookups[local] {
			by = append(by, l.who)
			if l.who == dead.id() {
				if took {
					t.Errorf("row %s: the dead replica looked it up after the survivor", keys[local])
				}
				continue
			}
			if !took && l.at.Before(leaseEnd[local]) {
				t.Errorf("row %s: looked up by %s at %s, inside the dead replica's lease (until %s)",
					keys[local], l.who, l.at.Format(time.RFC3339Nano), leaseEnd[local].Format(time.RFC3339Nano))
			}
			took = true
		}
		if !took {
			t.Errorf("row %s: never looked up by the surviving replica (lookups by %v)", keys[local], by)
		}
	}
	t.Logf("the survivor took over %d leased rows once their lease ended, %s after the kill; test body %s",
		len(held[dead.id()]), time.Since(killedAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// searchHold is a proxy in front of the fake Stripe that holds every
// PaymentIntent search (a resolver's lookup) until its caller's key is
// released, or the caller goes away, and records who looked up what, when.
type searchHold struct {
	srv *httptest.Server

	mu sync.Mutex
	// open lets every caller's lookups through but except's.
	open    bool
	except  string
	changed chan struct{} // closed and replaced when open changes
	seen    map[string][]lookup
	held    map[string]map[string]bool // caller → local ids held now
	heldAt  time.Time                  // when a lookup was last held
}

type lookup struct {
	who string
	at  time.Time
}

func newSearchHold(t *testing.T, target string) *searchHold {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	h := &searchHold{changed: make(chan struct{}), seen: map[string][]lookup{}, held: map[string]map[string]bool{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := searchQuery.FindStringSubmatch(r.URL.Query().Get("query"))
		if r.URL.Path != "/v1/payment_intents/search" || m == nil {
			rp.ServeHTTP(w, r)
			return
		}
		who := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "sk_test_")
		local := m[1]
		h.mu.Lock()
		h.seen[local] = append(h.seen[local], lookup{who: who, at: time.Now()})
		if h.held[who] == nil {
			h.held[who] = map[string]bool{}
		}
		h.held[who][local] = true
		h.heldAt = time.Now()
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			delete(h.held[who], local)
			h.mu.Unlock()
		}()
		for {
			h.mu.Lock()
			ok, changed := h.open && who != h.except, h.changed
			h.mu.Unlock()
			if ok {
				rp.ServeHTTP(w, r)
				return
			}
			select {
			case <-changed:
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *searchHold) URL() string { return h.srv.URL }

// waitHeld waits until lookups are held: all n rows', or those of one
// resolver pass at least (no new one for 700 ms; a pass sends its lookups
// within a few hundred, paced at Stripe's search rate, while a held one
// lasts the resolver's vendor time), and returns them by caller.
func (h *searchHold) waitHeld(t *testing.T, ctx context.Context, n int) map[string][]string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		out := map[string][]string{}
		total := 0
		for who, ids := range h.held {
			for id := range ids {
				out[who] = append(out[who], id)
				total++
			}
		}
		quiet := time.Since(h.heldAt) > 700*time.Millisecond
		h.mu.Unlock()
		if total >= n || total > 0 && quiet {
			return out
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			t.Fatalf("%d of %d rows' lookups held after 60s: %v", total, n, out)
		}
	}
}

// releaseAllBut lets every caller's lookups through but one's.
func (h *searchHold) releaseAllBut(who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open, h.except = true, who
	close(h.changed)
	h.changed = make(chan struct{})
}

// lookups are every search seen, by local id, in arrival order.
func (h *searchHold) lookups() map[string][]lookup {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]lookup{}
	for k, v := range h.seen {
		out[k] = append([]lookup(nil), v...)
	}
	return out
}
