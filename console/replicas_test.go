package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/console"
	"github.com/agentledger/reconciler/ledger"
)

// replica is a second console over f's store and API, as another replica
// behind a load balancer: its own process memory, its own server.
func (f *fixture) replica(mods ...fixtureOption) *fixture {
	f.t.Helper()
	o := f.opts
	for _, fn := range mods {
		fn(&o)
	}
	c, err := console.New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	ch, ah := c.Handler(), f.api.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/console") {
			ch.ServeHTTP(w, r)
			return
		}
		ah.ServeHTTP(w, r)
	}))
	f.t.Cleanup(func() { c.Close(); hs.Close() })
	r := *f
	r.console, r.srv, r.opts = c, hs, o
	return &r
}

// on is the browser b (its cookies) talking to replica r.
func (b *browser) on(r *fixture) *browser {
	return &browser{t: b.t, f: r, c: b.c}
}

// TestSessionsAcrossReplicas: a sign-in at one replica is valid at another
// that shares the store and the session key, forms there take its CSRF
// token, and a sign-out at either refuses the cookie at both; a replica
// with another key, or none, does not take it.
func TestSessionsAcrossReplicas(t *testing.T) {
	a := newFixture(t)
	b := a.replica()
	other := a.replica(func(o *console.Options) { o.SessionKey = "another-replica-key-0123456789abcdef" })
	keyless := a.replica(func(o *console.Options) { o.SessionKey = "" })

	alice := a.browser()
	alice.signIn(adminToken, "alice")
	cookies := alice.c.Jar.Cookies(mustURL(t, a.srv.URL+"/console/"))
	atB := alice.on(b)
	if got := atB.get("/console/attention"); got.Status != http.StatusOK || !strings.Contains(got.Body, "alice") {
		t.Fatalf("replica B with A's cookie: %d %s", got.Status, got.Location)
	}
	// An action at B, with the CSRF token of B's page, is alice's.
	got := atB.form("/console/tools?tenant=acme", "/console/actions/freeze",
		url.Values{"tenant": {"acme"}, "target": {"write_ledger"}, "note": {"incident 7"}})
	mustContain(t, "freeze at replica B", got.Body, "Freeze write_ledger: done", "frozen by alice")
	for _, r := range []*fixture{other, keyless} {
		if got := alice.on(r).get("/console/attention"); got.Status != http.StatusSeeOther || got.Location != "/console/signin" {
			t.Fatalf("a replica with another key took the cookie: %d %s", got.Status, got.Location)
		}
	}

	// Sign-out at B; A's copy of the cookie is refused at A too.
	atB.form("/console/attention", "/console/signout", url.Values{})
	replay := a.browser()
	replay.c.Jar.SetCookies(mustURL(t, a.srv.URL+"/console/"), cookies)
	for name, r := range map[string]*fixture{"A": a, "B": b} {
		if got := replay.on(r).get("/console/attention"); got.Status != http.StatusSeeOther || got.Location != "/console/signin" {
			t.Fatalf("replica %s after sign-out at B: %d %s", name, got.Status, got.Location)
		}
	}
	revoked := 0
	for _, ck := range cookies {
		if ck.Name == "reconciler_console" {
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("session cookies: %d, want 1", revoked)
	}
}

// TestSessionCookieIsSealed: the cookie holds no token in the clear, and a
// cookie changed by one byte, or expired, is refused.
func TestSessionCookieIsSealed(t *testing.T) {
	f := newFixture(t)
	b := f.browser()
	b.signIn(adminToken, "alice")
	u := mustURL(t, f.srv.URL+"/console/")
	var value string
	for _, ck := range b.c.Jar.Cookies(u) {
		if ck.Name == "reconciler_console" {
			value = ck.Value
		}
	}
	if value == "" || strings.Contains(value, adminToken) || strings.Contains(value, "alice") {
		t.Fatalf("session cookie %q: want a sealed value", value)
	}
	flipped := []byte(value)
	flipped[len(flipped)/2] ^= 1
	if flipped[len(flipped)/2] == '`' { // keep it base64url
		flipped[len(flipped)/2] = 'A'
	}
	forged := f.browser()
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "reconciler_console", Value: string(flipped), Path: "/console"}})
	if got := forged.get("/console/attention"); got.Status != http.StatusSeeOther {
		t.Fatalf("a changed cookie: %d, want a redirect to sign in", got.Status)
	}
	f.clock.Advance(console.DefaultSessionTTL + time.Second)
	if got := b.get("/console/attention"); got.Status != http.StatusSeeOther {
		t.Fatalf("an expired cookie: %d, want a redirect to sign in", got.Status)
	}
}

// failingRevocations is a store whose sign-out record cannot be written.
type failingRevocations struct{ ledger.Revocations }

func (failingRevocations) RevokeSession(context.Context, string, time.Time, time.Time) error {
	return ledger.ErrUnavailable
}

// TestSignOutFailsLoudly: a sign-out the store cannot record is not
// reported as done (the cookie would stay valid at other replicas).
func TestSignOutFailsLoudly(t *testing.T) {
	f := newFixture(t, func(o *console.Options) { o.Revocations = failingRevocations{o.Revocations} })
	b := f.browser()
	b.signIn(adminToken, "alice")
	b.get("/console/attention")
	got := b.post("/console/signout", url.Values{"csrf": {b.csrf()}})
	if got.Status != http.StatusServiceUnavailable {
		t.Fatalf("sign-out with the store down: %d, want 503", got.Status)
	}
}
