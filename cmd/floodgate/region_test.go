package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testbinary"
	"github.com/floodgate/floodgate/internal/testserver"
)

// The region flags: what is wrong and where, before anything opens.
func TestServeBadRegionFlags(t *testing.T) {
	for _, r := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--region-peers", "eu=redis://h:1"}, nil, "--region-peers: only with --region (this instance's region)"},
		{[]string{"serve", "--region-slice", "8"}, nil, "--region-slice: only with --region"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1"}, nil, "--region us: needs --region-peers: the other regions, NAME=URL each"},
		{[]string{"serve", "--region", "us", "--region-peers", "eu=redis://h:2"}, nil, "--region us: --store memory:// is in this process; a region's store must be one its peers reach: redis://, rediss://"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu"}, nil, `--region-peers eu: "eu": want NAME=URL`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://u:s3cret@h:2 ap=memory://"}, nil,
			`--region-peers eu=redis://u:xxxxx@h:2 ap=memory://: region "ap": memory:// is in a process of its own; a peer region's store must be one the regions share: redis://`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1"}, map[string]string{"FLOODGATE_REGION_PEERS": "us=redis://h:2"}, `FLOODGATE_REGION_PEERS: region "us" is named twice (this region is "us")`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-weights", "us=2,ap=1"}, nil,
			`--region-weights us=2,ap=1: region "ap" is neither --region us nor one of --region-peers`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-weights", "us=0"}, nil,
			`--region-weights us=0: "us=0": want NAME=N with N from 1 to 1000000`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-slice", "1"}, nil,
			"--region-slice 1: must be 0 (exact) or at least 2"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-slice-ttl", "10s"}, nil,
			"--region-slice-ttl: only with --region-slice N (borrowing slices)"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-slice", "4", "--region-slice-ttl", "0s"}, nil,
			"--region-slice-ttl 0s: must be > 0"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-prefetch"}, nil,
			"--region-prefetch: only with --region-slice N (it borrows slices ahead)"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-timeout", "0s"}, nil,
			"--region-timeout 0s: must be > 0"},
		{[]string{"serve", "--region", "u s", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2"}, nil,
			"--region u s: want letters, digits"},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=postgres://db"}, nil,
			`--region-peers eu=postgres://db: region "eu": unknown scheme "postgres": want redis://, rediss://, redis-cluster://, redis-sentinel://, memcached:// or memcacheds://`},
		// A typo before the password: the URL is not shown at all.
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis//user:s3cret@h:2"}, nil,
			`region "eu": its URL has no "://": want redis://`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://u:s3cret@H:1/0"}, nil,
			`--region-peers: region "eu": its store is this region's own --store (both name h:1); each region needs a store of its own`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis-cluster://a:1,b:2 ap=memcached://b:2"}, nil,
			`--region-peers: regions "eu" and "ap" have one store (both name b:2)`},
		{[]string{"serve", "--region", "us", "--store", "redis://h:1", "--region-peers", "eu=redis://h:2", "--region-weights", "us=2 xx=1"}, nil,
			`--region-weights us=2 xx=1: region "xx" is neither --region us nor one of --region-peers`},
	} {
		for k, v := range r.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code := run(ctx, append(r.args, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"), &out, &errb)
		cancel()
		if code != 1 || !strings.Contains(errb.String(), r.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 1 saying %q", r.args, r.env, code, errb.String(), r.want)
		}
		if strings.Contains(errb.String(), "s3cret") {
			t.Errorf("%v: stderr shows a password: %q", r.args, errb.String())
		}
		for k := range r.env {
			t.Setenv(k, "")
		}
	}
}

// Two regions, each its own redis-server, two floodgate processes in
// each: a day's quota of 300 is divided 150 and 150; the busy region's
// processes ask for far more, the quiet region's for 30. Borrowing from
// the quiet region, the four processes admit exactly 300, not one more;
// then the quiet region's store dies, and the busy region limits a fresh
// key on its share alone, without waiting on the dead peer.
func TestServeRegionsShareOneLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the floodgate binary")
	}
	t.Run("exact", func(t *testing.T) { serveRegions(t, 0) })
	// Slices of 5 borrowed ahead: a quota is never exceeded, and at most
	// the slices the two busy processes hold go unused.
	t.Run("slices", func(t *testing.T) { serveRegions(t, 5, "--region-slice", "5", "--region-prefetch") })
}

