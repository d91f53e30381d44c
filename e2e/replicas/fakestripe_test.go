package replicas

import (
	"regexp"
	"strings"
	"time"

	"github.com/agentledger/reconciler/internal/fakestripe"
)

// The replicas' Stripe is fakestripe, with no key of its own: each process
// carries a distinct API key (sk_test_<id>), so its requests tell which
// process made them.

// receiptFor is the PaymentIntent id of a local id, the same in the fake's
// objects and in the webhooks the load program sends.
func receiptFor(localID string) string { return "pi_rt_" + strings.TrimPrefix(localID, "rl_") }

// charge puts the succeeded PaymentIntent of a claimed row into the fake:
// the agent's call that the load program does not make, done as soon as
// the claim is answered, before any outcome makes the row a resolver's.
func charge(stripe *fakestripe.Stripe, localID string) {
	stripe.Put(map[string]any{
		"id": receiptFor(localID), "object": "payment_intent", "status": "succeeded",
		"amount": 1050, "currency": "usd", "metadata": map[string]any{"metadata_local_id": localID},
	}, time.Now())
}

var searchQuery = regexp.MustCompile(`^metadata\['metadata_local_id'\]:'([^']+)'$`)

// lookupsOf maps each local id the resolvers searched Stripe for to the
// ids of the processes that searched, in order.
func lookupsOf(stripe *fakestripe.Stripe) map[string][]string {
	out := map[string][]string{}
	for _, r := range stripe.Requests() {
		if r.Path != "/v1/payment_intents/search" {
			continue
		}
		if m := searchQuery.FindStringSubmatch(r.Query.Get("query")); m != nil {
			out[m[1]] = append(out[m[1]], strings.TrimPrefix(r.APIKey, "sk_test_"))
		}
	}
	return out
}
