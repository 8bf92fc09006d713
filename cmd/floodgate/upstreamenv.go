package main

import (
	"fmt"
	"sort"
	"strings"
)

// upstreamSetting is one row of docs/MIGRATING.md's settings table: the
// environment variables of envoyproxy/ratelimit it names and what does
// their job in floodgate serve.
type upstreamSetting struct {
	// vars are the variable names; one ending in '*' is a prefix.
	vars []string
	// instead says what does the job here: a flag and its variable, or
	// "none" and why.
	instead string
}

// upstreamSettings are envoyproxy/ratelimit's environment variables, as
// docs/MIGRATING.md's table lists them (keep the two alike). serve reads
// none of them: a Deployment carried over with its environment would
// otherwise change nothing without a word (SHADOW_MODE=true enforcing,
// REDIS_URL on the memory store).
var upstreamSettings = []upstreamSetting{
	{[]string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"},
		"use --config DIR (FLOODGATE_CONFIG), the directory that holds the YAML files ($RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY)"},
	{[]string{"RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"},
		"none needed: the configuration is reread every --reload-interval (FLOODGATE_RELOAD_INTERVAL) and names starting with '.' are always skipped"},
	{[]string{"HOST", "PORT"}, "use --http HOST:PORT (FLOODGATE_HTTP; default 127.0.0.1:8080)"},
	{[]string{"GRPC_HOST", "GRPC_PORT"}, "use --grpc HOST:PORT (FLOODGATE_GRPC; default 127.0.0.1:8081)"},
	{[]string{"DEBUG_HOST", "DEBUG_PORT"}, "use --admin HOST:PORT (FLOODGATE_ADMIN; default 127.0.0.1:9090)"},
	{[]string{"GRPC_UDS"}, "none: floodgate listens on TCP only (--grpc HOST:PORT)"},
	{[]string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"},
		"use --tls-cert FILE --tls-key FILE (FLOODGATE_TLS_CERT, FLOODGATE_TLS_KEY), and --tls-listeners grpc to keep --http plaintext"},
	{[]string{"GRPC_CLIENT_TLS_CACERT"}, "use --tls-client-ca FILE (FLOODGATE_TLS_CLIENT_CA)"},
	{[]string{"GRPC_CLIENT_TLS_SAN"}, "use --tls-client-san NAME (FLOODGATE_TLS_CLIENT_SAN)"},
	{[]string{"GRPC_MAX_CONNECTION_AGE"}, "use --grpc-max-connection-age D (FLOODGATE_GRPC_MAX_CONNECTION_AGE; default 0, no age)"},
	{[]string{"GRPC_MAX_CONNECTION_AGE_GRACE"}, "use --grpc-max-connection-age-grace D (FLOODGATE_GRPC_MAX_CONNECTION_AGE_GRACE)"},
	{[]string{"BACKEND_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_TYPE"},
		"use --store URL (FLOODGATE_STORE): redis://host:port, redis-sentinel://master@host:port,…, redis-cluster://host:port,… or memcached://host:port; without it the store is memory://, in this process only"},
	{[]string{"REDIS_AUTH", "REDIS_TLS"}, "the password and TLS go in --store's URL (FLOODGATE_STORE): redis://user:password@host:port, rediss://… for TLS"},
	{[]string{"REDIS_TLS_CACERT"}, "set SSL_CERT_FILE=ca.pem (Go's trust store) instead"},
	{[]string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"},
		"none: no client certificates towards Redis, and the server name is always verified"},
	{[]string{"REDIS_PERSECOND*"}, "none: one store (--store, FLOODGATE_STORE) holds every limit"},
	{[]string{"REDIS_TIMEOUT"}, "use --store-timeout D (FLOODGATE_STORE_TIMEOUT; default 50ms), with --on-store-error open|closed|local|unavailable for what a failed call decides (unavailable: the call fails, gRPC UNAVAILABLE, and Envoy's failure_mode_deny decides, as with envoyproxy/ratelimit)"},
	{[]string{"REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_POOL_ON_EMPTY_BEHAVIOR"}, "none"},
	{[]string{"MEMCACHE_HOST_PORT"}, "use --store memcached://host:port,host:port (FLOODGATE_STORE)"},
	{[]string{"MEMCACHE_SRV"}, "none: memcached://host:port,… (--store) lists the servers"},
	{[]string{"MEMCACHE_TLS*"}, "use --store memcacheds://host:port,… (FLOODGATE_STORE); SSL_CERT_FILE=ca.pem for a private CA; no client certificates"},
	{[]string{"CACHE_KEY_PREFIX"}, "none: floodgate's keys start with fg:"},
	{[]string{"EXPIRATION_JITTER_MAX_SECONDS"}, "none"},
	{[]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, "none needed: with a remote store, keys over their limit are cached in process"},
	{[]string{"NEAR_LIMIT_RATIO"}, "none: floodgate_near_limit_total counts at 0.8"},
	{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, "none needed: a refused request is never counted"},
	{[]string{"SHADOW_MODE"}, "use --shadow (FLOODGATE_SHADOW=true); without it the limits are enforced"},
	{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED"}, "use --envoy-headers (FLOODGATE_ENVOY_HEADERS=true)"},
	{[]string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}, "none: the header field names are fixed"},
	{[]string{"MERGE_DOMAIN_CONFIG"}, "none: a domain declared in two files is an error; merge the files"},
	{[]string{"QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA"}, "none"},
	{[]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, "none: floodgate is healthy with a configuration without domains"},
	{[]string{"CONFIG_TYPE", "CONFIG_GRPC_XDS_*", "FORCE_START_WITHOUT_INITIAL_CONFIG"}, "none: the configuration comes from files only (--config, FLOODGATE_CONFIG)"},
	{[]string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD*", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS"},
		"none: Prometheus only, GET /metrics on --admin"},
	{[]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"}, "none needed: GET /metrics on --admin is always on"},
	{[]string{"LOG_LEVEL"}, "use --log-level debug|info|warn|error (FLOODGATE_LOG_LEVEL)"},
	{[]string{"LOG_FORMAT"}, "use --log-format text|json (FLOODGATE_LOG_FORMAT)"},
	{[]string{"TRACING_*"}, "none"},
}

