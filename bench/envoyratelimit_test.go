package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/testserver"
)

// The envoyproxy-ratelimit contenders of GRPCShouldRateLimit64: the
// reference implementation of Envoy's rate limit service
// (github.com/envoyproxy/ratelimit), run as its own server process against
// the same kind of local redis-server as floodgate-redis, with a config
// equivalent to grpcDomain (domain "bench", key "user", a per-hour limit no
// run reaches), driven by the same callers over the same 10 000 values.
//
// Its module is not a dependency of this one: its dependencies would be
// merged into ours (and it is not meant to be imported). The benchmark builds
// its server once, the way its README does — `go build ./src/service_cmd` in
// a writable copy of the module's directory, with its own go.mod and go.sum —
// and caches the binary under os.UserCacheDir()/floodgate-bench/, keyed by
// the pinned version. Without the go command or the module proxy the
// contenders are skipped.
//
// envoyproxy/ratelimit decides with a fixed window: INCRBY and EXPIRE of the
// descriptor's key in one pipeline, one round trip per request; its Redis
// client (radix v4) multiplexes concurrent requests over a pool of 10
// connections. Two contenders:
//
//   - envoyproxy-ratelimit: its defaults;
//   - envoyproxy-ratelimit-pipelined: with REDIS_PIPELINE_WINDOW=150us, the
//     write buffering its README recommends "for optimal performance"
//     (150us–500us). In this version the window is applied to cluster
//     clients only (src/redis/driver_impl.go sets WriteFlushInterval when
//     REDIS_TYPE is cluster), so on a single Redis it should measure as the
//     defaults do; it is run to show that rather than assume it.
//     REDIS_PIPELINE_LIMIT is deprecated there and has no effect.
//
// floodgate-redis-process runs `floodgate serve` the same way, as a child
// process on its own Redis: floodgate-redis serves in the benchmark's
// process, which on a loaded machine gets a smaller share of the cores
// than a client process and a server process together.
//
// A server in another process keeps its CPU out of cpu-ns/op (this process:
// the callers). The Redis contenders report redis-cpu-ns/op (redis-server's
// CPU per decision, from INFO cpu) and total-cpu-ns/op (this process +
// server process + redis-server); the process contenders add
// server-cpu-ns/op, the server process's CPU per decision (/proc/<pid>/stat,
// Linux only, 10 ms resolution).
const (
	envoyRLModule  = "github.com/envoyproxy/ratelimit"
	envoyRLVersion = "v1.4.1-0.20260122083618-3fb702589d36"
	// envoyRLBuildTimeout bounds the download and build (43 s on the project's
	// 2-core machine with a warm module cache).
	envoyRLBuildTimeout = 10 * time.Minute
	// childStartTimeout bounds the wait for a started server to answer
	// with the configured limit.
	childStartTimeout = 30 * time.Second
	// envoyRLLimit is the hourly limit of every descriptor value: like
	// grpcDomain's burst, more than any run spends on one value.
	envoyRLLimit = 2_000_000
)

var envoyRLConfig = fmt.Sprintf(`domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: %d}
`, envoyRLLimit)

func benchEnvoyRateLimit(b *testing.B, pipelined bool) {
	bin, err := envoyRateLimitBinary()
	if err != nil {
		b.Skipf("envoyproxy/ratelimit %s could not be built, so it is not compared: %v", envoyRLVersion, err)
	}
	raddr := testserver.Redis(b)
	if raddr == "" {
		return
	}
	prefix := uniquePrefix("envoyrl")
	env := []string{"CACHE_KEY_PREFIX=" + prefix}
	if pipelined {
		env = append(env, "REDIS_PIPELINE_WINDOW=150us")
	}
	srv := startEnvoyRateLimit(b, bin, raddr, env)
	call := rlsCaller(b, srv.grpcAddr)
	outOfProcessCPU(b, raddr, srv.pid, func() { runGRPC(b, call) })
	if b.N >= grpcKeys {
		if n := countKeys(b, raddr, prefix+"bench_user_u*"); n < grpcKeys {
			b.Fatalf("redis holds %d of envoyproxy/ratelimit's keys after %d decisions over %d values", n, b.N, grpcKeys)
		}
	}
}

