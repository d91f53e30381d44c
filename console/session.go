package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Cookie names. The session cookie holds the session sealed (encrypted
// and authenticated) under the replicas' shared key; the sign-in cookie
// holds the CSRF token of the sign-in form (a person not yet signed in has
// no session to bind it to).
const (
	sessionCookie = "reconciler_console"
	signInCookie  = "reconciler_console_signin"
	// maxFormBytes caps a form's body.
	maxFormBytes = 64 << 10
	// maxActorLen is the API's limit on an actor's name.
	maxActorLen = 255
)

// session is one signed-in person. token is the bearer token the API
// calls carry; it leaves the process only sealed in the cookie.
type session struct {
	sid     string
	id      Identity
	token   string
	actor   string
	csrf    string
	expires time.Time
	// checked is when alive last asked the store; ended is set once it
	// answered revoked.
	checked time.Time
	ended   bool
}

// flash is a one-time message shown on the next page (an action's result).
type flash struct {
	OK   bool
	Text string
}

// canSee reports whether the session may look at tenant's data.
func (s *session) canSee(tenant string) bool {
	return s.id.Role == "admin" || s.id.Tenant == tenant
}

func (s *session) admin() bool { return s.id.Role == "admin" }

// sessions seals each session into its cookie with AES-256-GCM under a key
// derived from Options.SessionKey, which every replica is given: any
// replica opens a cookie another sealed, so a load balancer needs no
// stickiness. Sign-out writes the session's id to the store's revocations
// (Options.Revocations), which every replica reads, so a replayed cookie
// is refused everywhere; expiry is sealed in the cookie. Without a key the
// process makes one at random: sessions are then this replica's and end at
// its restart. Flash messages stay in this replica's memory.
type sessions struct {
	aead     cipher.AEAD
	ttl      time.Duration
	now      func() time.Time
	identify func(string) (Identity, bool)
	revoked  Revocations
	log      *slog.Logger

	mu    sync.Mutex
	flash map[string][]flash
	// local holds this replica's sign-outs when no store keeps them.
	local map[string]time.Time
}

// Revocations is the store's record of sign-outs (ledger.Revocations).
type Revocations interface {
	RevokeSession(ctx context.Context, id string, until, now time.Time) error
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

// maxFlash bounds the sessions holding flash messages in memory.
const maxFlash = 10000

// revocationCheckEvery is how often a live stream asks the store whether
// its session was signed out at another replica.
const revocationCheckEvery = 10 * time.Second

// sealAAD binds a sealed cookie to its purpose and format.
var sealAAD = []byte("reconciler console session v1")

// sessionKey derives the AES-256 key from the configured secret (or a
// random one).
func sessionKey(secret string) ([]byte, error) {
	if secret == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b, nil
	}
	return hkdf.Key(sha256.New, []byte(secret), nil, string(sealAAD), 32)
}

func newSessions(o Options, now func() time.Time, log *slog.Logger) (*sessions, error) {
	key, err := sessionKey(o.SessionKey)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &sessions{aead: aead, ttl: o.SessionTTL, now: now, identify: o.Identify, revoked: o.Revocations, log: log,
		flash: map[string][]flash{}, local: map[string]time.Time{}}, nil
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sealed is a session as its cookie carries it.
type sealed struct {
	SID     string `json:"s"`
	Token   string `json:"t"`
	Actor   string `json:"a"`
	CSRF    string `json:"c"`
	Expires int64  `json:"e"`
}

// create seals a new session and returns its cookie value.
func (ss *sessions) create(id Identity, token, actor string) (string, *session) {
	s := &session{sid: randomToken(), id: id, token: token, actor: actor, csrf: randomToken(), expires: ss.now().Add(ss.ttl)}
	plain, _ := json.Marshal(sealed{SID: s.sid, Token: token, Actor: actor, CSRF: s.csrf, Expires: s.expires.Unix()})
	nonce := make([]byte, ss.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(ss.aead.Seal(nonce, nonce, plain, sealAAD)), s
}

// decode is a cookie value's bytes (nonce ‖ sealed session).
func (ss *sessions) decode(cookie string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cookie)
	if err != nil || len(b) < ss.aead.NonceSize() {
		return nil, false
	}
	return b, true
}

// open unseals a cookie value; it says nothing of revocation.
func (ss *sessions) open(cookie string) (*session, bool) {
	b, ok := ss.decode(cookie)
	if !ok {
		return nil, false
	}
	n := ss.aead.NonceSize()
	plain, err := ss.aead.Open(nil, b[:n], b[n:], sealAAD)
	if err != nil {
		return nil, false
	}
	var p sealed
	if json.Unmarshal(plain, &p) != nil || p.SID == "" {
		return nil, false
	}
	s := &session{sid: p.SID, token: p.Token, actor: p.Actor, csrf: p.CSRF, expires: time.Unix(p.Expires, 0)}
	if !ss.now().Before(s.expires) {
		return nil, false
	}
	// The token is identified again: one removed from the configuration
	// ends its sessions at the next restart of each replica.
	id, ok := ss.identify(p.Token)
	if !ok || (id.Role != "admin" && id.Role != "approver") {
		return nil, false
	}
	s.id = id
	return s, true
}

// get returns the live session of a cookie value: sealed by a replica,
// not expired, not signed out.
func (ss *sessions) get(ctx context.Context, cookie string) (*session, bool) {
	s, ok := ss.open(cookie)
	if !ok {
		return nil, false
	}
	revoked, err := ss.isRevoked(ctx, s.sid)
	if err != nil {
		// Fail closed: a sign-out the store holds must not be missed.
		ss.log.Warn("console: read the session revocations", "err", err)
		return nil, false
	}
	s.checked = ss.now()
	return s, !revoked
}

func (ss *sessions) isRevoked(ctx context.Context, sid string) (bool, error) {
	ss.mu.Lock()
	_, local := ss.local[sid]
	ss.mu.Unlock()
	if local || ss.revoked == nil {
		return local, nil
	}
	return ss.revoked.SessionRevoked(ctx, sid)
}

// delete signs the cookie's session out, at every replica sharing the
// store.
func (ss *sessions) delete(ctx context.Context, cookie string) error {
	s, ok := ss.open(cookie)
	if !ok {
		return nil
	}
	now := ss.now()
	ss.mu.Lock()
	for k, until := range ss.local {
		if until.Before(now) {
			delete(ss.local, k)
		}
	}
	ss.local[s.sid] = s.expires
	delete(ss.flash, s.sid)
	ss.mu.Unlock()
	if ss.revoked == nil {
		return nil
	}
	return ss.revoked.RevokeSession(ctx, s.sid, s.expires, now)
}

// alive reports whether s is still signed in, asking the store at most
// every revocationCheckEvery.
func (ss *sessions) alive(ctx context.Context, s *session) bool {
	now := ss.now()
	if s.ended || !now.Before(s.expires) {
		return false
	}
	if now.Sub(s.checked) < revocationCheckEvery {
		ss.mu.Lock()
		_, local := ss.local[s.sid]
		ss.mu.Unlock()
		return !local
	}
	revoked, err := ss.isRevoked(ctx, s.sid)
	if err != nil {
		return true // the next check asks again; the pages fail closed
	}
	s.checked, s.ended = now, revoked
	return !revoked
}

// addFlash and takeFlash keep an action's result for the next page.
func (ss *sessions) addFlash(s *session, f flash) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.flash) >= maxFlash {
		clear(ss.flash) // messages are a courtesy; memory is bounded
	}
	if len(ss.flash[s.sid]) < 8 {
		ss.flash[s.sid] = append(ss.flash[s.sid], f)
	}
}

