package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// TestServeWarnsOfMissingReplicas: a Redis store opened with
// wait_replicas=1 on a master without a replica would fail every
// admission; serve says so at start (after a WAIT of at least a second),
// naming the count and the policy that answers. With a replica that has
// just come online it says nothing.
func TestServeWarnsOfMissingReplicas(t *testing.T) {
	master := testserver.NewRedis(t)
	dirCfg, _ := writeConfig(t, observeConfig)
	const warning = "--store has wait_replicas=1 but 0 replicas acknowledged a write within 1s: every admission fails, answered by --on-store-error, until 1 are attached and in sync"
	serve := func() string {
		_, errb, stop := startServe(t, "--config", dirCfg, "--store", "redis://"+master.Addr+"?wait_replicas=1&wait_timeout=10ms",
			"--store-timeout", "110ms", "--on-store-error", "closed")
		if code := stop(); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		return errb.String()
	}
	if log := serve(); !strings.Contains(log, warning) {
		t.Errorf("no replica: the log lacks %q:\n%s", warning, log)
	}

	testserver.NewRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := testserver.RedisDo(master.Addr, time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info.(string), "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica is not online after 10s: %v %v", info, err)
		}
		time.Sleep(50 * time.Millisecond) // a real replica's sync
	}
	if log := serve(); strings.Contains(log, "wait_replicas=1 but") {
		t.Errorf("with a replica in sync: warned anyway:\n%s", log)
	}
}
