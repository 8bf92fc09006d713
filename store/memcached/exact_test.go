package memcached_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// The exactness test: 4 OS processes (this test binary re-executed) × 64
// goroutines take from one key with a budget of 1000, 1200 attempts in all,
// and exactly 1000 must be admitted — for every algorithm. The clock is
// fixed (the same instant in every process) so that nothing refills or
// expires: the budget is the budget.

const (
	childEnv       = "FLOODGATE_MEMCACHED_EXACT_CHILD"
	exactProcs     = 4
	exactGoroutine = 64
	exactAttempts  = 1200
	exactBudget    = 1000
)

// exactNow is the instant every process decides at: half past midnight, in
// the middle of every window below.
var exactNow = t0.Add(30 * time.Minute)

// exactParams returns, for an algorithm, parameters under which a fresh key
// admits exactly exactBudget unit requests at one instant.
func exactParams(name string) (algo.Params, error) {
	h := time.Hour
	switch name {
	case "fixed_window":
		return algo.Params{Algorithm: algo.FixedWindow, Limit: exactBudget, Period: h}, nil
	case "sliding_window":
		return algo.Params{Algorithm: algo.SlidingWindow, Limit: exactBudget, Period: h}, nil
	case "sliding_window_10":
		return algo.Params{Algorithm: algo.SlidingWindow, Limit: exactBudget, Period: h, SubWindows: 10}, nil
	case "sliding_log":
		return algo.Params{Algorithm: algo.SlidingLog, Limit: exactBudget, Period: h}, nil
	case "token_bucket":
		return algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: h, Burst: exactBudget}, nil
	case "gcra":
		return algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: h, Burst: exactBudget}, nil
	case "shaper":
		return algo.Params{Algorithm: algo.Shaper, Limit: 1, Period: h, Burst: exactBudget - 1}, nil
	case "smooth_bursty", "smooth_warmup":
		// A smooth limiter admits while the next free ticket is within
		// MaxWait; set MaxWait to the wait of the budget-th request.
		p := algo.Params{Algorithm: algo.SmoothBursty, Limit: exactBudget, Period: time.Second, MaxWait: h}
		if name == "smooth_warmup" {
			p.Algorithm, p.WarmupPeriod = algo.SmoothWarmup, time.Second
		}
		l, err := algo.Compile(p)
		if err != nil {
			return p, err
		}
		var st algo.State
		now := exactNow.UnixMicro()
		for range exactBudget {
			p.MaxWait = l.Take(&st, now, 1).Delay
		}
		return p, nil
	case "concurrency":
		return algo.Params{Algorithm: algo.Concurrency, Limit: exactBudget, LeaseTTL: h}, nil
	}
	return algo.Params{}, fmt.Errorf("unknown algorithm %q", name)
}

var exactAlgorithms = []string{"fixed_window", "sliding_window", "sliding_window_10", "sliding_log", "token_bucket", "gcra", "shaper", "smooth_bursty", "smooth_warmup", "concurrency"}

// childReport is what each process prints.
type childReport struct {
	Admitted, Refused int
	Contended         int // attempts that met ErrContention and were tried again
	Failed            int // attempts that never got a decision
	Stats             memcached.Stats
	Err               string
}

func TestExactAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes per algorithm")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range exactAlgorithms {
		t.Run(name, func(t *testing.T) {
			p, err := exactParams(name)
			if err != nil {
				t.Fatal(err)
			}
			// The pure algorithm, sequentially, admits exactly the budget.
			l := compile(t, p)
			var st algo.State
			want := 0
			for i := range exactAttempts {
				if l.TakeLease(&st, exactNow.UnixMicro(), 1, uint64(i+1)).Allowed {
					want++
				}
			}
			if want != exactBudget {
				t.Fatalf("the reference admits %d of %d, want %d: fix exactParams", want, exactAttempts, exactBudget)
			}

			key := uniqueKey(t, "hot")
			c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type child struct {
				cmd   *exec.Cmd
				stdin io.WriteCloser
				out   io.ReadCloser
			}
			children := make([]child, exactProcs)
			for i := range children {
				cmd := exec.CommandContext(c, exe, "-test.run=^$")
				cmd.Env = append(os.Environ(),
					childEnv+"=1",
					"FLOODGATE_EXACT_ADDR="+addr,
					"FLOODGATE_EXACT_ALGO="+name,
					"FLOODGATE_EXACT_KEY="+key,
					"FLOODGATE_EXACT_ID="+strconv.Itoa(i),
				)
				cmd.Stderr = os.Stderr
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				children[i] = child{cmd, stdin, out}
			}
			// Each child connects, says "ready", then waits for "go" on
			// stdin, so that all four start together.
			readers := make([]*bufio.Reader, exactProcs)
			for i, ch := range children {
				readers[i] = bufio.NewReader(ch.out)
				if line, err := readers[i].ReadString('\n'); err != nil || line != "ready\n" {
					t.Fatalf("child %d: %q, %v; want ready", i, line, err)
				}
			}
			for _, ch := range children {
				io.WriteString(ch.stdin, "go\n")
				ch.stdin.Close()
			}
			var sum childReport
			for i, ch := range children {
				var r childReport
				if err := json.NewDecoder(readers[i]).Decode(&r); err != nil {
					t.Fatalf("child %d report: %v", i, err)
				}
				if err := ch.cmd.Wait(); err != nil {
					t.Fatalf("child %d: %v", i, err)
				}
				if r.Err != "" {
					t.Fatalf("child %d: %s", i, r.Err)
				}
				sum.Admitted += r.Admitted
				sum.Refused += r.Refused
				sum.Contended += r.Contended
				sum.Failed += r.Failed
				sum.Stats.CASOps += r.Stats.CASOps
				sum.Stats.CASRetries += r.Stats.CASRetries
				sum.Stats.CounterOps += r.Stats.CounterOps
				sum.Stats.Rollbacks += r.Stats.Rollbacks
			}
			perDecision := 0.0
			if sum.Stats.CASOps > 0 {
				perDecision = float64(sum.Stats.CASRetries) / float64(sum.Stats.CASOps)
			}
			t.Logf("%s: %d×%d goroutines, %d attempts: admitted %d, refused %d, gave up %d; counter ops %d, decr roll-backs %d; CAS decisions %d, CAS retries %d (%.2f per decision), ErrContention met %d times",
				name, exactProcs, exactGoroutine, exactAttempts, sum.Admitted, sum.Refused, sum.Failed,
				sum.Stats.CounterOps, sum.Stats.Rollbacks, sum.Stats.CASOps, sum.Stats.CASRetries, perDecision, sum.Contended)
			if sum.Admitted != exactBudget {
				t.Fatalf("admitted %d, want exactly %d", sum.Admitted, exactBudget)
			}
			if sum.Admitted+sum.Refused != exactAttempts {
				t.Fatalf("%d admitted + %d refused != %d attempts (%d gave up)", sum.Admitted, sum.Refused, exactAttempts, sum.Failed)
			}
		})
	}
}

// exactChild is one process of TestExactAcrossProcesses.
func exactChild() int {
	var rep childReport
	enc := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		rep.Err = err.Error()
		enc.Encode(rep)
		return 0
	}
	name, key := os.Getenv("FLOODGATE_EXACT_ALGO"), os.Getenv("FLOODGATE_EXACT_KEY")
	id, _ := strconv.Atoi(os.Getenv("FLOODGATE_EXACT_ID"))
	p, err := exactParams(name)
	if err != nil {
		return fail(err)
	}
	l, err := algo.Compile(p)
	if err != nil {
		return fail(err)
	}
	s, err := memcached.Open("memcached://"+os.Getenv("FLOODGATE_EXACT_ADDR"),
		memcached.WithClock(func() time.Time { return exactNow }), memcached.WithTimeout(5*time.Second))
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || line != "go\n" {
		return fail(fmt.Errorf("waiting for go: %q, %v", line, err))
	}
	c, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var next, admitted, refused, contended, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	per := int64(exactAttempts / exactProcs)
	var wg sync.WaitGroup
	for range exactGoroutine {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for {
				n := next.Add(1)
				if n > per {
					return
				}
				req := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: uint64(id)<<32 | uint64(n)}}
				decided := false
				// The caller's policy here: try again on contention, a
				// bounded number of times.
				for try := 0; try < 100 && !decided; try++ {
					_, err := s.Take(c, req, out)
					switch {
					case errors.Is(err, store.ErrContention):
						contended.Add(1)
					case err != nil:
						errOnce.Do(func() { firstErr = err })
						failed.Add(1)
						decided = true
						continue
					default:
						decided = true
						if out[0].Allowed {
							admitted.Add(1)
						} else {
							refused.Add(1)
						}
					}
				}
				if !decided {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fail(firstErr)
	}
	rep.Admitted, rep.Refused = int(admitted.Load()), int(refused.Load())
	rep.Contended, rep.Failed = int(contended.Load()), int(failed.Load())
	rep.Stats = s.Stats()
	enc.Encode(rep)
	return 0
}