func (ss *sessions) takeFlash(s *session) []flash {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := ss.flash[s.sid]
	delete(ss.flash, s.sid)
	return f
}

// secureRequest reports whether the browser reached us over TLS: directly,
// or through a proxy that says so. Trusting the header can only make the
// cookie stricter.
func (c *Console) secureRequest(r *http.Request) bool {
	return c.o.SecureCookie || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/console", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secureRequest(r),
	})
}

type sessionHandler func(w http.ResponseWriter, r *http.Request, s *session)

// signedIn admits requests with a live session; others go to the sign-in page.
func (c *Console) signedIn(next sessionHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.session(r)
		if !ok {
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		next(w, r, s)
	})
}

func (c *Console) session(r *http.Request) (*session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil, false
	}
	return c.sessions.get(r.Context(), ck.Value)
}

// form admits a POST from a signed-in person whose form carries the
// session's CSRF token and, when the browser says where it comes from, our
// own origin.
func (c *Console) form(next sessionHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.session(r)
		if !ok {
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if !sameOrigin(r) {
			http.Error(w, "cross-origin form refused", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "unreadable form", http.StatusBadRequest)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
			http.Error(w, "the form's CSRF token is missing or stale: reload the page", http.StatusForbidden)
			return
		}
		next(w, r, s)
	})
}

