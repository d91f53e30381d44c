package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionValidation(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // "" valid, else a substring of the error
		settled    time.Duration
	}{
		{name: "off by default", yaml: "", settled: 0},
		{name: "720h with the defaults", yaml: "retention: {settled_rows: 720h}", settled: 720 * time.Hour},
		{name: "shorter than inbox_retention", yaml: "retention: {settled_rows: 100h}", want: "retention.settled_rows: 100h is shorter than inbox_retention (168h)"},
		{name: "shorter than a replay window", yaml: "stripe: {replay_window: 720h}\nretention: {settled_rows: 700h}", want: "700h is shorter than stripe.replay_window (720h)"},
		{name: "shorter than a standard endpoint's window", yaml: `standard:
  endpoints:
    - {name: resend, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], local_id_path: data.tags.metadata_local_id, replay_window: 1000h}
retention: {settled_rows: 900h}`, want: "standard.endpoints[0].replay_window (1000h)"},
		{name: "negative", yaml: "retention: {settled_rows: -1h}", want: "must not be negative"},
		{name: "an archive without retention", yaml: "retention: {archive_dir: /var/archive}", want: "retention.archive_dir: is set but retention.settled_rows is 0"},
		{name: "an archive in the data directory itself", yaml: "data: /srv/d\nretention: {settled_rows: 720h, archive_dir: /srv/d/}", want: "must not be the data directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("reconciler.yaml", []byte(tc.yaml), func(string) string { return "" })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse error %v, want one containing %q", err, tc.want)
			case tc.want == "" && c.Retention.SettledRows != tc.settled:
				t.Fatalf("settled_rows = %s, want %s", c.Retention.SettledRows, tc.settled)
			}
		})
	}
}
