package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	allowPath := flag.String("allow", ".govulncheck-allow.yaml", "the reviewed allow-list")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, *allowPath, time.Now()))
}

// run returns the process status: 0 passed, 1 a problem to fix, 2 the
// input could not be read.
func run(in io.Reader, stdout, stderr io.Writer, allowPath string, now time.Time) int {
	today := day(now)
	allow, err := loadAllow(allowPath, today)
	if err != nil {
		fmt.Fprintf(stderr, "vulncheck: %v\n", err)
		return 2
	}
	s, err := readScan(in)
	if err != nil {
		fmt.Fprintf(stderr, "vulncheck: %v\n", err)
		return 2
	}
	report(stdout, s, allow)
	if problems := check(s, allow, today); len(problems) > 0 {
		fmt.Fprintf(stderr, "vulncheck: FAIL\n%v\n", errors.Join(problems...))
		return 1
	}
	return 0
}

// day is t's calendar date in UTC: review-by dates are whole days.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
