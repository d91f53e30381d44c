package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Cookie names. The session cookie holds a random id, never the token;
// the sign-in cookie holds the CSRF token of the sign-in form (a person not
// yet signed in has no session to bind it to).
const (
	sessionCookie = "reconciler_console"
	signInCookie  = "reconciler_console_signin"
	// maxFormBytes caps a form's body.
	maxFormBytes = 64 << 10
	// maxActorLen is the API's limit on an actor's name.
	maxActorLen = 255
)

// session is one signed-in person. token is the bearer token the API
// calls carry; it stays in this struct.
type session struct {
	id      Identity
	token   string
	actor   string
	csrf    string
	expires time.Time
	flash   []flash
	// ended is set at sign-out, so the session's live stream stops too.
	ended bool
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

// sessions are kept in memory, by the SHA-256 of their cookie value, so a
// dump of the map does not hand out working cookies.
type sessions struct {
	mu   sync.Mutex
	ttl  time.Duration
	max  int
	now  func() time.Time
	byID map[[32]byte]*session
}

func newSessions(ttl time.Duration, max int, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, max: max, now: now, byID: make(map[[32]byte]*session)}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create stores a new session and returns its cookie value.
func (ss *sessions) create(id Identity, token, actor string) (string, *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for k, s := range ss.byID {
		if !now.Before(s.expires) {
			delete(ss.byID, k)
		}
	}
	if len(ss.byID) >= ss.max {
		var oldest [32]byte
		var at time.Time
		for k, s := range ss.byID {
			if at.IsZero() || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		delete(ss.byID, oldest)
	}
	cookie := randomToken()
	s := &session{id: id, token: token, actor: actor, csrf: randomToken(), expires: now.Add(ss.ttl)}
	ss.byID[sha256.Sum256([]byte(cookie))] = s
	return cookie, s
}

// get returns the live session of a cookie value.
func (ss *sessions) get(cookie string) (*session, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sha256.Sum256([]byte(cookie))
	s, ok := ss.byID[k]
	if !ok {
		return nil, false
	}
	if !ss.now().Before(s.expires) {
		delete(ss.byID, k)
		return nil, false
	}
	return s, true
}

func (ss *sessions) delete(cookie string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	k := sha256.Sum256([]byte(cookie))
	if s, ok := ss.byID[k]; ok {
		s.ended = true
		delete(ss.byID, k)
	}
}

// alive reports whether s is still signed in.
func (ss *sessions) alive(s *session) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !s.ended && ss.now().Before(s.expires)
}

// addFlash and takeFlash keep an action's result for the next page.
func (ss *sessions) addFlash(s *session, f flash) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(s.flash) < 8 {
		s.flash = append(s.flash, f)
	}
}

func (ss *sessions) takeFlash(s *session) []flash {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := s.flash
	s.flash = nil
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
	return c.sessions.get(ck.Value)
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
		c.sessions.delete(old.Value)
	}
	cookie, _ := c.sessions.create(id, token, actor)
	c.setCookie(w, r, sessionCookie, cookie, int(c.o.SessionTTL/time.Second))
	c.setCookie(w, r, signInCookie, "", -1)
	c.log.Info("console: signed in", "actor", actor, "role", id.Role, "tenant", id.Tenant, "by", id.Fingerprint)
	http.Redirect(w, r, "/console/attention", http.StatusSeeOther)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.sessions.delete(ck.Value)
	}
	c.setCookie(w, r, sessionCookie, "", -1)
	c.log.Info("console: signed out", "actor", s.actor, "by", s.id.Fingerprint)
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}
