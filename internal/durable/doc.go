// Package durable feeds ledger events from a durable JetStream consumer to
// a handler: the loop the approval notifier and the page resolver share.
// Every replica names the same durable, so each event is handled by one of
// them; an event is acknowledged only once its handler returned nil, and a
// failed one is redelivered after a delay, without limit.
//
// Imports: ledger (the event it decodes) and nats.go's jetstream.
//
// Concurrency: Consume runs handlers on the nats.go consumer's goroutine,
// one at a time, and returns only after the last one has returned.
package durable
