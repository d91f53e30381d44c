package bolt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// The crash test: a child process (this test binary, re-executed) writes
// through the store from many goroutines and prints one line per
// acknowledged operation after the call returned; the parent SIGKILLs it at
// a random moment, reopens the same file, and checks that no acknowledged
// write was lost, the indexes agree, and the outbox holds exactly one record
// per transition.

const (
	crashEnvDB    = "RECONCILER_BOLT_CRASH_DB"
	crashEnvStart = "RECONCILER_BOLT_CRASH_START"
	// crashEnvWAL opens the child's store with the write-ahead log, tiny
	// segments and a short flush interval, so kills land in batch commits
	// and log truncations; crashEnvAt ("point:n") makes the child kill
	// itself at the n-th pass of a crash point (flush-start: a moment
	// later, inside bbolt's commit; truncate: between segment removals).
	crashEnvWAL  = "RECONCILER_BOLT_CRASH_WAL"
	crashEnvAt   = "RECONCILER_BOLT_CRASH_AT"
	crashWorkers = 16
	crashKills   = 24
	crashTenant  = "acme"
)

// Ack levels, in the order the child reaches them for one key.
const (
	ackClaimed   = 1 // Claim returned
	ackUnknown   = 2 // Report(timeout) returned: unknown (or later)
	ackSucceeded = 3 // Apply(succeeded, webhook) returned
)

var crashBase = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func crashKey(i int) string { return fmt.Sprintf("crash-%07d", i) }

func TestCrash(t *testing.T) {
	if os.Getenv(crashEnvDB) != "" {
		t.Skip("this is the crash child")
	}
	t.Run("bbolt", func(t *testing.T) { testCrash(t, false) })
	t.Run("wal", func(t *testing.T) { testCrash(t, true) })
}

func testCrash(t *testing.T, wal bool) {
	clear(crashHits)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	path := filepath.Join(t.TempDir(), "crash.db")

	acked := map[int]int{} // key index → highest acknowledged level
	start := 0
	var totalAcks int
	for round := range crashKills {
		lines, stderr, err := runAndKill(t, path, start, rng, wal)
		if err != nil {
			t.Fatalf("round %d: %v\nchild stderr:\n%s", round, err, stderr)
		}
		maxIdx := start
		for _, l := range lines {
			if l.level > acked[l.idx] {
				acked[l.idx] = l.level
			}
			maxIdx = max(maxIdx, l.idx)
		}
		totalAcks += len(lines)
		// The next child starts a little behind this one's frontier, so it
		// re-runs the keys that were in flight at the kill.
		start = max(0, maxIdx-crashWorkers)
		verifyCrashFile(t, path, acked, round, wal)
	}
	if totalAcks == 0 {
		t.Fatal("no child acknowledged anything: the test proved nothing")
	}
	t.Logf("%d kills, %d acknowledged operations over %d keys", crashKills, totalAcks, len(acked))
	if wal {
		t.Logf("kills at crash points: %v", crashHits)
		if crashHits["flush-start"] == 0 || crashHits["truncate"] == 0 {
			t.Errorf("no kill inside a batch commit or a log truncation (%v): rerun; the seed is above", crashHits)
		}
	}
}

type ackLine struct{ idx, level int }

// crashHits counts the children that killed themselves at each crash
// point (the WAL rounds); only the test goroutine's reader writes it.
var crashHits = map[string]int{}

