package loadgen

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const barWidth = 30

// startProgress redraws a progress bar on cfg.Progress until the returned
// stop is called; stop draws the last frame and ends its line, so that it
// stays above the report. The bar fills towards whichever bound is nearer
// (the count of requests done, the time passed), the one that will end
// the run; the frame shows both. Its rate is of answers, as the report's:
// errors are counted apart.
func startProgress(ctx context.Context, cfg Config, start time.Time, ok, rej, errs *atomic.Int64) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	unit := "decisions/s"
	if cfg.Protocol == HTTP {
		unit = "answered/s"
	}
	last := 0
	draw := func() {
		o, r, e := ok.Load(), rej.Load(), errs.Load()
		n := o + r + e
		el := time.Since(start)
		frac := 0.0
		count := fmt.Sprintf("%d req", n)
		if cfg.Requests > 0 {
			frac = float64(n) / float64(cfg.Requests)
			count = fmt.Sprintf("%d/%d req", n, cfg.Requests)
		}
		clock := fmt.Sprintf("%.1fs", el.Seconds())
		if cfg.Duration > 0 {
			frac = max(frac, el.Seconds()/cfg.Duration.Seconds())
			clock += "/" + cfg.Duration.String()
		}
		frac = min(frac, 1)
		fill := int(frac * barWidth)
		rate := 0.0
		if el > 0 {
			rate = float64(o+r) / el.Seconds()
		}
		line := fmt.Sprintf("[%s%s] %3.0f%% %s %s %.0f %s ok %d over %d err %d",
			strings.Repeat("=", fill), strings.Repeat(" ", barWidth-fill), 100*frac, count, clock, rate, unit, o, r, e)
		// Blanks over the end of a longer frame before it.
		pad := max(0, last-len(line))
		last = len(line)
		fmt.Fprint(cfg.Progress, "\r"+line+strings.Repeat(" ", pad))
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		draw()
		fmt.Fprintln(cfg.Progress)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%dµs", d/time.Microsecond)
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Print writes the report: counts, throughput, latency quantiles and a
// histogram.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	unit := "decisions/s"
	if c.Protocol == HTTP {
		unit = "answered requests/s"
		fmt.Fprintf(w, "target      http %s %s (%d header(s), %d-byte body, %d key(s))\n", c.Method, c.Addr, len(c.Header), len(c.Body), c.Keys)
	} else {
		fmt.Fprintf(w, "target      %s %s (domain %q, %d descriptor(s), %d key(s))\n", c.Protocol, c.Addr, c.Domain, len(c.Descriptors), c.Keys)
	}
	fmt.Fprintf(w, "requests    %d in %s, %d callers over %d connection(s)\n", r.Requests, fmt.Sprintf("%.2fs", r.Elapsed.Seconds()), c.Concurrency, c.Connections)
	if e := r.ended(); e != "" {
		fmt.Fprintf(w, "ended       %s\n", e)
	}
	fmt.Fprintf(w, "throughput  %.0f %s\n", r.DecisionsPerSecond(), unit)
	fmt.Fprintf(w, "admitted    %d (%.1f%%)\n", r.Admitted, pct(r.Admitted, r.Requests))
	refused := ""
	if c.Protocol == HTTP {
		refused = " (HTTP " + joinInts(c.RefusedStatus) + ")"
	}
	fmt.Fprintf(w, "rejected    %d (%.1f%%)%s\n", r.Rejected, pct(r.Rejected, r.Requests), refused)
	fmt.Fprintf(w, "errors      %d (%.1f%%)\n", r.Errors, pct(r.Errors, r.Requests))
	for _, e := range r.FirstErrors {
		fmt.Fprintf(w, "            %s\n", e)
	}
	if c.Protocol == HTTP && len(r.Statuses) > 0 {
		codes := make([]int, 0, len(r.Statuses))
		for code := range r.Statuses {
			codes = append(codes, code)
		}
		slices.Sort(codes)
		parts := make([]string, len(codes))
		for i, code := range codes {
			parts[i] = fmt.Sprintf("%d × %d", r.Statuses[code], code)
		}
		fmt.Fprintf(w, "statuses    %s\n", strings.Join(parts, ", "))
	}
	if r.FailedDials > 0 {
		fmt.Fprintf(w, "connections %d opened, %d attempt(s) failed to connect\n", r.Dials, r.FailedDials)
	} else if r.Dials > 0 {
		fmt.Fprintf(w, "connections %d opened\n", r.Dials)
	}
	if answered := r.Admitted + r.Rejected; r.Unmatched > 0 && c.Protocol == HTTP {
		fmt.Fprintf(w, "note: %d of %d admitted responses carried no RateLimit-Policy or X-RateLimit-Limit field: no rule limited them (no gateway route, or a route whose descriptors no rule has)\n",
			r.Unmatched, r.Admitted)
	} else if r.Unmatched > 0 {
		if r.Unmatched == answered {
			fmt.Fprintf(w, "note: no rule matched the descriptors sent; every request was admitted without a limit (domain %q, %s)\n", c.Domain, describe(c.Descriptors))
		} else {
			fmt.Fprintf(w, "note: %d of %d answered requests (%.1f%%) matched no rule and were admitted without a limit (domain %q, %s)\n",
				r.Unmatched, answered, pct(r.Unmatched, answered), c.Domain, describe(c.Descriptors))
		}
	}
	h := &r.Latency
	if h.Count() == 0 {
		return
	}
	fmt.Fprintf(w, "latency     min %s  mean %s  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
		fmtDur(h.Min()), fmtDur(h.Mean()), fmtDur(h.Quantile(0.5)), fmtDur(h.Quantile(0.9)),
		fmtDur(h.Quantile(0.99)), fmtDur(h.Quantile(0.999)), fmtDur(h.Max()))
	bars := h.Bars()
	var top uint64
	for _, b := range bars {
		top = max(top, b.Count)
	}
	fmt.Fprintln(w, "histogram")
	for _, b := range bars {
		n := 0
		if top > 0 {
			n = int(float64(b.Count) / float64(top) * 40)
		}
		fmt.Fprintf(w, "  %9s – %-9s %-40s %8d %5.1f%%\n", fmtDur(b.From), fmtDur(b.To), strings.Repeat("█", n), b.Count,
			100*float64(b.Count)/float64(h.Count()))
	}
}

