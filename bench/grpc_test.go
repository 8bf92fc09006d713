package bench

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
	"github.com/floodgate/floodgate/store/storeurl"
)

// The gRPC scenario GRPCShouldRateLimit64: 64 concurrent callers over 4
// client connections send one-descriptor rate limit requests over 10 000
// descriptor values to a gRPC server on the loopback, never refused:
//
//   - floodgate-memory: the floodgate server (server.New) on the memory store;
//   - floodgate-memory-headers: the same with the rate limit header fields
//     in response_headers_to_add (server.WithEnvoyHeaders, `floodgate serve
//     --envoy-headers`), what every answer carried before they became
//     optional;
//   - floodgate-redis: the same on a local redis-server, wrapped in the
//     resilient store exactly as `floodgate serve` wraps remote stores;
//   - floodgate-redis-lease: the same with local leases of 100 units
//     and a TTL of 10 s (store/lease, `floodgate serve --lease-slice 100
//     --lease-ttl 10s`): a stated, bounded
//     over-admission per window (instances × slice) for about one Redis
//     call per 100 decisions on a key (see benchLeaseSlice);
//   - noop-handler: the same gRPC server answering OK without deciding —
//     the transport's own ceiling;
//   - gubernator: github.com/gubernator-io/gubernator/v2 v2.13.0 as one
//     in-process node (GetRateLimits, token bucket), the nearest Go peer;
//   - envoyproxy-ratelimit and envoyproxy-ratelimit-pipelined: the reference
//     Envoy rate limit service as a server process on a local redis-server,
//     and floodgate-redis-process, `floodgate serve` run the same way
//     (envoyratelimit_test.go), and floodgate-redis-process-lease, the same
//     with --lease-slice 100.
//
// Metrics: decisions/s, p50-us and p99-us (one call's latency as its caller
// sees it), and cpu-ns/op (CPU time of the whole process — client and
// server — per decision). The Redis contenders add redis-cpu-ns/op and
// total-cpu-ns/op (see outOfProcessCPU).
//
// The floodgate contenders but floodgate-memory-headers run with the
// server's defaults: no header fields in the answers (as
// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED=false, its
// default, with which it runs here too).
func BenchmarkGRPCShouldRateLimit64(b *testing.B) {
	memoryContender := func(opts ...server.Option) func(b *testing.B) {
		return func(b *testing.B) {
			st, err := memory.New()
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			addr := floodgateServer(b, st, opts...)
			runGRPC(b, rlsCaller(b, addr))
			if n := st.Stats().Keys; b.N >= grpcKeys && n < grpcKeys {
				b.Fatalf("the memory store holds %d keys after %d decisions over %d values", n, b.N, grpcKeys)
			}
		}
	}
	b.Run("floodgate-memory", memoryContender())
	b.Run("floodgate-memory-headers", memoryContender(server.WithEnvoyHeaders(true)))
	b.Run("floodgate-redis", redisContender(nil))
	// As `floodgate serve --lease-slice 100` stacks them: the leases right
	// above the store, the failure policy above both.
	b.Run("floodgate-redis-lease", redisContender(func(inner store.Store) (store.Store, error) {
		return lease.New(inner, lease.WithSlice(benchLeaseSlice), lease.WithTTL(benchLeaseTTL))
	}))
	b.Run("noop-handler", func(b *testing.B) {
		runGRPC(b, rlsCaller(b, grpcServe(b, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, noopRLS{}) })))
	})
	b.Run("gubernator", func(b *testing.B) {
		runGRPC(b, gubernatorCaller(b))
	})
	b.Run("floodgate-redis-process", func(b *testing.B) { benchFloodgateProcess(b) })
	b.Run("floodgate-redis-process-lease", func(b *testing.B) {
		benchFloodgateProcess(b, "--lease-slice", strconv.Itoa(benchLeaseSlice), "--lease-ttl", benchLeaseTTL.String())
	})
	b.Run("envoyproxy-ratelimit", func(b *testing.B) { benchEnvoyRateLimit(b, false) })
	b.Run("envoyproxy-ratelimit-pipelined", func(b *testing.B) { benchEnvoyRateLimit(b, true) })
}

// redisContender is the floodgate server on a local redis-server, wrapped
// (when wrap is not nil) by wrap and then in the resilient store, as
// `floodgate serve` wraps remote stores.
func redisContender(wrap func(store.Store) (store.Store, error)) func(b *testing.B) {
	return func(b *testing.B) {
		raddr := testserver.Redis(b)
		if raddr == "" {
			return
		}
		st, err := storeurl.Open("redis://" + raddr)
		if err != nil {
			b.Fatal(err)
		}
		if wrap != nil {
			inner := st
			if st, err = wrap(inner); err != nil {
				inner.Close()
				b.Fatal(err)
			}
		}
		rs, err := resilient.New(st)
		if err != nil {
			b.Fatal(err)
		}
		defer rs.Close()
		call := rlsCaller(b, floodgateServer(b, rs))
		outOfProcessCPU(b, raddr, 0, func() { runGRPC(b, call) })
	}
}

