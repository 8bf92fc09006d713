package server

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/internal/causelog"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/resilient"
)

// Defaults of the options.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultDrainTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds how long the HTTP API and the admin API
	// wait for a request body once its headers are in. Only ReadHeaderTimeout
	// bounds the rest of the HTTP server: a server-wide ReadTimeout would cut
	// off long uploads that gateway mode streams to the upstream.
	DefaultBodyTimeout = 10 * time.Second
	// RLSServiceName is the gRPC service name of the Envoy rate limit
	// service, also reported by the health service.
	RLSServiceName = "envoy.service.ratelimit.v3.RateLimitService"
	// DefaultGRPCMaxStreams bounds the calls in flight on one gRPC
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); see
	// WithGRPCMaxStreams.
	DefaultGRPCMaxStreams = 1000
	// DefaultGRPCMaxConnectionIdle closes a gRPC connection that has
	// carried no call for that long; see WithGRPCMaxConnectionIdle.
	DefaultGRPCMaxConnectionIdle = 15 * time.Minute
	// HealthServiceName is the name envoyproxy/ratelimit registers its
	// gRPC health under, which Envoy clusters' grpc_health_check and
	// Kubernetes gRPC probes written for it ask for. The health service
	// reports it as it reports "" and RLSServiceName.
	HealthServiceName = "ratelimit"
	// DefaultReadyFailures is how many readiness pings in a row must fail
	// before /readyz reports the store down; see WithReadiness.
	DefaultReadyFailures = 3
	// DefaultReadyTimeout bounds one readiness ping; see WithReadiness.
	DefaultReadyTimeout = time.Second
)

// Option configures a Server; see New for the defaults.
type Option func(*Server)

// WithMetrics sets the metrics the server records (default: new Metrics).
func WithMetrics(m *metrics.Metrics) Option { return func(s *Server) { s.metrics = m } }

// WithLogger sets the structured logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithAdminToken makes the admin API require "Authorization: Bearer token"
// (default "": no token, for a loopback-only admin address; the admin API
// then answers loopback peers only, 403 to others, and a loopback admin
// listener refuses on every path a Host that is not an IP or localhost).
func WithAdminToken(token string) Option { return func(s *Server) { s.adminToken = token } }

// WithObserveToken makes POST /v1/observe require "Authorization: Bearer
// token" (default: the admin token, WithAdminToken). With neither token
// set, /v1/observe answers loopback peers only, and others 403: its
// samples steer the adaptive limits, so a caller that can reach the public
// address must not be able to lower a protected service's limit. POST
// /admin/api/observe on the admin address takes the same samples under the
// admin token.
func WithObserveToken(token string) Option { return func(s *Server) { s.observeToken = token } }

// tokenPair is the tokens a running server checks ("" for none).
type tokenPair struct {
	admin, observe string
	// observeIsAdmin: no observe token was given, so /v1/observe takes
	// the admin token, and a new admin token is the observe token too.
	observeIsAdmin bool
}

// RotateTokens replaces the tokens a running server checks, for a Secret
// rotated without a restart (serve rereads its token files on SIGHUP). An
// empty token leaves that token as it is: a running server's token can be
// changed, not removed. Where no observe token was given, the admin token
// guards /v1/observe, and so does the new one. Requests in flight finish
// under the token they were checked with.
func (s *Server) RotateTokens(admin, observe string) {
	next := *s.tok.Load()
	if admin != "" {
		next.admin = admin
		if next.observeIsAdmin {
			next.observe = admin
		}
	}
	if observe != "" {
		next.observe, next.observeIsAdmin = observe, false
	}
	s.tok.Store(&next)
}

// WithConfigPath records where the configuration was loaded from, for the
// admin API's config view (default "").
func WithConfigPath(p string) Option { return func(s *Server) { s.configPath = p } }

// WithLimits bounds what one request of the native API may carry
// (default Limits{}: 64 descriptors, 16 entries each, 1024-byte keys and
// values, 100 requests per /v1 batch). The Envoy APIs have no such bounds
// (see Limits).
func WithLimits(l Limits) Option { return func(s *Server) { s.limits = l } }

// WithMaxBodyBytes bounds HTTP request bodies (default DefaultMaxBodyBytes,
// 1 MiB); larger ones get 413.
func WithMaxBodyBytes(n int64) Option { return func(s *Server) { s.maxBody = n } }

// WithHeaders chooses the rate limit header fields of responses (default
// headers.Options{}: IETF, X-RateLimit-* and Retry-After): those of /v1
// always, those of the Envoy APIs when WithEnvoyHeaders turns them on.
func WithHeaders(o headers.Options) Option { return func(s *Server) { s.headerOpts = o } }

// WithEnvoyHeaders puts the rate limit header fields (WithHeaders) in the
// Envoy APIs' answers when on: gRPC's response_headers_to_add, which Envoy
// adds to the client's response, and /json's response_headers_to_add and
// HTTP header fields. Default off, as envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED: a client behind Envoy then sees no field
// it did not see before, and no rule name (an unnamed rule's name is its
// path, with configured values). floodgate serve --envoy-headers.
func WithEnvoyHeaders(on bool) Option { return func(s *Server) { s.envoyHeaders = on } }

// WithGRPCReflection offers (default) or withholds the gRPC server
// reflection service, with which grpcurl and similar tools call the server
// without its .proto files. A deployment that does not want its services
// listed to any caller turns it off. floodgate serve --grpc-reflection.
func WithGRPCReflection(on bool) Option { return func(s *Server) { s.noReflection = !on } }

// WithGateway makes h the whole HTTP address (gateway mode; default none:
// the address serves the decision APIs). The decision APIs then move to
// Listeners.API, when it is set; see HTTPHandler. The HTTP address then
// also speaks HTTP/2: without TLS with prior knowledge (h2c, what gRPC
// clients send to a plaintext address), and over a TLS listener that
// offers h2 by ALPN.
func WithGateway(h http.Handler) Option { return func(s *Server) { s.gateway = h } }

