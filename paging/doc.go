// Package paging tells a human that a ledger row needs them: PagerDuty
// Events API v2 (PagerDuty), a generic JSON webhook for Slack/Opsgenie
// bridges (Webhook), and the log (Log, the default when no pager is
// configured).
//
// Every pager is idempotent by dedup key: the resolver pages a row with
// DedupKey(tenant, row key) ("recon:<tenant>:<key>"), so a trigger that is retried, or sent
// again by a second replica, lands on the same PagerDuty alert instead of a
// new one, and the resolve for the same key closes it.
//
// Delivery: 2xx (PagerDuty: 202) is success; 400 (and other 4xx but 408 and
// 429) is a permanent refusal, returned at once as ErrRejected; 408, 429,
// 5xx and network errors are retried inside the call with capped
// exponential backoff and full jitter until the context's deadline (or
// Retry.MaxElapsed when it has none), then returned as ErrUndelivered so the
// caller retries later. The routing key and the webhook URL are credentials:
// they are never logged nor put in an error.
//
// Imports: the standard library only (make lint checks this).
//
// Concurrency: every pager is safe for concurrent use; a call blocks only
// its caller and starts no goroutine.
package paging
