package webhooks

// PayPal webhook verification. Two modes, chosen per endpoint:
//
//   - offline (default): the PayPal SDK algorithm done locally. The signed
//     message is transmission_id|transmission_time|webhook_id|crc32(body) with
//     the CRC as an UNSIGNED decimal, checked with RSA PKCS#1 v1.5 SHA-256
//     against the certificate at PAYPAL-CERT-URL. That URL is chosen by whoever
//     sent the request, so it is allow-listed before anything is fetched
//     (paypal_certs.go).
//   - postback: PayPal's own verify-webhook-signature API (paypal_postback.go).
//     One outbound call per delivery and a dependency on PayPal's uptime, but
//     no certificate handling.
//
// A PayPalVerifier is safe for concurrent use. It starts no goroutines; the
// only background work is the HTTP transport's idle connections, released by
// Close.

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/reconciler/internal/paypaloauth"
)

// ErrUpstream: verification could not be completed because a PayPal endpoint
// (certificate download, OAuth token, verify-webhook-signature) failed, timed
// out or is misconfigured. It says nothing about the delivery's authenticity,
// so the handler answers 5xx and PayPal retries the delivery later.
var ErrUpstream = errors.New("upstream unavailable")

// PayPal verification modes (PayPalEndpoint.Verify).
const (
	PayPalVerifyOffline  = "offline"
	PayPalVerifyPostback = "postback"
)

// PayPal delivery headers (VENDORS.md §2.1). http.Header canonicalises names,
// so any case on the wire matches.
const (
	PayPalHeaderTransmissionID   = "PAYPAL-TRANSMISSION-ID"
	PayPalHeaderTransmissionTime = "PAYPAL-TRANSMISSION-TIME"
	PayPalHeaderTransmissionSig  = "PAYPAL-TRANSMISSION-SIG"
	PayPalHeaderCertURL          = "PAYPAL-CERT-URL"
	PayPalHeaderAuthAlgo         = "PAYPAL-AUTH-ALGO"
)

const (
	// paypalAuthAlgo is the only algorithm accepted: the JCA name of
	// RSASSA-PKCS1-v1_5 with SHA-256. Accepting whatever the header names
	// would let a forger downgrade to SHA-1.
	paypalAuthAlgo = "SHA256withRSA"

	// DefaultPayPalTolerance is how old PAYPAL-TRANSMISSION-TIME may be.
	// PayPal documents no replay window and retries a delivery for up to 3
	// days, possibly with the original signed headers (VENDORS.md §2.5), so
	// a short window would reject genuine retries and leave rows unknown
	// until a human is paged. 4 days covers the 3-day retry span with a day
	// of margin, and stays well inside the inbox retention (7 days) that
	// makes any replay inside the window a deduplicated no-op.
	DefaultPayPalTolerance = 96 * time.Hour
	// DefaultPayPalFutureSkew is how far in the future a transmission time
	// may be: clock skew only, since a genuine delivery is never signed
	// ahead of time.
	DefaultPayPalFutureSkew = 5 * time.Minute
	// DefaultPayPalTimeout bounds each outbound call (certificate, token,
	// postback), well inside the time PayPal waits for our answer.
	DefaultPayPalTimeout = 5 * time.Second
	// DefaultPayPalMaxCertBytes caps a certificate download; PayPal's chain
	// is about 5 KiB.
	DefaultPayPalMaxCertBytes = 64 << 10
	// DefaultPayPalCertCacheSize bounds the verified-certificate cache.
	// PayPal rotates rarely, so a handful of URLs is the normal population;
	// the bound only stops a flood of distinct allowed URLs growing memory.
	DefaultPayPalCertCacheSize = 64

	defaultPayPalCNSuffix = ".paypal.com"

	// Header size limits: generous multiples of PayPal's documented maxima
	// (id ≤ 50, sig ≤ 500, cert URL ≤ 500 characters), so junk is refused
	// before any work.
	maxPayPalTransmissionID = 128
	maxPayPalTimeLen        = 64
	maxPayPalSigLen         = 2048
	maxPayPalCertURLLen     = 1024
)

