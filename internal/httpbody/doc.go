// Package httpbody reads a request body into one buffer of its announced
// length. The claim API and the webhook ingest both read every body whole
// (a claim to decode it, a delivery because its signature covers the exact
// bytes); io.ReadAll starts at 512 bytes and grows, copying as it goes.
package httpbody
