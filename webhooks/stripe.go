package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StripeEndpoint is one Stripe webhook endpoint: POST /webhooks/stripe/{Name}.
type StripeEndpoint struct {
	Name   string
	Tenant string
	// Secrets are the endpoint's whsec_ signing secrets, used as-is as HMAC
	// keys; several while a secret is rolled.
	Secrets []string
	// Tolerance bounds the signed timestamp's age and its lead into the
	// future (default DefaultTolerance).
	Tolerance time.Duration
	// MetadataKey is the metadata field holding our local id (default
	// "metadata_local_id").
	MetadataKey string
}

// DefaultTolerance is the signed timestamp's allowed skew either way.
const DefaultTolerance = 5 * time.Minute

// DefaultMetadataKey is where the runtime puts metadata_local_id.
const DefaultMetadataKey = "metadata_local_id"

// StripeSignature is a parsed Stripe-Signature header.
type StripeSignature struct {
	Timestamp int64
	// V1 are the decoded v1 signatures (one per active secret). Other
	// schemes, v0 included, are dropped so a downgrade is impossible.
	V1 [][]byte
}

// maxStripeSignatures bounds the work one header can ask for.
const maxStripeSignatures = 16

// ParseStripeSignature parses `t=<unix>,v1=<hex>[,v1=<hex>…][,v0=…]`. It
// follows stripe-go: a piece that is not key=value or a non-integer t is
// ErrUnparsable; unknown keys and v1 values that are not 32 bytes of hex
// are skipped; no usable v1 is ErrBadSignature, as is a missing header.
func ParseStripeSignature(header string) (StripeSignature, error) {
	var s StripeSignature
	if header == "" {
		return s, fmt.Errorf("%w: no Stripe-Signature header", ErrBadSignature)
	}
	hasT := false
	for piece := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(piece), "=")
		if !ok || strings.Contains(v, "=") {
			return StripeSignature{}, fmt.Errorf("%w: Stripe-Signature: malformed pair", ErrUnparsable)
		}
		switch k {
		case "t":
			ts, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return StripeSignature{}, fmt.Errorf("%w: Stripe-Signature: bad timestamp", ErrUnparsable)
			}
			s.Timestamp, hasT = ts, true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size || len(s.V1) == maxStripeSignatures {
				continue
			}
			s.V1 = append(s.V1, sig)
		}
	}
	if !hasT {
		return StripeSignature{}, fmt.Errorf("%w: Stripe-Signature: no timestamp", ErrUnparsable)
	}
	if len(s.V1) == 0 {
		return StripeSignature{}, fmt.Errorf("%w: Stripe-Signature: no v1 signature", ErrBadSignature)
	}
	return s, nil
}

// VerifyStripe checks a delivery the way docs/architecture.md §7a asks, which is
// not stripe-go's order: first the signature (HMAC-SHA256 over "t." + the
// raw body, keyed by each secret string as-is, compared in constant time
// with every v1), and only then the timestamp, which must be no older and
// no further in the future than tolerance. A stale but authentic delivery
// is ErrStale; a forged one is ErrBadSignature whatever its timestamp, so
// the answer never tells a forger that only the clock was wrong.
func VerifyStripe(header string, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	sig, err := ParseStripeSignature(header)
	if err != nil {
		return err
	}
	if !stripeSigned(sig, body, secrets) {
		return fmt.Errorf("%w: no v1 signature matches a secret of the endpoint", ErrBadSignature)
	}
	return checkSkew(time.Unix(sig.Timestamp, 0), now, tolerance)
}

func stripeSigned(sig StripeSignature, body []byte, secrets []string) bool {
	prefix := strconv.AppendInt(nil, sig.Timestamp, 10)
	prefix = append(prefix, '.')
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(prefix)
		mac.Write(body)
		want := mac.Sum(nil)
		for _, got := range sig.V1 {
			if hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

// checkSkew rejects a signed time older, or further ahead, than tolerance.
func checkSkew(signed, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	switch d := now.Sub(signed); {
	case d > tolerance:
		return fmt.Errorf("%w: signed %s ago", ErrStale, d.Truncate(time.Second))
	case d < -tolerance:
		return fmt.Errorf("%w: signed %s in the future", ErrStale, (-d).Truncate(time.Second))
	}
	return nil
}

// DecodeStripe decodes a verified Stripe event of any API version into an
// Event. metadataKey names the metadata field holding our local id (empty:
// DefaultMetadataKey). The local id, the echoed idempotency key, the
// amount and the currency are optional; an event without an id or a type
// is ErrUnparsable. Only the fields below are read (they have kept their
// names since 2017), not stripe-go's Event, so events of every API version
// decode; loosely typed fields (metadata values, the expandable
// payment_intent and charge) are taken only when they are strings, so an
// unexpected shape drops the field instead of the whole event: a 400 here
// would make Stripe retry a perfectly good event for three days. The
// request member is an object since API version 2017-05-25 (before it, the
// request id as a plain string).
func DecodeStripe(body []byte, metadataKey string) (Event, error) {
	if metadataKey == "" {
		metadataKey = DefaultMetadataKey
	}
	f, err := scanStripe(body, metadataKey)
	if err != nil {
		return Event{}, fmt.Errorf("%w: stripe event: %v", ErrUnparsable, err)
	}
	if f.id == "" || f.typ == "" {
		return Event{}, fmt.Errorf("%w: stripe event: no id or type", ErrUnparsable)
	}
	ev := Event{
		Vendor:         "stripe",
		ID:             f.id,
		Type:           f.typ,
		ObjectID:       f.objID,
		LocalID:        f.localID,
		Currency:       strings.ToLower(f.currency),
		Livemode:       f.livemode,
		IdempotencyKey: f.idempotencyKey,
		Raw:            body,
	}
	if f.created > 0 {
		ev.Created = time.Unix(f.created, 0).UTC()
	}
	// A charge made by a PaymentIntent is evidence about the PaymentIntent,
	// which is what the runtime created and recorded as its receipt.
	if f.objCharge && f.paymentIntent != "" {
		ev.ObjectID = f.paymentIntent
	}
	switch {
	case f.hasAmount:
		amount := f.amount
		ev.Amount = &amount
	case f.hasAmountReceived:
		amount := f.amountReceived
		ev.Amount = &amount
	}
	return ev, nil
}
