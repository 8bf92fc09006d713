// Package metrics exports the floodgate server's Prometheus metrics and the
// summary its dashboard polls.
//
// Every metric is prefixed "floodgate_":
//
//	decisions_total{domain,rule,outcome}   descriptor decisions; outcome is ok,
//	                                       over_limit, shadow_over_limit,
//	                                       unlimited or no_rule
//	shadow_decisions_total{domain,rule}    refusals a shadow-mode rule did not enforce (its own
//	                                       limit's, its ceil's or priority pools'), on
//	                                       descriptors no enforced limit refused
//	near_limit_total{domain,rule}          admitted decisions that left less than
//	                                       20% of the limit (envoyproxy/ratelimit's
//	                                       near_limit at its default 0.8 ratio)
//	requests_total{transport,code}         requests per transport (grpc, json, v1, v1-peek, v1-release, v1-renew)
//	                                       and overall code (OK, OVER_LIMIT, error)
//	request_duration_seconds{transport}    time to answer a request
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
//	config_last_reload_success_timestamp_seconds
//	adaptive_rate_factor{domain,rule}      factor an adaptive controller applies
//
// The domain and rule labels come from the configuration. Rules named after
// request values (Envoy's per-descriptor limits) and domains no rule knows
// (no_rule) could make them unbounded, so at most MaxSeries distinct
// (domain, rule) pairs are kept; the others are counted under rule
// "_other" (a no_rule decision under domain "_other"), and nothing is kept
// per pair past the bound. A limit's shadow refusals count for the rule it
// belongs to (policy.LimitStatus.Rule).
//
// Metrics is safe for concurrent use; recording a decision costs a few
// atomic adds and one lock-free map lookup per descriptor (the children of
// the labelled metrics are resolved once and cached).
package metrics
