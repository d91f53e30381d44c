package vendors_test

import (
	"strings"
	"testing"

	"github.com/agentledger/reconciler/vendors"
)

// FuzzVendorAnswer feeds vendor answers (untrusted input) through what the
// resolver does with them: decode, read a path, read a scalar, and set the
// key into a stored body. None may panic; SetPath's output must decode and
// hold the key where it was put.
func FuzzVendorAnswer(f *testing.F) {
	f.Add([]byte(`{"TotalCount":1,"Messages":[{"MessageID":"b7bc","Status":"Sent"}]}`), "Messages.0.MessageID")
	f.Add([]byte(`{"tickets":[{"id":35436,"status":"new"}],"count":1}`), "tickets.0.id")
	f.Add([]byte(`{"data":{"issue":null},"errors":[{"message":"Entity not found"}]}`), "data.issue")
	f.Add([]byte(`{"payment":{"id":"R2B3","status":"COMPLETED"}}`), "payment.status")
	f.Add([]byte(`[1,2,{"a":{"b":true}}]`), "2.a.b")
	f.Add([]byte(``), "$")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		doc, err := vendors.DecodeJSON(body)
		if err == nil {
			v, _ := vendors.LookupPath(doc, path)
			_, _ = vendors.Scalar(v)
		}
		if path == "" || path == "$" || strings.Contains(path, "..") || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") {
			return
		}
		out, err := vendors.SetPath(body, path, "vk")
		if err != nil {
			return
		}
		doc, err = vendors.DecodeJSON(out)
		if err != nil {
			t.Fatalf("SetPath wrote invalid JSON %q", out)
		}
		if v, ok := vendors.LookupPath(doc, path); !ok || v != "vk" {
			t.Fatalf("SetPath(%q, %q): %v at the path, want vk", body, path, v)
		}
	})
}
