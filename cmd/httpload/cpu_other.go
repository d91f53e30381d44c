//go:build !unix

package main

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }

func runQueueWait() (time.Duration, bool) { return 0, false }
