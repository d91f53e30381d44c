package webhooks_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/agentledger/reconciler/webhooks"
)

// The presets are data files embedded in the package; each names its
// scheme and its vendor's default event table.
func ExamplePresets() {
	presets, err := webhooks.Presets()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(presets)) {
		fmt.Println(name, presets[name].Scheme)
	}
	// Output:
	// adyen adyen
	// github hmac
	// hubspot hmac
	// jira hmac
	// linear hmac
	// mailgun hmac
	// postmark basic_auth
	// sendgrid ecdsa_p256_sha256
	// shopify hmac
	// slack hmac
	// square hmac
	// twilio twilio
	// zendesk hmac
}