// benchFloodgateProcess is floodgate-redis as envoyproxy/ratelimit runs:
// `floodgate serve` as a child process on the same kind of Redis, so that
// the two compare with the same processes on the cores (a loaded machine
// shares its cores among runnable threads, and a server in its own process
// brings its own).
func benchFloodgateProcess(b *testing.B, flags ...string) {
	bin, err := floodgateBinary()
	if err != nil {
		b.Skipf("cmd/floodgate could not be built, so it is not run as a process: %v", err)
	}
	raddr := testserver.Redis(b)
	if raddr == "" {
		return
	}
	config := filepath.Join(b.TempDir(), "bench.yaml")
	if err := os.WriteFile(config, []byte(grpcDomain), 0o644); err != nil {
		b.Fatal(err)
	}
	srv := startChild(b, "floodgate serve", func(host string, ports []int) *exec.Cmd {
		addr := func(i int) string { return net.JoinHostPort(host, strconv.Itoa(ports[i])) }
		args := append([]string{"serve", "--config", config, "--store", "redis://" + raddr,
			"--grpc", addr(0), "--http", addr(1), "--admin", addr(2), "--log-level", "error"}, flags...)
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{} // none of this process's FLOODGATE_ variables
		return cmd
	})
	call := rlsCaller(b, srv.grpcAddr)
	outOfProcessCPU(b, raddr, srv.pid, func() { runGRPC(b, call) })
}

var floodgateBuild struct {
	once sync.Once
	path string
	err  error
}

// floodgateBinary builds cmd/floodgate from this checkout, once per process, to a fixed place in the
// user's cache that each build replaces.
func floodgateBinary() (string, error) {
	floodgateBuild.once.Do(func() {
		floodgateBuild.path, floodgateBuild.err = buildFloodgate()
	})
	return floodgateBuild.path, floodgateBuild.err
}

func buildFloodgate() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "floodgate-bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), envoyRLBuildTimeout)
	defer cancel()
	bin := filepath.Join(dir, "floodgate")
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	defer os.Remove(tmp)
	// In the main module (the bench module's replace target, ..), with its
	// own go.mod and go.sum: from the bench directory where `go test` runs,
	// or from where this file was compiled when a test binary runs
	// elsewhere.
	mainDir := ".."
	if _, file, _, ok := runtime.Caller(0); ok {
		if _, err := os.Stat(filepath.Join(filepath.Dir(file), "..", "go.mod")); err == nil {
			mainDir = filepath.Join(filepath.Dir(file), "..")
		}
	}
	if _, err := runGo(ctx, goCmd, mainDir, os.Environ(), "build", "-o", tmp, "./cmd/floodgate"); err != nil {
		return "", err
	}
	return bin, os.Rename(tmp, bin)
}

var envoyRLBuild struct {
	once sync.Once
	path string
	err  error
}

// envoyRateLimitBinary returns the path of the envoyproxy/ratelimit server
// binary, built on the first call of the process unless the cache holds it.
func envoyRateLimitBinary() (string, error) {
	envoyRLBuild.once.Do(func() {
		envoyRLBuild.path, envoyRLBuild.err = buildEnvoyRateLimit()
	})
	return envoyRLBuild.path, envoyRLBuild.err
}

