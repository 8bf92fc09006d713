// Package adaptive lowers and raises a limit from a load signal: an AIMD
// (additive increase, multiplicative decrease) controller over a rate
// factor that the policy engine multiplies into a rule's rate.
//
// # Model
//
// The caller feeds samples — one per request: its latency and whether it
// failed — with Observe, and steps the controller once per evaluation
// interval with Step. Each step looks at the samples of the interval that
// just ended:
//
//   - overloaded when the latency quantile (p99 by default) is above
//     LatencyThreshold, or the error ratio is above ErrorRatio: the factor is
//     multiplied by Decrease (0.7 by default), down to Min;
//   - healthy otherwise: the factor grows by Increase (0.05 by default), up
//     to Max;
//   - unchanged when the interval has fewer than MinSamples samples: no
//     traffic is no evidence either way. Its samples are not dropped but
//     carried into the next step and judged with that interval's, so that
//     a trickle is judged once MinSamples have come: a factor cut so low
//     that the limit admits fewer than MinSamples requests an interval
//     would otherwise never be judged again, and never recover. An
//     interval without any sample drops what was carried: samples from
//     before a silence say nothing of the service after it.
//
// Every step returns a Change with the old and new factor and the reason in
// words ("p99 latency 180ms > 100ms threshold", "error ratio 12% > 5%",
// "recovered: p99 40ms"), for logs, metrics and the admin API.
//
// # Accuracy
//
// The overload decision is exact: the controller counts the samples above the
// latency threshold, and the q-quantile (nearest rank) is above the
// threshold exactly when more than n − ⌈q·n⌉ of the n samples are. The
// latency printed in a reason is estimated from a log-linear histogram (32
// sub-buckets per power of two) as the mean of the samples in the quantile's
// bucket, so it is exact when the samples in that bucket are equal and
// within about 3% otherwise, and always on the same side of the threshold as
// the decision. Factors are rounded to six decimals so that repeated steps
// do not drift (0.7·0.7 is 0.49, not 0.48999999999999994); a step moves
// the factor by at least one unit of that sixth decimal, so that the
// rounding never takes back an Increase or a cut smaller than it.
//
// # Concurrency and clock
//
// Observe is lock-free (a few atomic adds) and safe from any goroutine.
// Step, Factor and Run are safe for concurrent use; steps are serialised.
// The controller reads no clock: Step takes the time, and Run takes a tick
// channel (a time.Ticker's in the server, a hand-fed channel in tests).
// A sample that races with a Step is never lost: it is counted in the
// interval it raced with or, as the two windows alternate, the one after
// the next.
package adaptive
