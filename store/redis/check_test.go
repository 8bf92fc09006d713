package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// openErr opens url, expecting an error.
func openErr(t *testing.T, url string, opts ...Option) error {
	t.Helper()
	s, err := Open(url, opts...)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want an error", url)
	}
	return err
}

func wantMessage(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// TestOpenRefusesAReplica: redis:// at a replica fails at Open, naming its
// master, instead of opening and failing every decision with READONLY.
func TestOpenRefusesAReplica(t *testing.T) {
	master := testserver.NewRedis(t)
	if master == nil {
		return
	}
	host, port, _ := strings.Cut(master.Addr, ":")
	replica := testserver.NewRedis(t, "--replicaof", host, port)
	err := openErr(t, "redis://"+replica.Addr)
	t.Logf("Open: %v", err)
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("Open(replica) = %v, want ErrBadURL", err)
	}
	wantMessage(t, err, replica.Addr+" is a read-only replica of "+master.Addr, "point redis:// at the master", "redis-sentinel://")
}

// TestOpenRefusesAClusterNode: redis:// at a Cluster node (where keys of
// other slots answer MOVED) fails at Open, saying to use redis-cluster://.
func TestOpenRefusesAClusterNode(t *testing.T) {
	nodes := testserver.RedisCluster(t)
	if len(nodes) == 0 {
		return
	}
	err := openErr(t, "redis://"+nodes[0])
	t.Logf("Open: %v", err)
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("Open(cluster node) = %v, want ErrBadURL", err)
	}
	wantMessage(t, err, nodes[0]+" is a Redis Cluster node: use redis-cluster://"+nodes[0])
}

// TestOpenRefusesASentinel: redis:// at a Sentinel's port says it is one
// and how to write the URL, rather than "unknown command 'SCRIPT'".
func TestOpenRefusesASentinel(t *testing.T) {
	_, sentinels := testserver.RedisSentinel(t)
	if len(sentinels) == 0 {
		return
	}
	err := openErr(t, "redis://"+sentinels[0])
	t.Logf("Open: %v", err)
	if !errors.Is(err, ErrBadURL) {
		t.Errorf("Open(sentinel) = %v, want ErrBadURL", err)
	}
	wantMessage(t, err, sentinels[0]+" is a Redis Sentinel: use redis-sentinel://<master name>@"+sentinels[0])
}

// aclUser creates an ACL user with rules on every node and deletes it at
// the end of the test; it returns the user's name and password.
func aclUser(t *testing.T, nodes []string, rules ...string) (user, pass string) {
	t.Helper()
	user = "fgtest-" + runID + "-" + strconv.Itoa(int(time.Now().UnixNano()%1e9))
	pass = "Pw-" + runID + "-s3cret"
	for _, n := range nodes {
		args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass}, rules...)
		if _, err := testserver.RedisDo(n, 2*time.Second, args...); err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args[:3], " "), n, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_, _ = testserver.RedisDo(n, 2*time.Second, "ACL", "DELUSER", user)
		}
	})
	return user, pass
}

func without(rules []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == drop })
}

// TestOpenChecksTheACL: a user that lacks a command the scripts call
// (TIME, which no @read/@write category holds), SCRIPT LOAD, EVAL or the
// key pattern is refused at Open with ErrPermission, saying what failed
// and listing the rules the store needs, never the password; a user with
// exactly ACLRules on ~fg:* opens.
func TestOpenChecksTheACL(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	all := append([]string{"~fg:*"}, ACLRules...)
	for _, c := range []struct {
		name  string
		rules []string
		says  []string
	}{
		{"no TIME", without(all, "+time"), []string{"script TIME: ", "can't run this command"}},
		{"only @read @write @scripting", []string{"~fg:*", "+@read", "+@write", "+@scripting", "+hello", "+ping", "+client"}, []string{"script TIME: "}},
		{"no EVAL", without(all, "+eval"), []string{"EVAL: NOPERM"}},
		{"no SCRIPT LOAD", without(all, "+script|load"), []string{"SCRIPT LOAD", "NOPERM"}},
		{"no ZADD", without(all, "+zadd"), []string{"script ZADD: "}},
		{"other keys", append([]string{"~other:*"}, ACLRules...), []string{"EVALSHA: NOPERM", "keys"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			user, pass := aclUser(t, []string{addr}, c.rules...)
			err := openErr(t, "redis://"+user+":"+pass+"@"+addr)
			t.Logf("Open: %v", err)
			if !errors.Is(err, ErrPermission) {
				t.Errorf("Open = %v, want ErrPermission", err)
			}
			wantMessage(t, err, append(c.says, "~fg:* "+strings.Join(ACLRules, " "))...)
			if strings.Contains(err.Error(), pass) {
				t.Errorf("Open = %v: the password shows", err)
			}
		})
	}
}

