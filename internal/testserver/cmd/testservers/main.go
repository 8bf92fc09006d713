// Command testservers starts the servers that the test suite shares — a standalone Redis,
// a Redis Cluster (3 masters + 3 replicas), a Redis Sentinel set (master, replica,
// 3 sentinels) and a Memcached — all on free 127.0.0.1 ports, then stays running until it
// receives SIGINT/SIGTERM/SIGHUP (or its parent dies, or -lifetime passes), and stops them.
//
// Once every server is ready it writes, each file atomically:
//
//	-pids FILE: one line per server process: "kind pid addr"
//	-env FILE:  export FLOODGATE_TEST_REDIS=127.0.0.1:P
//	            export FLOODGATE_TEST_REDIS_CLUSTER=127.0.0.1:P1,...,127.0.0.1:P6
//	            export FLOODGATE_TEST_REDIS_SENTINEL=mymaster@127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3
//	            export FLOODGATE_TEST_MEMCACHED=127.0.0.1:P
//
// The pids file is written before the env file, so a script waiting for the env file can
// rely on both. It exits non-zero, with the servers' logs, if any server fails to start.
// scripts/lib.sh (start_test_servers / stop_test_servers) drives it.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

func main() {
	envFile := flag.String("env", "", "write `export FLOODGATE_TEST_...=...` lines to this file when ready")
	pidsFile := flag.String("pids", "", "write \"kind pid addr\" lines to this file when ready")
	only := flag.String("only", "redis,cluster,sentinel,memcached", "comma-separated servers to start")
	lifetime := flag.Duration("lifetime", 3*time.Hour, "stop everything after this long (0: never)")
	watchParent := flag.Bool("exit-with-parent", true, "stop everything when the parent process exits")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("testservers: ")

	want := map[string]bool{}
	for _, k := range strings.Split(*only, ",") {
		if k = strings.TrimSpace(k); k != "" {
			if !slices.Contains([]string{"redis", "cluster", "sentinel", "memcached"}, k) {
				log.Fatalf("-only: unknown server %q", k)
			}
			want[k] = true
		}
	}
	parent := os.Getppid()

	// Stop on signals from the start, also while servers are starting.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	var (
		mu       sync.Mutex
		stops    []func() error
		env      = map[string]string{}
		pids     []string
		failures []string
	)
	addServers := func(kind string, servers ...*testserver.Server) {
		for _, s := range servers {
			pids = append(pids, fmt.Sprintf("%s %d %s", kind, s.PID(), s.Addr))
		}
	}
	started := time.Now()
	var wg sync.WaitGroup
	start := func(name string, fn func() (func() error, error)) {
		if !want[name] {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			stop, err := fn()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s: %v", name, err))
				return
			}
			stops = append(stops, stop)
			log.Printf("%s ready in %v", name, time.Since(t0).Round(time.Millisecond))
		}()
	}
	start("redis", func() (func() error, error) {
		s, err := testserver.StartRedis()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		env[testserver.EnvRedis] = s.Addr
		addServers("redis", s)
		mu.Unlock()
		return s.Stop, nil
	})
	start("cluster", func() (func() error, error) {
		c, err := testserver.StartRedisCluster()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		env[testserver.EnvRedisCluster] = strings.Join(c.Addrs(), ",")
		addServers("redis-cluster", c.Nodes...)
		mu.Unlock()
		return c.Stop, nil
	})
	start("sentinel", func() (func() error, error) {
		s, err := testserver.StartRedisSentinel()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		env[testserver.EnvRedisSentinel] = testserver.SentinelSpec(s.MasterName, s.Addrs())
		addServers("redis-sentinel-master", s.Master)
		addServers("redis-sentinel-replica", s.Replica)
		addServers("redis-sentinel", s.Sentinels...)
		mu.Unlock()
		return s.Stop, nil
	})
	start("memcached", func() (func() error, error) {
		s, err := testserver.StartMemcached()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		env[testserver.EnvMemcached] = s.Addr
		addServers("memcached", s)
		mu.Unlock()
		return s.Stop, nil
	})

	ready := make(chan struct{})
	go func() { wg.Wait(); close(ready) }()
	select {
	case <-ready:
	case sig := <-sigs:
		log.Printf("got %v while starting; stopping", sig)
		<-ready
		stopEverything(stops)
		os.Exit(1)
	}

	if len(failures) > 0 {
		for _, f := range failures {
			log.Print(f)
		}
		stopEverything(stops)
		os.Exit(1)
	}

	slices.Sort(pids)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var envText strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&envText, "export %s=%s\n", k, env[k])
	}
	pidsText := strings.Join(pids, "\n") + "\n"
	fmt.Print(envText.String(), pidsText)
	if err := writeAtomic(*pidsFile, pidsText); err != nil {
		log.Print(err)
		stopEverything(stops)
		os.Exit(1)
	}
	if err := writeAtomic(*envFile, envText.String()); err != nil {
		log.Print(err)
		stopEverything(stops)
		os.Exit(1)
	}
	log.Printf("all servers ready in %v; waiting for a signal", time.Since(started).Round(time.Millisecond))

	var expire <-chan time.Time
	if *lifetime > 0 {
		expire = time.After(*lifetime)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			log.Printf("got %v; stopping", sig)
		case <-expire:
			log.Printf("lifetime %v passed; stopping", *lifetime)
		case <-tick.C:
			if !*watchParent || os.Getppid() == parent {
				continue
			}
			log.Printf("parent %d exited; stopping", parent)
		}
		break
	}
	stopEverything(stops)
}

// stopEverything runs every stop function concurrently.
func stopEverything(stops []func() error) {
	var wg sync.WaitGroup
	for _, stop := range stops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stop(); err != nil {
				log.Print(err)
			}
		}()
	}
	wg.Wait()
	log.Print("all servers stopped")
}

func writeAtomic(path, text string) error {
	if path == "" {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