func serveRegions(t *testing.T, slice int64, extra ...string) {
	us, eu := testserver.NewRedis(t), testserver.NewRedis(t)
	if us == nil || eu == nil {
		return
	}
	dir := t.TempDir()
	cfg := "domain: rg\ndescriptors:\n  - key: k\n    rate_limit:\n      name: quota\n      algorithm: token_bucket\n      unit: day\n      requests_per_unit: 300\n"
	if err := os.WriteFile(filepath.Join(dir, "rg.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(self, own, peer, peerAddr string) *testbinary.Process {
		return testbinary.Serve(t, nil, append([]string{"--config", dir, "--store", "redis://" + own,
			"--region", self, "--region-peers", peer + "=redis://" + peerAddr, "--region-timeout", "500ms",
			// A loaded machine's slow call must not become a fail-open
			// admission (or a refusal) and blur the count.
			"--store-timeout", "5s"}, extra...)...)
	}
	busy := []*testbinary.Process{start("us", us.Addr, "eu", eu.Addr), start("us", us.Addr, "eu", eu.Addr)}
	quiet := []*testbinary.Process{start("eu", eu.Addr, "us", us.Addr), start("eu", eu.Addr, "us", us.Addr)}

	client := &http.Client{Timeout: 10 * time.Second}
	decideOn := func(p *testbinary.Process, value string) (int, error) {
		resp, err := client.Post("http://"+p.HTTP+"/json", "application/json",
			strings.NewReader(`{"domain":"rg","descriptors":[{"entries":[{"key":"k","value":"`+value+`"}]}]}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	decide := func(p *testbinary.Process) (int, error) { return decideOn(p, "v") }
	var admitted atomic.Int64
	var quietAdmitted atomic.Int64
	var wg sync.WaitGroup
	hammer := func(p *testbinary.Process, goroutines, each int, count *atomic.Int64) {
		for range goroutines {
			wg.Go(func() {
				for range each {
					code, err := decide(p)
					if err != nil {
						t.Error(err)
						return
					}
					switch code {
					case http.StatusOK:
						admitted.Add(1)
						if count != nil {
							count.Add(1)
						}
					case http.StatusTooManyRequests:
					default:
						t.Errorf("status %d", code)
						return
					}
				}
			})
		}
	}
	for _, p := range busy {
		hammer(p, 6, 40, nil) // 480 in all
	}
	for _, p := range quiet {
		hammer(p, 1, 15, &quietAdmitted) // 30 in all
	}
	wg.Wait()
	// Each busy process holds at most a slice from the quiet region.
	if got, held := admitted.Load(), 2*slice; got > 300 || got < 300-held {
		t.Fatalf("four processes in two regions admitted %d of a quota of 300 (the quiet region %d), want %d to 300", got, quietAdmitted.Load(), 300-held)
	}

	metric := func(p *testbinary.Process, name string) float64 {
		resp, err := client.Get("http://" + p.Admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^floodgate_` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no floodgate_%s:\n%s", name, body)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if lent, want := metric(busy[0], "region_borrowed_total")+metric(busy[1], "region_borrowed_total"), float64(300-150-30-2*slice); lent < want {
		t.Fatalf("the busy region's processes say %v decisions were lent; want at least the %v beyond its share that the quiet region did not use", lent, want)
	}

	if err := eu.Kill(); err != nil {
		t.Fatal(err)
	}
	// A key the busy region has not used: its share, 150, and not one
	// more, each answer without waiting on the dead peer beyond the
	// region timeout once.
	var ok, slowest = 0, time.Duration(0)
	for range 160 {
		begin := time.Now()
		code, err := decideOn(busy[0], "w")
		if err != nil {
			t.Fatal(err)
		}
		switch code {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("with the peer region down, status %d", code)
		}
		slowest = max(slowest, time.Since(begin))
	}
	if ok != 150 {
		t.Fatalf("with the peer region down, admitted %d of 160 on a fresh key, want exactly the region's share 150", ok)
	}
	if slowest > 2*time.Second {
		t.Fatalf("with the peer region down, a decision took %v; want the region timeout (500ms) at most, and some slack", slowest)
	}
	if up := metric(busy[0], `region_peer_up{peer="eu"}`); up != 0 {
		t.Fatalf(`floodgate_region_peer_up{peer="eu"} %v with the peer region's store dead, want 0`, up)
	}
}

// --region-peers takes the peers separated by spaces or by commas (as
// the weights are), a cluster's hosts staying with their URL.
func TestParsePeers(t *testing.T) {
	for _, v := range []string{
		"eu=redis-cluster://a:1,b:2 ap=memcached://c:3,d:4",
		"eu=redis-cluster://a:1,b:2,ap=memcached://c:3,d:4",
		"  eu=redis-cluster://a:1,b:2 ,ap=memcached://c:3,d:4 ",
	} {
		got, err := parsePeers(v)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		want := []regionPeer{{"eu", "redis-cluster://a:1,b:2"}, {"ap", "memcached://c:3,d:4"}}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
	w, err := parseWeights("us=2 eu=1,ap=1")
	if err != nil || w["us"] != 2 || w["eu"] != 1 || w["ap"] != 1 || len(w) != 3 {
		t.Fatalf("parseWeights: %v %v", w, err)
	}
}

// A peer that is this region's own store (or another peer's) under a name
// checkRegion cannot tell apart — localhost for 127.0.0.1 — is found by
// a probe key at start and refused: it would lend this region's own
// budget back to it, the limit halved in effect with no error.
func TestServeRegionPeerIsOwnStoreUnderAnotherName(t *testing.T) {
	own, other := testserver.NewRedis(t), testserver.NewRedis(t)
	if own == nil || other == nil {
		return
	}
	_, ownPort, _ := strings.Cut(own.Addr, ":")
	_, otherPort, _ := strings.Cut(other.Addr, ":")
	for _, c := range []struct{ peers, want string }{
		{"eu=redis://localhost:" + ownPort,
			`--region-peers: region "eu": its store is this region's own --store under another name (a key charged in one shows in the other); each region needs a store of its own`},
		{"eu=redis://" + other.Addr + " ap=redis://localhost:" + otherPort,
			`--region-peers: region "ap": its store is region "eu"'s under another name`},
	} {
		var out, errb bytes.Buffer
		// Bounded: a serve that starts (the peer not found out) stops
		// with exit 0 when ctx ends.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--store", "redis://" + own.Addr, "--region", "us", "--region-peers", c.peers}, &out, &errb)
		cancel()
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("--region-peers %q: exit %d, stderr %s; want an error saying %q", c.peers, code, errb.String(), c.want)
		}
	}
}

// A slice larger than a peer region's share of a rule is a WARN at start,
// naming the rule, the region and its share; rules whose shares hold a
// slice, and those not borrowed (concurrency), are not.
func TestServeWarnsOfSliceAboveShare(t *testing.T) {
	us, eu := testserver.NewRedis(t), testserver.NewRedis(t)
	if us == nil || eu == nil {
		return
	}
	file := filepath.Join(t.TempDir(), "api.yaml")
	cfg := "domain: api\ndescriptors:\n" +
		"  - key: small\n    rate_limit: {unit: hour, requests_per_unit: 20}\n" +
		"  - key: large\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n" +
		"  - key: slots\n    rate_limit: {unit: second, requests_per_unit: 4, algorithm: concurrency}\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errb, stop := startServe(t, "--config", file, "--reload-interval", "0", "--store", "redis://"+us.Addr,
		"--region", "us", "--region-peers", "eu=redis://"+eu.Addr, "--region-slice", "50")
	if code := stop(); code != 0 {
		t.Fatalf("serve exit %d: %s", code, errb.String())
	}
	log := errb.String()
	if n := strings.Count(log, "less than a slice"); n != 1 {
		t.Errorf("%d warnings of a share less than a slice, want 1 (rule small): %s", n, log)
	}
	if !strings.Contains(log, `--region-slice 50: rule api/small (`+file+`:4), fixed_window 20/1h0m0s, gives region \"eu\" a share of 10, less than a slice`) {
		t.Errorf("no WARN naming rule small, region eu and its share of 10: %s", log)
	}
}

// A peer that cannot be reached at start (opened in the background) reads
// down on /metrics from the start, not up until a borrowing fails.
func TestServeRegionPeerUnreachedAtStartIsDown(t *testing.T) {
	own := testserver.NewRedis(t)
	if own == nil {
		return
	}
	out, errb, stop := startServe(t, "--reload-interval", "0", "--store", "redis://"+own.Addr,
		"--region", "us", "--region-peers", "eu=redis://127.0.0.1:1") // nothing listens there
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve exit %d: %s", code, errb.String())
		}
	}()
	_, _, adminAddr := serveAddrs(t, out.String())
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `floodgate_region_peer_up{peer="eu"} 0` + "\n"; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q with the peer unreachable since the start", want)
	}
}
