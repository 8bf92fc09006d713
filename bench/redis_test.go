package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	fgredis "github.com/floodgate/floodgate/store/redis"
)

// The Redis scenarios, against one local redis-server (FLOODGATE_TEST_REDIS,
// or one the benchmark starts through internal/testserver):
//
//   - RedisKeys10kParallel64: 64 goroutines over 10 000 keys, one decision
//     per operation, never refused; contenders floodgate-gcra,
//     floodgate-token-bucket (the Redis store, default options),
//     redis_rate (github.com/go-redis/redis_rate/v10, GCRA in Lua) and
//     go-redis-fixed-window (the classic INCR + EXPIRE pipeline). Metrics:
//     decisions/s and p99-us, the 99th percentile of one decision's
//     latency as its caller sees it.
//   - RedisKeys1Parallel64: the same on one hot key.
//   - RedisSerial: one goroutine, floodgate (a GCRA decision) against a
//     bare go-redis GET round trip, the least a limiter script does
//     (script-floor) and an EVALSHA of 'return 1' (evalsha-return-1).
//   - RedisClientEvalsha64: the measurement behind the store's choice of
//     client: EVALSHA of a short script from 64 goroutines through go-redis
//     and through rueidis, no batching of our own.
//
// Peers get a go-redis pool of 64 connections, one per goroutine, their
// best case.

func BenchmarkRedisKeys10kParallel64(b *testing.B) { benchRedisKeys(b, 10_000) }

// BenchmarkRedisKeys1Parallel64 is the hot-key variant.
func BenchmarkRedisKeys1Parallel64(b *testing.B) { benchRedisKeys(b, 1) }

// redisNever are limits no run refuses whose state stays live for the run
// (refilled within an hour, not a second).
var (
	redisGCRA   = algo.Params{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour, Burst: 2_000_000}
	redisBucket = algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 2_000_000}
	// redisRateLimit is redis_rate's equivalent of redisGCRA.
	redisRateLimit = redis_rate.Limit{Rate: 1, Period: time.Hour, Burst: 2_000_000}
)

func benchRedisKeys(b *testing.B, n int) {
	addr := testserver.Redis(b)
	if addr == "" {
		return
	}
	keys := benchKeys(n)
	b.Run("floodgate-gcra", func(b *testing.B) { benchFloodgateRedis(b, addr, redisGCRA, keys) })
	b.Run("floodgate-token-bucket", func(b *testing.B) { benchFloodgateRedis(b, addr, redisBucket, keys) })
	b.Run("redis_rate", func(b *testing.B) {
		c := goRedis(b, addr)
		lim := redis_rate.NewLimiter(c)
		prefix := uniquePrefix("rr")
		ctx := context.Background()
		for _, k := range keys {
			if _, err := lim.Allow(ctx, prefix+k, redisRateLimit); err != nil {
				b.Fatal(err)
			}
		}
		checkPopulated(b, c, "rate:"+prefix, keys)
		runRedisParallel(b, keys, func(key string) (bool, error) {
			r, err := lim.Allow(ctx, prefix+key, redisRateLimit)
			return err == nil && r.Allowed > 0, err
		})
	})
	b.Run("go-redis-fixed-window", func(b *testing.B) {
		c := goRedis(b, addr)
		prefix := uniquePrefix("fw")
		ctx := context.Background()
		const limit = 1 << 40
		take := func(key string) (bool, error) {
			// The classic: count in the current window's key, expire it
			// with the window.
			k := prefix + key + ":" + strconv.FormatInt(time.Now().Unix()/3600, 10)
			var incr *goredis.IntCmd
			_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
				incr = p.Incr(ctx, k)
				p.Expire(ctx, k, time.Hour)
				return nil
			})
			return err == nil && incr.Val() <= limit, err
		}
		for _, k := range keys {
			if _, err := take(k); err != nil {
				b.Fatal(err)
			}
		}
		checkPopulated(b, c, prefix, []string{keys[0] + ":" + strconv.FormatInt(time.Now().Unix()/3600, 10)})
		runRedisParallel(b, keys, take)
	})
}

