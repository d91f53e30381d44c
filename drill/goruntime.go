package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v79"
	stripeclient "github.com/stripe/stripe-go/v79/client"

	"github.com/agentledger/reconciler/client"
)

// goRuntime is the Go SDK as the agent runtime, in-process: each agent is
// a *client.Client that waits on NATS with the drill tenant's credential
// (long polls as the fallback), and vendor calls go through
// client.Transport, or stripe-go through client.StripeBackend for a call
// marked sdk "stripe", exactly as an agent runtime would make them.
type goRuntime struct {
	re runtimeEnv

	mu     sync.Mutex
	agents map[agentClient]*client.Client
}

// agentClient names one agent's client: a do that waits for queued calls
// (op.WaitQueued) uses a client WithWaitQueued.
type agentClient struct {
	name       string
	waitQueued bool
}

func newGoRuntime(re runtimeEnv) *goRuntime {
	return &goRuntime{re: re, agents: map[agentClient]*client.Client{}}
}

func (g *goRuntime) close() error { return nil }

// has: the Go SDK implements every step of the protocol.
func (g *goRuntime) has(string) bool { return true }

// client returns the agent's client, made on first use.
func (g *goRuntime) client(name string, waitQueued bool) (*client.Client, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := agentClient{name, waitQueued}
	if c, ok := g.agents[k]; ok {
		return c, nil
	}
	opts := []client.Option{client.WithNATS(g.re.JS), client.WithPollInterval(agentPollMS * time.Millisecond),
		client.WithWait(agentWaitMS * time.Millisecond), client.WithLogger(g.re.Log),
		client.WithRetries(agentRetries, agentBackoffMS*time.Millisecond)}
	if waitQueued {
		opts = append(opts, client.WithWaitQueued())
	}
	c, err := client.New(g.re.URL+"/"+name, g.re.Token, opts...)
	if err != nil {
		return nil, err
	}
	g.agents[k] = c
	return c, nil
}

func (g *goRuntime) run(ctx context.Context, o op) (reply, error) {
	ans := reply{ID: o.ID}
	if o.Op == opScrub {
		ans.Args = client.Scrub(o.Args)
		return ans, nil
	}
	c, err := g.client(o.Agent, o.WaitQueued)
	if err != nil {
		return ans, err
	}
	switch o.Op {
	case opDo:
		if o.Claim == nil || o.Call == nil {
			return ans, errors.New("do without a claim or a call")
		}
		out, err := c.Do(ctx, *o.Claim, goCall(*o.Call))
		ans.Outcome, ans.Error = wireOutcomeOf(out), wireErrorOf(err)
	case opClaim:
		if o.Claim == nil {
			return ans, errors.New("claim without a claim")
		}
		resp, err := c.Claim(ctx, *o.Claim)
		ans.Claim, ans.Error = claimAnswer(resp, err)
	case opCall:
		if o.Call == nil {
			return ans, errors.New("call without a call")
		}
		res, err := goCall(*o.Call)(client.WithKey(ctx, o.Key, o.LocalID), o.Key, o.LocalID)
		r := wireResultOf(res)
		ans.Result = &r
		if err != nil && res.HTTPStatus == 0 {
			// Only no answer is an error: a refusal is a result.
			ans.Error = &wireError{Class: errTransport, Message: err.Error()}
		}
	case opReport:
		if o.Outcome == nil {
			return ans, errors.New("report without an outcome")
		}
		row, err := c.ReportOutcome(ctx, o.Key, *o.Outcome)
		if err == nil {
			ans.Row = &row
		}
		ans.Error = wireErrorOf(err)
	case opCompensate:
		resp, err := c.Compensate(ctx, o.Key, o.Action)
		ans.Claim, ans.Error = claimAnswer(resp, err)
	case opGet:
		row, err := c.Get(ctx, o.Key)
		if err == nil {
			ans.Row = &row
		}
		ans.Error = wireErrorOf(err)
	default:
		ans.Error = &wireError{Class: errUnsupported, Message: fmt.Sprintf("op %q", o.Op)}
	}
	return ans, nil
}

