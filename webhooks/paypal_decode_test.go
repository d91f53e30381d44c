package webhooks

import (
	"bytes"
	"testing"
	"time"
)

func TestDecodePayPalFixtures(t *testing.T) {
	tests := []struct {
		file     string
		id       string
		typ      string
		object   string
		amount   int64
		currency string
		created  time.Time
	}{
		{"payment_capture_completed.json", "WH-58D329510W468432D-8HN650336L201105X", "PAYMENT.CAPTURE.COMPLETED",
			"2GG279541U471931P", 1050, "usd", time.Date(2026, 5, 14, 9, 11, 54, 338e6, time.UTC)},
		{"payment_capture_denied.json", "WH-4SW78779LY2325805-07E03580SX1414828", "PAYMENT.CAPTURE.DENIED",
			"7NW873794T343360M", 251, "aud", time.Date(2026, 5, 14, 10, 2, 16, 148e6, time.UTC)},
		{"checkout_order_completed.json", "WH-3YY56356Y7946423E-5P914211GU4312024", "CHECKOUT.ORDER.COMPLETED",
			"5O190127TN364715T", 10000, "usd", time.Date(2026, 5, 14, 11, 20, 5, 721e6, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body := readPayPalFixture(t, tt.file)
			ev, err := DecodePayPal(body)
			if err != nil {
				t.Fatalf("DecodePayPal: %v", err)
			}
			if ev.Vendor != "paypal" || ev.ID != tt.id || ev.Type != tt.typ || ev.ObjectID != tt.object {
				t.Errorf("got vendor=%q id=%q type=%q object=%q", ev.Vendor, ev.ID, ev.Type, ev.ObjectID)
			}
			if ev.LocalID != "rl_PLACEHOLDER_LOCAL_ID" {
				t.Errorf("LocalID = %q", ev.LocalID)
			}
			if ev.Amount == nil || *ev.Amount != tt.amount || ev.Currency != tt.currency {
				t.Errorf("amount = %v %q, want %d %q", ev.Amount, ev.Currency, tt.amount, tt.currency)
			}
			if !ev.Created.Equal(tt.created) {
				t.Errorf("Created = %s, want %s", ev.Created, tt.created)
			}
			if ev.Livemode {
				t.Error("sandbox fixture decoded as live")
			}
			if !bytes.Equal(ev.Raw, body) {
				t.Error("Raw is not the body")
			}
		})
	}
}

