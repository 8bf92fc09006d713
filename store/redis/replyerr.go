package redis

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/store"
)

// Server error replies. A call that Redis answers with an error is an
// outage, wrapping store.ErrUnavailable so that the failure policy
// answers for it, only when the error passes by itself: retrying later,
// with nothing changed, would succeed. An error that stays until an
// operator changes the deployment (the ACL, a password, the server's
// commands, what else writes under the store's keys) is not one: a
// failure policy that answered for it would hide it, failing open
// admitting every request for as long as it lasts. The decisions, by the
// reply's code (its first word):
//
//	NOPERM        refused  the ACL stops the user: a key outside its key
//	                       patterns, or a command it may not run
//	                       (ErrPermission; on Redis 6 a script's command
//	                       fails with "ERR … can't run this command");
//	                       a coalesced batch refused for a key is split
//	                       into its callers' calls (splits)
//	WRONGPASS     refused  on a reconnection, the URL's user or password no
//	NOAUTH                 longer works: the user was deleted, disabled or
//	                       its password changed, or the node (a promoted
//	                       replica, a new Cluster node) lacks the user, as
//	                       ACLs are per node (ErrPermission)
//	WRONGTYPE     refused  a key holds another type: another program writes
//	                       under the store's keys (the scripts read a key of
//	                       another type as fresh, so no call meets it today)
//	CROSSSLOT     refused  keys of several hash slots in one call: a proxy
//	                       that forwards to a Cluster behind redis://; the
//	                       store itself groups keys by slot
//	ERR unknown   refused  a command the store sends is renamed or disabled
//	command                (rename-command), or a proxy does not pass it
//	OOM           outage   a full server under noeviction: keys expire and
//	                       free memory (see the package documentation)
//	READONLY      outage   a master demoted by a failover, until the client
//	                       finds the new one (Open refuses a replica)
//	LOADING       outage   a restarted server reading its data set
//	BUSY          outage   a script running past busy-reply-threshold
//	MASTERDOWN    outage   a replica that lost its master
//	TRYAGAIN      outage   a slot migration (see tryAgainFirst)
//	CLUSTERDOWN   outage   a Cluster without a master for some slot
//	MOVED, ASK    outage   left after the client followed them
//	NOREPLICAS    outage   fewer replicas than min-replicas-to-write
//	MISCONF       outage   a server that cannot persist refuses writes
//	NOSCRIPT      outage   left after the EVAL fallback
//	anything else outage   as before: an unknown error is not taken for
//	                       the deployment's
//
// Errors that are not replies (connection refused or reset, timeouts, a
// deadline) are outages. WAIT's reply under WithWait is classified alike
// (*AckError).

// refusal says why a server error reply is the deployment's fault, and
// what to do about it; nil for an outage.
type refusal struct {
	kind error  // ErrPermission, errNotState or nil
	hint string // what to change; no key, only its prefix (keyPattern)
}

// refusalOf classifies a server error reply, msg, of a call on key (one of
// the call's keys, for its prefix): a *refusal when it is the
// deployment's fault (see the table above), nil when it is an outage.
func refusalOf(msg, key string) *refusal {
	switch {
	case isPermission(msg) && hasCode(msg, "NOPERM") && strings.Contains(msg, "key"):
		return &refusal{ErrPermission, "the Redis user's ACL does not allow the store's keys: " + keyPattern(key) + "; see docs/STORES.md"}
	case isPermission(msg):
		return &refusal{ErrPermission, "the Redis user's ACL does not allow a command the store sends: it needs " + aclHint(keyPrefix(key)) + "; see docs/STORES.md"}
	case hasCode(msg, "WRONGPASS"), hasCode(msg, "NOAUTH"):
		return &refusal{ErrPermission, "the server refused the URL's user and password on reconnecting: was the user deleted, disabled or given another password, or is it missing on this node (ACLs are per node)?"}
	case hasCode(msg, "WRONGTYPE"):
		return &refusal{errNotState, "a key holds a value of another type: does another program write under the store's key prefix?"}
	case hasCode(msg, "CROSSSLOT"):
		return &refusal{nil, "the server is a Redis Cluster behind a proxy that does not route the store's calls: use redis-cluster:// with the nodes' addresses"}
	case strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand"):
		return &refusal{nil, "the server does not know a command the store sends: renamed or disabled in its configuration (rename-command), or a proxy that does not pass it"}
	}
	return nil
}

// hasCode reports whether msg is an error reply of that code, or a
// script's error that carries one ("… script: …" on Redis 7, "ERR Error
// running script …: @user_script:1: CODE …" on Redis 6).
func hasCode(msg, code string) bool {
	return strings.HasPrefix(msg, code+" ") || msg == code || strings.Contains(msg, ": "+code+" ")
}

// keyPattern is the ACL key pattern that lets the user reach key and the
// keys that share its prefix (up to its first ':', as "fg:"), or advice
// to add one when key has no such prefix: the key itself (a client's
// address, an API key) is no part of the hint.
func keyPattern(key string) string {
	if p := keyPrefix(key); p != "" {
		return "allow ~" + p + "* in its key patterns"
	}
	return "add a key pattern that covers them"
}

// keyPrefix is key up to its first ':' included, as "fg:", the prefix
// the keys of a limiter or a server share; "" when key has none (or one
// too long, or holding a pattern's special characters, to be one).
func keyPrefix(key string) string {
	i := strings.IndexByte(key, ':')
	if i <= 0 || i >= 32 || strings.ContainsAny(key[:i], " \"*?[]\\") {
		return ""
	}
	return key[:i+1]
}

// callError is the error of a call (what: "take", "peek", …) on key that
// failed with err: it wraps store.ErrUnavailable when err is an outage,
// and otherwise the refusal's kind, err and its hint, a cause of its own
// (the server's store log shows causes without the key).
func callError(what, key string, err error) error {
	if r := replyRefusal(err, key); r != nil {
		hint := errors.New(r.hint)
		if r.kind == nil {
			return fmt.Errorf("redis: %s %q: %w (%w)", what, key, err, hint)
		}
		return fmt.Errorf("redis: %s %q: %w: %w (%w)", what, key, r.kind, err, hint)
	}
	return fmt.Errorf("redis: %s %q: %w: %w", what, key, store.ErrUnavailable, err)
}

// replyRefusal is refusalOf err when err is a server error reply, nil
// otherwise (an outage).
func replyRefusal(err error, key string) *refusal {
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != rueidis.Nil {
		return refusalOf(re.Error(), key)
	}
	return nil
}

// keysRefused reports whether err is the ACL's refusal of a call for one
// of the keys it declares: "NOPERM this user has no permissions to access
// one of the keys used as arguments" (Redis 6.2, 7.0), "NOPERM User u has
// no permissions to access the 'k' key" (7.2 on). Redis checks a call's
// declared keys, EVALSHA's and EVAL's KEYS included, before it runs the
// call: the script ran nothing and charged nothing. The scripts touch no
// key but their KEYS. A refusal raised inside a script, after it may
// have written some keys, names the script (or is an "ERR … script"): it
// is not one.
func keysRefused(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	msg := re.Error()
	return msg == "NOPERM this user has no permissions to access one of the keys used as arguments" || keyRefused.MatchString(msg)
}

// keyRefused is Redis 7.2's text of the refusal of a declared key, matched
// whole: a key's name may hold "script", and a refusal raised inside a
// script adds " script: …" after "key".
var keyRefused = regexp.MustCompile(`^NOPERM User \S+ has no permissions to access the '.*' key$`)
