package console

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// Finder is the store's complete search by local id, receipt id and tool
// call id (ledger.Finder): the local id through its index, the others by a
// scan of the tenant's rows in one read (bolt, memstore) or one query
// (PostgreSQL).
type Finder interface {
	FindRows(ctx context.Context, q ledger.FindQuery) (ledger.Found, error)
}

// find looks q up as a local id, a receipt id and a tool call id, within
// Options.SearchTimeout; a scan the deadline ended sets d.Cut, and the page
// says the answer may be short.
func (c *Console) find(ctx context.Context, tenant, q string, d *searchData, seen map[string]bool) error {
	if ledger.ValidateKey(q) != nil { // printable ASCII, as every id is
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.SearchTimeout)
	defer cancel()
	for _, f := range []struct {
		name string
		q    ledger.FindQuery
	}{
		{"local id", ledger.FindQuery{Tenant: tenant, LocalID: q}},
		{"receipt id", ledger.FindQuery{Tenant: tenant, ReceiptID: q, Limit: ledger.MaxListLimit}},
		{"tool call id", ledger.FindQuery{Tenant: tenant, ToolCallID: q, Limit: ledger.MaxListLimit}},
	} {
		if ctx.Err() != nil {
			d.Cut = true
			break
		}
		found, err := c.o.Finder.FindRows(ctx, f.q)
		if err != nil {
			if ctx.Err() != nil {
				d.Cut = true
				break
			}
			return fmt.Errorf("search by %s: %w", f.name, err)
		}
		d.Cut = d.Cut || found.Cut
		for _, row := range found.Rows {
			if seen[row.Key] {
				for i := range d.Hits {
					if d.Hits[i].Row.Key == row.Key && !strings.Contains(d.Hits[i].Matched, f.name) {
						d.Hits[i].Matched += ", " + f.name
					}
				}
				continue
			}
			seen[row.Key] = true
			d.Hits = append(d.Hits, searchHit{Row: row, Matched: f.name})
		}
	}
	return nil
}

// scanFor is find for a store without a Finder: the tenant's newest
// ScanLimit rows, and the page says so.
func (c *Console) scanFor(ctx context.Context, tenant, q string, d *searchData, seen map[string]bool) error {
	rows, trunc, err := c.scan(ctx, ledger.ListQuery{Tenant: tenant}, c.o.ScanLimit)
	if err != nil {
		return err
	}
	d.Truncated = trunc
	for _, row := range rows {
		var m []string
		if row.MetadataLocalID == q {
			m = append(m, "local id")
		}
		if row.UpstreamReceiptID == q {
			m = append(m, "receipt id")
		}
		if row.ToolCallID == q {
			m = append(m, "tool call id")
		}
		if len(m) > 0 && !seen[row.Key] {
			seen[row.Key] = true
			d.Hits = append(d.Hits, searchHit{Row: row, Matched: strings.Join(m, ", ")})
		}
	}
	return nil
}
