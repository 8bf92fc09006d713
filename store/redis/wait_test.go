package redis

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestWaitWithoutReplica: behind wait_replicas=1, a master with no
// replica answers every call that writes with an error that says so,
// within about WAIT's timeout; a take the script refused stands, and a
// peek, which writes nothing, sends no WAIT.
func TestWaitWithoutReplica(t *testing.T) {
	rid := runKey()
	// A server of its own, so that its WAIT count is this test's.
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	addr := srv.Addr
	for _, tc := range []struct {
		query  string
		within time.Duration
		batch  bool // coalesced batches rather than lone calls
	}{
		{"?wait_replicas=1", DefaultWaitTimeout, false},
		{"?wait_replicas=1&wait_timeout=10ms", 10 * time.Millisecond, false},
		{"?wait_replicas=1&wait_timeout=20ms", 20 * time.Millisecond, true},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var opts []Option
			if !tc.batch {
				opts = append(opts, WithBatchSize(1))
			}
			s := openT(t, "redis://"+addr+tc.query, opts...)
			want := fmt.Sprintf("written but acknowledged by 0 of 1 replica within %v (is a replica connected? the master's INFO replication shows connected_slaves)", tc.within)
			slow := tc.within + 500*time.Millisecond // the latency's bound on a loaded machine
			var fastest, slowest time.Duration
			defer func() { t.Logf("the failed calls took %v to %v", fastest, slowest) }()
			check := func(what string, took time.Duration, err error) {
				t.Helper()
				if fastest == 0 || took < fastest {
					fastest = took
				}
				slowest = max(slowest, took)
				var ae *AckError
				if !errors.Is(err, store.ErrUnavailable) || !errors.As(err, &ae) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v; want an *AckError (store.ErrUnavailable) saying %q", what, err, want)
				}
				if took < tc.within || took > slow {
					t.Errorf("%s took %v; want WAIT's timeout, %v, and less than %v", what, took, tc.within, slow)
				}
			}
			for _, k := range []algo.Kind{algo.FixedWindow, algo.TokenBucket, algo.SlidingLog, algo.Concurrency} {
				l, err := algo.Compile(withLimit(exactParams(k), 3))
				if err != nil {
					t.Fatal(err)
				}
				key := "wait:" + rid + ":" + k.String() + ":" + tc.query
				q := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: 9}}
				out := make([]algo.Decision, 1)
				// Three units are written and not acknowledged: three
				// errors; the fourth take is refused, and that stands.
				for i := 0; i < 3; i++ {
					start := time.Now()
					_, err := s.Take(t.Context(), q, out)
					check(fmt.Sprintf("%s: take %d", k, i+1), time.Since(start), err)
				}
				res, err := s.Take(t.Context(), q, out)
				if err != nil || res.Allowed {
					t.Errorf("%s: take 4 = %+v, %v; want refused (3 units were written), no error", k, out[0], err)
				}
				// Counted on the server, not timed against WAIT's 10 or
				// 20 ms, which a peek's round trip can take on a loaded
				// machine under -race.
				waits := commandCalls(t, addr)["wait"]
				if err := s.Peek(t.Context(), q, out); err != nil || out[0].Remaining != 0 {
					t.Errorf("%s: peek = %+v, %v; want 0 remaining, no error", k, out[0], err)
				}
				if n := commandCalls(t, addr)["wait"] - waits; n != 0 {
					t.Errorf("%s: the peek sent %d WAIT; it writes nothing and sends none", k, n)
				}
				start := time.Now()
				err = s.Refund(t.Context(), q)
				check(fmt.Sprintf("%s: refund", k), time.Since(start), err)
				if k == algo.Concurrency {
					start = time.Now()
					err = s.Renew(t.Context(), q)
					check(fmt.Sprintf("%s: renew", k), time.Since(start), err)
					start = time.Now()
					err = s.Release(t.Context(), q)
					check(fmt.Sprintf("%s: release", k), time.Since(start), err)
				}
			}
			if !tc.batch {
				return
			}
			// Concurrent takes share batches, and each batch one WAIT.
			l, err := algo.Compile(withLimit(exactParams(algo.FixedWindow), 1000))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var fails atomic.Int64
			start := time.Now()
			for g := 0; g < 32; g++ {
				wg.Go(func() {
					out := make([]algo.Decision, 1)
					q := []store.Request{{Key: fmt.Sprintf("wait:%s:batch:%d", rid, g%4), Limit: l, Cost: 1}}
					if _, err := s.Take(t.Context(), q, out); errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), want) {
						fails.Add(1)
					} else {
						t.Errorf("a concurrent take: %+v, %v; want the WAIT error", out[0], err)
					}
				})
			}
			wg.Wait()
			// 32 takes, in batches of up to 64, two in flight: a few
			// rounds of WAIT, not 32 of them one after the other.
			if took := time.Since(start); took > 8*tc.within+time.Second {
				t.Errorf("32 concurrent takes took %v; want a few WAIT timeouts (%v)", took, tc.within)
			}
			t.Logf("32 concurrent takes failed in %v, %d of them with the WAIT error", time.Since(start).Round(time.Millisecond), fails.Load())
		})
	}
}

