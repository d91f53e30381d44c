package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// bbolt's own consistency check runs in goroutines of its own and panics
// there on some damage (a page referenced twice, keys out of order in its
// free-page scan), where no recover reaches: in the process that checks,
// a damaged copy would end the process. CheckFileIsolated therefore runs
// CheckFile in a child process — this same executable, told by
// checkChildEnv to check one file and exit (init below, before main or a
// test binary's tests run) — and turns a crash of the child into an
// error. Restore and Compact use it; so does `reconciler backup`.

// checkChildEnv names the file a child process checks.
const checkChildEnv = "RECONCILER_BOLT_CHECK_FILE"

func init() {
	if path := os.Getenv(checkChildEnv); path != "" {
		os.Exit(checkChild(path))
	}
}

// checkChild is the child's whole run: the report as JSON on stdout and
// exit 0, or the error on stderr and exit 1 (a panic exits 2).
func checkChild(path string) int {
	rep, err := CheckFile(context.Background(), path)
	if err != nil {
		fmt.Fprintln(os.Stderr, strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// CheckFileIsolated is CheckFile in a child process: a file that crashes
// bbolt's check is an error here, not the end of the caller.
func CheckFileIsolated(ctx context.Context, path string) (FileReport, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return FileReport{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return FileReport{}, fmt.Errorf("check %s: %w", path, err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), checkChildEnv+"="+abs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		var rep FileReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			return FileReport{}, fmt.Errorf("check %s: the checker's answer: %w", path, err)
		}
		return rep, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return FileReport{}, errors.New(strings.TrimSpace(stderr.String()))
	case ctx.Err() != nil:
		return FileReport{}, ctx.Err()
	}
	return FileReport{}, fmt.Errorf("check %s: bbolt consistency check: the file is damaged (the check crashed: %s)", path, crashLine(stderr.String()))
}

// crashLine is the first line of a crash that says what happened.
func crashLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "unexpected fault") {
			return strings.TrimSpace(l)
		}
	}
	if s = strings.TrimSpace(s); len(s) > 200 {
		s = s[:200]
	}
	return s
}
