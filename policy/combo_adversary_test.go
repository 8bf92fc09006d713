package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memcached"
)

// adversaryStores are the scenario stores and memcached.
func adversaryStores() []scenarioStore {
	return append(scenarioStores[:len(scenarioStores):len(scenarioStores)], scenarioStore{
		name: "memcached",
		open: func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
			st, err := memcached.Open("memcached://"+testserver.Memcached(t), memcached.WithClock(clock), memcached.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, []Option{redisPrefix()}
		},
	})
}

// comboConfig is a three-level hierarchy whose users borrow (ceil) from
// their tenant's lend pool, with priority reserves on the global and the
// tenant limits: every derived key of the engine at once.
const comboConfig = `
domain: combo
hierarchy: true
priorities: [high, normal, low]
rate_limit: {name: global, unit: minute, requests_per_unit: 200, ALGO reserve: {normal: 0.2, low: 0.5}}
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 90, ALGO lendable: 0.5, reserve: {low: 0.3}}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 8, ALGO ceil: 20}
`

// comboLedger counts what admitted responses charged to every key, by the
// same rules the engine documents: the rate or (borrowed) the parent's
// lend pool, the ceil, the ancestors, and the priority pools of the
// request's class and the classes below it.
type comboLedger struct {
	mu sync.Mutex
	n  map[string]int64
}

func (l *comboLedger) add(tn, u int, class string, borrowed bool, d int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, us := fmt.Sprint("t", tn), fmt.Sprint("t", tn, "/u", u)
	if borrowed {
		l.n["lend "+t] += d
	} else {
		l.n["rate "+us] += d
	}
	l.n["ceil "+us] += d
	l.n["tenant "+t] += d
	l.n["global"] += d
	if class == "normal" || class == "low" {
		l.n["global/normal"] += d
	}
	if class == "low" {
		l.n["global/low"] += d
		l.n["tenant/low "+t] += d
	}
}

// TestAdversaryHierarchyBorrowPriorityRefund drives 24 goroutines through
// the combo hierarchy (3 classes, 3 tenants × 4 users) on every store, a
// third of the admitted responses refunded at once, some twice and from
// two goroutines: no key may end charged with other than exactly what the
// admitted, unrefunded responses took, and no limit may admit more than
// its budget.
func TestAdversaryHierarchyBorrowPriorityRefund(t *testing.T) {
	for _, algoName := range []string{"fixed_window", "token_bucket"} {
		for _, ss := range adversaryStores() {
			t.Run(algoName+"/"+ss.name, func(t *testing.T) {
				if testing.Short() && ss.name != "memory" {
					t.Skip("-short")
				}
				yaml := strings.ReplaceAll(comboConfig, "ALGO", "algorithm: "+algoName+",")
				st, opts := ss.open(t, frozen(scenarioT0.Add(20*time.Second)))
				e, err := NewEngine(mustParse(t, yaml), st, opts...)
				if err != nil {
					t.Fatal(err)
				}
				comboRun(t, e)
			})
		}
	}
}