// TestOpenACLFailureNamedOnce: a command the probe calls twice (DEL) that
// the ACL refuses is named once in Open's error, not once per call, and
// the WRONGTYPE errors its failure causes (the probe's string key left for
// the sorted-set calls) are not reported as failures of their own.
func TestOpenACLFailureNamedOnce(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	all := append([]string{"~fg:*"}, ACLRules...)
	user, pass := aclUser(t, []string{addr}, without(all, "+del")...)
	err := openErr(t, "redis://"+user+":"+pass+"@"+addr)
	t.Logf("Open: %v", err)
	if !errors.Is(err, ErrPermission) {
		t.Fatalf("Open = %v, want ErrPermission", err)
	}
	if n := strings.Count(err.Error(), "script DEL: "); n != 1 {
		t.Errorf("Open's error names the script's DEL %d times, want once: %v", n, err)
	}
	if strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Open's error reports the DEL failure's WRONGTYPE consequences: %v", err)
	}
}

// exercise runs every operation of the store on every algorithm, on the
// server's clock (the scripts read TIME), under prefix.
func exercise(t *testing.T, s *Store, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range algo.Kinds() {
		p := smallParams(k)
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		a, b := prefix+k.String()+":{x}a", prefix+k.String()+":{x}b"
		out := make([]algo.Decision, 2)
		steps := []struct {
			what string
			run  func() error
		}{
			{"take one", func() error {
				_, err := s.Take(ctx, []store.Request{{Key: a, Limit: l, Cost: 1, Lease: 3}}, out[:1])
				return err
			}},
			{"take two", func() error {
				_, err := s.Take(ctx, []store.Request{{Key: a, Limit: l, Cost: 1, Lease: 3}, {Key: b, Limit: l, Cost: 1, Lease: 3}}, out)
				return err
			}},
			{"peek", func() error { return s.Peek(ctx, []store.Request{{Key: a, Limit: l, Cost: 1}}, out[:1]) }},
			{"refund", func() error { return s.Refund(ctx, []store.Request{{Key: b, Limit: l, Cost: 1}}) }},
			{"renew", func() error { return s.Renew(ctx, []store.Request{{Key: a, Limit: l, Lease: 3}}) }},
			{"release", func() error { return s.Release(ctx, []store.Request{{Key: a, Limit: l, Lease: 3}}) }},
			{"inspect", func() error { _, _, err := s.Inspect(ctx, a); return err }},
			{"reset", func() error { return s.Reset(ctx, a, b) }},
		}
		for _, st := range steps {
			if err := st.run(); err != nil {
				t.Errorf("%s: %s: %v", k, st.what, err)
			}
		}
	}
}