// runAndKill starts a child at key index start and SIGKILLs it at a random
// moment: most rounds while it is acknowledging writes, some while it is
// still opening (recovering) the file.
func runAndKill(t *testing.T, path string, start int, rng *rand.Rand, wal bool) ([]ackLine, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnvDB+"="+path, crashEnvStart+"="+strconv.Itoa(start))
	selfKill := false
	if wal {
		cmd.Env = append(cmd.Env, crashEnvWAL+"=1")
		switch rng.IntN(3) {
		case 1:
			cmd.Env, selfKill = append(cmd.Env, crashEnvAt+"=flush-start:"+strconv.Itoa(1+rng.IntN(5))), true
		case 2:
			cmd.Env, selfKill = append(cmd.Env, crashEnvAt+"=truncate:"+strconv.Itoa(1+rng.IntN(8))), true
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	var (
		mu      sync.Mutex
		lines   []ackLine
		bad     []string
		first   = make(chan struct{})
		readErr = make(chan error, 1)
	)
	go func() { // owned by this round; exits at EOF, which the kill guarantees
		var once sync.Once
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l, ok := parseAck(sc.Text())
			mu.Lock()
			if ok {
				lines = append(lines, l)
				once.Do(func() { close(first) })
			} else if point, ok := strings.CutPrefix(sc.Text(), "HIT "); ok {
				crashHits[point]++
			} else if strings.HasPrefix(sc.Text(), "ERR") {
				bad = append(bad, sc.Text())
			}
			mu.Unlock()
		}
		once.Do(func() { close(first) })
		readErr <- sc.Err()
	}()

	if selfKill {
		// The child kills itself at its crash point; the parent kills
		// it only if it never gets there.
		select {
		case <-first:
		case <-time.After(30 * time.Second):
		}
		time.Sleep(2 * time.Second)
	} else if rng.IntN(5) == 0 {
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // during start-up or open
	} else {
		select {
		case <-first:
		case <-time.After(30 * time.Second):
		}
		time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond)
	}
	killErr := cmd.Process.Kill()
	if err := <-readErr; err != nil {
		return nil, stderr.String(), fmt.Errorf("reading child: %w", err)
	}
	waitErr := cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		return nil, stderr.String(), fmt.Errorf("child failed: %s", strings.Join(bad, "; "))
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); selfKill && ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		killErr = nil // it killed itself at its crash point
	}
	if killErr != nil || cmd.ProcessState.Success() {
		return nil, stderr.String(), fmt.Errorf("child ended before the kill (wait: %v)", waitErr)
	}
	return lines, stderr.String(), nil
}

func parseAck(s string) (ackLine, bool) {
	var kind string
	var idx int
	if n, err := fmt.Sscanf(s, "ACK %s %d", &kind, &idx); n != 2 || err != nil {
		return ackLine{}, false
	}
	level := map[string]int{"C": ackClaimed, "U": ackUnknown, "S": ackSucceeded}[kind]
	return ackLine{idx, level}, level != 0
}

// verifyCrashFile reopens the file the killed child left and checks it.
func verifyCrashFile(t *testing.T, path string, acked map[int]int, round int, wal bool) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{LockTimeout: 5 * time.Second, NoWAL: !wal})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	if err := s.CheckConsistency(ctx); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	for idx, level := range acked {
		r, err := s.Get(ctx, crashTenant, crashKey(idx))
		if err != nil {
			t.Fatalf("round %d: key %d acknowledged at level %d: %v", round, idx, level, err)
		}
		ok := true
		switch level {
		case ackUnknown:
			ok = r.Status == ledger.StatusUnknown || r.Status == ledger.StatusSucceeded
		case ackSucceeded:
			ok = r.Status == ledger.StatusSucceeded
		}
		if !ok {
			t.Fatalf("round %d: key %d acknowledged at level %d, status %s", round, idx, level, r.Status)
		}
		// The journal entry commits with the apply: a succeeded row has
		// one (one more per child that re-ran its apply), any other none.
		j, err := s.RowJournal(ctx, crashTenant, crashKey(idx))
		if err != nil {
			t.Fatal(err)
		}
		if succeeded := r.Status == ledger.StatusSucceeded; succeeded != (len(j) > 0) {
			t.Fatalf("round %d: key %d (%s) has %d journal entries", round, idx, r.Status, len(j))
		}
	}

	// Exactly one outbox record per transition: unknown iff the row reached
	// unknown (every succeeded row went through it), succeeded iff succeeded.
	recs, err := s.PendingEvents(ctx, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]map[string]int{}
	for _, rec := range recs {
		if counts[rec.Event.Key] == nil {
			counts[rec.Event.Key] = map[string]int{}
		}
		counts[rec.Event.Key][rec.Event.Status]++
	}
	page := ledger.ListQuery{Tenant: crashTenant, Limit: ledger.MaxListLimit}
	rows := 0
	for {
		p, err := s.List(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			rows++
			want := map[string]int{}
			switch r.Status {
			case ledger.StatusUnknown:
				want["unknown"] = 1
			case ledger.StatusSucceeded:
				want["unknown"], want["succeeded"] = 1, 1
			}
			got := counts[r.Key]
			delete(counts, r.Key)
			if len(got) != len(want) || got["unknown"] != want["unknown"] || got["succeeded"] != want["succeeded"] {
				t.Fatalf("round %d: key %s (%s): outbox records %v, want %v", round, r.Key, r.Status, got, want)
			}
		}
		if p.NextCursor == "" {
			break
		}
		page.Cursor = p.NextCursor
	}
	if len(counts) > 0 {
		t.Fatalf("round %d: outbox records for keys with no row: %v", round, counts)
	}
	if rows < len(acked) {
		t.Fatalf("round %d: %d rows, %d acknowledged keys", round, rows, len(acked))
	}
}

