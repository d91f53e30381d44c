package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentledger/reconciler/api"
	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/paging"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
)

// The profiled-vendor drills run the generic resolver (resolver.Profiled)
// on the shipped presets against a fake Resend (a key in Idempotency-Key,
// kept 24 h, no lookup) and a fake Postmark (no key, a lookup by metadata
// with index lag): the four ways a write to a vendor with a profile ends.
// The agent runtime is the Go SDK (client.Do with client.Transport).

// The profiled drills' sabotages.
const (
	SabotageReplayFreshKey = "replay-fresh-key" // the resolver's replay sends a new key
	SabotageNoMetadata     = "no-metadata"      // the call leaves the local id out of the vendor's metadata
	SabotageFirstMatchWins = "first-match-wins" // a lookup with two matches settles on the first
)

// drillVendorKey is the fake vendors' API key (the profiles' api_key).
const drillVendorKey = "drill-vendor-api-key"

type profiledDrill struct {
	name, summary, sabotage string
	run                     func(ctx context.Context, e *pEnv) Result
}

var profiledDrills = []profiledDrill{
	{"profiled-slow-success-replay", "Resend commits, the answer is lost; the resolver replays with the same vendor key: one email",
		SabotageReplayFreshKey, profiledSlowSuccess},
	{"profiled-lookup-finds-committed", "Postmark sent it, the answer was lost; the lookup by local id settles it, no resend",
		SabotageNoMetadata, profiledLookupFinds},
	{"profiled-lookup-duplicate-pages", "two Postmark emails carry one local id; the resolver pages at once, never resends",
		SabotageFirstMatchWins, profiledDuplicatePages},
	{"profiled-window-closed-pages-once", "a Resend row outlives its 24 h window unknown; several passes page once",
		SabotageForgetPaged, profiledWindowPagesOnce},
}

// ProfiledNames lists the profiled-vendor drills in the order RunProfiled
// runs them.
func ProfiledNames() []string {
	out := make([]string, len(profiledDrills))
	for i, d := range profiledDrills {
		out[i] = d.name
	}
	return out
}

// ProfiledSabotage is the sabotage that must make the named profiled drill
// fail ("" for an unknown name).
func ProfiledSabotage(name string) string {
	for _, d := range profiledDrills {
		if d.name == name {
			return d.sabotage
		}
	}
	return ""
}

// RunProfiled runs the profiled-vendor drills (o.Only selects; o.Runtime
// must be the Go SDK's), each in a fresh world: a bbolt ledger in a new
// temporary directory, the real API on a loopback server, the real
// resolver with the shipped resend and postmark presets pointed at fakes,
// and a clock the drill moves.
func RunProfiled(ctx context.Context, o Options) ([]Result, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Runtime != "" && o.Runtime != RuntimeGo {
		return nil, fmt.Errorf("drills: the profiled-vendor drills run with the Go runtime only")
	}
	var out []Result
	for _, d := range profiledDrills {
		if len(o.Only) > 0 && !slices.Contains(o.Only, d.name) {
			continue
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, o.Timeout)
		e, err := newPEnv(dctx, o)
		var r Result
		if err != nil {
			r = Result{Detail: "set-up: " + err.Error()}
		} else {
			r = d.run(dctx, e)
			e.close()
		}
		cancel()
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		r.Name, r.Runtime, r.Seconds = d.name, RuntimeGo, time.Since(start).Seconds()
		out = append(out, r)
	}
	return out, nil
}

// pEnv is one profiled drill's world.
type pEnv struct {
	dir      string
	log      *slog.Logger
	sabotage string
	clock    *clock
	store    *bolt.Store
	apiSrv   *httptest.Server
	ledger   *client.Client
	resend   *mailResend
	postmark *mailPostmark
	profiles map[string]vendors.Profile
	pager    *countingPager
	res      *resolver.Resolver
}

