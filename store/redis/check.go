package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/store"
)

// ErrPermission is wrapped by Open's error, and by a call's, when the
// server's ACL does not let the store's user run what the store sends
// (see ACLRules) or reach its keys (NOPERM), or refuses its user and
// password (WRONGPASS, as after the password changed), and by Open's when
// the server asked for a TLS client certificate and refused the
// connection (none sent, or one it does not accept). Such an error does
// not wrap store.ErrUnavailable: it lasts until the ACL or the URL
// changes, and a failure policy must not answer for it.
var ErrPermission = errors.New("redis: the user lacks permissions")

// DefaultProbeKey is the key Open's probe writes and deletes (see
// WithProbeKey): under the "fg:" prefix the server's keys use, so that an
// ACL key pattern that lets the probe through lets the decisions through.
const DefaultProbeKey = "fg:__probe"

// ACLRules are the ACL rules, after the key pattern, of a Redis user the
// store can work as (Redis 7.0 names; on 6.2 leave out +cluster|shards):
// the commands the client sends on connecting (HELLO, PING, SELECT for a
// database other than 0; its CLIENT SETINFO may fail), those the store
// sends itself (SCRIPT LOAD, EVALSHA, EVAL when a restart lost the
// scripts, DEL for Reset, TIME on a Cluster) and those the scripts call
// (lua/probe.lua calls each). Under Sentinel the client also asks the
// master its ROLE; on a Cluster it reads CLUSTER SLOTS (CLUSTER SHARDS on
// Redis 8) and, while a slot migrates, sends ASKING before a command that
// an ASK reply redirected (without it every decision on a key that has
// moved, or is new, in a migrating slot bounces between the two nodes
// until the store's timeout). WAIT follows the writes under WithWait
// (wait_replicas).
var ACLRules = []string{
	"+hello", "+ping", "+select",
	"+script|load", "+evalsha", "+eval", "+del", "+time",
	"+get", "+set", "+type", "+pexpire",
	"+zadd", "+zcount", "+zrange", "+zrangebyscore", "+zrem", "+zremrangebyscore", "+zrevrange", "+zscore",
	"+role", "+cluster|slots", "+cluster|shards", "+asking", "+wait",
}

// aclHint is the ACL SETUSER line that grants the store's needs on keys
// under key's prefix (what precedes its first ':', colon included).
func aclHint(key string) string {
	if key == "" {
		key = DefaultProbeKey
	}
	prefix := key
	if i := strings.IndexByte(key, ':'); i >= 0 {
		prefix = key[:i+1]
	}
	return "ACL SETUSER <user> on ><password> ~" + prefix + "* " + strings.Join(ACLRules, " ")
}

// checkStandalone refuses, behind redis:// or rediss://, a server that
// cannot serve as a standalone store: a Sentinel, a Cluster node (whose
// other slots would answer MOVED) or a replica (READONLY), as Open
// refuses a standalone server behind redis-cluster://. HELLO, which every
// user may run, says which it is; a server that does not know HELLO
// without arguments (before Redis 6.2) is let through to the probe.
func checkStandalone(ctx context.Context, client rueidis.Client, addr, shown string) error {
	hello, err := client.Do(ctx, client.B().Hello().Build()).AsMap()
	if err != nil {
		return nil
	}
	field := func(k string) string {
		v := hello[k]
		s, _ := v.ToString()
		return s
	}
	switch field("mode") {
	case "sentinel":
		return fmt.Errorf("%w %q: %s is a Redis Sentinel: use redis-sentinel://<master name>@%s (and the other sentinels' addresses)",
			ErrBadURL, shown, addr, addr)
	case "cluster":
		return fmt.Errorf("%w %q: %s is a Redis Cluster node: use redis-cluster://%s (other nodes may follow as seeds)",
			ErrBadURL, shown, addr, addr)
	}
	if r := field("role"); r != "replica" && r != "slave" {
		return nil
	}
	of := " (ROLE on it names its master)"
	if v, err := client.Do(ctx, client.B().Role().Build()).ToArray(); err == nil && len(v) >= 3 {
		host, _ := v[1].ToString()
		port, _ := v[2].AsInt64()
		of = " of " + net.JoinHostPort(host, strconv.FormatInt(port, 10))
	}
	return fmt.Errorf("%w %q: %s is a read-only replica%s: point redis:// at the master, or use redis-sentinel:// to follow failovers",
		ErrBadURL, shown, addr, of)
}

