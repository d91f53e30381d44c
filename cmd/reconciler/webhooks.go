package main

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/matcher"
	"github.com/agentledger/reconciler/vendors"
	"github.com/agentledger/reconciler/webhooks"
)

// webhookOptions turns the configuration's endpoints into the webhook
// handler's options (store, metrics, logger and clock are set by the caller).
func webhookOptions(c config.Config) (webhooks.Options, error) {
	var o webhooks.Options
	for _, ep := range c.Stripe.Endpoints {
		o.Stripe = append(o.Stripe, webhooks.StripeEndpoint{
			Name: ep.Name, Tenant: ep.Tenant, Secrets: ep.Secrets, Tolerance: ep.Tolerance, MetadataKey: ep.MetadataKey,
		})
	}
	for _, ep := range c.PayPal.Endpoints {
		w := webhooks.PayPalEndpoint{
			Name: ep.Name, Tenant: ep.Tenant, WebhookID: ep.WebhookID, Verify: ep.Verify,
			CertURLPrefixes: ep.CertURLPrefixes, CertCNSuffix: ep.CertCNSuffix,
			APIBase: c.PayPal.APIBase, ClientID: c.PayPal.ClientID, ClientSecret: c.PayPal.ClientSecret,
		}
		if ep.CAFile != "" {
			pool, err := loadCAFile(ep.CAFile)
			if err != nil {
				return o, fmt.Errorf("paypal endpoint %s: %w", ep.Name, err)
			}
			w.RootCAs = pool
		}
		o.PayPal = append(o.PayPal, w)
	}
	for _, ep := range c.Standard.Endpoints {
		o.Standard = append(o.Standard, webhooks.StandardEndpoint{
			Name: ep.Name, Tenant: ep.Tenant, Secrets: ep.Secrets, Tolerance: ep.Tolerance,
			LocalIDPath: ep.LocalIDPath, Vendor: ep.Vendor,
		})
	}
	for _, ep := range c.Webhooks {
		o.Presets = append(o.Presets, presetEndpoint(ep))
	}
	table, err := matcher.NewTable(c.EventTypes)
	if err != nil {
		return o, fmt.Errorf("event_types: %w", err)
	}
	o.Types = table
	o.BodyLimit = int64(c.BodyLimit)
	return o, nil
}

// loadCAFile reads extra roots (PEM) for fetching and chain-checking PayPal
// certificates; the system roots stay trusted too.
func loadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca_file %s: no PEM certificate", path)
	}
	return pool, nil
}

// presetEndpoint turns one endpoint of the webhooks: list into the
// handler's: the knobs it sets override its preset's.
func presetEndpoint(ep config.WebhookEndpoint) webhooks.PresetEndpoint {
	reject := ep.RejectEmptyBody
	return webhooks.PresetEndpoint{
		Name: ep.Name, Preset: ep.Preset, Tenant: ep.Tenant, Vendor: ep.Vendor, Secrets: ep.Secrets,
		URL: ep.URL, LocalIDPath: ep.LocalIDPath, Tolerance: ep.Tolerance,
		Spec: webhooks.Spec{
			Scheme: ep.Scheme, Hash: ep.Hash, KeyEncoding: ep.KeyEncoding, Signed: ep.Signed,
			Signature: webhooks.SignatureSpec{Source: ep.Signature.Source, Encoding: ep.Signature.Encoding, Prefix: ep.Signature.Prefix, Separator: ep.Signature.Separator},
			Timestamp: webhooks.TimestampSpec{Source: ep.Timestamp.Source, Unit: ep.Timestamp.Unit},
			Body:      ep.Body, Batch: ep.Batch, EventID: ep.EventID, EventType: ep.EventType, ObjectID: ep.ObjectID,
			Outcome:         webhooks.OutcomeSpec{Path: ep.Outcome.Path, Failed: ep.Outcome.Failed, Succeeded: ep.Outcome.Succeeded},
			Replay:          ep.Replay,
			RejectEmptyBody: &reject,
			Ack:             webhooks.AckSpec{Body: ep.Ack.Body, ContentType: ep.Ack.ContentType},
			Challenge:       ep.Challenge,
			Types:           ep.Types,
		},
	}
}

// refetchVendors names the vendors the resolver can ask for a row's state
// (a callable profile with a lookup): for them an unsigned webhook body
// (Mailgun) is only a hint (webhooks.Options.Refetch).
func refetchVendors(ps []vendors.Profile) map[string]bool {
	out := map[string]bool{}
	for _, p := range ps {
		if p.Callable() && p.Lookup != nil {
			out[p.Name] = true
		}
	}
	return out
}
