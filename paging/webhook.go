package paging

import (
	"context"
	"net/http"
	"time"
)

// WebhookOptions configure NewWebhook.
type WebhookOptions struct {
	// URL receives the JSON POST. It may carry a credential (Slack-style
	// webhook URLs do), so it is never logged.
	URL    string
	Client *http.Client
	Retry  Retry
}

// Webhook posts pages as JSON to any URL (Slack or Opsgenie bridges): 2xx
// is success, the retry rules are PagerDuty's.
type Webhook struct {
	url    string
	client *http.Client
	retry  Retry
}

// WebhookEvent is the body a Webhook posts. EventAction is trigger or
// resolve; receivers dedup on DedupKey.
type WebhookEvent struct {
	EventAction   string         `json:"event_action"`
	DedupKey      string         `json:"dedup_key"`
	Summary       string         `json:"summary,omitempty"`
	Source        string         `json:"source,omitempty"`
	Severity      Severity       `json:"severity,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
	Timestamp     time.Time      `json:"timestamp"`
}

// NewWebhook returns a Webhook pager for an absolute http(s) URL.
func NewWebhook(opts WebhookOptions) (*Webhook, error) {
	if err := checkURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	return &Webhook{url: opts.URL, client: opts.Client, retry: opts.Retry.withDefaults()}, nil
}

// Trigger posts a trigger event for the page.
func (w *Webhook) Trigger(ctx context.Context, p Page) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	p, err := p.normalize()
	if err != nil {
		return err
	}
	ev := WebhookEvent{
		EventAction: "trigger", DedupKey: p.DedupKey, Summary: p.Summary, Source: p.Source,
		Severity: p.Severity, CustomDetails: p.CustomDetails, Timestamp: time.Now().UTC(),
	}
	return postJSON(ctx, w.client, w.url, ev, w.retry, "webhook trigger "+p.DedupKey)
}

// Resolve posts a resolve event for dedupKey.
func (w *Webhook) Resolve(ctx context.Context, dedupKey string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := checkKey(dedupKey); err != nil {
		return err
	}
	ev := WebhookEvent{EventAction: "resolve", DedupKey: dedupKey, Timestamp: time.Now().UTC()}
	return postJSON(ctx, w.client, w.url, ev, w.retry, "webhook resolve "+dedupKey)
}
