package webhooks

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1; legacy vendors too.
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"strconv"
	"strings"
	"time"
)

type hashFunc = hash.Hash

type ecdsaKey = *ecdsa.PublicKey

// maxSignatures bounds the work one delivery can ask for.
const maxSignatures = 16

func (v *verifier) compileScheme(s Spec, secrets []string) error {
	signedParts := func(k partKind) bool { return k != partIndex && k != partQuery }
	needTemplate, needSig := false, false
	switch s.Scheme {
	case SchemeHMAC:
		needTemplate, needSig = true, true
	case SchemeECDSA:
		needTemplate, needSig = true, true
	case SchemeTwilio, SchemeAdyen, SchemeBasicAuth, SchemeStandardWebhooks:
		if s.Signed != "" || s.Signature.Source != "" {
			return fmt.Errorf("signed, signature: scheme %s computes its own", s.Scheme)
		}
	case "":
		return errors.New("scheme: missing (want hmac, ecdsa_p256_sha256, basic_auth, standard_webhooks, twilio or adyen)")
	default:
		return fmt.Errorf("scheme: unknown %q (want hmac, ecdsa_p256_sha256, basic_auth, standard_webhooks, twilio or adyen)", s.Scheme)
	}
	v.newHash = func() hashFunc { return sha256.New() }
	switch s.Hash {
	case "", "sha256":
		if s.Scheme == SchemeTwilio {
			v.newHash = func() hashFunc { return sha1.New() }
		}
	case "sha1":
		v.newHash = func() hashFunc { return sha1.New() }
	case "sha512":
		v.newHash = func() hashFunc { return sha512.New() }
	default:
		return fmt.Errorf("hash: want sha256, sha1 or sha512, got %q", s.Hash)
	}
	if (s.Scheme == SchemeTwilio || s.Scheme == SchemeAdyen || s.Scheme == SchemeECDSA) && s.Hash != "" {
		return fmt.Errorf("hash: scheme %s fixes its hash", s.Scheme)
	}
	if needTemplate {
		if s.Signed == "" {
			return errors.New("signed: the template of the signed bytes is missing (such as {body})")
		}
		t, err := parseTemplate(s.Signed, signedParts)
		if err != nil {
			return fmt.Errorf("signed: %w", err)
		}
		v.signed = t
		if t.uses(partTS) && s.Timestamp.Source == "" {
			return errors.New("signed: {ts} needs timestamp.source")
		}
	}
	if needSig {
		kind, arg, _ := strings.Cut(s.Signature.Source, ":")
		switch {
		case kind == "header" && arg != "":
			v.sig.header = arg
		case kind == "json" && arg != "":
			v.sig.json = arg
		default:
			return fmt.Errorf("signature.source: want header:<Name> or json:<path>, got %q", s.Signature.Source)
		}
		switch s.Signature.Encoding {
		case "hex", "base64":
		default:
			return fmt.Errorf("signature.encoding: want hex or base64, got %q", s.Signature.Encoding)
		}
		v.sig.encoding, v.sig.prefix, v.sig.separator = s.Signature.Encoding, s.Signature.Prefix, s.Signature.Separator
	} else if s.Signature != (SignatureSpec{}) {
		return fmt.Errorf("signature: scheme %s has none to configure", s.Scheme)
	}
	if secrets == nil {
		return nil // a preset checked on its own
	}
	if (v.signed.uses(partURL) || s.Scheme == SchemeTwilio) && v.url == "" {
		return errors.New("url: the vendor signs the URL it calls; configure it (it is never taken from the request)")
	}
	return v.parseKeys(s, secrets)
}

