package resolver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/vendors"
)

// found reads a lookup's matches: those carrying the row's local id (when
// the lookup names local_id_path), grouped by group_path (each match its
// own object without one). No object is a miss, one settles, more than one
// is a duplicate that already happened.
func (l *Profiled) found(op string, lk *vendors.Lookup, row ledger.Row, matches []any) Finding {
	type object struct {
		id       string
		statuses []ledger.Status
		raw      []string
	}
	var objs []*object
	byGroup := map[string]*object{}
	for i, m := range matches {
		if lk.LocalIDPath != "" {
			v, _ := vendors.LookupPath(m, lk.LocalIDPath)
			if s, ok := vendors.Scalar(v); !ok || s != row.MetadataLocalID || s == "" {
				continue
			}
		}
		group := fmt.Sprint("#", i)
		if lk.GroupPath != "" {
			v, _ := vendors.LookupPath(m, lk.GroupPath)
			if s, ok := vendors.Scalar(v); ok {
				group = s
			}
		}
		o, ok := byGroup[group]
		if !ok {
			o = &object{}
			if lk.FoundIDPath != "" {
				v, _ := vendors.LookupPath(m, lk.FoundIDPath)
				o.id, _ = vendors.Scalar(v)
			}
			byGroup[group] = o
			objs = append(objs, o)
		}
		st, raw := readStatus(m, lk.StatusPath, lk.StatusMap)
		o.statuses, o.raw = append(o.statuses, st), append(o.raw, raw)
	}
	switch len(objs) {
	case 0:
		return Finding{Detail: op + ": no match"}
	case 1:
		o := objs[0]
		return Finding{Found: true, Status: groupStatus(o.statuses), ReceiptID: o.id, Detail: strings.TrimSpace(op + " found " + strings.Join(o.raw, ","))}
	}
	return Finding{Duplicate: true, Detail: fmt.Sprintf("%s: %d objects carry the local id", op, len(objs))}
}

// groupStatus is the status of one object seen as several matches (a
// message's events): failed when any match says so, else succeeded when
// any does, else pending.
func groupStatus(sts []ledger.Status) ledger.Status {
	var out ledger.Status
	for _, s := range sts {
		switch s {
		case ledger.StatusFailedPoison:
			return s
		case ledger.StatusSucceeded:
			out = s
		}
	}
	return out
}

// nextPath reads the absolute URL of the next page at path and returns it
// as a path under api_base. A URL elsewhere is refused: the profile's
// credential goes to api_base only.
func (l *Profiled) nextPath(doc any, path string) (string, error) {
	v, _ := vendors.LookupPath(doc, path)
	next, ok := vendors.Scalar(v)
	if !ok || next == "" {
		return "", errors.New("no next page URL")
	}
	rest, ok := strings.CutPrefix(next, l.base)
	if !ok || !strings.HasPrefix(rest, "/") {
		return "", errors.New("next page URL is not under api_base")
	}
	return rest, nil
}