// WithGatewayClientTimeout closes a gateway HTTP/2 connection whose client
// has taken none of its bytes for d (default 0: no bound), as the
// gateway's client timeout (gateway.WithClientTimeout) does to an HTTP/1.1
// one, which it sets a write deadline on. Over HTTP/2 that per-request
// deadline cannot act on its own: the stream reset it sends waits behind
// the connection's blocked write, so that a client that granted a large
// flow-control window and stopped reading its socket held every stream's
// handler, concurrency slot and upstream request for as long as it kept
// the connection open. d is http.HTTP2Config.WriteByteTimeout; floodgate
// serve passes its --client-timeout.
func WithGatewayClientTimeout(d time.Duration) Option {
	return func(s *Server) { s.gatewayClient = d }
}

// WithGRPCCredentials makes the gRPC listener speak what c does, e.g.
// credentials.NewTLS for TLS (default: plaintext). The handshake runs on
// gRPC's connection timeout; health and the drain are unchanged.
func WithGRPCCredentials(c credentials.TransportCredentials) Option {
	return func(s *Server) { s.grpcCreds = c }
}

// WithGRPCMaxStreams bounds the calls in flight on one gRPC connection
// (default DefaultGRPCMaxStreams, 1000; advertised as HTTP/2's
// SETTINGS_MAX_CONCURRENT_STREAMS, a stream beyond it is refused with
// REFUSED_STREAM, which clients retry). grpc-go's own default is no bound:
// a client that opens streams and never sends their message then holds a
// goroutine each, and one connection sending 200 000 such HEADERS frames
// (a few megabytes) took the server to 2.3 GB. Envoy and grpc-go clients
// queue calls beyond the bound, or open another connection.
func WithGRPCMaxStreams(n uint32) Option { return func(s *Server) { s.grpcMaxStreams = n } }

// WithDrainTimeout bounds the graceful drain on shutdown (default
// DefaultDrainTimeout, 10 s); connections still open after it are closed.
func WithDrainTimeout(d time.Duration) Option { return func(s *Server) { s.drain = d } }

// WithShutdownDelay makes Serve, when its context is done, first report
// not ready for d — /readyz 503 "not ready: shutting down", the gRPC
// health NOT_SERVING — while every listener keeps serving, and only then
// drain (default 0: drain at once). Load balancers that learn of an
// endpoint's end through probes or a control plane (Kubernetes endpoints,
// Envoy, Istio) stop sending to it before its listeners close.
func WithShutdownDelay(d time.Duration) Option { return func(s *Server) { s.shutdownDelay = d } }

// WithGRPCMaxConnectionAge closes each gRPC connection after age (with
// jitter, by a GOAWAY: the client reconnects, to another instance behind
// a balancer), leaving its calls in flight grace to finish (default 0:
// connections live as long as their clients keep them; grace 0: no bound).
// Envoy keeps its HTTP/2 connections to the rate limit service open
// indefinitely, so without an age instances added by a scale-out get no
// share of the existing connections' load (envoyproxy/ratelimit's
// GRPC_MAX_CONNECTION_AGE and GRPC_MAX_CONNECTION_AGE_GRACE).
func WithGRPCMaxConnectionAge(age, grace time.Duration) Option {
	return func(s *Server) { s.grpcMaxAge, s.grpcMaxAgeGrace = age, grace }
}

// WithGRPCMaxConnectionIdle closes a gRPC connection on which no call has
// been in flight for d (a GOAWAY, then the close: the client opens a new
// connection for its next call, as after WithGRPCMaxConnectionAge), or
// never with 0 (default DefaultGRPCMaxConnectionIdle, 15 minutes). A call
// in flight, however long, keeps its connection open; pings do not.
// grpc-go's own default is no bound, and each idle connection holds about
// 16 KB of buffers and three goroutines (reader, writer, keepalive) for as
// long as its client keeps it. Envoy closes its own idle upstream
// connections after an hour (its idle_timeout), so 15 minutes is what
// decides for a rate limit service whose Envoys went quiet; one called
// every few minutes keeps its connection, and its next call does not pay a
// new handshake, which Envoy's 20 ms rate limit timeout may not cover
// (floodgate serve --grpc-max-connection-idle).
func WithGRPCMaxConnectionIdle(d time.Duration) Option { return func(s *Server) { s.grpcMaxIdle = d } }

// WithBodyTimeout bounds how long a handler that reads a small JSON body
// (POST /json, /v1/*, the admin API's) waits for all of it, from when the
// handler starts (default DefaultBodyTimeout, 10 s). A body that has not
// arrived by then is answered 408 and its connection closed, so that slow
// clients cannot hold connections open. The time the decision takes is not
// counted.
func WithBodyTimeout(d time.Duration) Option { return func(s *Server) { s.bodyTimeout = d } }

// WithInstances says how many instances share the store (floodgate serve
// --instances; default 1). Under the local failure policy (a
// store/resilient store with FailLocal, found down the store's wrappers),
// which decides on each limit ÷ n while the store does not answer, the
// Envoy APIs' current_limit then reports that share (resilient.Share), as
// /v1's limit and the header fields do, not the configured limit.
func WithInstances(n int) Option { return func(s *Server) { s.instances = n } }

// WithPinger sets how readiness checks the store (default: the store's own
// Ping(ctx) error method if it has one, else a Peek of a probe key).
func WithPinger(ping func(ctx context.Context) error) Option {
	return func(s *Server) { s.ping = ping }
}

