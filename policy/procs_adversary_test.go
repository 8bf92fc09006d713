package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAdversaryHierarchyAcrossProcesses runs the combo hierarchy (users
// borrowing from their tenant's lend pool, priority reserves on the tenant
// and the global limit) in 3 OS processes × 12 goroutines against one
// Redis Cluster, whose levels live in different slots, with a third of the
// admissions refunded: no limit admits past its budget, and every key
// ends holding exactly what the processes' unrefunded admissions took.
func TestAdversaryHierarchyAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	url := clusterURL(t)
	prefix := "fg:test:" + redisRun + ":procs:" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"
	const procs = 3
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAdversaryHierarchyHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "FLOODGATE_POLICY_HELPER=1", "FLOODGATE_HELPER_URL="+url,
			"FLOODGATE_HELPER_PREFIX="+prefix, "FLOODGATE_HELPER_SEED="+strconv.Itoa(p))
		wg.Go(func() { outs[p], errs[p] = cmd.CombinedOutput() })
	}
	wg.Wait()
	led := &comboLedger{n: map[string]int64{}}
	for p := range procs {
		if errs[p] != nil {
			t.Fatalf("helper %d: %v\n%s", p, errs[p], outs[p])
		}
		i := bytes.Index(outs[p], []byte("HELPER "))
		if i < 0 {
			t.Fatalf("helper %d reported nothing:\n%s", p, outs[p])
		}
		line, _, _ := bytes.Cut(outs[p][i+len("HELPER "):], []byte("\n"))
		var n map[string]int64
		if err := json.Unmarshal(line, &n); err != nil {
			t.Fatalf("helper %d: %v: %s", p, err, line)
		}
		for k, v := range n {
			led.n[k] += v
		}
	}
	st := openRedis(t, url, frozen(scenarioT0.Add(20*time.Second)))
	yaml := strings.ReplaceAll(comboConfig, "ALGO", "algorithm: token_bucket,")
	e, err := NewEngine(mustParse(t, yaml), st, WithKeyPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	comboCheck(t, e, led, 3, 4)
}

// TestAdversaryHierarchyHelperProcess is the body of a helper process of
// TestAdversaryHierarchyAcrossProcesses; it does nothing in a normal run.
func TestAdversaryHierarchyHelperProcess(t *testing.T) {
	if os.Getenv("FLOODGATE_POLICY_HELPER") != "1" {
		t.Skip("helper process only")
	}
	seed, _ := strconv.Atoi(os.Getenv("FLOODGATE_HELPER_SEED"))
	st := openRedis(t, os.Getenv("FLOODGATE_HELPER_URL"), frozen(scenarioT0.Add(20*time.Second)))
	yaml := strings.ReplaceAll(comboConfig, "ALGO", "algorithm: token_bucket,")
	e, err := NewEngine(mustParse(t, yaml), st, WithKeyPrefix(os.Getenv("FLOODGATE_HELPER_PREFIX")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	led := &comboLedger{n: map[string]int64{}}
	classes := []string{"high", "normal", "low"}
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			for i := 0; i < 12 && ctx.Err() == nil; i++ {
				tn, u := rng.IntN(3), rng.IntN(4)
				class := classes[rng.IntN(len(classes))]
				r := req("combo", ent("tenant", fmt.Sprint("t", tn), "user", fmt.Sprint("u", u)))
				r.Priority, r.Hits = class, int64(1+rng.IntN(2))
				resp, err := e.Decide(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Code != CodeOK {
					continue
				}
				borrowed := resp.Statuses[0].Borrowed
				led.add(tn, u, class, borrowed, r.Hits)
				if rng.IntN(3) == 0 {
					if err := e.Refund(ctx, resp); err != nil {
						t.Error(err)
						return
					}
					led.add(tn, u, class, borrowed, -r.Hits)
				}
			}
		})
	}
	wg.Wait()
	b, _ := json.Marshal(led.n)
	fmt.Printf("HELPER %s\n", b)
}
