package paging

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
)

// DefaultPagerDutyURL is the Events API v2 enqueue endpoint.
const DefaultPagerDutyURL = "https://events.pagerduty.com/v2/enqueue"

// PagerDutyOptions configure NewPagerDuty.
type PagerDutyOptions struct {
	// URL of the Events API v2 (default DefaultPagerDutyURL; tests point it at a fake).
	URL string
	// RoutingKey is the integration key: a credential, never logged.
	RoutingKey string
	// Client sends the events (default: a client without a global timeout;
	// every attempt has Retry.AttemptTimeout).
	Client *http.Client
	Retry  Retry
}

// PagerDuty sends pages to PagerDuty's Events API v2.
type PagerDuty struct {
	url        string
	routingKey string
	client     *http.Client
	retry      Retry
}

// NewPagerDuty returns a PagerDuty pager. It needs a routing key and an
// absolute http(s) URL.
func NewPagerDuty(opts PagerDutyOptions) (*PagerDuty, error) {
	if opts.URL == "" {
		opts.URL = DefaultPagerDutyURL
	}
	if err := checkURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.RoutingKey == "" {
		return nil, errors.New("pagerduty: routing key is required")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	return &PagerDuty{url: opts.URL, routingKey: opts.RoutingKey, client: opts.Client, retry: opts.Retry.withDefaults()}, nil
}

// pdEvent is the Events API v2 body.
type pdEvent struct {
	RoutingKey  string     `json:"routing_key"`
	EventAction string     `json:"event_action"`
	DedupKey    string     `json:"dedup_key"`
	Payload     *pdPayload `json:"payload,omitempty"`
}

type pdPayload struct {
	Summary       string         `json:"summary"`
	Source        string         `json:"source"`
	Severity      Severity       `json:"severity"`
	Timestamp     string         `json:"timestamp,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
}

// Trigger opens (or, while it is open, adds to) the alert of p.DedupKey.
// PagerDuty folds a trigger with the key of an open alert into that alert,
// so retrying a trigger never pages twice.
func (d *PagerDuty) Trigger(ctx context.Context, p Page) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	p, err := p.normalize()
	if err != nil {
		return err
	}
	ev := pdEvent{
		RoutingKey: d.routingKey, EventAction: "trigger", DedupKey: p.DedupKey,
		Payload: &pdPayload{
			Summary: p.Summary, Source: p.Source, Severity: p.Severity,
			Timestamp: time.Now().UTC().Format(time.RFC3339), CustomDetails: p.CustomDetails,
		},
	}
	return postJSON(ctx, d.client, d.url, ev, d.retry, "pagerduty trigger "+p.DedupKey)
}

// Resolve closes the alert of dedupKey. PagerDuty drops a resolve for a
// key with no open alert, so resolving twice is harmless.
func (d *PagerDuty) Resolve(ctx context.Context, dedupKey string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := checkKey(dedupKey); err != nil {
		return err
	}
	ev := pdEvent{RoutingKey: d.routingKey, EventAction: "resolve", DedupKey: dedupKey}
	return postJSON(ctx, d.client, d.url, ev, d.retry, "pagerduty resolve "+dedupKey)
}

// checkURL accepts absolute http and https URLs; the error never repeats
// the URL, which may hold a credential.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("paging: url must be an absolute http(s) URL")
	}
	return nil
}