// WithReadiness sets how /readyz judges the store (default
// DefaultReadyFailures, 3, and DefaultReadyTimeout, 1 s): once the store
// has answered, readiness turns not ready only after failures pings in a
// row failed, and ready again on the first that succeeds; each ping may
// take up to timeout. Before the store has ever answered, one failed ping
// is not ready: there is no answer to keep. A single slow ping under CPU
// load therefore no longer takes an instance out of service when load is
// highest. Pings come from Serve every second and from each /readyz
// request. The default pinger of a store wrapped by store/resilient pings
// through the wrapper first (its breaker and per-call timeout, 50 ms by
// default, and its metrics) and, when that fails other than by an open
// breaker, asks the store under it again within what is left of timeout:
// the wrapper's timeout is for decisions, which the failure policy
// answers, not for readiness.
func WithReadiness(failures int, timeout time.Duration) Option {
	return func(s *Server) { s.readyFailures, s.readyTimeout = failures, timeout }
}

// WithVersion sets the version floodgate_build_info reports (default: the
// main module's version in the binary's build information, "(devel)" for
// a build from a checkout, "unknown" without build information).
// floodgate serve passes the version floodgate version prints.
func WithVersion(v string) Option { return func(s *Server) { s.version = v } }

// Server is the floodgate server: the Envoy rate limit gRPC service and the
// standard health service, the HTTP API (/json and /v1/), and the admin
// address (/metrics, /healthz, /readyz, /admin/api/, /dashboard).
type Server struct {
	engine  *policy.Engine
	unknown unknownDomains
	store   store.Store
	metrics *metrics.Metrics
	// region is the store of several regions under the failure policy,
	// if it is one: the admin API's stats say its state.
	region *region.Store
	// conns are the listeners LimitConns wrapped, by name: Serve tells
	// them which HTTP connections are idle.
	conns map[string]*ConnListener
	// mcSettled is set once the memcached store's counters are exported,
	// or the store is known not to be memcached (exportMemcached).
	mcSettled atomic.Bool
	// tok holds the tokens the admin API and /v1/observe check, which
	// RotateTokens replaces (adminToken and observeToken are the options').
	tok        atomic.Pointer[tokenPair]
	log        *slog.Logger
	adminToken string
	// observeToken guards /v1/observe ("": the admin token; neither:
	// loopback peers only).
	observeToken string
	configPath   string
	limits       Limits
	maxBody      int64
	headerOpts   headers.Options
	// headerWriter formats the gRPC responses' fields (headerOpts), each
	// rule's own values once.
	headerWriter *headers.Writer
	envoyHeaders bool
	noReflection bool // WithGRPCReflection(false)
	gateway      http.Handler
	// gatewayClient bounds a gateway HTTP/2 connection's blocked writes
	// (0: none).
	gatewayClient time.Duration
	grpcCreds     credentials.TransportCredentials
	drain         time.Duration
	// shutdownDelay: how long Serve reports not ready before it drains.
	shutdownDelay time.Duration
	// grpcMaxAge, grpcMaxAgeGrace: the gRPC connections' age (0: none).
	grpcMaxAge, grpcMaxAgeGrace time.Duration
	// grpcMaxIdle closes gRPC connections without calls (0: never).
	grpcMaxIdle time.Duration
	// grpcMaxStreams bounds the streams of one gRPC connection.
	grpcMaxStreams uint32
	bodyTimeout    time.Duration
	// instances is WithInstances'; localShare is it when the store's
	// failure policy is local (limits divided by it), else 0.
	instances, localShare int
	ping                  func(ctx context.Context) error
	storeLog              *StoreLog
	// version is WithVersion's, for build_info.
	version string
	// readyFailures and readyTimeout are WithReadiness'.
	readyFailures int
	readyTimeout  time.Duration
	// defaultPing is set when ping is readinessPing's: it peeks at
	// resilient.PingKey, whose partition /readyz can name.
	defaultPing bool
	// pingFails counts the readiness pings that failed in a row.
	pingFails atomic.Int32
	// now is the decision log's clock (time.Now; tests set it).
	now func() time.Time
	// overLog samples the DEBUG records of refused decisions.
	overLog overLimitLog

	rules    atomic.Pointer[ruleCache]
	grpc     *grpc.Server
	health   *health.Server
	draining atomic.Bool
	// drainCtx is cancelled (startDrain) when the drain begins, after
	// draining is set and the health turned NOT_SERVING: it ends the
	// health Watch calls (drainingHealth).
	drainCtx   context.Context
	startDrain context.CancelFunc
	// grpcInflight counts the ShouldRateLimit calls in flight, for the
	// drain's report (the HTTP listeners' are counted in Serve).
	grpcInflight atomic.Int64
	// stopping is set during the shutdown delay: not ready, still serving.
	stopping atomic.Bool
	// storeState is what readiness reports: storeUnknown before the first
	// CheckStore, then storeUp or storeDown (after readyFailures failed
	// pings in a row, or the first failed one before any succeeded).
	storeState atomic.Int32

	eventsMu sync.Mutex
	events   []Event

	// lastReload is the last configuration reload's outcome (ConfigReloaded).
	lastReload atomic.Pointer[ReloadView]
}

