package drill

import (
	"context"
	"testing"
)

// TestProfiledDrills: every profiled-vendor drill passes, and fails with
// its sabotage (the protection it tests switched off), on its own symptom.
func TestProfiledDrills(t *testing.T) {
	ctx := context.Background()
	res, err := RunProfiled(ctx, Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(ProfiledNames()) {
		t.Fatalf("%d results, want %d", len(res), len(ProfiledNames()))
	}
	for _, r := range res {
		if !r.Pass {
			t.Errorf("%s: FAIL: %s", r.Name, r.Detail)
		}
	}
	for _, name := range ProfiledNames() {
		t.Run(name+"/sabotaged", func(t *testing.T) {
			res, err := RunProfiled(ctx, Options{TempDir: t.TempDir(), Only: []string{name}, Sabotage: ProfiledSabotage(name)})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || res[0].Pass {
				t.Fatalf("%s passed with sabotage %s: %+v", name, ProfiledSabotage(name), res)
			}
			t.Logf("fails as it should: %s", res[0].Detail)
		})
	}
}