func comboRun(t *testing.T, e *Engine) {
	const (
		workers  = 24
		attempts = 15
		tenants  = 3
		users    = 4
	)
	classes := []string{"high", "normal", "low"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	led := &comboLedger{n: map[string]int64{}}
	var refusals, borrows atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := 0; i < attempts && ctx.Err() == nil; i++ {
				tn, u := rng.IntN(tenants), rng.IntN(users)
				class := classes[rng.IntN(len(classes))]
				r := req("combo", ent("tenant", fmt.Sprint("t", tn), "user", fmt.Sprint("u", u)))
				r.Priority = class
				r.Hits = int64(1 + rng.IntN(2))
				resp, err := e.Decide(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Code != CodeOK {
					refusals.Add(1)
					continue
				}
				borrowed := resp.Statuses[0].Borrowed
				if borrowed {
					borrows.Add(1)
				}
				led.add(tn, u, class, borrowed, r.Hits)
				if rng.IntN(3) == 0 {
					var rw sync.WaitGroup
					for range 1 + rng.IntN(2) {
						rw.Go(func() {
							if err := e.Refund(ctx, resp); err != nil {
								t.Error(err)
							}
						})
					}
					rw.Wait()
					led.add(tn, u, class, borrowed, -r.Hits)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if refusals.Load() == 0 || borrows.Load() == 0 {
		t.Fatalf("%d refusals, %d borrowed admissions: the load did not reach the limits", refusals.Load(), borrows.Load())
	}
	comboCheck(t, e, led, tenants, users)
}

// comboCheck holds the combo hierarchy's keys to led: no limit charged past
// its budget, and each key holding exactly what led says it was charged.
func comboCheck(t *testing.T, e *Engine, led *comboLedger, tenants, users int) {
	t.Helper()
	budget := map[string]int64{"global": 200, "global/normal": 160, "global/low": 100}
	for k, n := range led.n {
		var want int64
		switch f := strings.Fields(k)[0]; f {
		case "rate":
			want = 8
		case "ceil":
			want = 20
		case "lend":
			want = 45
		case "tenant":
			want = 90
		case "tenant/low":
			want = 63
		default:
			want = budget[k]
		}
		if n > want {
			t.Errorf("%s: charged %d over its budget %d", k, n, want)
		}
	}
	// Every key holds exactly what the ledger says: peek each user with
	// the lowest class, which lists every limit.
	for tn := range tenants {
		for u := range users {
			r := req("combo", ent("tenant", fmt.Sprint("t", tn), "user", fmt.Sprint("u", u)))
			r.Priority = "low"
			r.Descriptors[0].HitsSet = true // cost 0: the state as it is
			resp, err := e.Peek(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			tk, uk := fmt.Sprint("t", tn), fmt.Sprint("t", tn, "/u", u)
			for _, l := range resp.Statuses[0].Limits {
				var used int64
				switch l.Name {
				case "user":
					used = led.n["rate "+uk]
				case "user/ceil":
					used = led.n["ceil "+uk]
				case "tenant/lend":
					used = led.n["lend "+tk]
				case "tenant":
					used = led.n["tenant "+tk]
				case "tenant/low":
					used = led.n["tenant/low "+tk]
				case "global", "global/normal", "global/low":
					used = led.n[l.Name]
				default:
					t.Fatalf("unexpected limit %q", l.Name)
				}
				if got, want := l.Decision.Remaining, l.Decision.Limit-used; got != want {
					t.Errorf("t%d/u%d %s: remaining %d, want %d (limit %d, charged %d by admitted responses)",
						tn, u, l.Name, got, want, l.Decision.Limit, used)
				}
			}
		}
	}
}

// TestAdversaryChargeRemainingRace: usage reports that exceed what is left
// drain it (ChargeRemaining) while other goroutines take and check (cost
// 0) the same user and global keys. Draining is a take of what the
// response saw remaining: never more than a key holds, and every key ends
// holding exactly what the admissions and the drains charged.
func TestAdversaryChargeRemainingRace(t *testing.T) {
	for _, algoName := range []string{"fixed_window", "token_bucket"} {
		for _, ss := range scenarioStores {
			t.Run(algoName+"/"+ss.name, func(t *testing.T) {
				yaml := strings.ReplaceAll(`
domain: drain
hierarchy: true
rate_limit: {name: global, unit: hour, requests_per_unit: 120, ALGO}
descriptors:
  - key: user
    rate_limit: {name: user, unit: hour, requests_per_unit: 50, ALGO}
`, "ALGO", "algorithm: "+algoName)
				st, opts := ss.open(t, frozen(scenarioT0.Add(20*time.Second)))
				e, err := NewEngine(mustParse(t, yaml), st, opts...)
				if err != nil {
					t.Fatal(err)
				}
				drainRun(t, e)
			})
		}
	}
}

func drainRun(t *testing.T, e *Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	charged := map[string]int64{}
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for i := 0; i < 30 && ctx.Err() == nil; i++ {
				u := fmt.Sprint("u", rng.IntN(3))
				r := req("drain", ent("user", u))
				switch rng.IntN(4) {
				case 0: // a check
					r.Descriptors[0].HitsSet = true
				case 1: // a usage report, often larger than what is left
					r.Hits = 5 + rng.Int64N(20)
				default:
					r.Hits = 1 + rng.Int64N(3)
				}
				cost := descCost(&r, 0)
				resp, err := e.Decide(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Code == CodeOK {
					mu.Lock()
					charged[u] += cost
					charged["global"] += cost
					mu.Unlock()
					continue
				}
				n := drainable(&resp.Statuses[0])
				k, err := e.ChargeRemaining(ctx, r, &resp)
				if err != nil {
					t.Error(err)
					return
				}
				if k == 1 {
					mu.Lock()
					charged[u] += n
					charged["global"] += n
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for u := range 3 {
		r := req("drain", ent("user", fmt.Sprint("u", u)))
		r.Descriptors[0].HitsSet = true
		resp, err := e.Peek(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.Statuses[0].Limits {
			c := charged[fmt.Sprint("u", u)]
			if l.Name == "global" {
				c = charged["global"]
			}
			if c > l.Decision.Limit {
				t.Errorf("u%d %s: charged %d over its budget %d", u, l.Name, c, l.Decision.Limit)
			}
			if got := l.Decision.Limit - l.Decision.Remaining; got != c {
				t.Errorf("u%d %s: holds %d, admissions and drains charged %d", u, l.Name, got, c)
			}
		}
	}
}

// TestAdversaryLeasedOverridesRefund: two instances (each an Engine over
// its own store/lease on one shared store) decide one key while their
// runtime overrides flip its quota between 100 and 60 and a third of the
// admissions are refunded, some twice. Each flip changes the limit the
// slices were taken under, so slices go back mid-load. At a standing
// clock the window never admits more than the larger quota, and once the
// instances close (their slices given back) the shared key holds exactly
// what the unrefunded admissions took.
func TestAdversaryLeasedOverridesRefund(t *testing.T) {
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			clock := frozen(scenarioT0.Add(20 * time.Second))
			inner, opts := ss.open(t, clock)
			cfg := mustParse(t, `
domain: lz
descriptors:
  - key: user
    rate_limit: {name: user, unit: hour, requests_per_unit: 100}
`)
			var engines []*Engine
			var leased []*lease.Store
			for range 2 {
				ls, err := lease.New(noClose{inner}, lease.WithSlice(7), lease.WithTTL(time.Hour), lease.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				leased = append(leased, ls)
				e, err := NewEngine(cfg, ls, opts...)
				if err != nil {
					t.Fatal(err)
				}
				engines = append(engines, e)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var flipper sync.WaitGroup
			flipper.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					for _, e := range engines {
						var err error
						if i%2 == 0 {
							err = e.SetOverride("lz", "user", Override{RequestsPerUnit: 60})
						} else {
							_, err = e.RemoveOverride("lz", "user")
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
					time.Sleep(time.Millisecond)
				}
			})
			for w := range 24 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 3))
					e := engines[w%2]
					for i := 0; i < 30 && ctx.Err() == nil; i++ {
						r := req("lz", ent("user", "x"))
						r.Hits = 1 + rng.Int64N(3)
						resp, err := e.Decide(ctx, r)
						if err != nil {
							t.Error(err)
							return
						}
						if resp.Code != CodeOK {
							continue
						}
						admitted.Add(r.Hits)
						if rng.IntN(3) == 0 {
							for range 1 + rng.IntN(2) {
								if err := e.Refund(ctx, resp); err != nil {
									t.Error(err)
								}
							}
							admitted.Add(-r.Hits)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			flipper.Wait()
			if t.Failed() {
				return
			}
			if n := admitted.Load(); n > 100 {
				t.Errorf("the window admitted %d (refunds deducted), over the larger quota 100", n)
			}
			for _, ls := range leased {
				if err := ls.Close(); err != nil {
					t.Fatal(err)
				}
			}
			keys, err := engines[0].Keys(req("lz", ent("user", "x")))
			if err != nil || len(keys) != 1 {
				t.Fatalf("Keys: %q, %v", keys, err)
			}
			if _, err := engines[0].RemoveOverride("lz", "user"); err != nil {
				t.Fatal(err)
			}
			l := engines[0].snap.Load().limits[0].rate // the configured 100
			out := make([]algo.Decision, 1)
			if err := inner.Peek(context.Background(), []store.Request{{Key: keys[0], Limit: l}}, out); err != nil {
				t.Fatal(err)
			}
			if held := out[0].Limit - out[0].Remaining; held != admitted.Load() {
				t.Errorf("the shared key holds %d (limit %d in force), the unrefunded admissions took %d", held, out[0].Limit, admitted.Load())
			}
		})
	}
}

// noClose keeps a lease store's Close from closing the shared store.
type noClose struct{ store.Store }

func (noClose) Close() error { return nil }
