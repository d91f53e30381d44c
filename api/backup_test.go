package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/agentledger/reconciler/api"
)

// fakeBackup streams body, or fails after the headers.
type fakeBackup struct {
	body    string
	rows    int64
	failMid bool
}

func (b fakeBackup) Backup(ctx context.Context, w io.Writer, start func(rows, bytes int64) error) error {
	if err := start(b.rows, int64(len(b.body))); err != nil {
		return err
	}
	if b.failMid {
		_, _ = io.WriteString(w, b.body[:2])
		return errors.New("disk went away")
	}
	_, err := io.WriteString(w, b.body)
	return err
}

func TestBackupRoute(t *testing.T) {
	t.Run("no online backup (PostgreSQL) is 501", func(t *testing.T) {
		f := newFixture(t)
		wantError(t, f.do(http.MethodGet, "/v1/admin/backup", tokenAdmin, nil), http.StatusNotImplemented, "not_implemented")
	})
	with := func(b api.Backuper) func(*api.Options) { return func(o *api.Options) { o.Backup = b } }
	t.Run("a tenant token is 403", func(t *testing.T) {
		f := newFixture(t, with(fakeBackup{body: "bbolt"}))
		wantError(t, f.do(http.MethodGet, "/v1/admin/backup", tokenAcme, nil), http.StatusForbidden, "forbidden")
	})
	t.Run("the copy, its length and its rows", func(t *testing.T) {
		f := newFixture(t, with(fakeBackup{body: "bbolt-file-bytes", rows: 42}))
		rec := f.do(http.MethodGet, "/v1/admin/backup", tokenAdmin, nil)
		wantStatus(t, rec, http.StatusOK)
		if rec.Body.String() != "bbolt-file-bytes" || rec.Header().Get("Content-Length") != "16" ||
			rec.Header().Get(api.HeaderBackupRows) != "42" || rec.Header().Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("answer %q, headers %v", rec.Body.String(), rec.Header())
		}
	})
	t.Run("a copy that fails after the headers is cut short", func(t *testing.T) {
		f := newFixture(t, with(fakeBackup{body: "bbolt-file-bytes", rows: 1, failMid: true}))
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler (the connection is cut)", r)
			}
		}()
		rec := f.do(http.MethodGet, "/v1/admin/backup", tokenAdmin, nil)
		if int64(rec.Body.Len()) >= 16 {
			t.Fatalf("a failed copy was answered whole: %q", rec.Body.String())
		}
	})
}