// New returns a server deciding with engine on st (the store engine was
// built on: the admin API resets and inspects keys there, readiness pings
// it). Options and their defaults:
//
//   - WithMetrics(metrics.New())
//   - WithLogger(slog.Default())
//   - WithAdminToken(""): the admin API is open (bind it to loopback)
//   - WithObserveToken(""): /v1/observe takes the admin token; with none, loopback peers only
//   - WithConfigPath("")
//   - WithLimits(Limits{}): 64 descriptors, 16 entries, 1024-byte strings, batches of 100
//   - WithMaxBodyBytes(1 MiB)
//   - WithHeaders(headers.Options{}): every header field, default names
//   - WithEnvoyHeaders(false): no header fields in the Envoy APIs' answers
//   - WithGateway(nil)
//   - WithGatewayClientTimeout(0): a gateway HTTP/2 connection's writes not bounded
//   - WithDrainTimeout(10s)
//   - WithBodyTimeout(10s)
//   - WithShutdownDelay(0): drain as soon as Serve's context is done
//   - WithGRPCMaxConnectionAge(0, 0): gRPC connections never aged out
//   - WithGRPCMaxConnectionIdle(DefaultGRPCMaxConnectionIdle): a gRPC connection without calls for 15 minutes is closed
//   - WithGRPCMaxStreams(DefaultGRPCMaxStreams): 1000 calls in flight per gRPC connection
//   - WithInstances(1): current_limit is never divided
//   - WithPinger(nil): the store's Ping, else a Peek of a probe key
//   - WithReadiness(DefaultReadyFailures, DefaultReadyTimeout): not ready after 3 failed pings in a row of up to 1 s each
//   - WithStoreLog(nil): no store log reports through the server
//   - WithVersion(""): build_info reports the module version of the build information
func New(engine *policy.Engine, st store.Store, opts ...Option) (*Server, error) {
	if engine == nil || st == nil {
		return nil, errors.New("server: New needs an engine and a store")
	}
	s := &Server{engine: engine, store: st, maxBody: DefaultMaxBodyBytes, drain: DefaultDrainTimeout, bodyTimeout: DefaultBodyTimeout,
		grpcMaxStreams: DefaultGRPCMaxStreams, grpcMaxIdle: DefaultGRPCMaxConnectionIdle,
		readyFailures: DefaultReadyFailures, readyTimeout: DefaultReadyTimeout, now: time.Now}
	s.unknown.lines = causelog.Limiter{Interval: unknownDomainEvery, Max: 1}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if err := s.headerOpts.Check(); err != nil {
		return nil, fmt.Errorf("server: WithHeaders: %w", err)
	}
	s.headerWriter = headers.NewWriter(s.headerOpts)
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxBody <= 0 {
		return nil, fmt.Errorf("server: max body bytes must be > 0, got %d", s.maxBody)
	}
	if s.drain <= 0 {
		return nil, fmt.Errorf("server: drain timeout must be > 0, got %v", s.drain)
	}
	if s.shutdownDelay < 0 || s.grpcMaxAge < 0 || s.grpcMaxAgeGrace < 0 {
		return nil, fmt.Errorf("server: shutdown delay and gRPC connection age must be >= 0, got %v, %v, %v", s.shutdownDelay, s.grpcMaxAge, s.grpcMaxAgeGrace)
	}
	if s.grpcMaxIdle < 0 {
		return nil, fmt.Errorf("server: gRPC max connection idle must be >= 0 (0: none), got %v", s.grpcMaxIdle)
	}
	if s.grpcMaxStreams == 0 {
		return nil, errors.New("server: gRPC max streams must be > 0")
	}
	if s.bodyTimeout <= 0 {
		return nil, fmt.Errorf("server: body timeout must be > 0, got %v", s.bodyTimeout)
	}
	if s.readyFailures < 1 || s.readyTimeout <= 0 {
		return nil, fmt.Errorf("server: readiness needs at least 1 failed ping and a ping timeout > 0, got %d and %v", s.readyFailures, s.readyTimeout)
	}
	if s.instances < 0 {
		return nil, fmt.Errorf("server: instances must be >= 1 (0: the default, 1), got %d", s.instances)
	}
	if rs, ok, _ := store.Under[*resilient.Store](st); ok && rs.Policy() == resilient.FailLocal && s.instances > 1 {
		s.localShare = s.instances
	}
	s.limits = s.limits.withDefaults()
	observeIsAdmin := s.observeToken == ""
	if observeIsAdmin {
		s.observeToken = s.adminToken
	}
	s.tok.Store(&tokenPair{admin: s.adminToken, observe: s.observeToken, observeIsAdmin: observeIsAdmin})
	if s.storeLog != nil {
		s.storeLog.attach(s)
	}
	if s.ping == nil {
		s.ping, s.defaultPing = readinessPing(st), true
	}
	if s.version == "" {
		s.version = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			s.version = bi.Main.Version
		}
	}
	s.metrics.SetBuildInfo(s.version)
	s.metrics.SetQueueDepth(engine.Waiting)
	s.metrics.SetConfigSource(engine.Config)
	s.recordFactors("", "")
	if ms, ok := st.(*memory.Store); ok {
		s.metrics.MemoryStore(ms.Stats)
	}
	s.exportMemcached()
	if rs, ok, _ := store.Under[*region.Store](st); ok {
		s.region = rs
		s.metrics.RegionStore(rs.Stats)
	}
	// Stream workers reuse goroutines whose stacks have already grown to
	// the handler's depth, instead of a fresh goroutine per call.
	gopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(s.maxBody)), grpc.NumStreamWorkers(uint32(max(16, 4*runtime.GOMAXPROCS(0)))),
		grpc.MaxConcurrentStreams(s.grpcMaxStreams)}
	if s.grpcCreds != nil {
		gopts = append(gopts, grpc.Creds(s.grpcCreds))
	}
	// Pings are answered, with calls in flight or not, down to one every
	// grpcPingMinTime: grpc-go's default policy (one every 5 minutes, and
	// on a connection without calls one every 2 hours) answers the third
	// that comes sooner with GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and
	// closes the connection, so an Envoy whose rate limit cluster sets
	// connection_keepalive (interval 30s, say) lost every connection that
	// went a minute and a half between calls, and paid a new handshake on
	// its next call. Pings do not make a connection busy: the idle bound
	// still closes it.
	gopts = append(gopts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcPingMinTime, PermitWithoutStream: true}))
	// A connection must finish its handshake (TLS, when on, and the
	// HTTP/2 preface and settings) within grpcConnectionTimeout, as an
	// HTTP request's header must within the HTTP listeners'
	// ReadHeaderTimeout: grpc-go's default of 120 s let a client hold a
	// connection, and its goroutine, for two minutes by sending nothing.
	gopts = append(gopts, grpc.ConnectionTimeout(grpcConnectionTimeout))
	if s.grpcMaxAge > 0 || s.grpcMaxIdle > 0 {
		// A zero field is grpc-go's default: no bound, and for Time and
		// Timeout a ping after 2 h without reads, the close 20 s later.
		gopts = append(gopts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.grpcMaxIdle,
			MaxConnectionAge: s.grpcMaxAge, MaxConnectionAgeGrace: s.grpcMaxAgeGrace}))
	}
	s.grpc = grpc.NewServer(gopts...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, rlsService{s: s})
	s.health = health.NewServer()
	s.drainCtx, s.startDrain = context.WithCancel(context.Background())
	healthpb.RegisterHealthServer(s.grpc, drainingHealth{s.health, s})
	if !s.noReflection {
		reflection.Register(s.grpc) // grpcurl and friends need no .proto files
	}
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// grpcPingMinTime is the shortest interval between a client's pings that
// the gRPC server tolerates (keepalive.EnforcementPolicy.MinTime): that of
// gRPC clients' keepalive, which cannot be set shorter (10 s). A variable
// for tests.
var grpcPingMinTime = 10 * time.Second

