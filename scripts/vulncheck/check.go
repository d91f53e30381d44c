package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// check compares a scan with the allow-list on day today and returns every
// problem, in id order.
func check(s scan, allow []entry, today time.Time) []error {
	allowed := map[string]entry{}
	for _, e := range allow {
		allowed[e.ID] = e
	}
	var problems []error
	for _, id := range slices.Sorted(maps.Keys(s.Called)) {
		if _, ok := allowed[id]; !ok {
			v := s.Called[id]
			problems = append(problems, fmt.Errorf("%s is called and not in the allow-list: %s (%s, fixed in %s); fix it (go get, a newer toolchain) or review it into the allow-list",
				id, v.Summary, v.Module, orNone(v.Fixed)))
		}
	}
	for _, e := range allow {
		switch {
		case s.Called[e.ID] == nil:
			problems = append(problems, fmt.Errorf("%s is in the allow-list but no longer called: remove its entry", e.ID))
		case today.After(e.reviewBy):
			problems = append(problems, fmt.Errorf("%s was to be reviewed by %s: check its reason still holds and move the date, or fix it", e.ID, e.ReviewBy))
		}
	}
	return problems
}

// report prints what was scanned and found, called vulnerabilities first.
func report(w io.Writer, s scan, allow []entry) {
	allowed := map[string]entry{}
	for _, e := range allow {
		allowed[e.ID] = e
	}
	fmt.Fprintf(w, "%s, %s, database %s\n", s.Scanner, s.GoVersion, s.DB)
	fmt.Fprintf(w, "called by our code: %d\n", len(s.Called))
	for _, id := range slices.Sorted(maps.Keys(s.Called)) {
		v := s.Called[id]
		verdict := "NOT ALLOWED"
		if e, ok := allowed[id]; ok {
			verdict = "allowed, review by " + e.ReviewBy
		}
		fmt.Fprintf(w, "  %s %s, fixed in %s: %s\n      %s\n      e.g. %s\n", id, v.Module, orNone(v.Fixed), verdict, v.Summary, v.Trace)
	}
	ids := slices.Sorted(maps.Keys(s.Uncalled))
	fmt.Fprintf(w, "in required modules or imported packages, not called: %d", len(ids))
	if len(ids) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(ids, ", "))
	}
	fmt.Fprintln(w)
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}