func TestDecodePayPalFields(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		local    string
		amount   int64 // -1: no amount
		currency string
		live     bool
		wantErr  bool
	}{
		{name: "resource custom_id wins",
			body:  `{"id":"WH-1","event_type":"X","resource":{"custom_id":"c","invoice_id":"i","purchase_units":[{"custom_id":"p"}]}}`,
			local: "c", amount: -1},
		{name: "purchase unit custom_id before invoice_id",
			body:  `{"id":"WH-1","event_type":"X","resource":{"invoice_id":"i","purchase_units":[{"invoice_id":"pi"},{"custom_id":"p2","amount":{"currency_code":"EUR","value":"3.00"}}]}}`,
			local: "p2", amount: 300, currency: "eur"},
		{name: "resource invoice_id",
			body:  `{"id":"WH-1","event_type":"X","resource":{"invoice_id":"i","amount":{"currency_code":"USD","value":"1"}}}`,
			local: "i", amount: 100, currency: "usd"},
		{name: "purchase unit invoice_id, that unit's amount",
			body: `{"id":"WH-1","event_type":"X","resource":{"purchase_units":[{"amount":{"currency_code":"USD","value":"1.00"}},` +
				`{"invoice_id":"pi","amount":{"currency_code":"USD","value":"2.00"}}]}}`,
			local: "pi", amount: 200, currency: "usd"},
		{name: "several units without a match: no amount",
			body: `{"id":"WH-1","event_type":"X","resource":{"custom_id":"c","purchase_units":[{"amount":{"currency_code":"USD","value":"1.00"}},` +
				`{"amount":{"currency_code":"USD","value":"2.00"}}]}}`,
			local: "c", amount: -1},
		{name: "JPY has no decimals",
			body:   `{"id":"WH-1","event_type":"X","resource":{"amount":{"currency_code":"JPY","value":"1000"}}}`,
			amount: 1000, currency: "jpy"},
		{name: "v1 sale amount",
			body:   `{"id":"WH-1","event_type":"PAYMENT.SALE.COMPLETED","resource":{"amount":{"total":"14.97","currency":"EUR"}}}`,
			amount: 1497, currency: "eur"},
		{name: "live links",
			body:   `{"id":"WH-1","event_type":"X","resource":{"links":[{"href":"https://api.paypal.com/v2/payments/captures/1"}]}}`,
			amount: -1, live: true},
		{name: "sandbox wins over live",
			body: `{"id":"WH-1","event_type":"X","resource":{"links":[{"href":"https://api.paypal.com/v2/x"}]},` +
				`"links":[{"href":"https://api-m.sandbox.paypal.com/v1/notifications/webhooks-events/WH-1"}]}`,
			amount: -1},
		{name: "look-alike link is not live",
			body:   `{"id":"WH-1","event_type":"X","resource":{"links":[{"href":"https://api.paypal.com.evil.test/x"}]}}`,
			amount: -1},
		{name: "not JSON", body: `{"id":`, wantErr: true},
		{name: "no id", body: `{"event_type":"X"}`, wantErr: true},
		{name: "no event type", body: `{"id":"WH-1"}`, wantErr: true},
		{name: "bad create_time", body: `{"id":"WH-1","event_type":"X","create_time":"yesterday"}`, wantErr: true},
		{name: "float-looking amount", body: `{"id":"WH-1","event_type":"X","resource":{"amount":{"currency_code":"USD","value":"1e3"}}}`, wantErr: true},
		{name: "too many decimals", body: `{"id":"WH-1","event_type":"X","resource":{"amount":{"currency_code":"USD","value":"10.505"}}}`, wantErr: true},
		{name: "amount without currency", body: `{"id":"WH-1","event_type":"X","resource":{"amount":{"value":"10.50"}}}`, wantErr: true},
		{name: "resource of the wrong type", body: `{"id":"WH-1","event_type":"X","resource":"oops"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodePayPal([]byte(tt.body))
			if tt.wantErr {
				paypalCheckErr(t, err, ErrUnparsable)
				return
			}
			if err != nil {
				t.Fatalf("DecodePayPal: %v", err)
			}
			if ev.LocalID != tt.local {
				t.Errorf("LocalID = %q, want %q", ev.LocalID, tt.local)
			}
			switch {
			case tt.amount < 0 && ev.Amount != nil:
				t.Errorf("Amount = %d, want none", *ev.Amount)
			case tt.amount >= 0 && (ev.Amount == nil || *ev.Amount != tt.amount || ev.Currency != tt.currency):
				t.Errorf("Amount = %v %q, want %d %q", ev.Amount, ev.Currency, tt.amount, tt.currency)
			}
			if ev.Livemode != tt.live {
				t.Errorf("Livemode = %v, want %v", ev.Livemode, tt.live)
			}
		})
	}
}

func TestPayPalMinorUnits(t *testing.T) {
	tests := []struct {
		value, currency string
		want            int64
		wantErr         bool
	}{
		{"10.50", "USD", 1050, false},
		{"10.5", "USD", 1050, false},
		{"10", "USD", 1000, false},
		{"0.01", "USD", 1, false},
		{".5", "USD", 50, false},
		{"-2.51", "AUD", -251, false},
		{"0", "USD", 0, false},
		{"000123.40", "usd", 12340, false},
		{"1000", "JPY", 1000, false},
		{"1000.00", "JPY", 1000, false}, // zeros past the exponent are exact
		{"100", "HUF", 10000, false},    // ISO exponent 2, whatever PayPal's display rule
		{"1.234", "KWD", 1234, false},
		{"92233720368547758.07", "USD", 9223372036854775807, false},
		{"92233720368547758.08", "USD", 0, true}, // overflows int64
		{"1000.5", "JPY", 0, true},
		{"10.505", "USD", 0, true},
		{"10.", "USD", 0, true},
		{"", "USD", 0, true},
		{"-", "USD", 0, true},
		{"+1", "USD", 0, true},
		{"1e2", "USD", 0, true},
		{"1,000.00", "USD", 0, true},
		{" 1", "USD", 0, true},
		{"NaN", "USD", 0, true},
		{"1.00", "US", 0, true},
		{"1.00", "U$D", 0, true},
		{"1.0.0", "USD", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.value+" "+tt.currency, func(t *testing.T) {
			got, err := paypalMinorUnits(tt.value, tt.currency)
			if (err != nil) != tt.wantErr {
				t.Fatalf("paypalMinorUnits(%q, %q) error = %v, wantErr %v", tt.value, tt.currency, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("paypalMinorUnits(%q, %q) = %d, want %d", tt.value, tt.currency, got, tt.want)
			}
		})
	}
}
