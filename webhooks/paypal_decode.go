package webhooks

// Decoding a verified PayPal delivery into an Event: only the fields the
// ledger needs, from the shapes of Payments v2 (capture, refund,
// authorization) and Orders v2 (checkout-order) resources.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

type paypalMoney struct {
	// v2 resources: {"currency_code":"USD","value":"10.50"}.
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
	// v1 sale resources: {"currency":"EUR","total":"14.97"}.
	Currency string `json:"currency"`
	Total    string `json:"total"`
}

type paypalLink struct {
	Href string `json:"href"`
}

type paypalPurchaseUnit struct {
	CustomID  string       `json:"custom_id"`
	InvoiceID string       `json:"invoice_id"`
	Amount    *paypalMoney `json:"amount"`
}

type paypalEventBody struct {
	ID         string `json:"id"`
	EventType  string `json:"event_type"`
	CreateTime string `json:"create_time"`
	Resource   struct {
		ID            string               `json:"id"`
		CustomID      string               `json:"custom_id"`
		InvoiceID     string               `json:"invoice_id"`
		Amount        *paypalMoney         `json:"amount"`
		PurchaseUnits []paypalPurchaseUnit `json:"purchase_units"`
		Links         []paypalLink         `json:"links"`
	} `json:"resource"`
	Links []paypalLink `json:"links"`
}

// DecodePayPal normalises a verified PayPal event body.
//
// LocalID is the first non-empty of resource.custom_id,
// resource.purchase_units[].custom_id, resource.invoice_id and
// resource.purchase_units[].invoice_id (docs/architecture.md §7). The amount is
// resource.amount, else the amount of the purchase unit the local id came
// from, else the only purchase unit's; it is parsed as an exact decimal into
// ISO 4217 minor units ("10.50" USD → 1050, "1000" JPY → 1000). Livemode is
// true only when the event's links point at a non-sandbox paypal.com host.
// Errors wrap ErrUnparsable.
func DecodePayPal(body []byte) (Event, error) {
	var b paypalEventBody
	if err := decodeEvent(body, &b); err != nil {
		return Event{}, fmt.Errorf("paypal: %w: %w", ErrUnparsable, err)
	}
	if b.ID == "" || b.EventType == "" {
		return Event{}, fmt.Errorf("paypal: %w: event has no id or event_type", ErrUnparsable)
	}
	ev := Event{
		Vendor:   "paypal",
		ID:       b.ID,
		Type:     b.EventType,
		ObjectID: b.Resource.ID,
		Raw:      body,
	}
	if b.CreateTime != "" {
		t, err := time.Parse(time.RFC3339Nano, b.CreateTime)
		if err != nil {
			return Event{}, fmt.Errorf("paypal: %w: create_time %.40q is not RFC 3339", ErrUnparsable, b.CreateTime)
		}
		ev.Created = t.UTC()
	}

	r := &b.Resource
	unit := -1 // the purchase unit the local id came from
	ev.LocalID = r.CustomID
	for i := range r.PurchaseUnits {
		if ev.LocalID != "" {
			break
		}
		if ev.LocalID = r.PurchaseUnits[i].CustomID; ev.LocalID != "" {
			unit = i
		}
	}
	if ev.LocalID == "" {
		ev.LocalID = r.InvoiceID
	}
	for i := range r.PurchaseUnits {
		if ev.LocalID != "" {
			break
		}
		if ev.LocalID = r.PurchaseUnits[i].InvoiceID; ev.LocalID != "" {
			unit = i
		}
	}

	money := r.Amount
	if money == nil && unit >= 0 {
		money = r.PurchaseUnits[unit].Amount
	}
	if money == nil && len(r.PurchaseUnits) == 1 {
		money = r.PurchaseUnits[0].Amount
	}
	if money != nil {
		value, currency := money.Value, money.CurrencyCode
		if value == "" && currency == "" {
			value, currency = money.Total, money.Currency
		}
		if value != "" || currency != "" {
			n, err := paypalMinorUnits(value, currency)
			if err != nil {
				return Event{}, fmt.Errorf("paypal: %w: amount: %w", ErrUnparsable, err)
			}
			ev.Amount = &n
			ev.Currency = strings.ToLower(currency)
		}
	}
	ev.Livemode = paypalLivemode(r.Links, b.Links)
	return ev, nil
}

// paypalLivemode is false for sandbox links (api.sandbox.paypal.com,
// api-m.sandbox.paypal.com, www.sandbox.paypal.com) and for events without
// paypal.com links; true when a link points at any other paypal.com host.
func paypalLivemode(lists ...[]paypalLink) bool {
	live := false
	for _, links := range lists {
		for _, l := range links {
			u, err := url.Parse(l.Href)
			if err != nil {
				continue
			}
			host := strings.ToLower(u.Hostname())
			if !paypalNameMatches(host, ".paypal.com") {
				continue
			}
			if strings.HasSuffix(host, ".sandbox.paypal.com") {
				return false
			}
			live = true
		}
	}
	return live
}

// paypalMinorUnits converts a PayPal amount string (pattern
// -?digits[.digits] or -?.digits, at most 32 characters, per PayPal's money
// schema) to integer minor units without floating point. Digits beyond the
// currency's exponent are accepted only if they are zeros.
func paypalMinorUnits(value, currency string) (int64, error) {
	if len(currency) != 3 || !isASCIIAlpha(currency) {
		return 0, fmt.Errorf("currency %.8q is not an ISO 4217 code", currency)
	}
	if value == "" || len(value) > 32 {
		return 0, fmt.Errorf("value %.40q is empty or too long", value)
	}
	exp := currencyExponent(strings.ToUpper(currency))
	s, neg := strings.CutPrefix(value, "-")
	whole, frac, dot := strings.Cut(s, ".")
	if (dot && frac == "") || (!dot && whole == "") || !isDigits(whole) || !isDigits(frac) {
		return 0, fmt.Errorf("value %.40q is not a decimal amount", value)
	}
	if len(frac) > exp {
		if strings.Trim(frac[exp:], "0") != "" {
			return 0, fmt.Errorf("value %.40q has more than %d decimals for %s", value, exp, currency)
		}
		frac = frac[:exp]
	}
	frac += strings.Repeat("0", exp-len(frac))
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("value %.40q out of range", value)
	}
	if neg {
		n = -n
	}
	return n, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isASCIIAlpha(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// currencyExponent is the ISO 4217 minor-unit exponent. PayPal itself sends
// HUF and TWD amounts without decimals, but ISO (and Stripe, and our expect
// amounts) count them in hundredths, so "100" HUF is 10000 minor units.
func currencyExponent(code string) int {
	switch code {
	case "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF",
		"UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF":
		return 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		return 3
	case "CLF", "UYW":
		return 4
	}
	return 2
}
