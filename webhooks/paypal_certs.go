package webhooks

// PayPal signing certificates: the cert-URL allow-list (the header is
// attacker-controlled until the signature checks out, so a lax check is an
// SSRF), the bounded download, chain/name/expiry verification, and a cache of
// verified keys by URL with one download per URL however many deliveries
// arrive at once.

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	paypalCertPath = "/v1/notifications/certs/"
	// paypalCertCacheMaxTTL re-verifies a cached certificate at least daily,
	// even when it is valid for years, so a root removed from RootCAs or a
	// replaced certificate takes effect without a restart.
	paypalCertCacheMaxTTL = 24 * time.Hour
	// paypalMaxChainCerts bounds the work of parsing a downloaded chain.
	paypalMaxChainCerts = 8
	paypalMinRSABits    = 2048
)

// paypalCertPrefix is one allow-listed cert URL prefix: scheme is always
// https; host is compared exactly, port included.
type paypalCertPrefix struct {
	host string // lower case, with port if the prefix has one
	path string // starts and, unless it is the cert path itself, ends with '/'
}

func parsePayPalCertPrefix(raw string) (paypalCertPrefix, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return paypalCertPrefix{}, fmt.Errorf("cert url prefix %q: %w", raw, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.Opaque != "" || u.RawPath != "" {
		return paypalCertPrefix{}, fmt.Errorf("cert url prefix %q: want https://host[:port]/[path/]", raw)
	}
	p := u.Path
	if p == "" {
		p = "/"
	}
	// A prefix path must be compatible with the cert path, else nothing
	// could ever match and the endpoint would silently reject everything.
	if !strings.HasPrefix(paypalCertPath, p) && !strings.HasPrefix(p, paypalCertPath) {
		return paypalCertPrefix{}, fmt.Errorf("cert url prefix %q: path must be on the way to or under %s", raw, paypalCertPath)
	}
	return paypalCertPrefix{host: strings.ToLower(u.Host), path: p}, nil
}

// checkCertURL returns the parsed URL if raw is allowed to be fetched:
// https, an allow-listed host[:port] exactly, no userinfo/query/fragment/
// percent-encoding/backslashes, and a path that is the cert path followed by
// one plain segment (so no "..", no encoded slash, no second segment).
func (v *PayPalVerifier) checkCertURL(raw string) (*url.URL, error) {
	for i := 0; i < len(raw); i++ {
		// '%' is refused outright: PayPal cert ids need no escaping, and
		// decoding is where "..%2f" style tricks live. '\\' and controls are
		// parsed differently by different URL parsers.
		if c := raw[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '\\' {
			return nil, errors.New("cert url has a forbidden character")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("cert url does not parse")
	}
	switch {
	case u.Scheme != "https":
		return nil, errors.New("cert url is not https")
	case u.Opaque != "" || u.User != nil || strings.Contains(raw, "@"):
		return nil, errors.New("cert url has userinfo or is opaque")
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#"):
		return nil, errors.New("cert url has a query or fragment")
	case u.RawPath != "":
		return nil, errors.New("cert url path is escaped")
	}
	host := strings.ToLower(u.Host)
	allowed := false
	for _, p := range v.prefixes {
		if host == p.host && strings.HasPrefix(u.Path, p.path) {
			allowed = true
			break
		}
	}
	if !allowed {
		return nil, errors.New("cert url is outside the allow-list")
	}
	if !validPayPalCertPath(u.Path) {
		return nil, fmt.Errorf("cert url path is not one segment under %s", paypalCertPath)
	}
	return u, nil
}

func validPayPalCertPath(p string) bool {
	seg, ok := strings.CutPrefix(p, paypalCertPath)
	if !ok || seg == "" || len(seg) > 200 || seg[0] == '.' {
		return false
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func normalisePayPalCNSuffix(s string) string {
	if s == "" {
		s = defaultPayPalCNSuffix
	}
	s = strings.ToLower(s)
	if !strings.HasPrefix(s, ".") {
		s = "." + s
	}
	return s
}

// paypalNameMatches reports whether name is a proper subdomain of suffix
// (which starts with '.'): "x.paypal.com" matches ".paypal.com",
// "evilpaypal.com" and "api.paypal.com.evil.test" do not.
func paypalNameMatches(name, suffix string) bool {
	name = strings.ToLower(name)
	return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
}

// fetchCert downloads the chain at u and verifies it. Errors wrap ErrUpstream
// when PayPal could not answer (retry later) and ErrBadSignature when what it
// answered cannot vouch for the delivery.
func (v *PayPalVerifier) fetchCert(ctx context.Context, u *url.URL) (*rsa.PublicKey, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: build cert request: %w", ErrBadSignature, err)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: fetch cert from %s: %w", ErrUpstream, u.Host, err)
	}
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
	case code >= 300 && code < 400:
		return nil, time.Time{}, fmt.Errorf("%w: cert url answered redirect %d (not followed)", ErrBadSignature, code)
	case paypalUpstreamStatus(code):
		return nil, time.Time{}, fmt.Errorf("%w: cert url answered %d", ErrUpstream, code)
	default:
		return nil, time.Time{}, fmt.Errorf("%w: cert url answered %d", ErrBadSignature, code)
	}
	if resp.ContentLength > v.maxCert {
		return nil, time.Time{}, fmt.Errorf("%w: cert is %d bytes, limit %d", ErrBadSignature, resp.ContentLength, v.maxCert)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, v.maxCert+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: read cert: %w", ErrUpstream, err)
	}
	if int64(len(data)) > v.maxCert {
		return nil, time.Time{}, fmt.Errorf("%w: cert is over %d bytes", ErrBadSignature, v.maxCert)
	}
	pub, expires, err := verifyPayPalChain(data, v.ep.RootCAs, v.suffix, v.now())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	return pub, expires, nil
}

// verifyPayPalChain parses a PEM chain (leaf first), verifies it against
// roots (nil: system roots) at now, checks the leaf's name against suffix and
// returns its RSA key and the time the verification stops holding (the
// earliest NotAfter in the chain).
func verifyPayPalChain(data []byte, roots *x509.CertPool, suffix string, now time.Time) (*rsa.PublicKey, time.Time, error) {
	var leaf *x509.Certificate
	inter := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if n++; n > paypalMaxChainCerts {
			return nil, time.Time{}, fmt.Errorf("cert chain has more than %d certificates", paypalMaxChainCerts)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("parse cert: %w", err)
		}
		if leaf == nil {
			leaf = c
		} else {
			inter.AddCert(c)
		}
	}
	if leaf == nil {
		return nil, time.Time{}, errors.New("cert url served no PEM certificate")
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("verify cert chain: %w", err)
	}
	named := paypalNameMatches(leaf.Subject.CommonName, suffix)
	for _, d := range leaf.DNSNames {
		named = named || paypalNameMatches(d, suffix)
	}
	if !named {
		return nil, time.Time{}, fmt.Errorf("cert name %q does not end with %q", leaf.Subject.CommonName, suffix)
	}
	pub, ok := leaf.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, time.Time{}, fmt.Errorf("cert key is %T, want RSA", leaf.PublicKey)
	}
	if pub.N.BitLen() < paypalMinRSABits {
		return nil, time.Time{}, fmt.Errorf("cert RSA key has %d bits, want at least %d", pub.N.BitLen(), paypalMinRSABits)
	}
	expires := leaf.NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(expires) {
			expires = c.NotAfter
		}
	}
	return pub, expires, nil
}