// upstreamEnv returns one warning for each of envoyproxy/ratelimit's
// variables set (not empty) in environ (KEY=value pairs), sorted, saying
// that serve does not read it and what does its job. It never quotes a
// value: REDIS_AUTH and REDIS_URL may hold passwords. A *_PORT variable
// holding a Kubernetes service link is skipped: Kubernetes sets
// GRPC_PORT=tcp://10.0.0.1:8081 in every pod of a namespace with a
// Service named grpc, which no operator meant as a setting.
func upstreamEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if v == "" {
			continue
		}
		instead, ok := upstreamInstead(k)
		if !ok {
			continue
		}
		if strings.HasSuffix(k, "_PORT") && serviceLink(v) {
			continue
		}
		out = append(out, fmt.Sprintf("environment variable %s is envoyproxy/ratelimit's and floodgate does not read it: %s (docs/MIGRATING.md)", k, instead))
	}
	sort.Strings(out)
	return out
}

// serviceLink reports whether v is the value of a Kubernetes service link
// variable {SERVICE}_PORT: proto://ip:port.
func serviceLink(v string) bool {
	for _, p := range []string{"tcp://", "udp://", "sctp://"} {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// upstreamInstead returns what does the job of envoyproxy/ratelimit's
// variable name here, and whether name is one of its variables.
func upstreamInstead(name string) (string, bool) {
	for _, s := range upstreamSettings {
		for _, v := range s.vars {
			if p, prefix := strings.CutSuffix(v, "*"); prefix && strings.HasPrefix(name, p) || name == v {
				return s.instead, true
			}
		}
	}
	return "", false
}
