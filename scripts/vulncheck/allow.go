package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// entry is one reviewed vulnerability of the allow-list.
type entry struct {
	ID       string `yaml:"id"`
	Reason   string `yaml:"reason"`
	ReviewBy string `yaml:"review_by"` // YYYY-MM-DD: still accepted on that day, not after

	reviewBy time.Time
}

var idPattern = regexp.MustCompile(`^GO-[0-9]{4}-[0-9]{4,}$`)

// maxAhead caps a review-by date: every accepted vulnerability is looked
// at again within a year, however safe it seemed.
const maxAhead = 366 * 24 * time.Hour

// loadAllow reads and validates the allow-list. Whether an entry is past its
// date is check's business: it is a finding, not a malformed file.
func loadAllow(path string, today time.Time) ([]entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("allow-list: %w", err)
	}
	allow, err := parseAllow(data, today)
	if err != nil {
		return nil, fmt.Errorf("allow-list %s: %w", path, err)
	}
	return allow, nil
}

func parseAllow(data []byte, today time.Time) ([]entry, error) {
	var allow []entry
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&allow); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var errs []error
	seen := map[string]bool{}
	for i := range allow {
		e := &allow[i]
		e.Reason = strings.TrimSpace(e.Reason)
		switch {
		case !idPattern.MatchString(e.ID):
			errs = append(errs, fmt.Errorf("entry %d: id %q is not a Go vulnerability id (GO-YYYY-NNNN)", i+1, e.ID))
			continue
		case seen[e.ID]:
			errs = append(errs, fmt.Errorf("%s: listed twice", e.ID))
		case e.Reason == "":
			errs = append(errs, fmt.Errorf("%s: no reason", e.ID))
		}
		seen[e.ID] = true
		t, err := time.Parse(time.DateOnly, e.ReviewBy)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: review_by %q is not a date (YYYY-MM-DD)", e.ID, e.ReviewBy))
		case t.Sub(today) > maxAhead:
			errs = append(errs, fmt.Errorf("%s: review_by %s is more than a year ahead", e.ID, e.ReviewBy))
		}
		e.reviewBy = t
	}
	return allow, errors.Join(errs...)
}