// paypalCertCache holds verified keys by cert URL, each until its chain
// expires or paypalCertCacheMaxTTL passes, at most max entries. Concurrent
// misses for one URL share a single download (singleflight).
type paypalCertCache struct {
	mu      sync.Mutex
	max     int
	seq     uint64
	entries map[string]*paypalCertEntry
	flights map[string]*paypalCertFlight
}

type paypalCertEntry struct {
	key     *rsa.PublicKey
	expires time.Time
	seq     uint64 // insertion order, for eviction
}

type paypalCertFlight struct {
	done    chan struct{} // closed when key/err are set
	key     *rsa.PublicKey
	err     error
	waiters int // followers that joined; read by tests
}

func newPayPalCertCache(max int) *paypalCertCache {
	return &paypalCertCache{
		max:     max,
		entries: make(map[string]*paypalCertEntry),
		flights: make(map[string]*paypalCertFlight),
	}
}

// get returns the verified key for url, calling fetch at most once for all
// concurrent callers. A follower whose ctx ends stops waiting; the leader's
// fetch is bounded by its own ctx and the verifier's timeout. Failures are not
// cached: the next delivery tries again.
func (c *paypalCertCache) get(ctx context.Context, url string, now func() time.Time,
	fetch func(context.Context) (*rsa.PublicKey, time.Time, error)) (*rsa.PublicKey, error) {
	c.mu.Lock()
	if e, ok := c.entries[url]; ok {
		if now().Before(e.expires) {
			c.mu.Unlock()
			return e.key, nil
		}
		delete(c.entries, url)
	}
	if f, ok := c.flights[url]; ok {
		f.waiters++
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.key, f.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: wait for cert download: %w", ErrUpstream, ctx.Err())
		}
	}
	f := &paypalCertFlight{done: make(chan struct{})}
	c.flights[url] = f
	c.mu.Unlock()

	var expires time.Time
	defer func() {
		c.mu.Lock()
		delete(c.flights, url)
		if f.err == nil && f.key != nil {
			t := now()
			if max := t.Add(paypalCertCacheMaxTTL); expires.After(max) {
				expires = max
			}
			c.putLocked(url, f.key, expires, t)
		} else if f.err == nil {
			f.err = fmt.Errorf("%w: cert download aborted", ErrUpstream)
		}
		c.mu.Unlock()
		close(f.done)
	}()
	f.key, expires, f.err = fetch(ctx)
	return f.key, f.err
}

func (c *paypalCertCache) putLocked(url string, key *rsa.PublicKey, expires, now time.Time) {
	if _, ok := c.entries[url]; !ok && len(c.entries) >= c.max {
		// Expired entries go first; then the oldest insertion. n ≤ max, so
		// a scan is cheaper than keeping an ordered structure in step.
		var oldest string
		var oldestSeq uint64
		for u, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, u)
				continue
			}
			if oldest == "" || e.seq < oldestSeq {
				oldest, oldestSeq = u, e.seq
			}
		}
		if len(c.entries) >= c.max {
			delete(c.entries, oldest)
		}
	}
	c.seq++
	c.entries[url] = &paypalCertEntry{key: key, expires: expires, seq: c.seq}
}

// flightWaiters reports how many callers wait on url's download (tests).
func (c *paypalCertCache) flightWaiters(url string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flights[url]; ok {
		return f.waiters
	}
	return -1
}

// len reports the number of cached entries (tests).
func (c *paypalCertCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
