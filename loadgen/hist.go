package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBuckets per power of two: values are kept within 1/64 (1.6%).
const subBits = 6

// Histogram is a log-linear latency histogram in microseconds with about
// 1.6% resolution. The zero value is empty and ready; it is not safe for
// concurrent use (each worker keeps its own and Merge joins them).
type Histogram struct {
	counts [64 << subBits]uint64
	n      uint64
	sum    float64
	min    uint64
	max    uint64
}

func bucket(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - 1 - subBits
	return (e+1)<<subBits | int(v>>e)&(1<<subBits-1)
}

// lower returns the smallest value of bucket b.
func lower(b int) uint64 {
	if b < 1<<subBits {
		return uint64(b)
	}
	e := b>>subBits - 1
	return (1<<subBits | uint64(b&(1<<subBits-1))) << e
}

// Record adds one latency.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(0, d/time.Microsecond))
	h.counts[bucket(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds o's samples to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the q-quantile (nearest rank, 0 < q <= 1), reported as
// the middle of its bucket and clamped to the observed min and max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lower(b), lower(b+1)
			v := (lo + hi) / 2
			v = min(max(v, h.min), h.max)
			return time.Duration(v) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// Min, Max and Mean summarise the samples.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) * time.Microsecond }

// Max is the largest sample.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

// Mean is the average sample.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/float64(h.n)) * time.Microsecond
}

// Bar is one row of a coarse histogram.
type Bar struct {
	From, To time.Duration
	Count    uint64
}

// Bars groups the samples into rows bounded by powers of two microseconds
// (1-2µs, 2-4µs, ...), from the first non-empty row to the last.
func (h *Histogram) Bars() []Bar {
	var rows []Bar
	for e := 0; e < 40; e++ {
		from, to := uint64(1)<<e, uint64(1)<<(e+1)
		var c uint64
		for b := bucket(from); b < bucket(to); b++ {
			c += h.counts[b]
		}
		if e == 0 {
			c += h.counts[0]
		}
		rows = append(rows, Bar{time.Duration(from) * time.Microsecond, time.Duration(to) * time.Microsecond, c})
	}
	first, last := -1, -1
	for i, r := range rows {
		if r.Count > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	return rows[first : last+1]
}
