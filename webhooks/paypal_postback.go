package webhooks

// PayPal postback verification: POST the delivery back to PayPal's
// verify-webhook-signature API with an OAuth2 client-credentials token.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

const (
	paypalVerifyPath = "/v1/notifications/verify-webhook-signature"
	// paypalMaxResponse caps what we read from PayPal's API answers.
	paypalMaxResponse = 64 << 10
)

// accessToken is the endpoint's OAuth token. Every failure is ErrUpstream: a
// refused client secret is our configuration, not the delivery's fault, and
// PayPal's retries give the operator time to fix it.
func (v *PayPalVerifier) accessToken(ctx context.Context) (string, error) {
	tok, err := v.tokens.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUpstream, err)
	}
	return tok, nil
}

func (v *PayPalVerifier) verifyPostback(ctx context.Context, hd paypalHeaders, body []byte) error {
	if !json.Valid(body) {
		return fmt.Errorf("paypal: %w: body is not JSON", ErrUnparsable)
	}
	payload, err := paypalPostbackBody(hd, v.ep.WebhookID, body)
	if err != nil {
		return fmt.Errorf("paypal: %w: %w", ErrUnparsable, err)
	}
	// Two attempts: a 401 means the cached token was revoked early; one
	// fresh token settles it, a second 401 is a configuration problem.
	for attempt := 0; ; attempt++ {
		tok, err := v.accessToken(ctx)
		if err != nil {
			return fmt.Errorf("paypal: %w", err)
		}
		status, code, err := v.postVerify(ctx, tok, payload)
		if err != nil {
			return fmt.Errorf("paypal: %w", err)
		}
		switch {
		case code == http.StatusUnauthorized && attempt == 0:
			v.tokens.Invalidate(tok)
			continue
		case code == http.StatusOK && status == "SUCCESS":
			return nil
		case code == http.StatusOK:
			return fmt.Errorf("paypal: %w: postback verification_status %.32q", ErrBadSignature, status)
		case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
			// PayPal refused the verification request itself: the headers or
			// body of this delivery are not something it signed.
			return fmt.Errorf("paypal: %w: postback answered %d", ErrBadSignature, code)
		default:
			return fmt.Errorf("paypal: %w: postback answered %d", ErrUpstream, code)
		}
	}
}

// paypalPostbackBody builds the verify-webhook-signature request by hand so
// webhook_event is the received bytes exactly: encoding/json would compact and
// HTML-escape even a json.RawMessage, and a re-serialised event is the
// classic cause of FAILURE answers.
func paypalPostbackBody(hd paypalHeaders, webhookID string, body []byte) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(body) + 1024)
	fields := []struct{ name, val string }{
		{"auth_algo", hd.authAlgo},
		{"cert_url", hd.certURL},
		{"transmission_id", hd.transmissionID},
		{"transmission_sig", hd.sigB64},
		{"transmission_time", hd.transmissionTime},
		{"webhook_id", webhookID},
	}
	b.WriteByte('{')
	for _, f := range fields {
		val, err := json.Marshal(f.val)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", f.name, err)
		}
		b.WriteString(`"` + f.name + `":`)
		b.Write(val)
		b.WriteByte(',')
	}
	b.WriteString(`"webhook_event":`)
	b.Write(body)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// postVerify makes one verify-webhook-signature call and returns the
// verification status (when the answer is 200) and the HTTP status.
func (v *PayPalVerifier) postVerify(ctx context.Context, token string, payload []byte) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.apiBase+paypalVerifyPath, bytes.NewReader(payload))
	if err != nil {
		return "", 0, fmt.Errorf("%w: build postback request: %w", ErrUpstream, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w: postback: %w", ErrUpstream, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, paypalMaxResponse)) // keep the connection reusable
		return "", resp.StatusCode, nil
	}
	var out struct {
		VerificationStatus string `json:"verification_status"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, paypalMaxResponse)).Decode(&out); err != nil {
		return "", 0, fmt.Errorf("%w: decode postback answer: %w", ErrUpstream, err)
	}
	return out.VerificationStatus, resp.StatusCode, nil
}