// openFloodgateRedis compiles p and opens the Redis store at addr with its
// default options, closed when b ends.
func openFloodgateRedis(b *testing.B, addr string, p algo.Params) (*algo.Limit, *fgredis.Store) {
	b.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	st, err := fgredis.Open("redis://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return l, st
}

// benchFloodgateRedis runs the Redis store with its default options.
func benchFloodgateRedis(b *testing.B, addr string, p algo.Params, keys []string) {
	l, st := openFloodgateRedis(b, addr, p)
	prefix := uniquePrefix("fg")
	ctx := context.Background()
	take := func(key string) (bool, error) {
		reqs := [1]store.Request{{Key: prefix + key, Limit: l, Cost: 1}}
		var out [1]algo.Decision
		_, err := st.Take(ctx, reqs[:], out[:])
		return out[0].Allowed, err
	}
	for _, k := range keys {
		if ok, err := take(k); err != nil || !ok {
			b.Fatalf("populate %s: %v %v", k, ok, err)
		}
	}
	for _, k := range []string{keys[0], keys[len(keys)-1]} {
		if _, ok, err := st.Inspect(ctx, prefix+k); err != nil || !ok {
			b.Fatalf("key %s holds no state after populating: %v", k, err)
		}
	}
	runRedisParallel(b, keys, take)
}

// goRedis returns a go-redis client with one connection per goroutine.
func goRedis(b *testing.B, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// checkPopulated fails unless the server holds prefix+key for each key.
func checkPopulated(b *testing.B, c *goredis.Client, prefix string, keys []string) {
	for _, k := range []string{keys[0], keys[len(keys)-1]} {
		if n, err := c.Exists(context.Background(), prefix+k).Result(); err != nil || n != 1 {
			b.Fatalf("key %s%s was not populated: %d %v", prefix, k, n, err)
		}
	}
}

func uniquePrefix(what string) string {
	return fmt.Sprintf("bench:%s:%d:", what, time.Now().UnixNano())
}

// latencies is a histogram of decision latencies: 1µs buckets up to 10ms,
// then 100µs buckets up to about 1s (one per goroutine, merged at the
// end), so recording costs no allocation and no shared cache line.
type latencies [latFine + latCoarse]uint32

const (
	latFine   = 10_000 // 1µs buckets
	latCoarse = 9_900  // 100µs buckets from 10ms
)

func (h *latencies) add(d time.Duration) {
	us := int(d / time.Microsecond)
	i := us
	if us >= latFine {
		i = latFine + (us-latFine)/100
	}
	if i >= len(h) {
		i = len(h) - 1
	}
	h[i]++
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *latencies) quantile(q float64) time.Duration {
	var total uint64
	for _, c := range h {
		total += uint64(c)
	}
	want := uint64(q * float64(total))
	var seen uint64
	for i, c := range h {
		seen += uint64(c)
		if seen > want {
			if i < latFine {
				return time.Duration(i+1) * time.Microsecond
			}
			return time.Duration(latFine+(i-latFine+1)*100) * time.Microsecond
		}
	}
	return time.Duration(latFine+latCoarse*100) * time.Microsecond
}

// runLoad runs a parallel scenario's 64 callers (on any GOMAXPROCS):
// newCaller(g), g counting from 1, returns caller g's next decision. Each
// decision is timed into the caller's own histogram, merged at the end; an
// error fails the run and so does a refusal (the scenarios' limits admit
// everything). It reports decisions/s and p99-us and returns the merged
// histogram for other quantiles.
func runLoad(b *testing.B, newCaller func(g int) func() (bool, error)) *latencies {
	var (
		mu     sync.Mutex
		merged latencies
		seq    atomic.Int64
		denied atomic.Int64
	)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		decide := newCaller(int(seq.Add(1)))
		h := new(latencies)
		for pb.Next() {
			t0 := time.Now()
			ok, err := decide()
			h.add(time.Since(t0))
			if err != nil {
				b.Error(err)
				return
			}
			if !ok {
				denied.Add(1)
			}
		}
		mu.Lock()
		for j, c := range h {
			merged[j] += c
		}
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if d := denied.Load(); d > 0 {
		b.Fatalf("%d decisions refused: the scenario's limits must admit everything", d)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(merged.quantile(0.99).Microseconds()), "p99-us")
	return &merged
}

// runRedisParallel runs take from 64 goroutines, each striding over keys
// from its own start, and reports decisions/s and p99-us.
func runRedisParallel(b *testing.B, keys []string, take func(key string) (bool, error)) {
	n := len(keys)
	runLoad(b, func(g int) func() (bool, error) {
		i := g * 104729 % n
		return func() (bool, error) {
			i = (i + 7919) % n
			return take(keys[i])
		}
	})
}

// BenchmarkRedisSerial is one goroutine: a floodgate GCRA decision against
// a bare go-redis GET, the round trip no Redis limiter can beat, and
// against script-floor, the least any Lua limiter does per call (an
// EVALSHA, through rueidis, of a script that reads TIME, GETs and SETs one
// key and returns seven integers, as floodgate's does). The rest place the
// costs between the two: rueidis-get (the same GET through the store's
// client), evalsha-return-1 and rueidis-evalsha-return-1 (an EVALSHA of a
// script that calls nothing, through each client): what running a script
// at all costs, before its redis.call()s. floodgate-request-ctx is
// floodgate under the kind of context a request handler has.
func BenchmarkRedisSerial(b *testing.B) {
	addr := testserver.Redis(b)
	if addr == "" {
		return
	}
	keys := benchKeys(10_000)
	floodgate := func(b *testing.B, ctx context.Context) {
		l, st := openFloodgateRedis(b, addr, redisGCRA)
		prefix := uniquePrefix("fgs")
		reqs := []store.Request{{Limit: l, Cost: 1}}
		out := make([]algo.Decision, 1)
		runRedisSerial(b, func(i int) error {
			reqs[0].Key = prefix + keys[i%len(keys)]
			_, err := st.Take(ctx, reqs, out)
			if err == nil && !out[0].Allowed {
				err = fmt.Errorf("refused: %+v", out[0])
			}
			return err
		})
	}
	b.Run("floodgate", func(b *testing.B) { floodgate(b, context.Background()) })
	// floodgate-request-ctx decides under a context that can be cancelled
	// and has no deadline, as an HTTP request's: rueidis then sends even a
	// lone call through its background writer and reader goroutines
	// instead of its synchronous path.
	b.Run("floodgate-request-ctx", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		floodgate(b, ctx)
	})
	b.Run("go-redis-get", func(b *testing.B) {
		c := goRedis(b, addr)
		prefix := uniquePrefix("get")
		ctx := context.Background()
		for _, k := range keys {
			if err := c.Set(ctx, prefix+k, "1", time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
		}
		runRedisSerial(b, func(i int) error {
			return c.Get(ctx, prefix+keys[i%len(keys)]).Err()
		})
	})
	b.Run("rueidis-get", func(b *testing.B) {
		c := rueidisClient(b, addr)
		prefix := uniquePrefix("rget")
		ctx := context.Background()
		for _, k := range keys {
			if err := c.Do(ctx, c.B().Set().Key(prefix+k).Value("1").Px(time.Hour).Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
		runRedisSerial(b, func(i int) error {
			return c.Do(ctx, c.B().Get().Key(prefix+keys[i%len(keys)]).Build()).Error()
		})
	})
	b.Run("evalsha-return-1", func(b *testing.B) {
		c := goRedis(b, addr)
		s := goredis.NewScript("return 1")
		ctx := context.Background()
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		runRedisSerial(b, func(i int) error {
			return s.EvalSha(ctx, c, nil).Err()
		})
	})
	b.Run("rueidis-evalsha-return-1", func(b *testing.B) {
		c := rueidisClient(b, addr)
		s := rueidis.NewLuaScript("return 1")
		ctx := context.Background()
		runRedisSerial(b, func(i int) error {
			return s.Exec(ctx, c, nil, nil).Error()
		})
	})
	b.Run("script-floor", func(b *testing.B) {
		c := rueidisClient(b, addr)
		s := rueidis.NewLuaScript(floorScript)
		prefix := uniquePrefix("floor")
		ctx := context.Background()
		args := []string{"1"}
		runRedisSerial(b, func(i int) error {
			return s.Exec(ctx, c, []string{prefix + keys[i%len(keys)]}, args).Error()
		})
	})
}

// floorScript is the least a Redis limiter script does.
const floorScript = `
local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], 'abcdefghijklmnopqrstuvwxy', 'PX', 3600000)
return {1, t[1], 1, 0, 0, 0, 0}
`

// runRedisSerial times op and reports p50-us and p99-us besides ns/op.
func runRedisSerial(b *testing.B, op func(i int) error) {
	h := new(latencies)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		h.add(time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(float64(h.quantile(0.50).Microseconds()), "p50-us")
	b.ReportMetric(float64(h.quantile(0.99).Microseconds()), "p99-us")
}

// clientScript is a short GCRA-like script, the shape of every Redis
// limiter's call.
const clientScript = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
tat = tat + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', 3600000)
return tat - now
`

// BenchmarkRedisClientEvalsha64 compares the two Go clients on EVALSHA of
// a short script from 64 goroutines, with no batching but the client's.
func BenchmarkRedisClientEvalsha64(b *testing.B) {
	addr := testserver.Redis(b)
	if addr == "" {
		return
	}
	keys := benchKeys(10_000)
	b.Run("go-redis", func(b *testing.B) {
		c := goRedis(b, addr)
		s := goredis.NewScript(clientScript)
		ctx := context.Background()
		if err := s.Load(ctx, c).Err(); err != nil {
			b.Fatal(err)
		}
		runRedisParallel(b, keys, func(key string) (bool, error) {
			return true, s.EvalSha(ctx, c, []string{key}, 1).Err()
		})
	})
	b.Run("rueidis", func(b *testing.B) {
		c := rueidisClient(b, addr)
		s := rueidis.NewLuaScript(clientScript)
		ctx := context.Background()
		args := []string{"1"}
		runRedisParallel(b, keys, func(key string) (bool, error) {
			return true, s.Exec(ctx, c, []string{key}, args).Error()
		})
	})
}

// rueidisClient returns a rueidis client on one connection, as the store
// uses on a standalone Redis.
func rueidisClient(b *testing.B, addr string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}
