package webhooks

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Twilio's scheme (the twilio preset), which a template cannot express:
// X-Twilio-Signature is base64 HMAC-SHA1, keyed with the Auth Token, over
// the URL Twilio requested (the configured url with the request's query)
// followed by every form parameter as name+value, sorted by name, with the
// first value of a repeated name (twilio-go ValidateBody). A URL whose
// query has bodySHA256 is a JSON delivery: the signature covers the URL
// alone and the body must hash (SHA-256, hex) to that parameter. Twilio's
// back ends sign with and without the default port, so both are tried
// (twilio-go request_validator.go).

const headerTwilioSignature = "X-Twilio-Signature"

func (v *verifier) verifyTwilio(r *request) error {
	raw := r.header.Get(headerTwilioSignature)
	if raw == "" {
		return fmt.Errorf("%w: no %s", ErrBadSignature, headerTwilioSignature)
	}
	sig, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return fmt.Errorf("%w: %s not base64", ErrBadSignature, headerTwilioSignature)
	}
	var tail []byte
	if want := r.query.Get("bodySHA256"); want != "" {
		sum := sha256.Sum256(r.body)
		if !equal([]byte(hex.EncodeToString(sum[:])), []byte(strings.ToLower(want))) {
			return fmt.Errorf("%w: body does not hash to bodySHA256", ErrBadSignature)
		}
	} else {
		form, err := url.ParseQuery(string(r.body))
		if err != nil {
			return fmt.Errorf("%w: form body: %v", ErrUnparsable, err)
		}
		tail = twilioParams(form)
	}
	var macs [][]byte
	for _, u := range twilioURLVariants(r.url) {
		macs = append(macs, v.macs(append([]byte(u), tail...))...)
	}
	if !anyMatch([][]byte{sig}, macs) {
		return fmt.Errorf("%w: no signature matches a secret of the endpoint", ErrBadSignature)
	}
	return nil
}

// twilioParams is the sorted name+value concatenation of a form.
func twilioParams(form url.Values) []byte {
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	slices.Sort(names)
	var b []byte
	for _, k := range names {
		b = append(b, k...)
		if len(form[k]) > 0 {
			b = append(b, form[k][0]...)
		}
	}
	return b
}

// twilioURLVariants returns the URL as given and with its port toggled:
// without it when it has one, with the scheme's default when it has none.
func twilioURLVariants(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return []string{raw}
	}
	other := *u
	if u.Port() != "" {
		other.Host = u.Hostname()
		if strings.Contains(other.Host, ":") {
			other.Host = "[" + other.Host + "]"
		}
	} else {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		other.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return []string{raw, other.String()}
}