// PayPalEndpoint is one configured PayPal webhook endpoint (docs/architecture.md §9).
type PayPalEndpoint struct {
	Name, Tenant string
	// WebhookID is our subscription's id in PayPal (WH-…): part of the signed
	// message, and of the postback request.
	WebhookID string
	// Verify is "offline" (default) or "postback".
	Verify string
	// CertURLPrefixes allow-lists certificate URLs (offline), e.g.
	// "https://api.paypal.com/". Scheme, host and port must match a prefix
	// exactly and the path must start with the prefix's path.
	CertURLPrefixes []string
	// CertCNSuffix is what the leaf's CN or a SAN DNS name must end with
	// (default ".paypal.com"). A missing leading dot is added, so
	// "paypal.com" cannot match "evilpaypal.com".
	CertCNSuffix string
	// RootCAs verifies both the TLS connection to the cert URL and the
	// downloaded chain; nil means the system roots.
	RootCAs *x509.CertPool
	// APIBase (e.g. https://api-m.paypal.com), ClientID and ClientSecret are
	// used in postback mode. APIBase must be https, except on a loopback host
	// (local fakes).
	APIBase, ClientID, ClientSecret string
}

// PayPalOptions tunes a PayPalVerifier; the zero value is production-ready.
type PayPalOptions struct {
	// HTTPClient is used for every outbound call. Optional: the default has
	// RootCAs as its TLS roots. Either way redirects are never followed.
	HTTPClient *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Tolerance is the maximum age of PAYPAL-TRANSMISSION-TIME
	// (default DefaultPayPalTolerance; see there for why it is days).
	Tolerance time.Duration
	// FutureSkew is how far ahead of Now a transmission time may be
	// (default DefaultPayPalFutureSkew).
	FutureSkew time.Duration
	// Timeout bounds each outbound call (default DefaultPayPalTimeout).
	Timeout time.Duration
	// MaxCertBytes caps a certificate download (default DefaultPayPalMaxCertBytes).
	MaxCertBytes int64
	// CertCacheSize bounds the verified-certificate cache
	// (default DefaultPayPalCertCacheSize).
	CertCacheSize int
}

// PayPalVerifier checks that a delivery was signed by PayPal for one endpoint.
type PayPalVerifier struct {
	ep         PayPalEndpoint
	mode       string
	prefixes   []paypalCertPrefix
	suffix     string
	client     *http.Client
	ownClient  bool
	now        func() time.Time
	tolerance  time.Duration
	futureSkew time.Duration
	timeout    time.Duration
	maxCert    int64
	certs      *paypalCertCache
	apiBase    string
	tokens     *paypaloauth.Source
}