// grpcConnectionTimeout bounds a gRPC connection's handshake, TLS
// included (grpc.ConnectionTimeout): the HTTP listeners' header timeout.
// A variable for tests.
var grpcConnectionTimeout = 10 * time.Second

var probeLimit, _ = algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})

// peekProbe checks that st answers with a Peek that charges nothing.
func peekProbe(ctx context.Context, st store.Store) error {
	return st.Peek(ctx, []store.Request{{Key: "fg:__ping", Limit: probeLimit}}, make([]algo.Decision, 1))
}

// pingOf is st's Ping, or a Peek of a probe key for a store without one.
func pingOf(st store.Store) func(ctx context.Context) error {
	if p, ok := st.(interface{ Ping(context.Context) error }); ok {
		return p.Ping
	}
	return func(ctx context.Context) error { return peekProbe(ctx, st) }
}

// readinessPing is the default pinger of st (WithPinger). On a store
// wrapped by store/resilient, a ping the wrapper failed other than by an
// open breaker (its per-call timeout, meant for decisions, which a busy
// CPU can exceed with a healthy store) is asked again of the store under
// it, within what is left of the readiness deadline. An open breaker
// answers at once: the failure policy already answers decisions, and its
// error names the failure that opened it.
func readinessPing(st store.Store) func(ctx context.Context) error {
	ping := pingOf(st)
	rs, ok, _ := store.Under[*resilient.Store](st)
	if !ok || rs.Unwrap() == nil {
		return ping
	}
	inner := pingOf(rs.Unwrap())
	return func(ctx context.Context) error {
		err := ping(ctx)
		if err == nil || errors.Is(err, resilient.ErrCircuitOpen) || ctx.Err() != nil {
			return err
		}
		// A store that pipelines calls on one connection (store/redis)
		// can fail a call with the deadline of another still in flight
		// on it — the wrapper's ping, abandoned at its timeout — while
		// ctx has time left: such a failure is asked again, a few times
		// at most, the connection replaced meanwhile.
		for range maxReadyRetries {
			err = inner(ctx)
			if err == nil || ctx.Err() != nil ||
				!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				break
			}
		}
		return err
	}
}

// maxReadyRetries bounds the readiness pings of the store under
// store/resilient that one check sends (readinessPing).
const maxReadyRetries = 3

// Metrics returns the server's metrics.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// RLS returns the Envoy rate limit service implementation, for callers
// that register it on a gRPC server of their own.
func (s *Server) RLS() rlsv3.RateLimitServiceServer { return rlsService{s: s} }

// GRPCServer returns the gRPC server with the rate limit and health
// services registered.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

func (s *Server) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range []string{"", RLSServiceName, HealthServiceName} {
		s.health.SetServingStatus(name, st)
	}
}

// What CheckStore found.
const (
	storeUnknown int32 = iota // not checked yet
	storeUp
	storeDown
)

// CheckStore pings the store, within the readiness deadline (WithReadiness,
// 1 s by default), updates the readiness and returns the ping's error.
// Readiness turns not ready only after the configured number of failed
// pings in a row (3 by default; the first failed ping when the store has
// never answered) and ready again on the first ping that succeeds. The
// first check turns the gRPC health to SERVING, which the store's state no
// longer changes (only the drain does). Changes of readiness are logged (a
// store that fails from the start, or fails enough pings in a row, is a
// WARN "store not answering" event; one that answers again an INFO "store
// answering"), a failed ping that leaves the server ready at DEBUG.
func (s *Server) CheckStore(ctx context.Context) error {
	_, err := s.checkStore(ctx)
	return err
}

