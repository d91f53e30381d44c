package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// RetentionConfig is retention (docs/architecture.md §15): how long the
// store keeps settled rows, and where it archives them before the delete.
type RetentionConfig struct {
	// SettledRows deletes succeeded and failed_poison rows this long after
	// they settled; 0 (the default) keeps every row.
	SettledRows time.Duration `yaml:"settled_rows"`
	// ArchiveDir, when set, receives each row before its delete: one JSON
	// line in rows-YYYY-MM-DD.jsonl, fsynced first. A relative path is
	// relative to the working directory, as data is.
	ArchiveDir string `yaml:"archive_dir"`
}

// LongestReplayWindow is the longest configured replay window and the key
// that configures it: a row younger than it may still be replayed by its
// vendor, so retention must keep it.
func (c Config) LongestReplayWindow() (time.Duration, string) {
	d, key := c.Stripe.ReplayWindow, "stripe.replay_window"
	for _, w := range []struct {
		d   time.Duration
		key string
	}{{c.PayPal.ReplayWindow, "paypal.replay_window"}, {c.PayPal.OrdersReplayWindow, "paypal.orders_replay_window"}} {
		if w.d > d {
			d, key = w.d, w.key
		}
	}
	for i, e := range c.Standard.Endpoints {
		if e.ReplayWindow > d {
			d, key = e.ReplayWindow, fmt.Sprintf("standard.endpoints[%d].replay_window", i)
		}
	}
	return d, key
}

// retention checks retention: off, or at least as long as every replay
// window and the inbox's retention (a deleted row whose vendor replays
// the key, or whose webhook is redelivered, would be claimed afresh or
// parked as an orphan). The archive must not sit inside the data
// directory's bbolt file path.
func (v *validator) retention(c Config) {
	r := c.Retention
	if r.SettledRows < 0 {
		v.add("retention.settled_rows", "must not be negative (0 keeps every row), got %s", formatDuration(r.SettledRows))
		return
	}
	if r.SettledRows == 0 {
		if strings.TrimSpace(r.ArchiveDir) != "" {
			v.add("retention.archive_dir", "is set but retention.settled_rows is 0 (retention off): nothing would be archived")
		}
		return
	}
	if w, key := c.LongestReplayWindow(); r.SettledRows < w {
		v.add("retention.settled_rows", "%s is shorter than %s (%s): a vendor may still replay a key retention deleted",
			formatDuration(r.SettledRows), key, formatDuration(w))
	}
	if r.SettledRows < c.InboxRetention {
		v.add("retention.settled_rows", "%s is shorter than inbox_retention (%s): a redelivered webhook would find no row",
			formatDuration(r.SettledRows), formatDuration(c.InboxRetention))
	}
	if r.ArchiveDir != "" && filepath.Clean(r.ArchiveDir) == filepath.Clean(c.Data) {
		v.add("retention.archive_dir", "must not be the data directory itself (a backup of the data directory would carry the archive)")
	}
}
