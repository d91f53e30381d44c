//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the user + system CPU time this process has used.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// runQueueWait is the time this process's threads have spent runnable but
// waiting for a CPU (Linux /proc/self/task/*/schedstat, second field). On a
// shared machine it says how much of a phase was lost to other processes.
// Threads that exited are not counted, so it is a lower bound.
func runQueueWait() (time.Duration, bool) {
	files, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(files) == 0 {
		return 0, false
	}
	var total int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited meanwhile
		}
		fields := strings.Fields(string(b))
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		total += n
	}
	return time.Duration(total), true
}