// parseKeys turns the endpoint's secrets into keys. Errors name the
// secret's position, never its value.
func (v *verifier) parseKeys(s Spec, secrets []string) error {
	enc := s.KeyEncoding
	if enc == "" {
		enc = "utf8"
		switch s.Scheme {
		case SchemeAdyen:
			enc = "hex"
		case SchemeStandardWebhooks:
			enc = "whsec"
		}
	}
	for i, secret := range secrets {
		if secret == "" {
			continue
		}
		where := fmt.Sprintf("secret %d", i+1)
		switch s.Scheme {
		case SchemeECDSA:
			der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
			if err != nil {
				return fmt.Errorf("%s: want the base64 DER public key the vendor shows", where)
			}
			pub, err := x509.ParsePKIXPublicKey(der)
			key, ok := pub.(*ecdsa.PublicKey)
			if err != nil || !ok || key.Curve != elliptic.P256() {
				return fmt.Errorf("%s: not a P-256 ECDSA public key (SubjectPublicKeyInfo)", where)
			}
			v.ecdsaKeys = append(v.ecdsaKeys, key)
			continue
		case SchemeBasicAuth:
			if !strings.Contains(secret, ":") {
				return fmt.Errorf("%s: want user:password", where)
			}
			v.basic = append(v.basic, sha256.Sum256([]byte(secret)))
			continue
		}
		var key []byte
		var err error
		switch enc {
		case "utf8":
			key = []byte(secret)
		case "hex":
			key, err = hex.DecodeString(secret)
		case "base64":
			key, err = base64.StdEncoding.DecodeString(secret)
		case "whsec":
			key, err = ParseStandardSecret(secret)
		default:
			return fmt.Errorf("key_encoding: want utf8, hex, base64 or whsec, got %q", s.KeyEncoding)
		}
		if err != nil || len(key) == 0 {
			return fmt.Errorf("%s: not %s", where, enc)
		}
		v.keys = append(v.keys, key)
	}
	if len(v.keys)+len(v.ecdsaKeys)+len(v.basic) == 0 {
		return errors.New("secrets: need at least one")
	}
	return nil
}

// needsDoc reports whether the signature's check reads the decoded body.
func (v *verifier) needsDoc() bool {
	return v.sig.json != "" || v.signed.uses(partJSON) || v.scheme == SchemeAdyen || len(v.replay) > 0
}

// verifySignature checks the delivery's signature (for adyen, every
// element's). The caller checks the timestamp after it, as VerifyStripe
// does, so ErrStale is only said of authentic deliveries. Standard
// Webhooks checks its own timestamp.
func (v *verifier) verifySignature(r *request, elems []any, now time.Time) error {
	switch v.scheme {
	case SchemeHMAC:
		return v.verifyHMAC(r)
	case SchemeECDSA:
		return v.verifyECDSA(r)
	case SchemeBasicAuth:
		return v.verifyBasic(r)
	case SchemeStandardWebhooks:
		_, err := VerifyStandard(r.header, r.body, v.keys, v.tolerance, now)
		return err
	case SchemeTwilio:
		return v.verifyTwilio(r)
	case SchemeAdyen:
		return v.verifyAdyen(elems)
	}
	return fmt.Errorf("%w: unknown scheme", ErrBadSignature)
}

// signatures reads and decodes the delivery's signatures.
func (v *verifier) signatures(r *request) ([][]byte, error) {
	var raw string
	if v.sig.header != "" {
		raw = r.header.Get(v.sig.header)
	} else {
		raw, _ = lookupScalar(r.doc, v.sig.json)
	}
	if raw == "" {
		return nil, fmt.Errorf("%w: no signature", ErrBadSignature)
	}
	entries := []string{raw}
	if v.sig.separator != "" {
		entries = strings.Split(raw, v.sig.separator)
	}
	var out [][]byte
	for _, e := range entries {
		e = strings.TrimSpace(e)
		s, ok := strings.CutPrefix(e, v.sig.prefix)
		if !ok || s == "" || len(out) == maxSignatures {
			continue
		}
		var b []byte
		var err error
		if v.sig.encoding == "hex" {
			b, err = hex.DecodeString(s)
		} else {
			b, err = base64.StdEncoding.DecodeString(s)
		}
		if err == nil && len(b) > 0 {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no well-formed signature", ErrBadSignature)
	}
	return out, nil
}

// equal compares a signature with the expected MAC in constant time, after
// checking the lengths (a decoded signature can be any length).
func equal(got, want []byte) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare(got, want) == 1
}

