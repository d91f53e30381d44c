package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentledger/reconciler/fixtures"
)

// sendFixtureUsage is the help of `reconciler send-fixture`.
const sendFixtureUsage = `Usage:
  reconciler send-fixture NAME --url URL --secret S [--set metadata_local_id=rl_…]...
  reconciler send-fixture --list

Signs a payload from fixtures/ the way its vendor would and POSTs it to URL
(e.g. http://127.0.0.1:8080/webhooks/stripe); prints the status and body.
Exit status: 0 for a 2xx answer, 1 for any other answer or a failed post,
2 for a usage error.

  --url URL          where to post (required)
  --secret S         Stripe: the endpoint's whsec_ secret; Standard Webhooks
                     (resend/…): the whsec_<base64> secret. Repeat it to sign
                     with several secrets, as during a rotation.
  --set PATH=VALUE   change the payload before signing; repeatable.
                     metadata_local_id=rl_… and idempotency_key=… replace the
                     placeholders; any other PATH is a dotted JSON path
                     (data.object.amount=999, id=evt_new).
  --id ID            Standard Webhooks: the webhook-id (default: derived from
                     the payload, so a resend is a duplicate like a retry).
  --at TIME          signing time, RFC 3339 or Unix seconds (default: now);
                     an old one shows the stale-timestamp answer.
  --timeout D        bound on the post (default 10s)
  --list             print the fixture names
PayPal fixtures (paypal/…) are signed with a certificate's key:
  --paypal-key FILE  PEM RSA private key of the certificate served at
  --paypal-cert-url URL
  --paypal-webhook-id ID   the receiving endpoint's webhook_id
`

// sendFixture runs `reconciler send-fixture`; the lead wires it as the
// subcommand. It never prints a secret.
func sendFixture(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return sendFixtureWith(ctx, args, stdout, stderr, time.Now, nil)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// sendFixtureWith is sendFixture with its clock and HTTP client injected
// (nil client: a plain client with the --timeout).
func sendFixtureWith(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time, client *http.Client) int {
	fs := flag.NewFlagSet("reconciler send-fixture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		url, id, at, ppKey, ppCertURL, ppWebhookID string
		secrets, sets                              multiFlag
		timeout                                    = 10 * time.Second
		list                                       bool
	)
	fs.StringVar(&url, "url", "", "")
	fs.Var(&secrets, "secret", "")
	fs.Var(&sets, "set", "")
	fs.StringVar(&id, "id", "", "")
	fs.StringVar(&at, "at", "", "")
	fs.DurationVar(&timeout, "timeout", timeout, "")
	fs.BoolVar(&list, "list", false, "")
	fs.StringVar(&ppKey, "paypal-key", "", "")
	fs.StringVar(&ppCertURL, "paypal-cert-url", "", "")
	fs.StringVar(&ppWebhookID, "paypal-webhook-id", "", "")

	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "reconciler send-fixture: "+format+"\n", a...)
		fmt.Fprint(stderr, sendFixtureUsage)
		return 2
	}
	names, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, sendFixtureUsage)
			return 0
		}
		return usageErr("%v", err)
	}
	if list {
		for _, n := range fixtures.Names() {
			fmt.Fprintln(stdout, n)
		}
		return 0
	}
	if len(names) != 1 {
		return usageErr("want exactly one fixture NAME, got %d (see --list)", len(names))
	}
	name := names[0]
	if url == "" {
		return usageErr("--url is required")
	}
	body, err := fixtures.Lookup(name)
	if err != nil {
		return usageErr("%v", err)
	}
	for _, s := range sets {
		path, value, ok := strings.Cut(s, "=")
		if !ok {
			return usageErr("--set %q: want PATH=VALUE", s)
		}
		if body, err = fixtures.Set(body, path, value); err != nil {
			return usageErr("%v", err)
		}
	}
	signedAt := now()
	if at != "" {
		if signedAt, err = parseAt(at); err != nil {
			return usageErr("--at: %v", err)
		}
	}

	header := http.Header{}
	switch fixtures.Vendor(name) {
	case "stripe":
		if len(secrets) == 0 {
			return usageErr("--secret is required for %s", name)
		}
		header.Set("Stripe-Signature", fixtures.SignStripe(body, signedAt, secrets...))
	case "standard":
		if len(secrets) == 0 {
			return usageErr("--secret is required for %s", name)
		}
		if id == "" {
			sum := sha256.Sum256(body)
			id = "msg_" + hex.EncodeToString(sum[:12])
		}
		if header, err = fixtures.SignStandard(id, body, signedAt, secrets...); err != nil {
			return usageErr("%v", err)
		}
	case "paypal":
		if ppKey == "" || ppCertURL == "" || ppWebhookID == "" {
			return usageErr("%s needs --paypal-key, --paypal-cert-url and --paypal-webhook-id", name)
		}
		key, err := readRSAKey(ppKey)
		if err != nil {
			return usageErr("--paypal-key: %v", err)
		}
		tid := make([]byte, 16)
		_, _ = rand.Read(tid)
		if header, err = fixtures.SignPayPal(key, ppCertURL, ppWebhookID, hex.EncodeToString(tid), signedAt, body); err != nil {
			fmt.Fprintf(stderr, "reconciler send-fixture: %v\n", err)
			return 1
		}
	}
	header.Set("Content-Type", "application/json")

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return usageErr("--url: %v", err)
	}
	req.Header = header
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "reconciler send-fixture: post %s: %v\n", name, err)
		return 1
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "reconciler send-fixture: read answer: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n%s\n", resp.Status, bytes.TrimSpace(answer))
	if resp.StatusCode/100 != 2 {
		return 1
	}
	return 0
}

func parseAt(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	var sec int64
	if _, err := fmt.Sscanf(s, "%d", &sec); err != nil || fmt.Sprint(sec) != s {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor Unix seconds", s)
	}
	return time.Unix(sec, 0), nil
}

func readRSAKey(path string) (*rsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not an RSA private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA private key")
	}
	return rk, nil
}