// plannedFailover is the planned failover of docs/STORES.md
// ("Persistence"): 64 goroutines take from 8 fixed-window keys of a
// Sentinel set with replicas replicas while SENTINEL FAILOVER promotes one,
// behind wait_replicas=wait (0: no WAIT). The load stops once the old
// master has become a replica of the new one; each key's remaining budget
// is then taken in one take, so that a unit charged on the old master and
// lost shows as a unit admitted past the budget.
type plannedFailover struct {
	replicas, wait int

	budget   int64
	admitted []int64 // per key
	errs     int64   // decisions that failed
	unacked  int64   // of which with an *AckError
	ops      int64
	firstErr error
	switchAt time.Duration // from SENTINEL FAILOVER to the sentinels naming the new master
	demoteAt time.Duration // ... to the old master in sync as its replica
}

func (f *plannedFailover) run(t *testing.T) {
	const (
		keys       = 8
		goroutines = 64
		maxOps     = 2_000_000
		maxTime    = 60 * time.Second
	)
	f.budget = 1_000_000 // never reached while the load runs: the budget left is taken at the end
	set := testserver.NewRedisSentinel(t)
	if set == nil {
		t.SkipNow()
	}
	infoOf := func(addr string) string {
		v, err := testserver.RedisDo(addr, time.Second, "INFO", "replication")
		if err != nil {
			return ""
		}
		s, _ := v.(string)
		return s
	}
	waitUntil := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %v", what, within)
			}
		}
	}
	if f.replicas == 2 {
		r2 := testserver.NewRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(set.Master.Port))
		waitUntil("the second replica in sync", 30*time.Second, func() bool {
			return strings.Contains(infoOf(r2.Addr), "master_link_status:up")
		})
		// The sentinels learn of a replica from the master's INFO, every
		// 10 s.
		waitUntil("the sentinels know two replicas", 30*time.Second, func() bool {
			for _, sn := range set.Sentinels {
				v, err := testserver.RedisDo(sn.Addr, time.Second, "SENTINEL", "replicas", set.MasterName)
				if a, ok := v.([]any); err != nil || !ok || len(a) != 2 {
					return false
				}
			}
			return true
		})
	}
	url := "redis-sentinel://" + set.MasterName + "@" + strings.Join(set.Addrs(), ",")
	if f.wait > 0 {
		url += "?wait_replicas=" + strconv.Itoa(f.wait)
	}
	s := openT(t, url, WithTimeout(time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: f.budget, Period: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("planned:%s:%d", runID, i)
	}
	admitted := make([]atomic.Int64, keys)
	var (
		stop     atomic.Bool
		ops      atomic.Int64
		errs     atomic.Int64
		unacked  atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		start    = time.Now()
	)
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for i := g; !stop.Load() && ops.Add(1) <= maxOps && time.Since(start) < maxTime; i++ {
				k := i % keys
				res, err := s.Take(t.Context(), []store.Request{{Key: names[k], Limit: l, Cost: 1}}, out)
				switch {
				case err != nil:
					errs.Add(1)
					if ae := (*AckError)(nil); errors.As(err, &ae) {
						unacked.Add(1)
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				case res.Allowed:
					admitted[k].Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	old := set.Master.Addr
	failAt := time.Now()
	if _, err := testserver.RedisDo(set.Sentinels[0].Addr, 2*time.Second, "SENTINEL", "FAILOVER", set.MasterName); err != nil {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	var newMaster string
	waitUntil("the sentinels name a new master", 30*time.Second, func() bool {
		newMaster, _ = set.MasterAddr()
		return newMaster != "" && newMaster != old
	})
	f.switchAt = time.Since(failAt)
	waitUntil("the old master in sync as a replica", 45*time.Second, func() bool {
		info := infoOf(old)
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	f.demoteAt = time.Since(failAt)
	time.Sleep(300 * time.Millisecond) // decisions on the new master, with its replicas
	stop.Store(true)
	wg.Wait()
	f.ops, f.errs, f.unacked, f.firstErr = min(ops.Load(), maxOps), errs.Load(), unacked.Load(), firstErr

	// Take what each key has left, in one take (retried while the new
	// master's replicas catch up, under WAIT), then check nothing is left.
	out := make([]algo.Decision, 1)
	f.admitted = make([]int64, keys)
	for k, name := range names {
		f.admitted[k] = admitted[k].Load()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			q := []store.Request{{Key: name, Limit: l}}
			err := s.Peek(t.Context(), q, out)
			if err == nil && out[0].Remaining == 0 {
				break
			}
			var res store.Result
			if err == nil {
				q[0].Cost = out[0].Remaining
				res, err = s.Take(t.Context(), q, out)
			}
			if err == nil && res.Allowed {
				f.admitted[k] += q[0].Cost
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("taking what %s has left after the failover: %+v, %v", name, out[0], err)
			}
		}
	}
	t.Logf("%d replicas, wait_replicas=%d: %d decisions, %d failed, %d of them not acknowledged (first: %v); new master named %v after SENTINEL FAILOVER, old master its replica after %v",
		f.replicas, f.wait, f.ops, f.errs, f.unacked, f.firstErr, f.switchAt.Round(time.Millisecond), f.demoteAt.Round(time.Millisecond))
	var over []string
	for k, n := range f.admitted {
		if n > f.budget {
			over = append(over, fmt.Sprintf("%s +%d", names[k], n-f.budget))
		}
	}
	t.Logf("keys admitted past the budget of %d: %d of %d (%s)", f.budget, len(over), keys, strings.Join(over, ", "))
}

// overAdmitted returns the keys that admitted past the budget.
func (f *plannedFailover) overAdmitted() (n int) {
	for _, a := range f.admitted {
		if a > f.budget {
			n++
		}
	}
	return n
}

// TestSentinelPlannedFailoverWait: behind wait_replicas equal to the
// number of replicas, a planned failover (SENTINEL FAILOVER) admits no
// key past its budget: the writes to the old master after the sentinels
// promoted its replica, lost when it becomes a replica, are not
// acknowledged, and those decisions fail instead of admitting.
//
// Without WAIT, or with fewer replicas acknowledging than there are (a
// replica still following the old master acknowledges what the new one
// never gets), keys admit past their budget: set
// FLOODGATE_TEST_MEASURE=1 to run those and log by how much
// (docs/STORES.md, Persistence).
func TestSentinelPlannedFailoverWait(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a Sentinel set over")
	}
	measure := os.Getenv("FLOODGATE_TEST_MEASURE") != ""
	for _, tc := range []struct {
		replicas, wait int
		safe           bool
	}{
		{1, 1, true},
		{2, 2, true},
		{1, 0, false},
		{2, 1, false},
	} {
		t.Run(fmt.Sprintf("replicas=%d/wait_replicas=%d", tc.replicas, tc.wait), func(t *testing.T) {
			if !tc.safe && !measure {
				t.Skip("over-admits: a measurement, run with FLOODGATE_TEST_MEASURE=1")
			}
			f := &plannedFailover{replicas: tc.replicas, wait: tc.wait}
			f.run(t)
			if !tc.safe {
				return
			}
			if n := f.overAdmitted(); n > 0 {
				t.Errorf("%d keys admitted past their budget", n)
			}
			if f.unacked == 0 {
				t.Errorf("no decision failed for want of acknowledgement (%d failed, first: %v): the failover did not meet the load", f.errs, f.firstErr)
			}
		})
	}
}

// TestWaitCluster: on a Cluster whose masters have a replica each, WAIT
// follows each slot's script on that slot's master: behind
// wait_replicas=1 lone, coalesced, all-or-nothing (several slots) and
// per-slot calls are acknowledged; behind wait_replicas=2 each fails,
// naming 2 replicas, and an all-or-nothing take over several slots rolls
// its reservations back.
func TestWaitCluster(t *testing.T) {
	rid := runKey()
	base := clusterURL(t)
	l, err := algo.Compile(withLimit(exactParams(algo.FixedWindow), 100))
	if err != nil {
		t.Fatal(err)
	}
	keys := slotKeys(t, "waitc:"+rid+":", 6)
	for _, tc := range []struct {
		query string
		want  string // "": acknowledged
	}{
		{"?wait_replicas=1", ""},
		{"?wait_replicas=2&wait_timeout=20ms", "written but acknowledged by 1 of 2 replicas within 20ms"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			s := openT(t, base+tc.query)
			check := func(what string, err error) {
				t.Helper()
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: %v; want it acknowledged", what, err)
				case tc.want != "" && (!errors.Is(err, store.ErrUnavailable) || err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: %v; want an error saying %q", what, err, tc.want)
				}
			}
			ns := tc.query[len(tc.query)-4:]
			req := func(i int) store.Request { return store.Request{Key: keys[i] + ns, Limit: l, Cost: 1} }
			out := make([]algo.Decision, len(keys))
			_, err := s.Take(t.Context(), []store.Request{req(0)}, out[:1])
			check("a lone take", err)
			var wg sync.WaitGroup
			for i := range keys {
				wg.Go(func() {
					_, err := s.Take(t.Context(), []store.Request{req(i)}, make([]algo.Decision, 1))
					check(fmt.Sprintf("a concurrent take of %s", keys[i]), err)
				})
			}
			wg.Wait()
			all := make([]store.Request, len(keys))
			for i := range all {
				all[i] = req(i)
			}
			res, err := s.Take(t.Context(), all, out)
			check("a take over 6 slots", err)
			if err == nil && !res.Allowed {
				t.Errorf("a take over 6 slots refused: %+v", out)
			}
			check("a refund over 6 slots", s.Refund(t.Context(), all))
			for i := range all {
				all[i].Cost = 0
			}
			if err := s.Peek(t.Context(), all, out); err != nil {
				t.Fatalf("peek: %v", err)
			}
			// Acknowledged: the concurrent take, the take over all, less
			// the refund (and the lone take of the first key). Not: the
			// same were written, but the take over all was rolled back.
			for i, d := range out {
				want := int64(100 - 1)
				if i == 0 {
					want--
				}
				if tc.want != "" {
					want++ // the roll-back
				}
				if d.Remaining != want {
					t.Errorf("%s: %d remaining, want %d", all[i].Key, d.Remaining, want)
				}
			}
		})
	}
}

// TestWaitCost measures what WAIT costs on one machine, for
// docs/STORES.md: serial takes (latency) and 64 goroutines (decisions per
// second) on a master with one replica, without WAIT and behind
// wait_replicas=1. A measurement, bounded in count and time: set
// FLOODGATE_TEST_MEASURE=1 to run it (without -race for the figures).
func TestWaitCost(t *testing.T) {
	if os.Getenv("FLOODGATE_TEST_MEASURE") == "" {
		t.Skip("a measurement: run with FLOODGATE_TEST_MEASURE=1")
	}
	master := testserver.NewRedis(t)
	replica := testserver.NewRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, _ := testserver.RedisDo(replica.Addr, time.Second, "INFO", "replication")
		if s, _ := v.(string); strings.Contains(s, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica is not in sync")
		}
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1 << 40, Period: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const (
		serial     = 3000
		goroutines = 64
		keys       = 10_000
		span       = 3 * time.Second
	)
	for round := 0; round < 2; round++ {
		for _, query := range []string{"", "?wait_replicas=1"} {
			s := openT(t, "redis://"+master.Addr+query)
			out := make([]algo.Decision, 1)
			lat := make([]time.Duration, serial)
			for i := range lat {
				start := time.Now()
				if _, err := s.Take(t.Context(), []store.Request{{Key: fmt.Sprintf("cost:%d", i%keys), Limit: l, Cost: 1}}, out); err != nil {
					t.Fatal(err)
				}
				lat[i] = time.Since(start)
			}
			slices.Sort(lat)
			var n atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for g := 0; g < goroutines; g++ {
				wg.Go(func() {
					out := make([]algo.Decision, 1)
					for i := g; time.Since(start) < span; i += goroutines {
						if _, err := s.Take(t.Context(), []store.Request{{Key: fmt.Sprintf("cost:%d", i%keys), Limit: l, Cost: 1}}, out); err != nil {
							t.Error(err)
							return
						}
						n.Add(1)
					}
				})
			}
			wg.Wait()
			rate := float64(n.Load()) / time.Since(start).Seconds()
			t.Logf("round %d %-18q serial: p50 %v p99 %v; %d goroutines: %.0f decisions/s", round, query,
				lat[serial/2].Round(time.Microsecond), lat[serial*99/100].Round(time.Microsecond), goroutines, rate)
		}
	}
}