func claimAnswer(resp client.ClaimResponse, err error) (*wireClaim, *wireError) {
	if err != nil {
		return nil, wireErrorOf(err)
	}
	return wireClaimOf(resp), nil
}

// goCall is the vendor call vc as client.Do runs it, bounded by vc's
// timeout: the key travels in ctx to client.Transport (or StripeBackend),
// and the local id goes into the form where vc says.
func goCall(vc vendorCall) client.CallFunc {
	return func(ctx context.Context, _, localID string) (client.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, vc.timeout())
		defer cancel()
		if vc.SDK == sdkStripe {
			return stripeCall(ctx, vc)
		}
		form := formOf(vc.Form)
		if vc.LocalIDField != "" {
			form.Set(vc.LocalIDField, localID)
		}
		return postForm(ctx, vc, form)
	}
}

// postForm sends one form write through client.Transport and turns the answer
// into a client.Result: its status, headers and the receipt where vc says.
// An answer that is not a 2xx is also an error (with its status in the
// Result), as the SDK's CallFunc expects.
func postForm(ctx context.Context, vc vendorCall, form url.Values) (client.Result, error) {
	req, err := http.NewRequestWithContext(ctx, vc.Method, vc.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return client.Result{}, err
	}
	req.Header.Set("Content-Type", formType)
	hc := &http.Client{Transport: &client.Transport{Header: vc.KeyHeader}}
	resp, err := hc.Do(req)
	if err != nil {
		return client.Result{}, fmt.Errorf("post %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The status arrived: the vendor answered, whatever the body says.
		return client.ResultFromResponse(resp, ""), fmt.Errorf("post %s: read answer: %w", req.URL.Path, err)
	}
	res := client.ResultFromResponse(resp, receiptOf(data, vc.Receipt))
	if resp.StatusCode/100 != 2 {
		return res, fmt.Errorf("post %s: vendor answered %d", req.URL.Path, resp.StatusCode)
	}
	return res, nil
}

// receiptOf is the first non-empty string at one of paths (dotted, into
// nested objects) of the JSON answer data; "" when none holds one.
func receiptOf(data []byte, paths []string) string {
	var doc any
	if json.Unmarshal(data, &doc) != nil {
		return ""
	}
	for _, p := range paths {
		v := doc
		for _, name := range strings.Split(p, ".") {
			m, _ := v.(map[string]any)
			v = m[name]
		}
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// stripeCall is the PaymentIntent create vc describes, made the way most
// Go runtimes would make it: with stripe-go, through client.StripeBackend,
// which sets the ledger key as the Idempotency-Key explicitly (stripe-go
// would mint a random one) and metadata[metadata_local_id]. stripe-go's
// own network retries are off: the ledger decides about retries, with the
// same key.
func stripeCall(ctx context.Context, vc vendorCall) (client.Result, error) {
	u, err := url.Parse(vc.URL)
	if err != nil {
		return client.Result{}, err
	}
	if vc.Method != http.MethodPost || u.Path != "/v1/payment_intents" {
		return client.Result{}, fmt.Errorf("stripe-go: the drills make only PaymentIntent creates, not %s %s", vc.Method, u.Path)
	}
	amount, err := strconv.ParseInt(vc.Form["amount"], 10, 64)
	if err != nil {
		return client.Result{}, fmt.Errorf("stripe-go: amount: %w", err)
	}
	inner := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(u.Scheme + "://" + u.Host),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	sc := &stripeclient.API{}
	sc.Init("sk_test_drill", &stripe.Backends{API: client.NewStripeBackend(inner)})
	params := &stripe.PaymentIntentParams{
		Amount: stripe.Int64(amount), Currency: stripe.String(vc.Form["currency"]), Customer: stripe.String(vc.Form["customer"]),
	}
	params.Context = ctx // carries the key and the local id to StripeBackend
	pi, err := sc.PaymentIntents.New(params)
	return client.StripeResult(pi, err)
}