// probe checks that the scripts can run: it runs lua/probe.lua by
// EVALSHA and by EVAL (the NOSCRIPT fallback), then deletes the probe key
// with DEL (Reset's command), and under WithWait runs WAIT 0 0. A user the ACL stops gets an error wrapping
// ErrPermission that lists ACLRules; any other failure (a full server
// under noeviction, a replica behind a proxy) wraps store.ErrUnavailable.
// Without the probe such a store opens and then fails every decision, and
// the failure policy hides why.
func (s *Store) probe(ctx context.Context) error {
	key := s.o.probeKey
	if key == "" {
		return nil
	}
	c := s.client
	var fails []string
	for _, cmd := range []rueidis.Completed{
		c.B().Evalsha().Sha1(probeScript.sha).Numkeys(1).Key(key).Build(),
		c.B().Eval().Script(probeScript.src).Numkeys(1).Key(key).Build(),
	} {
		name := cmd.Commands()[0]
		r := c.Do(ctx, cmd)
		if err := r.Error(); err != nil {
			if !isRedisErr(err) {
				return fmt.Errorf("redis: probe (%s %s): %w: %w", name, key, store.ErrUnavailable, err)
			}
			fails = append(fails, name+": "+err.Error())
			continue
		}
		errs, err := r.AsStrSlice()
		if err != nil {
			return fmt.Errorf("redis: probe (%s %s): bad reply: %w", name, key, err)
		}
		for _, e := range errs {
			fails = append(fails, "script "+e)
		}
		if len(errs) > 0 {
			break // the same commands fail under EVAL
		}
	}
	if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
		if !isRedisErr(err) {
			return fmt.Errorf("redis: probe (DEL %s): %w: %w", key, store.ErrUnavailable, err)
		}
		fails = append(fails, "DEL: "+err.Error())
	}
	if s.mode == Cluster {
		fails = append(fails, askingFails(ctx, c)...)
	}
	if f := s.waitProbe(ctx, key); f != "" {
		fails = append(fails, f)
	}
	if len(fails) == 0 {
		return nil
	}
	msg := strings.Join(fails, "; ")
	if isPermission(msg) {
		return fmt.Errorf("%w to run floodgate's scripts on %s: %s; it needs %s (docs/STORES.md)", ErrPermission, key, msg, aclHint(key))
	}
	return fmt.Errorf("redis: floodgate's scripts cannot run on %s: %w: %s", key, store.ErrUnavailable, msg)
}

func isRedisErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// isPermission reports whether a Redis error message is an ACL refusal: a
// NOPERM reply, or what a script gets for a command it may not run.
func isPermission(msg string) bool {
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command") ||
		strings.Contains(msg, "no permissions")
}

// askingFails sends ASKING, which only a slot migration's ASK redirection
// needs, to every node of a Cluster, and returns the refusals. A PING
// follows it in the same pipeline and takes the flag ASKING sets for the
// connection's next command.
func askingFails(ctx context.Context, c rueidis.Client) []string {
	var fails []string
	for addr, n := range c.Nodes() {
		r := n.DoMulti(ctx, n.B().Asking().Build(), n.B().Ping().Build())
		if err := r[0].Error(); err != nil && isRedisErr(err) {
			fails = append(fails, "ASKING on "+addr+": "+err.Error())
		}
	}
	return fails
}

// EvictionPolicy returns the maxmemory-policy of every master (CONFIG GET
// maxmemory-policy on each node the client knows; on a Cluster, the
// masters), the harmful one first when they differ: "noeviction" on a
// server fit for the store (see EvictionSafe). It fails when a node
// refuses CONFIG (managed Redis services often do, as does an ACL user
// without +config|get): the caller then cannot tell, and should skip the
// check rather than refuse to start. Open does not check it: the operator
// decides.
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	ctx, cancel := s.syncable(ctx)
	defer cancel()
	policy := ""
	for addr, n := range s.client.Nodes() {
		if s.mode == Cluster {
			role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
			if err == nil && len(role) > 0 {
				if r, _ := role[0].ToString(); r != "master" {
					continue
				}
			}
		}
		kv, err := n.Do(ctx, n.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if err != nil {
			return "", fmt.Errorf("redis: CONFIG GET maxmemory-policy on %s: %w", addr, err)
		}
		p, ok := kv["maxmemory-policy"]
		if !ok {
			return "", fmt.Errorf("redis: CONFIG GET maxmemory-policy on %s: no such setting in the reply", addr)
		}
		if policy == "" || !EvictionSafe(p) {
			policy = p
		}
	}
	if policy == "" {
		return "", errors.New("redis: CONFIG GET maxmemory-policy: no node to ask")
	}
	return policy, nil
}

// EvictionSafe reports whether a maxmemory-policy keeps the store's
// counters: only "noeviction". Every allkeys-* policy, and every
// volatile-* one (each of the store's keys has a TTL), evicts counters
// when memory runs short, and an evicted counter is a fresh budget for
// its key: the limiter over-admits, silently (docs/STORES.md).
func EvictionSafe(policy string) bool {
	return strings.EqualFold(policy, "noeviction")
}