// checkStore is CheckStore, also reporting whether the server is ready.
func (s *Server) checkStore(ctx context.Context) (ready bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, s.readyTimeout)
	defer cancel()
	err = s.ping(pctx)
	if err != nil && ctx.Err() != nil {
		// The caller gave up (a shutdown): this says nothing of the store.
		return s.storeState.Load() == storeUp, err
	}
	if err != nil && pctx.Err() != nil {
		err = fmt.Errorf("no answer within the readiness deadline of %v; last: %s", s.readyTimeout, keyless(err))
	}
	now := storeUp
	if err == nil {
		s.pingFails.Store(0)
	} else {
		n := int(s.pingFails.Add(1))
		if n >= s.readyFailures || s.storeState.Load() != storeUp {
			now = storeDown
		} else {
			s.log.Debug(fmt.Sprintf("store did not answer a readiness ping, still ready (%d of %d failed pings in a row before not ready): %s",
				n, s.readyFailures, shown(keyless(err))), "event", "store")
		}
	}
	if was := s.storeState.Swap(now); was != now {
		if now == storeDown {
			s.Warn("store", "store not answering: "+shown(keyless(err)))
		} else {
			s.Event("store", "store answering")
		}
	}
	if !s.draining.Load() && !s.stopping.Load() {
		// The gRPC health says the server answers decisions, whatever its
		// store does: during an outage the failure policy answers, and a
		// fleet reported NOT_SERVING would be taken out of rotation (Envoy
		// then fails open, whatever --on-store-error says). Readiness
		// (/readyz) reports the store.
		s.setHealth(healthpb.HealthCheckResponse_SERVING)
	}
	return now == storeUp, err
}

// decide decides or peeks req, which the caller validated (checkRequest,
// Limits.check), recording metrics. A decision's statuses go to buf when
// it is not nil (Engine.DecideInto): the response is then valid as long as
// buf is not used again.
func (s *Server) decide(ctx context.Context, req policy.Request, peek bool, buf *policy.StatusBuffer) (policy.Response, error) {
	var resp policy.Response
	var err error
	switch {
	case peek:
		resp, err = s.engine.Peek(ctx, req)
	case buf != nil:
		resp, err = s.engine.DecideInto(ctx, req, buf)
	default:
		resp, err = s.engine.Decide(ctx, req)
	}
	if err != nil {
		return policy.Response{}, err
	}
	if !peek {
		s.recordDecision(ctx, s.domainLabel(req.Domain), &req, &resp)
	}
	return resp, nil
}

// recordDecision records resp, the decision of req, in the metrics under
// the domain label domain, and a refusal in the decision log when its
// level is on (logOverLimit).
func (s *Server) recordDecision(ctx context.Context, domain string, req *policy.Request, resp *policy.Response) {
	s.metrics.Decided(domain, resp)
	if resp.Code == policy.CodeOverLimit && s.log.Enabled(ctx, slog.LevelDebug) {
		s.logOverLimit(ctx, req, resp)
	}
}

// MaxOverLimitLogs bounds the DEBUG records of refused decisions a server
// writes per second (logOverLimit); the next record after a second that
// left some out says how many.
const MaxOverLimitLogs = 10

// overLimitLog counts the DEBUG records of refused decisions of the
// current second.
type overLimitLog struct {
	mu      sync.Mutex
	second  int64 // Unix second the count is of
	n       int   // records written in it
	skipped int   // records left out since the last one written
}

// logOverLimit writes, at DEBUG and at most MaxOverLimitLogs times a
// second, a record of a refused decision: its domain, the refusing
// descriptor's rule (its configured name, "" without one) and entry keys,
// the retry time, how many descriptors were refused, whether the failure
// policy answered, and how many records were left out before it. No
// descriptor value: values are clients' addresses, users, API keys. The
// caller checks the code and the level first, so that an admitted
// decision, or any at INFO, costs nothing here.
func (s *Server) logOverLimit(ctx context.Context, req *policy.Request, resp *policy.Response) {
	sec := s.now().Unix()
	l := &s.overLog
	l.mu.Lock()
	if sec != l.second {
		l.second, l.n = sec, 0
	}
	if l.n >= MaxOverLimitLogs {
		l.skipped++
		l.mu.Unlock()
		return
	}
	l.n++
	skipped := l.skipped
	l.skipped = 0
	l.mu.Unlock()
	first, refused := -1, 0
	for i := range resp.Statuses {
		if resp.Statuses[i].Code == policy.CodeOverLimit {
			refused++
			if first < 0 {
				first = i
			}
		}
	}
	attrs := []slog.Attr{slog.String("domain", req.Domain)}
	if first >= 0 {
		st := &resp.Statuses[first]
		var keys []string
		if first < len(req.Descriptors) {
			for _, e := range req.Descriptors[first].Entries {
				keys = append(keys, e.Key)
			}
		}
		attrs = append(attrs, slog.String("rule", st.ConfiguredName), slog.String("keys", strings.Join(keys, ",")),
			slog.Duration("retry_after", st.Decision.RetryAfter))
	}
	attrs = append(attrs, slog.Int("refused_descriptors", refused), slog.Bool("store_fallback", resp.StoreFallback))
	if skipped > 0 {
		attrs = append(attrs, slog.Int("unlogged", skipped))
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "decision over limit", attrs...)
}

// domainLabel is domain as the metrics label it: itself when the
// configuration has it, else metrics.UnknownDomain.
// An unknown domain is also noted for its WARN (see unknownDomains).
func (s *Server) domainLabel(domain string) string {
	if cfg := s.engine.Config(); cfg.Domain(domain) == nil {
		s.unknown.note(s.log, cfg, domain, s.now())
		return metrics.UnknownDomain
	}
	return domain
}

// Event is a notable change shown by the admin API and the dashboard.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	// Level is the log level it was logged at: "INFO", or "WARN" for a
	// failure (the store not answering, a configuration not reloaded).
	Level string `json:"level"`
}

const maxEvents = 100

// Event records a notable change (a reload, an override, the store coming
// back) and logs it at INFO.
func (s *Server) Event(kind, msg string) { s.EventAt(slog.LevelInfo, kind, msg) }

// Warn records a failure the operator should see (the store not
// answering, a configuration that did not reload) and logs it at WARN, so
// that it shows under --log-level warn.
func (s *Server) Warn(kind, msg string) { s.EventAt(slog.LevelWarn, kind, msg) }