func buildEnvoyRateLimit() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "floodgate-bench", fmt.Sprintf("envoyproxy-ratelimit@%s-%s-%s", envoyRLVersion, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, "ratelimit")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is not on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), envoyRLBuildTimeout)
	defer cancel()
	work, err := os.MkdirTemp("", "floodgate-bench-envoyrl-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// Outside any module and any workspace: nothing here may read or edit
	// the bench module's go.mod.
	goEnv := append(os.Environ(), "GOWORK=off")

	out, err := runGo(ctx, goCmd, work, goEnv, "mod", "download", "-json", envoyRLModule+"@"+envoyRLVersion)
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr == nil && mod.Error != "" {
		return "", fmt.Errorf("go mod download: %s", mod.Error)
	}
	if err != nil {
		return "", err
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("go mod download gave no module directory: %s", out)
	}
	// The module cache is read-only; the build runs in a copy.
	src := filepath.Join(work, "ratelimit")
	if err := copyTree(mod.Dir, src); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Built beside its final name and renamed, so that a concurrent run never
	// sees half a binary.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	defer os.Remove(tmp)
	if _, err := runGo(ctx, goCmd, src, goEnv, "build", "-o", tmp, "./src/service_cmd"); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// runGo runs the go command in dir and returns its standard output; an
// error carries the tail of its standard error.
func runGo(ctx context.Context, goCmd, dir string, env []string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.Bytes(), 2<<10))
	}
	return out, nil
}

// copyTree copies the regular files of from into to, writable.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

func tail(p []byte, n int) []byte {
	if len(p) > n {
		return p[len(p)-n:]
	}
	return p
}

// childServer is a rate limit server running as a child process.
type childServer struct {
	pid      int
	grpcAddr string
}

// startChild starts a rate limit server process on free loopback ports —
// command gives the command for ports (gRPC, HTTP, debug or admin) — waits
// until it answers a request of the bench domain with a limit, and kills it
// at the end of b.
func startChild(b *testing.B, name string, command func(host string, ports []int) *exec.Cmd) *childServer {
	b.Helper()
	// A port taken by another process between the probe and the server's
	// bind makes the server exit: try again on other ports.
	var lastErr error
	for range 3 {
		srv, err := tryStartChild(b, name, command)
		if err == nil {
			return srv
		}
		lastErr = err
	}
	b.Fatal(lastErr)
	return nil
}

func tryStartChild(b *testing.B, name string, command func(host string, ports []int) *exec.Cmd) (*childServer, error) {
	const host = "127.0.0.1"
	ports, err := freeLoopbackPorts(3)
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp(b.TempDir(), "server-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := command(host, ports)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = killWithParent()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	srv := &childServer{pid: cmd.Process.Pid, grpcAddr: net.JoinHostPort(host, strconv.Itoa(ports[0]))}
	if err := waitChild(srv.grpcAddr, exited); err != nil {
		stop()
		log, _ := os.ReadFile(logf.Name())
		return nil, fmt.Errorf("%s (%s): %w\n--- its log ---\n%s", name, cmd.Path, err, tail(log, 4<<10))
	}
	b.Cleanup(stop)
	b.Logf("%s pid %d: gRPC on %s, HTTP on %s:%d, debug or admin on %s:%d", name, srv.pid, srv.grpcAddr, host, ports[1], host, ports[2])
	return srv, nil
}

// startEnvoyRateLimit starts the envoyproxy/ratelimit server bin against
// the Redis at raddr with envoyRLConfig and the extra environment.
func startEnvoyRateLimit(b *testing.B, bin, raddr string, extraEnv []string) *childServer {
	b.Helper()
	root := b.TempDir()
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(envoyRLConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	return startChild(b, "envoyproxy/ratelimit", func(host string, ports []int) *exec.Cmd {
		cmd := exec.Command(bin)
		// Only what is set here: nothing of this process's environment
		// reaches the server's settings.
		cmd.Env = append([]string{
			"RUNTIME_ROOT=" + root,
			"RUNTIME_SUBDIRECTORY=ratelimit",
			"RUNTIME_APPDIRECTORY=config",
			"RUNTIME_WATCH_ROOT=false",
			"BACKEND_TYPE=redis",
			"REDIS_SOCKET_TYPE=tcp",
			"REDIS_TYPE=SINGLE",
			"REDIS_URL=" + raddr,
			// USE_STATSD=false alone selects its "stdout" sink, which writes
			// a JSON line to stderr for every timer value (9 % of its CPU in
			// a profile, plus the writes); DISABLE_STATS drops stats
			// altogether: its cheapest setting, while floodgate keeps its
			// metrics.
			"USE_STATSD=false",
			"DISABLE_STATS=true",
			"LOG_LEVEL=error",
			"GRPC_HOST=" + host, "GRPC_PORT=" + strconv.Itoa(ports[0]),
			"HOST=" + host, "PORT=" + strconv.Itoa(ports[1]),
			"DEBUG_HOST=" + host, "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		}, extraEnv...)
		return cmd
	})
}

// waitChild waits until the server at addr answers a request of the bench
// domain with a limit (an unknown domain or a config not yet loaded is
// answered OK too, but without a limit and without deciding).
func waitChild(addr string, exited <-chan struct{}) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "readiness-probe"}}}}}
	deadline := time.Now().Add(childStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err == nil {
			if len(resp.Statuses) == 1 && resp.Statuses[0].CurrentLimit != nil {
				return nil
			}
			err = fmt.Errorf("answered without a limit: %v", resp)
		}
		select {
		case <-exited:
			return errors.New("exited before answering")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer with a limit within %v: %v", childStartTimeout, err)
		}
	}
}