// TestACLRulesSuffice: a user with ACLRules on ~fg:* and nothing else
// runs every operation on every algorithm, on a standalone server and on
// a Cluster (the rules set on every node; a cross-slot take reads TIME).
func TestACLRulesSuffice(t *testing.T) {
	rules := append([]string{"~fg:*"}, ACLRules...)
	t.Run("standalone", func(t *testing.T) {
		addr := testserver.Redis(t)
		if addr == "" {
			return
		}
		user, pass := aclUser(t, []string{addr}, rules...)
		s := openT(t, "redis://"+user+":"+pass+"@"+addr)
		exercise(t, s, "fg:acl:"+runID+":")
	})
	t.Run("sentinel", func(t *testing.T) {
		master, sentinels := testserver.RedisSentinel(t)
		if len(sentinels) == 0 {
			return
		}
		user, pass := aclUser(t, sentinelDataNodes(t, master, sentinels[0]), rules...)
		s := openT(t, "redis-sentinel://"+user+":"+pass+"@"+master+"@"+strings.Join(sentinels, ","))
		exercise(t, s, "fg:acl:"+runID+":")
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := testserver.RedisCluster(t)
		if len(nodes) == 0 {
			return
		}
		user, pass := aclUser(t, nodes, rules...)
		s := openT(t, "redis-cluster://"+user+":"+pass+"@"+strings.Join(nodes, ","))
		exercise(t, s, "fg:acl:"+runID+":")
		// A take over two slots.
		l, _ := algo.Compile(smallParams(algo.TokenBucket))
		keys := slotKeys(t, "fg:acl:"+runID+":xs:", 2)
		if _, err := s.Take(context.Background(), []store.Request{{Key: keys[0], Limit: l, Cost: 1}, {Key: keys[1], Limit: l, Cost: 1}},
			make([]algo.Decision, 2)); err != nil {
			t.Errorf("cross-slot take: %v", err)
		}
		_ = s.Reset(context.Background(), keys...)
	})
}

// sentinelDataNodes asks a sentinel for the addresses of master's master
// and replicas.
func sentinelDataNodes(t *testing.T, master, sentinel string) []string {
	t.Helper()
	v, err := testserver.RedisDo(sentinel, 2*time.Second, "SENTINEL", "get-master-addr-by-name", master)
	a, ok := v.([]any)
	if err != nil || !ok || len(a) != 2 {
		t.Fatalf("SENTINEL get-master-addr-by-name: %#v, %v", v, err)
	}
	nodes := []string{fmt.Sprint(a[0]) + ":" + fmt.Sprint(a[1])}
	v, err = testserver.RedisDo(sentinel, 2*time.Second, "SENTINEL", "replicas", master)
	if err != nil {
		t.Fatalf("SENTINEL replicas: %v", err)
	}
	reps, _ := v.([]any)
	for _, r := range reps {
		kv, _ := r.([]any)
		f := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			f[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
		}
		nodes = append(nodes, f["ip"]+":"+f["port"])
	}
	return nodes
}

// TestProbeCallsEveryScriptCommand: lua/probe.lua calls every command the
// other scripts call, so that an ACL the probe passes lets them all run,
// and ACLRules allows each.
func TestProbeCallsEveryScriptCommand(t *testing.T) {
	call := regexp.MustCompile(`(?:rcall|rpcall|redis\.call|redis\.pcall)\('([A-Z]+)'`)
	probe := map[string]bool{}
	for _, m := range regexp.MustCompile(`\{ '([A-Z]+)'`).FindAllStringSubmatch(probeScript.src, -1) {
		probe[m[1]] = true
	}
	entries, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "probe.lua" {
			continue
		}
		src, err := os.ReadFile("lua/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if !probe[m[1]] {
				t.Errorf("lua/%s calls %s, which lua/probe.lua does not", e.Name(), m[1])
			}
		}
	}
	for c := range probe {
		if !slices.Contains(ACLRules, "+"+strings.ToLower(c)) {
			t.Errorf("the probe calls %s, which ACLRules does not allow", c)
		}
	}
	if len(probe) < 10 {
		t.Errorf("found %d commands in the probe: %v", len(probe), probe)
	}
}

// TestProbeKeyOption: WithProbeKey("") skips the probe (a user limited to
// other keys then opens); the error names the probe key's prefix.
func TestProbeKeyOption(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	user, pass := aclUser(t, []string{addr}, append([]string{"~app:*"}, ACLRules...)...)
	url := "redis://" + user + ":" + pass + "@" + addr
	err := openErr(t, url)
	wantMessage(t, err, "fg:__probe", "~fg:*")
	openT(t, url, WithProbeKey("app:probe"))
	openT(t, url, WithProbeKey(""))
}