// ended says which bound ended the run, and how far the other had come.
func (r *Result) ended() string {
	c := r.Config
	of := ""
	if c.Requests > 0 {
		of = fmt.Sprintf(": %d of %d requests done", r.Requests, c.Requests)
	}
	switch r.Stop {
	case StopCount:
		return fmt.Sprintf("all %d requests done", c.Requests)
	case StopDuration:
		return fmt.Sprintf("time bound %s reached%s", c.Duration, of)
	case StopServerDown:
		return fmt.Sprintf("server gone after %.2fs: no answer for %s, requests failing to reach it (%s)%s", r.Elapsed.Seconds(), c.DownAfter, r.DownError, of)
	case StopInterrupted:
		if of == "" && c.Duration > 0 {
			of = " of " + c.Duration.String()
		}
		return fmt.Sprintf("interrupted after %.2fs%s", r.Elapsed.Seconds(), of)
	}
	return ""
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// describe is "descriptor k=v,k2=v2", or "descriptors k=v; k2=v2" for
// several, as -D takes them.
func describe(ds [][]Entry) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		kv := make([]string, len(d))
		for j, e := range d {
			kv[j] = e.Key + "=" + e.Value
		}
		parts[i] = strings.Join(kv, ",")
	}
	if len(parts) == 1 {
		return "descriptor " + parts[0]
	}
	return "descriptors " + strings.Join(parts, "; ")
}
