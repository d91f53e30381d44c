package main

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/config"
	"github.com/agentledger/reconciler/matcher"
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
