package webhooks

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// Adyen's standard notifications (the adyen preset), which a template
// cannot express: every NotificationRequestItem carries its own
// additionalData.hmacSignature, base64 HMAC-SHA256 keyed with the
// hex-decoded HMAC key over eight fields joined with ":", raw (no
// escaping; a missing field is empty, amount.value a decimal integer):
// adyen-go hmacvalidator GetDataToSign, adyen-node getDataToSign. Every item
// must verify, or the delivery is refused whole.

var adyenFields = []string{
	"pspReference", "originalReference", "merchantAccountCode", "merchantReference",
	"amount.value", "amount.currency", "eventCode", "success",
}

// adyenSigned is the signed string of one item.
func adyenSigned(item any) string {
	vals := make([]string, len(adyenFields))
	for i, f := range adyenFields {
		vals[i], _ = lookupScalar(item, f)
	}
	return strings.Join(vals, ":")
}

func (v *verifier) verifyAdyen(items []any) error {
	for i, item := range items {
		raw, _ := lookupScalar(item, "additionalData.hmacSignature")
		if raw == "" {
			return fmt.Errorf("%w: item %d: no additionalData.hmacSignature", ErrBadSignature, i)
		}
		// Compared as decoded bytes with a length check (adyen-node's
		// secureCompare): two base64 strings can decode to different lengths.
		sig, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return fmt.Errorf("%w: item %d: hmacSignature not base64", ErrBadSignature, i)
		}
		if !anyMatch([][]byte{sig}, v.macs([]byte(adyenSigned(item)))) {
			return fmt.Errorf("%w: item %d: no signature matches a key of the endpoint", ErrBadSignature, i)
		}
	}
	return nil
}