// freeLoopbackPorts returns n distinct ports of 127.0.0.1 that were free a
// moment ago.
func freeLoopbackPorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// killWithParent asks the kernel, where it can (Linux's Pdeathsig), to kill
// the child when the thread that started it dies, so that a benchmark
// killed by -timeout or a signal does not leave a server behind. The field
// is set by name because it exists on Linux only.
func killWithParent() *syscall.SysProcAttr {
	attr := new(syscall.SysProcAttr)
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	return attr
}

// countKeys counts the keys of the Redis at addr that match pattern.
func countKeys(b *testing.B, addr, pattern string) int {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	it := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		n++
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// outOfProcessCPU runs run and reports the CPU per decision of the
// processes that serve the decisions outside this one: the redis-server at
// raddr (redis-cpu-ns/op, from INFO cpu) and, when pid is not 0, the server
// child pid (server-cpu-ns/op); and total-cpu-ns/op, their sum with this
// process's CPU. A figure that cannot be read is not reported.
func outOfProcessCPU(b *testing.B, raddr string, pid int, run func()) {
	own0 := cpuTime()
	redis0, rerr := redisCPU(raddr)
	child0, cerr := procCPU(pid)
	run()
	own := cpuTime() - own0
	redis1, rerr1 := redisCPU(raddr)
	child1, cerr1 := procCPU(pid)
	total := own
	perOp := func(d time.Duration) float64 { return float64(d) / float64(b.N) }
	if rerr == nil && rerr1 == nil {
		b.ReportMetric(perOp(redis1-redis0), "redis-cpu-ns/op")
		total += redis1 - redis0
	} else {
		b.Logf("redis-server CPU not measured: %v", errors.Join(rerr, rerr1))
	}
	if pid != 0 {
		if cerr == nil && cerr1 == nil {
			b.ReportMetric(perOp(child1-child0), "server-cpu-ns/op")
			total += child1 - child0
		} else {
			b.Logf("the server process's CPU not measured: %v", errors.Join(cerr, cerr1))
			return
		}
	}
	b.ReportMetric(perOp(total), "total-cpu-ns/op")
}

// redisCPU is the CPU time redis-server has used (used_cpu_user +
// used_cpu_sys of INFO cpu).
func redisCPU(addr string) (time.Duration, error) {
	v, err := testserver.RedisDo(addr, 5*time.Second, "INFO", "cpu")
	if err != nil {
		return 0, err
	}
	info, _ := v.(string)
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		s, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", k, err)
		}
		sum += s
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu without used_cpu_user and used_cpu_sys: %q", info)
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// procCPU is the CPU time (utime + stime) process pid has used, from
// /proc/<pid>/stat in clock ticks of 1/100 s (USER_HZ). 0 for pid 0.
func procCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields are counted
	// after its closing parenthesis, from field 3 (state).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}