// EventAt records an event and logs it at level.
func (s *Server) EventAt(level slog.Level, kind, msg string) {
	s.log.Log(context.Background(), level, msg, "event", kind)
	s.eventsMu.Lock()
	defer s.eventsMu.Unlock()
	if len(s.events) == maxEvents {
		copy(s.events, s.events[1:])
		s.events = s.events[:maxEvents-1]
	}
	s.events = append(s.events, Event{Time: time.Now().UTC(), Kind: kind, Message: msg, Level: level.String()})
}

// Events returns the recent events, oldest first.
func (s *Server) Events() []Event {
	s.eventsMu.Lock()
	defer s.eventsMu.Unlock()
	return append([]Event(nil), s.events...)
}

// Listeners are the listening sockets of Serve.
type Listeners struct {
	HTTP, GRPC, Admin net.Listener
	// API, when not nil, serves the decision APIs (APIHandler) apart from
	// HTTP: gateway mode's --api address. Nil: only HTTP serves them, and
	// in gateway mode nothing does.
	API net.Listener
}

// Listen opens the three addresses.
func Listen(httpAddr, grpcAddr, adminAddr string) (Listeners, error) {
	var ls Listeners
	var err error
	if ls.HTTP, err = net.Listen("tcp", httpAddr); err != nil {
		return ls, fmt.Errorf("server: listen --http %s: %w", httpAddr, err)
	}
	if ls.GRPC, err = net.Listen("tcp", grpcAddr); err != nil {
		ls.HTTP.Close()
		return ls, fmt.Errorf("server: listen --grpc %s: %w", grpcAddr, err)
	}
	if ls.Admin, err = net.Listen("tcp", adminAddr); err != nil {
		ls.HTTP.Close()
		ls.GRPC.Close()
		return ls, fmt.Errorf("server: listen --admin %s: %w", adminAddr, err)
	}
	return ls, nil
}

// exportMemcached exports the memcached store's counters once the store
// under the failure policy (and any other wrapper with Unwrap) is one: at
// New, or once a store that could not be reached at start has opened.
func (s *Server) exportMemcached() {
	if s.mcSettled.Load() {
		return
	}
	mc, ok, whole := store.Under[*memcached.Store](s.store)
	if ok {
		s.metrics.MemcachedStore(mc.Stats)
	}
	s.mcSettled.Store(whole) // found, or known not to be memcached: look no more

}

// idleTimeout closes a keep-alive connection of the HTTP, API and admin
// listeners that has sent no request for that long. A variable for tests.
var idleTimeout = 2 * time.Minute

// Serve serves on the listeners until ctx is done, then drains: health
// turns NOT_SERVING, the HTTP and gRPC listeners close, requests in flight
// finish (up to the drain timeout), the admin listener closes last (so that
// /readyz answers 503 "draining" and /metrics stays readable meanwhile) and
// Serve returns nil. An event says how many requests are in flight when
// the drain starts; connections still open when the drain timeout passes
// are closed, and a WARN event says how many requests were cut off. It
// also pings the store every second for readiness. An error from a
// listener stops everything and is returned.
func (s *Server) Serve(ctx context.Context, ls Listeners) error {
	var httpActive, adminActive activeConns
	// httpInflight and apiInflight count the requests in flight on the
	// HTTP and API listeners, for the drain's reports: an HTTP/2
	// connection (the gateway's) carries many.
	var httpInflight, apiInflight atomic.Int64
	httpHandler := counted(s.HTTPHandler(), &httpInflight)
	httpSrv := &http.Server{Handler: httpHandler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
		ConnState: s.connState("http", httpActive.track), ErrorLog: s.httpErrorLog("http")}
	if s.gateway != nil {
		httpSrv.Protocols = gatewayProtocols()
		if s.gatewayClient > 0 {
			httpSrv.HTTP2 = &http.HTTP2Config{WriteByteTimeout: s.gatewayClient}
		}
	}
	adminSrv := &http.Server{Handler: s.AdminHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout, ConnState: adminActive.track,
		ErrorLog: s.httpErrorLog("admin"), BaseContext: withListenAddr}
	var apiActive activeConns
	var apiSrv *http.Server
	errc := make(chan error, 4)
	go func() { errc <- serveHTTP(httpSrv, ls.HTTP, "http") }()
	if ls.API != nil {
		apiSrv = &http.Server{Handler: counted(s.APIHandler(), &apiInflight), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout,
			ConnState: s.connState("api", apiActive.track), ErrorLog: s.httpErrorLog("api")}
		go func() { errc <- serveHTTP(apiSrv, ls.API, "api") }()
	}
	go func() { errc <- serveHTTP(adminSrv, ls.Admin, "admin") }()
	go func() {
		if err := s.grpc.Serve(ls.GRPC); err != nil {
			errc <- fmt.Errorf("server: grpc: %w", err)
			return
		}
		errc <- nil
	}()
	s.CheckStore(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			s.CheckStore(ctx)
			s.exportMemcached()
		case err = <-errc:
			break loop
		}
	}
	if err == nil && s.shutdownDelay > 0 {
		// Not ready, still serving: the balancers see the probes fail
		// and stop routing here before the listeners close.
		s.stopping.Store(true)
		s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
		s.Event("drain", fmt.Sprintf("shutting down: reporting not ready and still serving for %v (shutdown delay), then draining", s.shutdownDelay))
		delay := time.NewTimer(s.shutdownDelay)
		select {
		case <-delay.C:
		case err = <-errc:
			delay.Stop()
		}
	}
	s.draining.Store(true)
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	s.startDrain() // the health watches end once they have said so
	s.Event("drain", s.drainStart(httpInflight.Load(), apiInflight.Load(), s.grpcInflight.Load(), apiSrv != nil))
	dctx, cancel := context.WithTimeout(context.Background(), s.drain)
	defer cancel()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	var cut [3]int
	errs := make([]error, 3)
	var proxiedCut int64
	cut[0], errs[0] = shutdown(dctx, httpSrv, &httpActive, func() { proxiedCut = httpInflight.Load() })
	if apiSrv != nil {
		cut[2], errs[2] = shutdown(dctx, apiSrv, &apiActive, nil)
	}
	grpcCut := false
	var grpcCalls int64
	select {
	case <-done:
	default:
		select {
		case <-done:
		case <-dctx.Done():
			grpcCut, grpcCalls = true, s.grpcInflight.Load()
			s.grpc.Stop()
			<-done
		}
	}
	// The admin address closes last: while the rest drains, /readyz and
	// /healthz answer 503 "draining" and /metrics shows the drain, rather
	// than refusing connections as if the process were gone.
	cut[1], errs[1] = shutdown(dctx, adminSrv, &adminActive, nil)
	if dctx.Err() != nil && (cut[0] > 0 || cut[1] > 0 || cut[2] > 0 || grpcCut) {
		var what []string
		switch {
		case cut[0] > 0 && s.gateway != nil:
			// Not the HTTP API, which gateway mode moves to --api, and
			// not one request per connection: HTTP/2 multiplexes.
			what = append(what, fmt.Sprintf("%d proxied request(s) (gateway, %d connection(s))", proxiedCut, cut[0]))
		case cut[0] > 0:
			what = append(what, fmt.Sprintf("%d HTTP API request(s)", cut[0]))
		}
		if cut[2] > 0 {
			what = append(what, fmt.Sprintf("%d decision API (--api) request(s)", cut[2]))
		}
		if cut[1] > 0 {
			what = append(what, fmt.Sprintf("%d admin request(s)", cut[1]))
		}
		if grpcCut {
			// GracefulStop also waits for streams the handler has not
			// started (a request not fully received) and other services'
			// streams (reflection): those are no decisions. The health
			// Watch calls end at the drain (drainingHealth).
			what = append(what, fmt.Sprintf("%d gRPC decision call(s) (and any other gRPC streams)", grpcCalls))
		}
		s.Warn("drain", fmt.Sprintf("drain timed out after %v: closed the connections of %s still in flight", s.drain, strings.Join(what, " and ")))
	}
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("server: drain: %w", err)
	}
	return nil
}

