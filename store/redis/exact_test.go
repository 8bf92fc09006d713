package redis

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Exactness across OS processes: 4 processes (this test binary re-executed
// as helpers) × 64 goroutines take one unit each from one key with a budget
// of 1000 that cannot refill during the test, 1200 attempts in all, at the
// Redis server's time. Exactly 1000 must be admitted, for every algorithm
// that promises exactness, on standalone Redis and on a Cluster, three
// times each.

const (
	exactProcs      = 4
	exactGoroutines = 64
	exactAttempts   = 1200
	exactBudget     = 1000
)

// exactParams are limits of budget 1000 that do not refill during a test
// (a period of 1000 hours).
func exactParams(k algo.Kind) algo.Params {
	period := 1000 * time.Hour
	p := algo.Params{Algorithm: k, Limit: exactBudget, Period: period}
	switch k {
	case algo.Shaper:
		p.Burst = exactBudget - 1 // capacity Burst+1
	case algo.Concurrency:
		p.Period, p.LeaseTTL = 0, period
	}
	return p
}

// exactKinds are the algorithms whose budget is exact. The smooth
// algorithms are not in the list: they admit by waiting time, so what they
// admit in a span depends on how long the span lasts.
var exactKinds = []algo.Kind{
	algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow, algo.TokenBucket,
	algo.GCRA, algo.Shaper, algo.Concurrency,
}

func TestExactAcrossProcessesStandalone(t *testing.T) {
	testExactAcrossProcesses(t, redisURL(t))
}

func TestExactAcrossProcessesCluster(t *testing.T) {
	testExactAcrossProcesses(t, clusterURL(t))
}

func testExactAcrossProcesses(t *testing.T, url string) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, k := range exactKinds {
		t.Run(k.String(), func(t *testing.T) {
			for run := 0; run < 3; run++ {
				key := fmt.Sprintf("exact:%s:%s:%d:%d", runID, k, run, time.Now().UnixNano())
				admitted, errs := runHelpers(t, url, k, key)
				if errs > 0 {
					t.Errorf("run %d: %d takes failed", run, errs)
				}
				if admitted != exactBudget {
					t.Errorf("run %d: %d processes × %d goroutines, %d attempts on a budget of %d: admitted %d", run, exactProcs, exactGoroutines, exactAttempts, exactBudget, admitted)
				}
			}
		})
	}
}

// runHelpers starts the helper processes on key, lets them start together
// and sums what they report.
func runHelpers(t *testing.T, url string, k algo.Kind, key string) (admitted, errs int) {
	t.Helper()
	start := time.Now().Add(500 * time.Millisecond)
	type result struct {
		out []byte
		err error
	}
	results := make([]result, exactProcs)
	var wg sync.WaitGroup
	for p := 0; p < exactProcs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExactHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(),
			"FLOODGATE_REDIS_HELPER=1",
			"FLOODGATE_HELPER_URL="+url,
			"FLOODGATE_HELPER_KEY="+key,
			"FLOODGATE_HELPER_KIND="+k.String(),
			"FLOODGATE_HELPER_ATTEMPTS="+strconv.Itoa(exactAttempts/exactProcs),
			"FLOODGATE_HELPER_LEASE_BASE="+strconv.Itoa(p*1_000_000),
			"FLOODGATE_HELPER_START="+strconv.FormatInt(start.UnixNano(), 10),
		)
		wg.Go(func() {
			out, err := cmd.CombinedOutput()
			results[p] = result{out, err}
		})
	}
	wg.Wait()
	for p, r := range results {
		if r.err != nil {
			t.Fatalf("helper %d: %v\n%s", p, r.err, r.out)
		}
		var a, e int
		i := bytes.Index(r.out, []byte("HELPER admitted="))
		if i < 0 {
			t.Fatalf("helper %d reported nothing:\n%s", p, r.out)
		}
		if _, err := fmt.Sscanf(string(r.out[i:]), "HELPER admitted=%d errors=%d", &a, &e); err != nil {
			t.Fatalf("helper %d: %v\n%s", p, err, r.out)
		}
		admitted += a
		errs += e
	}
	return admitted, errs
}

// TestExactHelperProcess is the body of a helper process; it does nothing
// in a normal run.
func TestExactHelperProcess(t *testing.T) {
	if os.Getenv("FLOODGATE_REDIS_HELPER") != "1" {
		t.Skip("helper process only")
	}
	kind, err := algo.ParseKind(os.Getenv("FLOODGATE_HELPER_KIND"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := algo.Compile(exactParams(kind))
	if err != nil {
		t.Fatal(err)
	}
	attempts, _ := strconv.Atoi(os.Getenv("FLOODGATE_HELPER_ATTEMPTS"))
	leaseBase, _ := strconv.Atoi(os.Getenv("FLOODGATE_HELPER_LEASE_BASE"))
	startNS, _ := strconv.ParseInt(os.Getenv("FLOODGATE_HELPER_START"), 10, 64)
	key := os.Getenv("FLOODGATE_HELPER_KEY")
	s := openT(t, os.Getenv("FLOODGATE_HELPER_URL"))
	// Start with the other processes (synchronising processes, not
	// testing time).
	time.Sleep(time.Until(time.Unix(0, startNS)))
	var next, admitted, errs atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < exactGoroutines; g++ {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for {
				i := next.Add(1)
				if i > int64(attempts) {
					return
				}
				reqs := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: uint64(leaseBase) + uint64(i)}}
				res, err := s.Take(context.Background(), reqs, out)
				switch {
				case err != nil:
					errs.Add(1)
					t.Log(err)
				case res.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("HELPER admitted=%d errors=%d\n", admitted.Load(), errs.Load())
}