// sameOrigin checks the Origin header when the browser sends one (every
// current browser does on a POST); SameSite=Strict and the CSRF token are
// the other two locks.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if o == "null" {
		return false
	}
	_, rest, ok := strings.Cut(o, "://")
	return ok && rest == r.Host
}

type signInData struct {
	CSRF  string
	Error string
	Actor string
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.session(r); ok {
		http.Redirect(w, r, "/console/attention", http.StatusSeeOther)
		return
	}
	c.renderSignIn(w, r, http.StatusOK, signInData{})
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, d signInData) {
	d.CSRF = randomToken()
	c.setCookie(w, r, signInCookie, d.CSRF, 600)
	c.render(w, status, "signin", page{Title: "Sign in", Data: d})
}

// signIn exchanges an admin or approver token for a session. The token is
// read from the form body only, compared by the API's authenticator, and
// never echoed: a failed sign-in shows the form again, empty.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || !sameOrigin(r) {
		http.Error(w, "unreadable or cross-origin form", http.StatusBadRequest)
		return
	}
	ck, err := r.Cookie(signInCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		c.renderSignIn(w, r, http.StatusForbidden, signInData{Error: "The form expired: try again."})
		return
	}
	actor := strings.TrimSpace(r.PostFormValue("actor"))
	token := strings.TrimSpace(r.PostFormValue("token"))
	if actor == "" || len(actor) > maxActorLen || !utf8.ValidString(actor) || strings.IndexFunc(actor, unicode.IsControl) >= 0 {
		c.renderSignIn(w, r, http.StatusBadRequest, signInData{Error: "Your name is required (it is recorded with every action), without control characters.", Actor: ""})
		return
	}
	id, ok := c.o.Identify(token)
	if !ok || (id.Role != "admin" && id.Role != "approver") {
		c.log.Warn("console: sign-in refused", "remote", r.RemoteAddr, "known_token", ok, "role", id.Role)
		c.renderSignIn(w, r, http.StatusUnauthorized, signInData{Error: "Sign in with an admin or approver token.", Actor: actor})
		return
	}
	// A fresh session id at every sign-in: a cookie planted before it is
	// worth nothing after.
	if old, err := r.Cookie(sessionCookie); err == nil {
		if err := c.sessions.delete(r.Context(), old.Value); err != nil {
			c.log.Warn("console: revoke the previous session", "err", err)
		}
	}
	cookie, _ := c.sessions.create(id, token, actor)
	c.setCookie(w, r, sessionCookie, cookie, int(c.o.SessionTTL/time.Second))
	c.setCookie(w, r, signInCookie, "", -1)
	c.log.Info("console: signed in", "actor", actor, "role", id.Role, "tenant", id.Tenant, "by", id.Fingerprint)
	http.Redirect(w, r, "/console/attention", http.StatusSeeOther)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if err := c.sessions.delete(r.Context(), ck.Value); err != nil {
			// The cookie stays valid at the other replicas: say so.
			c.log.Error("console: sign-out not recorded in the store", "actor", s.actor, "err", err)
			http.Error(w, "sign-out could not be recorded: try again", http.StatusServiceUnavailable)
			return
		}
	}
	c.setCookie(w, r, sessionCookie, "", -1)
	c.log.Info("console: signed out", "actor", s.actor, "by", s.id.Fingerprint)
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}