func newPEnv(ctx context.Context, o Options) (_ *pEnv, err error) {
	dir, err := os.MkdirTemp(o.TempDir, "reconciler-vendor-drill-*")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	e := &pEnv{dir: dir, log: o.Logger, sabotage: o.Sabotage, clock: &clock{}, pager: &countingPager{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.store, err = bolt.Open(filepath.Join(dir, "reconciler.db"), bolt.Options{Policy: ledger.DefaultPolicy(), Logger: e.log}); err != nil {
		return e, fmt.Errorf("open store: %w", err)
	}
	e.resend, e.postmark = newMailResend(e.clock.Now), newMailPostmark(e.clock.Now)
	doc := fmt.Sprintf(`vendors:
  - {name: resend, preset: resend, api_key: %s, api_base: %q}
  - {name: postmark, preset: postmark, api_key: %s, api_base: %q}
`, drillVendorKey, e.resend.srv.URL, drillVendorKey, e.postmark.srv.URL)
	ps, err := vendors.Parse("drill.yaml", []byte(doc), vendors.Options{})
	if err != nil {
		return e, err
	}
	e.profiles = map[string]vendors.Profile{}
	lookups := map[string]resolver.Lookup{}
	for _, p := range ps {
		e.profiles[p.Name] = p
		lk, err := resolver.NewProfiled(p, nil)
		if err != nil {
			return e, err
		}
		lookups[p.Name] = sabotagedLookup{Profiled: lk, sabotage: o.Sabotage}
	}
	srv, err := api.New(api.Options{
		Store:  e.store,
		Tokens: map[string]string{tenantToken: tenant},
		Policy: ledger.DefaultPolicy(),
		ReplayWindow: func(v string, _ *ledger.Request) time.Duration {
			return e.profiles[v].EffectiveWindow()
		},
		VendorKey: func(v, key string) string { return e.profiles[v].VendorKey(key) },
		Logger:    e.log,
		Now:       e.clock.Now,
	})
	if err != nil {
		return e, err
	}
	e.apiSrv = httptest.NewServer(srv.Handler())
	if e.ledger, err = client.New(e.apiSrv.URL, tenantToken, client.WithLogger(e.log), client.WithCallTimeout(300*time.Millisecond)); err != nil {
		return e, err
	}
	var store resolver.Store = e.store
	if o.Sabotage == SabotageForgetPaged {
		store = forgetPaged{store}
	}
	e.res = resolver.New(store, resolver.Options{
		Lookups: lookups, Pager: e.pager, Interval: time.Minute, MinBackoff: time.Minute, MaxBackoff: time.Hour,
		PageTimeout: 5 * time.Second, Now: e.clock.Now, Logger: e.log,
	})
	return e, nil
}

func (e *pEnv) close() {
	if e.apiSrv != nil {
		e.apiSrv.CloseClientConnections()
		e.apiSrv.Close()
	}
	if e.resend != nil {
		e.resend.close()
	}
	if e.postmark != nil {
		e.postmark.close()
	}
	if e.store != nil {
		_ = e.store.Close()
	}
	_ = os.RemoveAll(e.dir)
}

// passes moves the clock by d, then runs one resolver pass, n times.
func (e *pEnv) passes(ctx context.Context, c *checker, n int, d time.Duration) {
	for range n {
		e.clock.Advance(d)
		if err := e.res.Pass(ctx); err != nil {
			c.expect(false, "resolver pass: %v", err)
		}
	}
}

// sabotagedLookup is the profile's lookup, or a sabotaged one.
type sabotagedLookup struct {
	*resolver.Profiled
	sabotage string
}

func (l sabotagedLookup) Replay(ctx context.Context, row ledger.Row) (resolver.Finding, error) {
	if l.sabotage == SabotageReplayFreshKey {
		row.VendorKey = "fresh-" + row.Key[:16]
	}
	return l.Profiled.Replay(ctx, row)
}

func (l sabotagedLookup) Find(ctx context.Context, row ledger.Row) (resolver.Finding, error) {
	f, err := l.Profiled.Find(ctx, row)
	if l.sabotage == SabotageFirstMatchWins && f.Duplicate {
		f = resolver.Finding{Found: true, Status: ledger.StatusSucceeded, Detail: "first match"}
	}
	return f, err
}

type countingPager struct {
	mu       sync.Mutex
	triggers []string
}

func (p *countingPager) Trigger(_ context.Context, pg paging.Page) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.triggers = append(p.triggers, pg.DedupKey)
	return nil
}

func (p *countingPager) Resolve(context.Context, string) error { return nil }

func (p *countingPager) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.triggers)
}

