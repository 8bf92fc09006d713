// Package sim is Floodgate's simulator: a deterministic, seeded
// discrete-event simulation that runs the project's real algorithms (the
// algo package, on simulated microsecond time) against generated or replayed
// traffic, and measures how far each contender is from a perfect sliding
// window.
//
// # Model
//
// A [Scenario] names the traffic (steady, Poisson, on/off bursts, a diurnal
// swing, a ramp, a flash crowd, a Zipf mix over many clients, or a replayed
// log), the limit (Limit units per Period per key) and the contenders. A
// contender is an algorithm with its parameters and a strategy: one limiter
// ("single"), or K simulated instances behind a load balancer that share the
// limit through a central store with a round trip ("central"), enforce
// Limit ÷ K each ("local"; with Share "full", the whole Limit each, as N
// copies of one limiter), pin keys to instances and lose them on a
// scale-out ("sticky"), decide on counts shared with a lag ("async", the
// Kafka design) or spend leased slices of budget ("lease").
//
// [Run] generates the arrivals once, in time order, and feeds them to every
// contender on its own goroutine; each contender is sequential, so the
// result depends only on the scenario and its seed: the same seed gives
// byte-identical tables, CSVs and charts.
//
// # Measures
//
// Every decision is judged against a perfect sliding window over what the
// contender itself admitted: an admission that takes a key over Limit in
// the trailing Period is an over-admission; a rejection of a request that
// would have fitted is an under-admission. Besides, the real sliding_log
// algorithm runs as the "ideal" on the same arrivals, so each contender's
// admitted units can be compared with the ideal's. See [Metrics] and
// [Series].
//
// # Reports
//
// [WriteTable] prints the comparison, [WriteCSV] every series, and
// [WriteReport] a folder with an HTML page, SVG and PNG charts (drawn by
// package sim/chart) and the CSV. [Main] is the `floodgate sim` command.
//
// Time never comes from a clock: arrivals carry simulated time from the
// start of the run, mapped to a fixed epoch (a UTC midnight) for the
// algorithms, so fixed windows start with the run.
package sim
