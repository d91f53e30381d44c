package resolver

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// stripeMock starts stripe-mock (Stripe's OpenAPI-driven mock, which
// validates every request against the spec) on a random local port and
// returns its base URL, or skips when it is not installed.
func stripeMock(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		if gp := os.Getenv("GOPATH"); gp != "" {
			bin = filepath.Join(gp, "bin", "stripe-mock")
		} else if home, herr := os.UserHomeDir(); herr == nil {
			bin = filepath.Join(home, "go", "bin", "stripe-mock")
		}
		if _, serr := os.Stat(bin); serr != nil {
			t.Skip("stripe-mock not installed; run: go install github.com/stripe/stripe-mock@v0.203.0 (the version .ci/run pins)")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() { // exits when stripe-mock's stdout closes (the cleanup kills it)
		re := regexp.MustCompile(`Listening for HTTP at address: (\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("stripe-mock did not start")
		return ""
	}
}

// TestStripeRequestsAgainstStripeMock sends every kind of request the
// Stripe lookup makes to stripe-mock, which answers 400 to any request
// that does not match Stripe's OpenAPI spec (checked by the negative case).
func TestStripeRequestsAgainstStripeMock(t *testing.T) {
	base := stripeMock(t)
	now := time.Now()
	s, err := NewStripe(StripeOptions{APIBase: base, APIKey: "sk_test_123", CallTimeout: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("ab", 32)
	row := func(path, body, receipt string) ledger.Row {
		r := ledger.Row{
			Tenant: "acme", Key: key, MetadataLocalID: ledger.LocalID("acme", key, true), Vendor: "stripe",
			Tool: "stripe.call", Status: ledger.StatusUnknown, FirstSeenAt: now.Add(-time.Hour), UpstreamReceiptID: receipt,
		}
		if path != "" {
			r.Request = &ledger.Request{Method: "POST", Path: path, ContentType: "application/x-www-form-urlencoded", Body: body}
		}
		return r
	}
	ctx := context.Background()
	for _, res := range []string{"payment_intents", "charges", "customers", "invoices", "subscriptions"} {
		t.Run("search "+res, func(t *testing.T) {
			if _, err := s.searchFor(ctx, row("/v1/"+res, "", ""), res); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, parent := range []string{"payment_intent", "charge"} {
		t.Run("list refunds by "+parent, func(t *testing.T) {
			if _, err := s.findRefund(ctx, row("/v1/refunds", parent+"=x_123", ""), parent, "x_123"); err != nil {
				t.Fatal(err)
			}
		})
	}
	for res := range eventTypes {
		t.Run("list events "+res, func(t *testing.T) {
			if _, err := s.findInEvents(ctx, row("/v1/"+res, "", ""), res); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, id := range []string{"pi_123", "ch_123", "cus_123", "in_123", "sub_123", "re_123"} {
		t.Run("retrieve "+id, func(t *testing.T) {
			f, err := s.Retrieve(ctx, row("", "", id))
			if err != nil || !f.Found {
				t.Fatalf("finding %+v, err %v", f, err)
			}
		})
	}
	for _, tc := range []struct{ name, path, body string }{
		{"payment intent", "/v1/payment_intents", "amount=1000&currency=usd&metadata[metadata_local_id]=rl_x&payment_method_types[0]=card"},
		{"refund", "/v1/refunds", "payment_intent=pi_123&metadata[metadata_local_id]=rl_x"},
		{"customer", "/v1/customers", "email=a%40example.com&metadata[metadata_local_id]=rl_x"},
	} {
		t.Run("replay "+tc.name, func(t *testing.T) {
			// stripe-mock answers with a fixture object (its state is the
			// fixture's); what matters is that the request was accepted.
			f, err := s.Replay(ctx, row(tc.path, tc.body, ""))
			if err != nil || !f.Found {
				t.Fatalf("finding %+v, err %v", f, err)
			}
		})
	}
	t.Run("stripe-mock refuses a request off the spec", func(t *testing.T) {
		f, err := s.Replay(ctx, row("/v1/payment_intents", "amount=ten&currency=usd", ""))
		if err != nil || f.Found || f.Status != ledger.StatusFailedPoison {
			t.Fatalf("finding %+v, err %v; want the 400 as failed_poison", f, err)
		}
	})
}
