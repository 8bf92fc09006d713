// Package metrics exports the floodgate server's Prometheus metrics and the
// summary its dashboard polls.
//
// Every metric is prefixed "floodgate_":
//
//	decisions_total{domain,rule,outcome}   descriptor decisions; outcome is ok,
//	                                       over_limit, shadow_over_limit,
//	                                       unlimited or no_rule, or for a decision
//	                                       the store's failure policy made instead
//	                                       of the store, fallback_ok or
//	                                       fallback_refused
//	shadow_decisions_total{domain,rule}    refusals a shadow-mode rule did not enforce (its own
//	                                       limit's, its ceil's or priority pools'), on
//	                                       descriptors no enforced limit refused
//	near_limit_total{domain,rule}          admitted decisions that left less than
//	                                       20% of the limit (envoyproxy/ratelimit's
//	                                       near_limit at its default 0.8 ratio)
//	priority_unknown_total{domain}         decided requests whose priority class the
//	                                       domain does not declare (decided in its
//	                                       default class: a client's typo, or classes
//	                                       renamed; policy.Response.PriorityUnknown)
//	requests_total{transport,code}         requests per transport (grpc, json, v1, v1-peek, v1-release, v1-renew)
//	                                       and overall code: OK, OVER_LIMIT, batch (a /v1
//	                                       batch), invalid (the client's mistake: a 4xx,
//	                                       INVALID_ARGUMENT) or error (the server's: a 5xx,
//	                                       UNAVAILABLE, a cancelled or timed-out call)
//	build_info{version,goversion}          1, for the binary's version (SetBuildInfo)
//	request_duration_seconds{transport}    time to answer a request; buckets from
//	                                       50 µs to 10 s (a wait-strategy request
//	                                       lasts up to its max_wait)
//	store_duration_seconds{op}             store call latency
//	store_errors_total{op}                 store calls that failed
//	store_fallbacks_total{op,policy}       decisions the failure policy made
//	over_limit_cache_hits_total            refusals answered without a store call
//	circuit_state                          0 closed, 1 open, 2 half-open; with a breaker
//	                                       per partition, the worst (open if any is)
//	circuit_open_partitions                breakers open or half-open (Redis Cluster
//	                                       slot ranges, memcached servers; 0 or 1 for
//	                                       a store with one breaker)
//	queue_depth                            requests waiting in wait-strategy queues
//	config_reloads_total{result}           hot reloads, result success or failure
//	                                       (both there at 0 from the start)
//	config_last_reload_successful          1 when the last reload succeeded (and
//	                                       before any), 0 when it failed: the
//	                                       previous configuration stays in force
//	config_last_reload_timestamp_seconds   when the configuration was loaded or a
//	                                       reload last attempted, successful or not
//	config_last_reload_success_timestamp_seconds
//	                                       when the configuration in force was loaded
//	adaptive_rate_factor{domain,rule}      factor an adaptive controller applies
//	gateway_upstream_errors_total{reason}  gateway mode's upstream failures: connect,
//	                                       timeout, reset, other (GatewayUpstreamErrors)
//	gateway_responses_total{code,by}       gateway mode's responses by status and by
//	                                       upstream or floodgate (GatewayResponses)
//	memory_keys, memory_max_keys           on the memory store (MemoryStore): keys held,
//	                                       and the key cap (0: none)
//	memory_evictions_total                 keys the cap removed before their state
//	                                       expired (each comes back fresh)
//	memory_expired_total                   keys removed because their state expired
//	memcached_counter_ops_total            on memcached (MemcachedStore): decisions,
//	                                       refunds and roll-backs on window counters
//	memcached_cas_ops_total                operations on compare-and-swap state
//	memcached_cas_retries_total            compare-and-swap attempts lost to a
//	                                       concurrent writer (a hot key)
//	memcached_contention_total             operations out of retries: refused,
//	                                       nothing charged, whatever the policy
//	memcached_rollbacks_total              charges undone: refused increments and
//	                                       the keys of refused multi-key takes
//	region_borrowed_total                  with several regions (RegionStore):
//	                                       decisions a peer region lent
//	region_prefetches_total                rounds of borrowing ahead that left a
//	                                       slice held here
//	region_peer_failures_total             peer calls that failed or timed out
//	region_peer_up{peer}                   1, or 0 from a failed call to the peer
//	                                       until a call or a probe answers
//	connections_open{listener}             connections the http, grpc or api
//	                                       listener holds open (Listener)
//	connections_full_total{listener}       new connections that found it at its
//	                                       --max-connections
//	connections_idle_closed_total{listener}
//	                                       idle keep-alive connections it closed
//	                                       to make room
//	connections_max{listener}              its --max-connections, when set
//
// Series an alert takes increase() or rate() of are there at 0 before their
// first event: config_reloads_total's results, gateway_upstream_errors_total's
// reasons (GatewayUpstreamErrors), gateway_responses_total of the statuses
// the gateway answers itself (GatewayResponses), store_errors_total of every operation and
// store_fallbacks_total under the configured policy (StoreSeries), and, once
// the configuration is known, near_limit_total of each rule with a limit,
// shadow_decisions_total of each shadow rule and priority_unknown_total of
// each domain that declares priority classes.
//
// The domain and rule labels come from the configuration. Once the
// Metrics knows it (SetConfigSource; server.New sets Engine.Config), every
// rule name of the configuration in force — after a reload, the new one's —
// is a rule label, whatever requests did before. A limit that a request
// carries (Envoy's per-descriptor limit, /v1's "limit") is named after
// the descriptor's path with its values ("client_L17"), one name per
// value: such names count under rule "_request_limit" (RequestLimitLabel),
// one series per domain, and nothing is kept per name. Domains no rule
// knows (no_rule) would be unbounded too: at most MaxSeries (domain, rule)
// pairs are given out first come, and a no_rule decision of a domain past
// them counts under domain "_other" (the server labels every domain its
// configuration lacks "_unknown" before that). A Metrics that does not
// know the configuration cannot tell a configured rule from a request's
// limit, and gives rule labels out of that first-come budget too, rule
// "_other" past it. A limit's shadow refusals count for the rule it
// belongs to (policy.LimitStatus.Rule).
//
// A reload deletes the series of what it removed, once the Metrics knows
// the configuration: every series of a removed domain (its rules', its
// "_request_limit" and "_other" ones, its no_rule decisions, its
// priority_unknown_total), every series
// of a removed rule (decisions_total, shadow_decisions_total,
// near_limit_total, adaptive_rate_factor), and the adaptive_rate_factor of
// a rule that lost its adaptive block. It happens at ConfigReloaded(true),
// or at the first decision, scrape or Summary that sees the new
// configuration. The series of the rules that stay are untouched, so their
// counters never go back; a rule or domain that comes back later starts
// again from 0 (a counter reset, as after a restart).
//
// Metrics is safe for concurrent use; recording a decision costs a few
// atomic adds and one lock-free map lookup per descriptor (the children of
// the labelled metrics are resolved once and cached), two more for a
// request's limit, and allocates nothing once the series exist.
package metrics
