package apierror_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentledger/reconciler/apierror"
)

func TestBodyJSON(t *testing.T) {
	b, err := json.Marshal(apierror.New(apierror.CodeNotFound, "no such claim"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"error":{"code":"not_found","message":"no such claim"}}`; got != want {
		t.Fatalf("body: got %s, want %s", got, want)
	}
	var back apierror.Body
	if err := json.Unmarshal(b, &back); err != nil || back.Error.Code != apierror.CodeNotFound || back.Error.Message != "no such claim" {
		t.Fatalf("decode: got %+v, %v", back, err)
	}
}

func TestNewCapsMessage(t *testing.T) {
	tests := []struct {
		name    string
		message string
		want    string
	}{
		{name: "short", message: "invalid run_id", want: "invalid run_id"},
		{name: "300 bytes", message: strings.Repeat("a", 300), want: strings.Repeat("a", 300)},
		{name: "301 bytes", message: strings.Repeat("a", 301), want: strings.Repeat("a", 300) + "…"},
		// "é" is two bytes: the one straddling byte 300 is dropped whole.
		{name: "cut inside a character", message: strings.Repeat("a", 299) + strings.Repeat("é", 10), want: strings.Repeat("a", 299) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := apierror.New(apierror.CodeInvalidInput, tt.message).Error.Message
			if got != tt.want {
				t.Fatalf("message: got %q, want %q", got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("message %q is not UTF-8", got)
			}
		})
	}
}
