package api

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/apierror"
)

// Backuper is a store that can stream a consistent copy of itself (bolt).
type Backuper interface {
	// Backup writes the copy to w from one read transaction; start learns
	// its row count and size before the first byte.
	Backup(ctx context.Context, w io.Writer, start func(rows, bytes int64) error) error
}

// Headers of GET /v1/admin/backup.
const (
	HeaderBackupRows = "Reconciler-Backup-Rows"
)

var errNoBackup = newError(http.StatusNotImplemented, apierror.CodeNotImplemented,
	"this store has no online backup: a PostgreSQL store is backed up with pg_dump or point-in-time recovery")

// backup is GET /v1/admin/backup: the ledger file, as of one read
// transaction, streamed with its length and row count in the headers.
// Writers go on meanwhile. Each megabyte written moves the write deadline,
// so a large file is bounded by its pace, not by one answer's time.
func (s *Server) backup(c echo.Context) error {
	if s.backuper == nil {
		return errNoBackup
	}
	ctx := requestContext(c)
	res := c.Response()
	rc := http.NewResponseController(res)
	started := false
	err := s.backuper.Backup(ctx, &deadlineWriter{w: res, rc: rc, step: s.answer}, func(rows, bytes int64) error {
		h := res.Header()
		h.Set(echo.HeaderContentType, "application/octet-stream")
		h.Set(echo.HeaderContentLength, strconv.FormatInt(bytes, 10))
		h.Set(HeaderBackupRows, strconv.FormatInt(rows, 10))
		h.Set(echo.HeaderContentDisposition, `attachment; filename="reconciler.db"`)
		h.Set("Cache-Control", "no-store")
		res.WriteHeader(http.StatusOK)
		started = true
		return nil
	})
	if err != nil && started {
		// The status is sent: cutting the connection, short of
		// Content-Length, is how the client learns.
		s.log.WarnContext(ctx, "backup cut short", "err", err)
		panic(http.ErrAbortHandler)
	}
	return err
}

// deadlineWriter moves the connection's write deadline every megabyte.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	step    time.Duration
	pending int
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if d.pending += len(p); d.pending >= 1<<20 {
		d.pending = 0
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.step))
	}
	return d.w.Write(p)
}
