package memstore

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// The indexes are sorted slices searched by binary search. Inserting into
// the middle of a slice is O(n), which an in-memory test store can afford;
// what matters is that reads have the shape of the durable stores' reads:
// Due and List walk the front of an ordered index and stop.

// rowID names a row: business keys may repeat across tenants.
type rowID struct{ tenant, key string }

// dueEntry is one open row in the due index, ordered by next_check_at, then
// tenant and key so the order is total.
type dueEntry struct {
	at time.Time
	id rowID
}

func compareDue(a, b dueEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.id.tenant, b.id.tenant); c != 0 {
		return c
	}
	return strings.Compare(a.id.key, b.id.key)
}

// seenEntry is one row in a tenant's first_seen index, ascending; List walks
// it backwards for newest first.
type seenEntry struct {
	at  time.Time
	key string
}

func compareSeen(a, b seenEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.key, b.key)
}

// inboxID names a vendor event: event ids are unique per vendor only.
type inboxID struct{ vendor, eventID string }

// inboxEntry orders the inbox by first-seen time so PruneInbox only walks
// what it removes.
type inboxEntry struct {
	at time.Time
	id inboxID
}

func compareInbox(a, b inboxEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.id.vendor, b.id.vendor); c != 0 {
		return c
	}
	return strings.Compare(a.id.eventID, b.id.eventID)
}

// approvalEntry is one open approval, ordered by expires_at, then tenant
// and key (ledger.CompareApprovals).
type approvalEntry struct {
	at time.Time
	id rowID
}

func compareApproval(a, b approvalEntry) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	if c := strings.Compare(a.id.tenant, b.id.tenant); c != 0 {
		return c
	}
	return strings.Compare(a.id.key, b.id.key)
}

// sortedInsert adds v to the sorted slice s (a no-op when it is present).
func sortedInsert[T any](s []T, v T, compare func(a, b T) int) []T {
	i, found := slices.BinarySearchFunc(s, v, compare)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

// sortedDelete removes v from the sorted slice s (a no-op when it is absent).
func sortedDelete[T any](s []T, v T, compare func(a, b T) int) []T {
	i, found := slices.BinarySearchFunc(s, v, compare)
	if !found {
		return s
	}
	return slices.Delete(s, i, i+1)
}

func insertString(s []string, v string) []string { return sortedInsert(s, v, cmp.Compare[string]) }
func deleteString(s []string, v string) []string { return sortedDelete(s, v, cmp.Compare[string]) }