// errLost is a vendor call whose answer never came back.
var errLost = errors.New("connection reset after the request was sent")

const resendBody = `{"from":"billing@example.com","to":["ana@example.com"],"subject":"Invoice 42","html":"<p>Your invoice</p>"}`

// sendResend is the runtime's Resend call: the vendor key in
// Idempotency-Key by client.Transport (ctx carries it), the body as in the
// claim's envelope.
func sendResend(base string) client.CallFunc {
	hc := &http.Client{Transport: &client.Transport{Header: "Idempotency-Key"}}
	return func(ctx context.Context, _, _ string) (client.Result, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/emails", strings.NewReader(resendBody))
		if err != nil {
			return client.Result{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+drillVendorKey)
		resp, err := hc.Do(req)
		if err != nil {
			return client.Result{}, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		id := ""
		if _, rest, ok := strings.Cut(string(b), `"id":"`); ok {
			id, _, _ = strings.Cut(rest, `"`)
		}
		return client.ResultFromResponse(resp, id), nil
	}
}

func resendClaim(run string) client.ClaimRequest {
	return client.ClaimRequest{RunID: run, Tool: "email.send", Vendor: "resend", ToolClass: ledger.ClassWriteIdempotent,
		Intent:  map[string]any{"to": "ana@example.com", "template": "invoice", "invoice": 42},
		Request: &ledger.Request{Method: "POST", Path: "/emails", ContentType: "application/json", Body: resendBody}}
}

// sendPostmark sends one email per copies, the local id in Metadata
// (unless sabotaged), and loses the last answer.
func sendPostmark(base string, copies int, withLocalID bool) client.CallFunc {
	return func(ctx context.Context, _, localID string) (client.Result, error) {
		meta := `,"Metadata":{"local_id":"` + localID + `"}`
		if !withLocalID {
			meta = ""
		}
		for range copies {
			req, err := http.NewRequestWithContext(ctx, "POST", base+"/email",
				strings.NewReader(`{"From":"billing@example.com","To":"ana@example.com","Subject":"Invoice 42","TextBody":"hi"`+meta+`}`))
			if err != nil {
				return client.Result{}, err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Postmark-Server-Token", drillVendorKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return client.Result{}, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return client.Result{}, errLost
	}
}

func postmarkClaim(run string) client.ClaimRequest {
	return client.ClaimRequest{RunID: run, Tool: "email.send", Vendor: "postmark", ToolClass: ledger.ClassWriteLedger,
		Intent: map[string]any{"to": "ana@example.com", "template": "invoice", "invoice": 42}}
}

// 1. Resend commits the email, then holds the answer past the runtime's
// call timeout: the row is unknown. Resend has no lookup by tag, so the
// resolver replays the stored request with the same vendor key inside the
// 24 h window: Resend answers the first email's id. One email.
func profiledSlowSuccess(ctx context.Context, e *pEnv) Result {
	r, c := Result{Expected: 1}, &checker{}
	e.resend.mu.Lock()
	e.resend.hang = 1
	e.resend.mu.Unlock()
	out, err := e.ledger.Do(ctx, resendClaim("run_v1"), sendResend(e.resend.srv.URL))
	c.expect(errors.Is(err, client.ErrUnsettled) && out.Row.Status == ledger.StatusUnknown,
		"a call past its timeout: %s %v, want unknown", out.Row.Status, err)
	c.expect(out.VendorKey != "", "the claim gave no vendor_key")
	e.passes(ctx, c, 2, 2*time.Minute)
	row, err := e.ledger.Get(ctx, out.Key)
	c.expect(err == nil && row.Status == ledger.StatusSucceeded && row.UpstreamReceiptID != "",
		"row %s receipt %q (%v), want succeeded through the replay", row.Status, row.UpstreamReceiptID, err)
	c.expect(e.pager.count() == 0, "%d pages, want none", e.pager.count())
	r.SideEffects = e.resend.sent()
	c.expect(r.SideEffects == r.Expected, "Resend sent %d emails, want %d", r.SideEffects, r.Expected)
	return c.result(r)
}

// 2. Postmark (no key, so never a replay) sent the email and the answer
// was lost. A lookup younger than min_age proves nothing; after it, the
// lookup by the local id in Metadata finds the message and settles the
// row. No resend, no page.
func profiledLookupFinds(ctx context.Context, e *pEnv) Result {
	r, c := Result{Expected: 1}, &checker{}
	out, err := e.ledger.Do(ctx, postmarkClaim("run_v2"), sendPostmark(e.postmark.srv.URL, 1, e.sabotage != SabotageNoMetadata))
	c.expect(errors.Is(err, client.ErrUnsettled), "a lost answer: %v, want unsettled", err)
	e.passes(ctx, c, 1, time.Minute)
	row, _ := e.ledger.Get(ctx, out.Key)
	c.expect(row.Status == ledger.StatusUnknown && e.pager.count() == 0, "before min_age: %s, %d pages; want unknown, none", row.Status, e.pager.count())
	e.passes(ctx, c, 2, 5*time.Minute)
	row, err = e.ledger.Get(ctx, out.Key)
	c.expect(err == nil && row.Status == ledger.StatusSucceeded && row.UpstreamReceiptID != "",
		"row %s receipt %q (%v), want succeeded by the lookup", row.Status, row.UpstreamReceiptID, err)
	c.expect(e.pager.count() == 0, "%d pages, want none", e.pager.count())
	r.SideEffects = e.postmark.sent()
	c.expect(r.SideEffects == r.Expected, "Postmark sent %d emails, want %d", r.SideEffects, r.Expected)
	return c.result(r)
}

// 3. A retry layer inside the call sent the email twice: two messages
// carry the local id. The duplicate already happened: the resolver pages
// at once (before min_age: a match needs no lag) and once, and the row
// stays unknown.
func profiledDuplicatePages(ctx context.Context, e *pEnv) Result {
	r, c := Result{Expected: 2}, &checker{}
	out, err := e.ledger.Do(ctx, postmarkClaim("run_v3"), sendPostmark(e.postmark.srv.URL, 2, true))
	c.expect(errors.Is(err, client.ErrUnsettled), "a lost answer: %v, want unsettled", err)
	e.passes(ctx, c, 3, 3*time.Minute)
	row, err := e.ledger.Get(ctx, out.Key)
	c.expect(err == nil && row.Status == ledger.StatusUnknown && !row.PagedAt.IsZero(),
		"row %s paged_at %v (%v), want unknown and paged", row.Status, row.PagedAt, err)
	c.expect(e.pager.count() == 1, "%d pages in 3 passes, want 1", e.pager.count())
	r.SideEffects = e.postmark.sent()
	c.expect(r.SideEffects == r.Expected, "Postmark sent %d emails, want the %d of the call, none more", r.SideEffects, r.Expected)
	return c.result(r)
}

// 4. The call never reached Resend, and nobody looked for 25 hours: the
// 24 h window is closed, so no replay (it would be a new email). The
// resolver passes several times: one page.
func profiledWindowPagesOnce(ctx context.Context, e *pEnv) Result {
	r, c := Result{Expected: 0}, &checker{}
	out, err := e.ledger.Do(ctx, resendClaim("run_v4"), func(context.Context, string, string) (client.Result, error) {
		return client.Result{}, errLost
	})
	c.expect(errors.Is(err, client.ErrUnsettled), "a dropped call: %v, want unsettled", err)
	e.clock.Advance(25 * time.Hour)
	e.passes(ctx, c, 4, 2*time.Hour)
	row, err := e.ledger.Get(ctx, out.Key)
	c.expect(err == nil && row.Status == ledger.StatusUnknown && !row.PagedAt.IsZero(),
		"row %s paged_at %v (%v), want unknown and paged", row.Status, row.PagedAt, err)
	c.expect(e.pager.count() == 1, "%d pages in 4 passes, want 1", e.pager.count())
	e.resend.mu.Lock()
	posts := e.resend.posts
	e.resend.mu.Unlock()
	c.expect(posts == 0, "Resend got %d posts after its window, want none", posts)
	r.SideEffects = e.resend.sent()
	return c.result(r)
}
