package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunRefusesBadFlags: a flag error exits 2 before anything starts.
func TestRunRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{name: "unknown flag", args: []string{"-nope"}, want: "flag provided but not defined"},
		{name: "zero conns", args: []string{"-conns", "0"}, want: "conns 0"},
		{name: "negative lag rate", args: []string{"-lag-rate", "-1"}, want: "lag rate"},
		{name: "zero rounds", args: []string{"-rounds", "0"}, want: "rounds 0"},
		{name: "unknown mode", args: []string{"-mode", "grpc"}, want: `mode "grpc"`},
		{name: "webhook mode without rows", args: []string{"-mode", "webhook", "-webhook-rows", "0"}, want: "webhook rows 0"},
		{name: "stray argument", args: []string{"extra"}, want: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(context.Background(), tt.args, &stdout, &stderr); got != 2 {
				t.Errorf("exit code: got %d, want 2 (stderr %q)", got, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr: got %q, want it to mention %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: got %q, want nothing", stdout.String())
			}
		})
	}
}