// NewPayPalVerifier validates ep and returns its verifier.
func NewPayPalVerifier(ep PayPalEndpoint, opts PayPalOptions) (*PayPalVerifier, error) {
	v := &PayPalVerifier{
		ep:         ep,
		mode:       ep.Verify,
		now:        opts.Now,
		tolerance:  opts.Tolerance,
		futureSkew: opts.FutureSkew,
		timeout:    opts.Timeout,
		maxCert:    opts.MaxCertBytes,
	}
	if ep.WebhookID == "" {
		return nil, fmt.Errorf("paypal endpoint %q: webhook_id is required", ep.Name)
	}
	if v.mode == "" {
		v.mode = PayPalVerifyOffline
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.tolerance <= 0 {
		v.tolerance = DefaultPayPalTolerance
	}
	if v.futureSkew <= 0 {
		v.futureSkew = DefaultPayPalFutureSkew
	}
	if v.timeout <= 0 {
		v.timeout = DefaultPayPalTimeout
	}
	if v.maxCert <= 0 {
		v.maxCert = DefaultPayPalMaxCertBytes
	}
	size := opts.CertCacheSize
	if size <= 0 {
		size = DefaultPayPalCertCacheSize
	}
	switch v.mode {
	case PayPalVerifyOffline:
		if len(ep.CertURLPrefixes) == 0 {
			return nil, fmt.Errorf("paypal endpoint %q: offline verification needs cert_url_prefixes", ep.Name)
		}
		for _, p := range ep.CertURLPrefixes {
			cp, err := parsePayPalCertPrefix(p)
			if err != nil {
				return nil, fmt.Errorf("paypal endpoint %q: %w", ep.Name, err)
			}
			v.prefixes = append(v.prefixes, cp)
		}
		v.suffix = normalisePayPalCNSuffix(ep.CertCNSuffix)
		v.certs = newPayPalCertCache(size)
	case PayPalVerifyPostback:
		base, err := parsePayPalAPIBase(ep.APIBase)
		if err != nil {
			return nil, fmt.Errorf("paypal endpoint %q: %w", ep.Name, err)
		}
		if ep.ClientID == "" || ep.ClientSecret == "" {
			return nil, fmt.Errorf("paypal endpoint %q: postback verification needs client_id and client_secret", ep.Name)
		}
		v.apiBase = base
	default:
		return nil, fmt.Errorf("paypal endpoint %q: verify must be %q or %q, got %q",
			ep.Name, PayPalVerifyOffline, PayPalVerifyPostback, ep.Verify)
	}
	if opts.HTTPClient != nil {
		c := *opts.HTTPClient // a copy, so the caller's client keeps its own redirect policy
		c.CheckRedirect = paypalNoRedirect
		v.client = &c
	} else {
		v.client = newPayPalHTTPClient(ep.RootCAs, v.timeout)
		v.ownClient = true
	}
	if v.mode == PayPalVerifyPostback {
		tokens, err := paypaloauth.New(paypaloauth.Options{
			Base: v.apiBase, ClientID: ep.ClientID, ClientSecret: ep.ClientSecret,
			Client: v.client, Timeout: v.timeout, Now: v.now,
		})
		if err != nil {
			return nil, fmt.Errorf("paypal endpoint %q: %w", ep.Name, err)
		}
		v.tokens = tokens
	}
	return v, nil
}

// Close releases idle connections of the verifier's own HTTP client. The
// verifier stays usable; Close is for shutdown hygiene.
func (v *PayPalVerifier) Close() {
	if v.ownClient {
		v.client.CloseIdleConnections()
	}
}

// Verify checks one delivery: headers, then the signature (offline or by
// postback), then the transmission time. The signature is checked before the
// time so that ErrStale is only ever said of authentic deliveries. Errors wrap
// ErrUnparsable, ErrBadSignature, ErrStale or ErrUpstream.
func (v *PayPalVerifier) Verify(ctx context.Context, h http.Header, body []byte) error {
	hd, err := parsePayPalHeaders(h)
	if err != nil {
		return err
	}
	switch v.mode {
	case PayPalVerifyPostback:
		err = v.verifyPostback(ctx, hd, body)
	default:
		err = v.verifyOffline(ctx, hd, body)
	}
	if err != nil {
		return err
	}
	return v.checkTime(hd.at)
}

func (v *PayPalVerifier) verifyOffline(ctx context.Context, hd paypalHeaders, body []byte) error {
	u, err := v.checkCertURL(hd.certURL)
	if err != nil {
		return fmt.Errorf("paypal: %w: %w", ErrBadSignature, err)
	}
	pub, err := v.certs.get(ctx, hd.certURL, v.now, func(ctx context.Context) (*rsa.PublicKey, time.Time, error) {
		return v.fetchCert(ctx, u)
	})
	if err != nil {
		return fmt.Errorf("paypal: %w", err)
	}
	digest := sha256.Sum256(paypalMessage(hd.transmissionID, hd.transmissionTime, v.ep.WebhookID, body))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], hd.sig); err != nil {
		return fmt.Errorf("paypal: %w: signature does not match", ErrBadSignature)
	}
	return nil
}

func (v *PayPalVerifier) checkTime(at time.Time) error {
	now := v.now()
	if at.Before(now.Add(-v.tolerance)) {
		return fmt.Errorf("paypal: %w: transmission time %s is more than %s old",
			ErrStale, at.UTC().Format(time.RFC3339), v.tolerance)
	}
	if at.After(now.Add(v.futureSkew)) {
		return fmt.Errorf("paypal: %w: transmission time %s is more than %s in the future",
			ErrStale, at.UTC().Format(time.RFC3339), v.futureSkew)
	}
	return nil
}

// paypalHeaders are the parsed delivery headers. transmissionTime is kept
// verbatim: the signed message uses the header string, not a re-formatting.
type paypalHeaders struct {
	transmissionID   string
	transmissionTime string
	at               time.Time
	sig              []byte
	sigB64           string
	certURL          string
	authAlgo         string
}