// counted returns h counting its requests in flight in n.
func counted(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		defer n.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// drainStart is the drain's first event: the requests in flight as it
// starts, by listener — httpN on the HTTP listener (the gateway's proxied
// requests in gateway mode), apiN on the API listener (when api is set),
// grpcN ShouldRateLimit calls — and how long they have to finish. The
// admin listener, which serves until the end, is not counted.
func (s *Server) drainStart(httpN, apiN, grpcN int64, api bool) string {
	parts := make([]string, 0, 3)
	if s.gateway != nil {
		parts = append(parts, fmt.Sprintf("%d proxied (gateway)", httpN))
	} else {
		parts = append(parts, fmt.Sprintf("%d HTTP API", httpN))
	}
	if api {
		parts = append(parts, fmt.Sprintf("%d decision API (--api)", apiN))
	}
	parts = append(parts, fmt.Sprintf("%d gRPC", grpcN))
	return fmt.Sprintf("draining: %d request(s) in flight (%s); they have up to %v (drain timeout) to finish",
		httpN+apiN+grpcN, strings.Join(parts, ", "), s.drain)
}

// httpErrorLog is the ErrorLog of the http.Server of listener: net/http's
// messages become records of the server's logger, with listener=name,
// instead of unstructured lines from the standard logger on stderr.
func (s *Server) httpErrorLog(listener string) *log.Logger {
	return log.New(httpLogWriter{s.log.With("listener", listener)}, "", 0)
}

// tlsHandshakeError starts net/http's message for a failed TLS handshake.
const tlsHandshakeError = "http: TLS handshake error"

// httpLogWriter logs each net/http message at a level chosen by its
// prefix: a failed TLS handshake (a scanner, a plaintext client, a client
// without a certificate under mTLS) at DEBUG, since it is per-connection
// noise a client causes, not the server (the client sees the failure);
// everything else (accept errors, panics in handlers, superfluous
// WriteHeader calls) at WARN, as a fault of the server to look at.
type httpLogWriter struct{ log *slog.Logger }

func (w httpLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, tlsHandshakeError) {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// shutdown closes srv gracefully, up to ctx's deadline; then it closes the
// connections left and returns how many were serving a request. before,
// when not nil, runs just before they are closed.
func shutdown(ctx context.Context, srv *http.Server, active *activeConns, before func()) (cut int, err error) {
	err = srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		cut = active.count()
		if before != nil {
			before()
		}
		srv.Close()
		err = nil
	}
	return cut, err
}

// activeConns tracks an http.Server's connections that are serving a
// request (its ConnState hook), for the drain to say how many it cut off.
type activeConns struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (a *activeConns) track(c net.Conn, st http.ConnState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st == http.StateActive {
		if a.m == nil {
			a.m = make(map[net.Conn]struct{})
		}
		a.m[c] = struct{}{}
	} else {
		delete(a.m, c)
	}
}

func (a *activeConns) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// gatewayProtocols are the protocols of the HTTP address in gateway mode
// (WithGateway): HTTP/1.1, HTTP/2 over TLS (when the listener is a TLS
// one offering h2 by ALPN) and HTTP/2 without TLS with prior knowledge
// (h2c), which gRPC clients speak to a plaintext address. A connection
// that begins with the HTTP/2 preface is served as HTTP/2, any other as
// HTTP/1.1; the "Upgrade: h2c" offer of HTTP/1.1 is not taken (net/http
// does not implement it, and the gateway does not pass it on). The
// decision APIs (--api) and the admin address stay HTTP/1.1.
func gatewayProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

func serveHTTP(srv *http.Server, ln net.Listener, name string) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %s: %w", name, err)
	}
	return nil
}
