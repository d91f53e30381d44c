package natsserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	childDirEnv  = "NATSSERVER_TEST_KILL_CHILD_DIR"
	childSyncEnv = "NATSSERVER_TEST_KILL_CHILD_SYNC"
)

// TestAckedEventsSurviveSIGKILL runs an embedded server in a child process
// (this test binary, re-executed), publishes with acks until the parent has
// seen enough PubAcks, SIGKILLs the child mid-stream, reopens the store in
// a new server and checks that every acknowledged message is there.
//
// SIGKILL keeps the kernel's page cache, so this proves the file store
// hands a message to the kernel before it acks (true in both modes). A
// power loss, which a test cannot simulate, is covered by the relay
// keeping each record until the server has synced it (events/doc.go).
func TestAckedEventsSurviveSIGKILL(t *testing.T) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		killChild(t, dir, os.Getenv(childSyncEnv) == "1")
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary; skipped with -short")
	}
	cases := []struct {
		name       string
		syncAlways bool
	}{
		{name: "sync always", syncAlways: true},
		{name: "default sync interval", syncAlways: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAckedEventsSurviveSIGKILL$", "-test.timeout=1m")
			sync := "0"
			if tc.syncAlways {
				sync = "1"
			}
			cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childSyncEnv+"="+sync)
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

			// acked maps stream sequence to the Nats-Msg-Id the child had
			// acknowledged. The child is killed as soon as 300 are seen,
			// while it is still publishing.
			acked := map[uint64]string{}
			killed := false
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 || f[0] != "ACK" {
					continue
				}
				seq, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					t.Fatalf("child line %q: %v", sc.Text(), err)
				}
				acked[seq] = f[2]
				if len(acked) >= 300 && !killed {
					if err := cmd.Process.Kill(); err != nil { // SIGKILL on Unix
						t.Fatalf("kill: %v", err)
					}
					killed = true
				}
			}
			err = cmd.Wait()
			if !killed {
				t.Fatalf("child ended before 300 acks (%d seen): %v", len(acked), err)
			}

			s := natstest.Start(t, dir, "", false)
			js := natstest.Connect(t, s.ClientURL())
			st, err := js.Stream(ctx, events.DefaultStream)
			if err != nil {
				t.Fatalf("stream after restart: %v", err)
			}
			missing := 0
			for seq, id := range acked {
				m, err := st.GetMsg(ctx, seq)
				if err != nil || m.Header.Get(jetstream.MsgIDHeader) != id {
					missing++
					if missing < 5 {
						t.Errorf("acked seq %d (%s) lost after SIGKILL: %v", seq, id, err)
					}
				}
			}
			if missing > 0 {
				t.Fatalf("%d of %d acknowledged messages lost", missing, len(acked))
			}
			t.Logf("all %d acknowledged messages survived SIGKILL (stream holds %d)", len(acked), natstest.StreamCount(t, st))
		})
	}
}

// killChild is the child side: publish with acks forever, printing each ack.
func killChild(t *testing.T, dir string, syncAlways bool) {
	ctx := context.Background()
	s, err := natsserver.Start(ctx, natsserver.Options{Listen: "127.0.0.1:-1", StoreDir: dir, SyncAlways: syncAlways})
	if err != nil {
		t.Fatalf("child start: %v", err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("child connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatalf("child stream: %v", err)
	}
	for i := 0; i < 1_000_000; i++ {
		ev := natstest.Event(i, "succeeded")
		subj, _ := events.Subject("recon", ev)
		body, _ := json.Marshal(ev)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := js.PublishMsg(pctx, &nats.Msg{Subject: subj, Data: body}, jetstream.WithMsgID(ev.MsgID()))
		cancel()
		if err != nil {
			t.Fatalf("child publish: %v", err)
		}
		// One write per ack, straight to the pipe: the parent must never
		// see an ack the server did not send.
		fmt.Fprintf(os.Stdout, "ACK %d %s\n", ack.Sequence, ev.MsgID())
	}
}