func (v *verifier) macs(msg []byte) [][]byte {
	out := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		m := hmac.New(v.newHash, key)
		m.Write(msg)
		out[i] = m.Sum(nil)
	}
	return out
}

func anyMatch(sigs, macs [][]byte) bool {
	ok := false
	for _, want := range macs {
		for _, got := range sigs {
			if equal(got, want) {
				ok = true // no early exit: the work does not depend on which key matched
			}
		}
	}
	return ok
}

func (v *verifier) verifyHMAC(r *request) error {
	sigs, err := v.signatures(r)
	if err != nil {
		return err
	}
	if !anyMatch(sigs, v.macs(v.signed.render(nil, r, r.doc, 0))) {
		return fmt.Errorf("%w: no signature matches a secret of the endpoint", ErrBadSignature)
	}
	return nil
}

func (v *verifier) verifyECDSA(r *request) error {
	sigs, err := v.signatures(r)
	if err != nil {
		return err
	}
	digest := sha256.Sum256(v.signed.render(nil, r, r.doc, 0))
	for _, key := range v.ecdsaKeys {
		for _, sig := range sigs {
			if ecdsa.VerifyASN1(key, digest[:], sig) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no signature verifies with a key of the endpoint", ErrBadSignature)
}

// verifyBasic compares the Authorization header's credentials with each
// configured user:password through their SHA-256, so the comparison's time
// depends on neither's length.
func (v *verifier) verifyBasic(r *request) error {
	scheme, cred, ok := strings.Cut(r.header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return fmt.Errorf("%w: no basic credentials", ErrBadSignature)
	}
	plain, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return fmt.Errorf("%w: malformed basic credentials", ErrBadSignature)
	}
	got := sha256.Sum256(plain)
	ok = false
	for _, want := range v.basic {
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: basic credentials do not match", ErrBadSignature)
	}
	return nil
}

// checkTimestamp checks the signed timestamp against the tolerance, both
// ways. Zero tolerance: the vendor documents none, nothing is checked.
func (v *verifier) checkTimestamp(r *request, now time.Time) error {
	if v.tolerance <= 0 || v.scheme == SchemeStandardWebhooks {
		return nil
	}
	if r.ts == "" {
		return fmt.Errorf("%w: no timestamp", ErrUnparsable)
	}
	t, err := parseTimestamp(r.ts, v.ts.unit)
	if err != nil {
		return err
	}
	return checkSkew(t, now, v.tolerance)
}

func parseTimestamp(s, unit string) (time.Time, error) {
	if unit == "iso8601" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: timestamp not RFC 3339", ErrUnparsable)
		}
		return t, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%w: timestamp not an integer", ErrUnparsable)
	}
	if unit == "ms" {
		return time.UnixMilli(n), nil
	}
	return time.Unix(n, 0), nil
}

// timestampOf reads the delivery's raw timestamp.
func (v *verifier) timestampOf(r *request) string {
	switch {
	case v.ts.header != "":
		return r.header.Get(v.ts.header)
	case v.ts.json != "":
		s, _ := lookupScalar(r.doc, v.ts.json)
		return s
	}
	return ""
}

// signedURL is the URL the vendor signed: the configured one, or for a
// scheme that signs the request's query (twilio) the configured one with
// the query the request arrived with.
func (v *verifier) signedURL(rawQuery string) (string, url.Values) {
	if v.scheme != SchemeTwilio {
		if u, err := url.Parse(v.url); err == nil {
			return v.url, u.Query()
		}
		return v.url, nil
	}
	base, _, _ := strings.Cut(v.url, "?")
	q, _ := url.ParseQuery(rawQuery)
	if rawQuery == "" {
		return base, q
	}
	return base + "?" + rawQuery, q
}