// TestCrashChild is the child of TestCrash; it does nothing unless TestCrash
// started it. It writes until it is killed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnvDB)
	if path == "" {
		t.Skip("run by TestCrash as a child process")
	}
	start, _ := strconv.Atoi(os.Getenv(crashEnvStart))
	fail := func(format string, args ...any) {
		os.Stdout.WriteString("ERR " + fmt.Sprintf(format, args...) + "\n")
		os.Exit(3)
	}
	// The parent waits for this process to die before reopening, but
	// the kernel may release the lock a moment after the exit is reported.
	opts := Options{LockTimeout: 10 * time.Second, NoWAL: os.Getenv(crashEnvWAL) != "1"}
	if os.Getenv(crashEnvWAL) == "1" {
		opts.WALSegmentSize, opts.WALFlushInterval = 16<<10, 2*time.Millisecond
		if at := os.Getenv(crashEnvAt); at != "" {
			point, nth, _ := strings.Cut(at, ":")
			n, _ := strconv.Atoi(nth)
			var seen atomic.Int64
			opts.crashHook = func(p string) {
				if p != point || seen.Add(1) != int64(n) {
					return
				}
				kill := func() {
					os.Stdout.WriteString("HIT " + p + "\n")
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				if p == "flush-start" {
					// A moment later: inside bbolt's commit of the batch.
					time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, kill)
					return
				}
				kill()
			}
		}
	}
	s, err := Open(path, opts)
	if err != nil {
		fail("open: %v", err)
	}
	ctx := context.Background()
	ack := func(kind string, i int) { os.Stdout.WriteString(fmt.Sprintf("ACK %s %d\n", kind, i)) } // one write(2): atomic on a pipe
	var next atomic.Int64
	next.Store(int64(start))
	deadline := time.Now().Add(45 * time.Second) // the parent kills long before
	var wg sync.WaitGroup
	for range crashWorkers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				i := int(next.Add(1) - 1)
				key := crashKey(i)
				c, err := ledger.NewClaim(ledger.ClaimRequest{
					Tenant: crashTenant, RunID: "run_crash", Tool: "email.send", Vendor: "resend",
					ToolClass: ledger.ClassWriteLedger, Key: key,
					Intent: json.RawMessage(fmt.Sprintf(`{"to":"u%d@example.com","template_id":"welcome"}`, i)),
				}, s.policy, crashBase)
				if err != nil {
					fail("new claim %d: %v", i, err)
				}
				if _, err := s.Claim(ctx, c); err != nil {
					fail("claim %d: %v", i, err)
				}
				ack("C", i)
				if _, _, err := s.Report(ctx, crashTenant, key, ledger.Outcome{Kind: ledger.OutcomeTimeout, At: crashBase.Add(time.Second)}); err != nil {
					fail("report %d: %v", i, err)
				}
				ack("U", i)
				ev := ledger.Evidence{Source: ledger.SourceWebhook, Status: ledger.StatusSucceeded, ReceiptID: "msg_" + strconv.Itoa(i),
					VendorEventID: "evt_" + strconv.Itoa(i), At: crashBase.Add(2 * time.Second)}
				// With a journal entry, as the resolver writes one: it must
				// be as durable as the transition it goes with.
				note := ledger.JournalEntry{Kind: ledger.JournalResolver, Outcome: ledger.NoteFound, Detail: "crash " + strconv.Itoa(i), At: ev.At}
				if _, _, err := s.Apply(ledger.WithJournal(ctx, note), crashTenant, key, ev); err != nil {
					fail("apply %d: %v", i, err)
				}
				ack("S", i)
			}
		})
	}
	wg.Wait()
	fail("not killed within the deadline")
}