func parsePayPalHeaders(h http.Header) (paypalHeaders, error) {
	var hd paypalHeaders
	get := func(name string, max int) (string, error) {
		vals := h.Values(name)
		switch {
		case len(vals) == 0 || vals[0] == "":
			return "", fmt.Errorf("paypal: %w: missing %s header", ErrUnparsable, name)
		case len(vals) > 1:
			// Two values would leave us choosing which one was signed.
			return "", fmt.Errorf("paypal: %w: %s header given %d times", ErrUnparsable, name, len(vals))
		case len(vals[0]) > max:
			return "", fmt.Errorf("paypal: %w: %s header longer than %d", ErrUnparsable, name, max)
		}
		return vals[0], nil
	}
	var err error
	if hd.transmissionID, err = get(PayPalHeaderTransmissionID, maxPayPalTransmissionID); err != nil {
		return hd, err
	}
	// '|' separates the signed fields: an id containing it could shift
	// bytes between fields of the message.
	for i := 0; i < len(hd.transmissionID); i++ {
		if c := hd.transmissionID[i]; c <= ' ' || c >= 0x7f || c == '|' {
			return hd, fmt.Errorf("paypal: %w: %s has a forbidden character", ErrUnparsable, PayPalHeaderTransmissionID)
		}
	}
	if hd.transmissionTime, err = get(PayPalHeaderTransmissionTime, maxPayPalTimeLen); err != nil {
		return hd, err
	}
	if hd.at, err = time.Parse(time.RFC3339Nano, hd.transmissionTime); err != nil {
		return hd, fmt.Errorf("paypal: %w: %s is not RFC 3339", ErrUnparsable, PayPalHeaderTransmissionTime)
	}
	if hd.sigB64, err = get(PayPalHeaderTransmissionSig, maxPayPalSigLen); err != nil {
		return hd, err
	}
	if hd.sig, err = base64.StdEncoding.DecodeString(hd.sigB64); err != nil {
		if hd.sig, err = base64.RawStdEncoding.DecodeString(hd.sigB64); err != nil || len(hd.sig) == 0 {
			return hd, fmt.Errorf("paypal: %w: %s is not base64", ErrUnparsable, PayPalHeaderTransmissionSig)
		}
	}
	if len(hd.sig) == 0 {
		return hd, fmt.Errorf("paypal: %w: %s is empty", ErrUnparsable, PayPalHeaderTransmissionSig)
	}
	if hd.certURL, err = get(PayPalHeaderCertURL, maxPayPalCertURLLen); err != nil {
		return hd, err
	}
	if hd.authAlgo, err = get(PayPalHeaderAuthAlgo, 64); err != nil {
		return hd, err
	}
	if hd.authAlgo != paypalAuthAlgo {
		return hd, fmt.Errorf("paypal: %w: auth algo %.64q is not %s", ErrBadSignature, hd.authAlgo, paypalAuthAlgo)
	}
	return hd, nil
}

// paypalMessage is the signed string of PayPal's SDKs (VENDORS.md §2.3):
// the CRC32 is unsigned; a signed rendering breaks every other body.
func paypalMessage(transmissionID, transmissionTime, webhookID string, body []byte) []byte {
	crc := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	msg := make([]byte, 0, len(transmissionID)+len(transmissionTime)+len(webhookID)+len(crc)+3)
	msg = append(msg, transmissionID...)
	msg = append(msg, '|')
	msg = append(msg, transmissionTime...)
	msg = append(msg, '|')
	msg = append(msg, webhookID...)
	msg = append(msg, '|')
	msg = append(msg, crc...)
	return msg
}

// paypalNoRedirect stops the client at the first response: a redirect could
// lead a certificate download off the allow-list, and PayPal never redirects
// these calls.
func paypalNoRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func newPayPalHTTPClient(roots *x509.CertPool, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          8,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	// Every request also carries a context deadline; Timeout is the backstop.
	return &http.Client{Transport: tr, CheckRedirect: paypalNoRedirect, Timeout: 2 * timeout}
}

// paypalUpstreamStatus reports whether an HTTP status from PayPal means
// "try again later" rather than "this delivery is bad".
func paypalUpstreamStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500
}

// isLoopbackHost reports whether host (no port) is a loopback name or address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parsePayPalAPIBase checks the postback API base and returns it without a
// trailing slash.
func parsePayPalAPIBase(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("postback verification needs api_base")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("api_base: %w", err)
	}
	switch {
	case u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("api_base %q: want scheme://host[:port][/path]", raw)
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
	default:
		return "", fmt.Errorf("api_base %q: must be https (http only on loopback)", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}