const grpcKeys = 10_000

// benchLeaseSlice and benchLeaseTTL are the lease contenders' (store/lease):
// each instance takes 100 units of a key from Redis at a time and admits
// from them in process for up to 10 s. Over 10 000 keys a key comes round
// every 10 000 decisions, about every half second here: under the default
// TTL of 1 s a slice would often expire between two visits, and each visit
// would give 99 units back and take 100 again, two Redis calls for one
// decision. A run of N decisions makes about one Redis call per key per
// 100 of its decisions, so the lease contenders show their rate on runs of
// several seconds (-benchtime 400000x), not on the 40000x of the others.
const (
	benchLeaseSlice = 100
	benchLeaseTTL   = 10 * time.Second
)

// grpcDomain's rule never refuses within a run: a GCRA of 2e6 burst that
// refills one unit per hour keeps every key's state live.
var grpcDomain = fmt.Sprintf(`
domain: bench
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: gcra, unit: hour, requests_per_unit: 1, burst: %d}
`, 2_000_000)

// floodgateServer serves the bench domain over gRPC on st with the
// server's options opts (none: its defaults).
func floodgateServer(b *testing.B, st store.Store, opts ...server.Option) string {
	b.Helper()
	cfg, err := policy.Parse("bench.yaml", []byte(grpcDomain))
	if err != nil {
		b.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix(uniquePrefix("grpc")))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(eng, st, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.GRPCServer().Serve(ln)
	b.Cleanup(srv.GRPCServer().Stop)
	return ln.Addr().String()
}

func grpcServe(b *testing.B, register func(*grpc.Server)) string {
	b.Helper()
	// The floodgate server's own gRPC options, so that only the handler differs.
	s := grpc.NewServer(grpc.NumStreamWorkers(uint32(max(16, 4*runtime.GOMAXPROCS(0)))))
	register(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	b.Cleanup(s.Stop)
	return ln.Addr().String()
}

// noopRLS answers OK with one status per descriptor, deciding nothing.
type noopRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (noopRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

const grpcConns = 4

// rlsCaller returns a decision function over 4 connections to addr, with
// the 10 000 requests built beforehand.
func rlsCaller(b *testing.B, addr string) func(g, i int) (bool, error) {
	b.Helper()
	clients := make([]rlsv3.RateLimitServiceClient, grpcConns)
	for c := range clients {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients[c] = rlsv3.NewRateLimitServiceClient(conn)
	}
	reqs := make([]*rlsv3.RateLimitRequest, grpcKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("u%05d", i)}}}}}
	}
	return func(g, i int) (bool, error) {
		resp, err := clients[g%grpcConns].ShouldRateLimit(context.Background(), reqs[i])
		if err != nil {
			return false, err
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
	}
}

func gubernatorCaller(b *testing.B) func(g, i int) (bool, error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
		GRPCListenAddress: "127.0.0.1:0",
		HTTPListenAddress: "127.0.0.1:0",
		Logger:            quietLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	addr := d.GRPCListeners[0].Addr().String()
	d.SetPeers([]guber.PeerInfo{{GRPCAddress: addr, HTTPAddress: d.HTTPListener.Addr().String(), IsOwner: true}})
	clients := make([]guber.V1Client, grpcConns)
	for c := range clients {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients[c] = guber.NewV1Client(conn)
	}
	reqs := make([]*guber.GetRateLimitsReq, grpcKeys)
	for i := range reqs {
		reqs[i] = &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
			Name: "bench", UniqueKey: fmt.Sprintf("u%05d", i), Hits: 1, Limit: 2_000_000,
			Duration: time.Hour.Milliseconds(), Algorithm: guber.Algorithm_TOKEN_BUCKET,
		}}}
	}
	return func(g, i int) (bool, error) {
		resp, err := clients[g%grpcConns].GetRateLimits(context.Background(), reqs[i])
		if err != nil {
			return false, err
		}
		r := resp.Responses[0]
		if r.Error != "" {
			return false, fmt.Errorf("gubernator: %s", r.Error)
		}
		return r.Status == guber.Status_UNDER_LIMIT, nil
	}
}

// runGRPC runs call from 64 goroutines over the 10 000 values and reports
// decisions/s, p50-us, p99-us and cpu-ns/op; every decision must admit.
func runGRPC(b *testing.B, call func(g, i int) (bool, error)) {
	var next atomic.Int64
	var lat *latencies
	measureCPU(b, func() {
		lat = runLoad(b, func(g int) func() (bool, error) {
			return func() (bool, error) {
				// Values in turn across all callers: a run of b.N >= 10 000
				// uses every one of them.
				return call(g, int(next.Add(1)-1)%grpcKeys)
			}
		})
	})
	b.ReportMetric(float64(lat.quantile(0.50).Microseconds()), "p50-us")
}

// quietLogger keeps gubernator's logrus output to warnings and worse.
func quietLogger() guber.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}
