package retention_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/ledger/bolt"
	"github.com/agentledger/reconciler/ledger/memstore"
	"github.com/agentledger/reconciler/retention"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// settle claims n keys and settles key i at t0 + i minutes, then
// publishes every event (acks the outbox), as the relay would.
func settle(t *testing.T, st ledger.Store, n int) []ledger.Row {
	t.Helper()
	ctx := t.Context()
	var rows []ledger.Row
	for i := range n {
		c, err := ledger.NewClaim(ledger.ClaimRequest{
			Tenant: "acme", RunID: "run-1", Tool: "stripe.charges.create", Vendor: "stripe", ToolClass: ledger.ClassWriteIdempotent,
			Intent: json.RawMessage(`{"n":` + string(rune('0'+i%10)) + `,"i":"` + time.Duration(i).String() + `"}`), ReplayWindow: time.Hour,
		}, ledger.DefaultPolicy(), t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		row, _, err := st.Report(ctx, "acme", c.Row.Key, ledger.Outcome{Kind: ledger.OutcomeResponse, HTTPStatus: 200, ReceiptID: "ch_1", At: t0.Add(time.Duration(i) * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	recs, err := st.PendingEvents(ctx, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := st.AckEvents(ctx, r.Seq); err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

func TestSweepArchivesThenDeletes(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(t *testing.T) ledger.Store
	}{
		{"memstore", func(*testing.T) ledger.Store { return memstore.New(ledger.DefaultPolicy()) }},
		{"bolt", func(t *testing.T) ledger.Store {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "reconciler.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(store.name, func(t *testing.T) {
			st := store.open(t)
			rows := settle(t, st, 10)
			dir := filepath.Join(t.TempDir(), "archive")
			reg := prometheus.NewRegistry()
			now := t0.Add(time.Hour + 5*time.Minute + 30*time.Second) // rows 0..5 settled before now-1h
			j, err := retention.New(st, retention.Options{
				SettledRows: time.Hour, ArchiveDir: dir, Batch: 4, Pause: time.Millisecond,
				Now: func() time.Time { return now }, Registerer: reg,
				File: func(context.Context) (retention.FileStats, error) {
					return retention.FileStats{Size: 1, FreePages: 2}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			n, err := j.Sweep(t.Context())
			if err != nil || n != 6 {
				t.Fatalf("Sweep = %d, %v; want 6", n, err)
			}
			for i, r := range rows {
				_, err := st.Get(t.Context(), "acme", r.Key)
				if gone := err != nil; gone != (i < 6) {
					t.Errorf("row %d (settled at +%dm): gone=%v (%v)", i, i, gone, err)
				}
			}
			// Every deleted row is in the day's archive, in order, whole.
			f, err := os.Open(retention.ArchiveFile(dir, now))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var got []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var line struct {
					ArchivedAt time.Time  `json:"archived_at"`
					Row        ledger.Row `json:"row"`
				}
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("archive line %q: %v", sc.Text(), err)
				}
				if line.Row.UpstreamReceiptID != "ch_1" || line.Row.Status != ledger.StatusSucceeded || !line.ArchivedAt.Equal(now) {
					t.Errorf("archive line %s", sc.Text())
				}
				got = append(got, line.Row.Key)
			}
			if len(got) != 6 {
				t.Fatalf("archive holds %d rows, want 6", len(got))
			}
			for i, k := range got {
				if k != rows[i].Key {
					t.Errorf("archive line %d is %s, want %s (oldest first)", i, k, rows[i].Key)
				}
			}
			if v := metric(t, reg, "reconciler_retention_rows_deleted_total"); v != 6 {
				t.Errorf("rows deleted metric %v, want 6", v)
			}
			if v := metric(t, reg, "reconciler_retention_oldest_settled_age_seconds"); v != (time.Hour - 30*time.Second).Seconds() {
				t.Errorf("oldest age %v, want %v", v, (time.Hour - 30*time.Second).Seconds())
			}
			if v := metric(t, reg, "reconciler_store_free_pages"); v != 2 {
				t.Errorf("free pages %v, want 2", v)
			}
			// A second sweep finds nothing.
			if n, err := j.Sweep(t.Context()); n != 0 || err != nil {
				t.Fatalf("second Sweep = %d, %v", n, err)
			}
		})
	}
}

// TestArchiveFailureDeletesNothing: a row is archived before it goes, or
// it stays.
func TestArchiveFailureDeletesNothing(t *testing.T) {
	st := memstore.New(ledger.DefaultPolicy())
	rows := settle(t, st, 3)
	dir := t.TempDir()
	j, err := retention.New(st, retention.Options{SettledRows: time.Minute, ArchiveDir: dir, Now: func() time.Time { return t0.Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	// The day's file cannot be opened for writing: a directory stands there.
	if err := os.Mkdir(retention.ArchiveFile(dir, t0.Add(time.Hour)), 0o700); err != nil {
		t.Fatal(err)
	}
	if n, err := j.Sweep(t.Context()); err == nil || n != 0 {
		t.Fatalf("Sweep with an unwritable archive = %d, %v; want an error", n, err)
	}
	for _, r := range rows {
		if _, err := st.Get(t.Context(), "acme", r.Key); err != nil {
			t.Errorf("row %s deleted without its archive: %v", r.Key, err)
		}
	}
}

// metric reads one gathered counter or gauge.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
