package ledger_test

import (
	"strings"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

// The vectors below were computed outside Go, with the shell:
//
//	printf '%s' '{"amount":10.5,"currency":"usd","to":"cus_123"}' | sha256sum
//	printf 'acme\x1frun-1\x1fstripe.charge\x1f%s' "$FP" | sha256sum
//	printf 'acme\x1fcart-42' | sha256sum | cut -c1-32
//	printf '%s:compensate:refund' "$KEY" | sha256sum
const (
	vecIntent      = `{"to": "cus_123", "amount": 10.50, "currency": "usd"}`
	vecFingerprint = "5efe56cf4eeaac453b40acc05d9575bfe3c948f223961b580122e582d3a13f65"
	vecKeyAcme     = "38af6fb5b479712bbaf3bf71cf2e82f36ea153edba4402c9d430892f121f951b"
	vecKeyGlobex   = "0bb8502f3f889a9e91888f5119fb273edaf8aa7ab8762c23ec192b2beacf4743"
)

func TestFingerprintVectors(t *testing.T) {
	tests := []struct {
		name   string
		intent string
		want   string
	}{
		{name: "charge intent", intent: vecIntent, want: vecFingerprint},
		{name: "empty object", intent: "{}", want: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
		{name: "empty object with whitespace", intent: " \n{ }\t", want: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ledger.Fingerprint([]byte(tt.intent))
			if err != nil {
				t.Fatalf("Fingerprint: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Fingerprint = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMintKey(t *testing.T) {
	tests := []struct {
		name                       string
		tenant, runID, tool, fprnt string
		want                       string
	}{
		{name: "acme", tenant: "acme", runID: "run-1", tool: "stripe.charge", fprnt: vecFingerprint, want: vecKeyAcme},
		{name: "other tenant, same intent", tenant: "globex", runID: "run-1", tool: "stripe.charge", fprnt: vecFingerprint, want: vecKeyGlobex},
		{name: "all empty is still separated", want: "c60b1f6ce4ac96cdb68fdab9e25e13fc2a4e1711f13ae42e028921c40b9abf5e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ledger.MintKey(tt.tenant, tt.runID, tt.tool, tt.fprnt)
			if got != tt.want {
				t.Fatalf("MintKey = %s, want %s", got, tt.want)
			}
			if !ledger.IsMintedKey(got) {
				t.Fatalf("IsMintedKey(%s) = false", got)
			}
		})
	}

	// Moving a character across a field boundary must change the key: the
	// separator is what keeps ("ab","c") and ("a","bc") apart.
	t.Run("field boundaries matter", func(t *testing.T) {
		seen := map[string]string{}
		for name, parts := range map[string][4]string{
			"ab|c|d|e": {"ab", "c", "d", "e"},
			"a|bc|d|e": {"a", "bc", "d", "e"},
			"a|b|cd|e": {"a", "b", "cd", "e"},
			"a|b|c|de": {"a", "b", "c", "de"},
			"abcd|||e": {"abcd", "", "", "e"},
		} {
			k := ledger.MintKey(parts[0], parts[1], parts[2], parts[3])
			if prev, ok := seen[k]; ok {
				t.Fatalf("MintKey(%s) == MintKey(%s)", name, prev)
			}
			seen[k] = name
		}
	})
}

func TestLocalID(t *testing.T) {
	tests := []struct {
		name        string
		tenant, key string
		minted      bool
		want        string
	}{
		{name: "minted key: prefix of the key", tenant: "acme", key: vecKeyAcme, minted: true, want: "rl_38af6fb5b479712bbaf3bf71cf2e82f3"},
		{name: "minted key: tenant not mixed in again", tenant: "globex", key: vecKeyAcme, minted: true, want: "rl_38af6fb5b479712bbaf3bf71cf2e82f3"},
		{name: "business key: hashed with tenant", tenant: "acme", key: "cart-42", want: "rl_bb38e9f7e60b7e3d45f65fa3436c1068"},
		{name: "business key: other tenant differs", tenant: "globex", key: "cart-42", want: "rl_74c90838a617a3ef632bdc91e7ade2ad"},
		{name: "upper-case hex is a business key", tenant: "acme", key: strings.ToUpper(vecKeyAcme)},
		// A business key shaped like a minted key is still the caller's:
		// hashed with the tenant, so another tenant's same key (or its
		// compensation key) has another local id.
		{name: "business key of minted shape", tenant: "acme", key: vecKeyAcme},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ledger.LocalID(tt.tenant, tt.key, tt.minted)
			if !strings.HasPrefix(got, ledger.LocalIDPrefix) || len(got) != len(ledger.LocalIDPrefix)+32 {
				t.Fatalf("LocalID = %q, want rl_ and 32 hex characters", got)
			}
			if tt.want != "" && got != tt.want {
				t.Fatalf("LocalID = %s, want %s", got, tt.want)
			}
			if !tt.minted {
				if got == ledger.LocalIDPrefix+strings.ToLower(tt.key[:min(32, len(tt.key))]) {
					t.Fatalf("LocalID of business key %s = %s: the key leaked into the local id", tt.key, got)
				}
				if other := ledger.LocalID(tt.tenant+"x", tt.key, false); other == got {
					t.Fatalf("two tenants share the local id %s of business key %s", got, tt.key)
				}
			}
		})
	}
	t.Run("business key never appears in the local id", func(t *testing.T) {
		key := "customer@example.com"
		if got := ledger.LocalID("acme", key, false); strings.Contains(got, "customer") {
			t.Fatalf("LocalID = %s, leaks the business key", got)
		}
	})
}

func TestCompensationKey(t *testing.T) {
	tests := []struct {
		name             string
		original, action string
		want             string
	}{
		{name: "minted original", original: vecKeyAcme, action: "refund", want: "99e3d0167a77a3714dfc0fa8ec8ee3cdc5f6540dbf6e23491536e144da872d87"},
		{name: "business original", original: "cart-42", action: "refund", want: "67288859493924350deca133c72e2a0d7b949b1f1e6cc65ebe387eb364c66e66"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ledger.CompensationKey(tt.original, tt.action)
			if got != tt.want {
				t.Fatalf("CompensationKey = %s, want %s", got, tt.want)
			}
			if again := ledger.CompensationKey(tt.original, tt.action); again != got {
				t.Fatalf("CompensationKey is not stable: %s then %s", got, again)
			}
			if other := ledger.CompensationKey(tt.original, "void"); other == got {
				t.Fatalf("CompensationKey ignores the action")
			}
		})
	}
}

func TestIsMintedKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{name: "minted", key: vecKeyAcme, want: true},
		{name: "all zeros", key: strings.Repeat("0", 64), want: true},
		{name: "all f", key: strings.Repeat("f", 64), want: true},
		{name: "upper-case hex", key: strings.ToUpper(vecKeyAcme)},
		{name: "63 characters", key: vecKeyAcme[:63]},
		{name: "65 characters", key: vecKeyAcme + "0"},
		{name: "non-hex letter", key: vecKeyAcme[:63] + "g"},
		{name: "business key", key: "cart-42"},
		{name: "empty", key: ""},
		{name: "64 multibyte bytes", key: strings.Repeat("é", 32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ledger.IsMintedKey(tt.key); got != tt.want {
				t.Fatalf("IsMintedKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}
