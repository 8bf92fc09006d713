package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// WriteTable prints the comparison: one row per contender, the ideal first.
// Columns: admitted units (and their share of the offered units), admitted
// relative to the ideal, the per-key error in units (Metrics.ExcessUnits
// and MissingUnits relative to the ideal's admitted units), the over- and
// under-admitted requests (and their share of the decisions), the share of
// wrong decisions, the most units admitted for one key in any window (and
// that as a multiple of the limit), the added latency (mean and max) and
// the store calls per decision. A legend under the table says what each
// column counts.
func WriteTable(w io.Writer, res *Result) error {
	sc := res.Scenario
	off := res.Offered.Metrics
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "scenario %s: %v simulated, limit %d per %v per key, seed %d\n", sc.Name, sc.Duration.D(), sc.Limit, fmtDur(sc.Period.D()), sc.Seed)
	fmt.Fprintf(bw, "offered: %s, %s; the perfect sliding window admits %s\n\n", count(off.Requests, "request"), count(off.Units, "unit"), count(res.Ideal.Metrics.AdmittedUnits, "unit"))
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	rows := append([]ContenderResult{res.Ideal}, res.Contenders...)
	nameW := 0
	for _, c := range rows {
		nameW = max(nameW, utf8.RuneCountInString(c.Name))
	}
	fmt.Fprintf(tw, "%-*s\tadmitted units\tvs ideal\tper-key units +/− ideal\tover-admitted reqs\tunder-admitted reqs\twrong decisions\tmax in a window\tadded latency avg/max\tstore calls/decision\t\n", nameW, "contender")
	for _, c := range rows {
		m := c.Metrics
		r := tableRow(m, res)
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			c.Name, strings.Repeat(" ", nameW-utf8.RuneCountInString(c.Name)),
			r.admitted, r.vs, r.perKey, r.over, r.under, r.wrong, r.maxWin, r.latency, r.calls)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	bw.WriteString("\n" + tableLegend)
	return bw.Flush()
}

// tableLegend says what each column of the table counts.
const tableLegend = `admitted units: units admitted (and their share of the units offered); vs ideal: relative to the ideal's admitted units.
per-key units +/− ideal: for each key, the units admitted beyond (+) and short of (−) what the ideal admitted
  for the same key over the run, summed over the keys, relative to the ideal's admitted units: the error in units.
over-admitted reqs: requests admitted although their key already had the limit in the trailing window;
under-admitted reqs: requests refused although they would have fitted; both judged on the contender's own
  history and counted in decisions, with their share of all decisions. Wrong decisions: the two together.
  They grow with the offered load: under a steady overload, a contender that spaces requests out (smooth_bursty,
  a shaper) can admit the ideal's units and still refuse many requests that would have fitted.
`

// row is one contender's table cells, shared by the text and HTML tables.
type row struct {
	admitted, vs, perKey, over, under, wrong, maxWin, latency, calls string
}

func tableRow(m Metrics, res *Result) row {
	ideal := res.Ideal.Metrics.AdmittedUnits
	r := row{vs: "-", perKey: "-"}
	if ideal > 0 {
		r.vs = signedPct(100 * float64(m.AdmittedUnits-ideal) / float64(ideal))
		r.perKey = fmt.Sprintf("+%.1f%% / −%.1f%%", 100*float64(m.ExcessUnits)/float64(ideal), 100*float64(m.MissingUnits)/float64(ideal))
	}
	r.admitted = fmt.Sprintf("%d (%s)", m.AdmittedUnits, pct(m.AdmittedUnits, res.Offered.Metrics.Units))
	r.over = fmt.Sprintf("%d (%s)", m.Over, pct(m.Over, m.Requests))
	r.under = fmt.Sprintf("%d (%s)", m.Under, pct(m.Under, m.Requests))
	r.wrong = fmt.Sprintf("%.1f%%", 100*m.Wrong())
	r.maxWin = fmt.Sprintf("%d (%.2f×)", m.MaxWindow, float64(m.MaxWindow)/float64(res.Scenario.Limit))
	r.latency = fmtLatency(m.MeanLatency()) + " / " + fmtLatency(float64(m.LatencyMax))
	r.calls = fmt.Sprintf("%.3f", m.CallsPerDecision())
	return r
}

// count is n and the noun, plural unless n is 1: "1 request", "0 requests",
// "2 requests". The nouns it is given take an s.
func count[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// signedPct prints a percentage with its sign, +17.8% or −2.5%: the minus
// is U+2212, as in the per-key column and the headers ("+/−"), not the
// hyphen-minus fmt writes.
func signedPct(v float64) string {
	s := fmt.Sprintf("%+.1f%%", v)
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		return "−" + rest
	}
	return s
}

func pct(a, b int64) string {
	if b == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// fmtLatency prints µs as a short duration: 0, 850µs, 1.2ms, 3.5s.
func fmtLatency(us float64) string {
	switch {
	case us <= 0:
		return "0"
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.1fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// WriteCSV writes every series, one row per bin: the bin's end in seconds,
// the offered units, the perfect count of the focus key's requests and of
// all requests in the trailing window, then for the ideal and each
// contender its admitted units, rejected requests, over- and
// under-admissions, the focus key's and all keys' admitted units in the
// trailing window, and the algorithm's own count when it has one (see
// Series). Column names are "<contender>:<series>".
func WriteCSV(w io.Writer, res *Result) error {
	bw := bufio.NewWriter(w)
	cols := []string{"time_s", "offered:units", "offered:window", "offered:all_window"}
	type col struct {
		name string
		get  func(i int) string
	}
	var getters []col
	add := func(c *ContenderResult) {
		s := c.Series
		getters = append(getters,
			col{c.Name + ":admitted", func(i int) string { return strconv.FormatInt(s.Admitted[i], 10) }},
			col{c.Name + ":rejected", func(i int) string { return strconv.FormatInt(s.Rejected[i], 10) }},
			col{c.Name + ":over", func(i int) string { return strconv.FormatInt(s.Over[i], 10) }},
			col{c.Name + ":under", func(i int) string { return strconv.FormatInt(s.Under[i], 10) }},
			col{c.Name + ":window", func(i int) string { return strconv.FormatInt(s.Window[i], 10) }},
			col{c.Name + ":all_window", func(i int) string { return strconv.FormatInt(s.AllWindow[i], 10) }},
		)
		if s.Estimate != nil {
			getters = append(getters, col{c.Name + ":count", func(i int) string { return strconv.FormatFloat(s.Estimate[i], 'f', -1, 64) }})
		}
	}
	add(&res.Ideal)
	for i := range res.Contenders {
		add(&res.Contenders[i])
	}
	for _, g := range getters {
		cols = append(cols, g.name)
	}
	bw.WriteString(strings.Join(cols, ","))
	bw.WriteByte('\n')
	off := res.Offered.Series
	for i := range res.Bins() {
		bw.WriteString(strconv.FormatFloat(res.BinEnd(i).Seconds(), 'f', -1, 64))
		bw.WriteByte(',')
		bw.WriteString(strconv.FormatInt(off.Admitted[i], 10))
		bw.WriteByte(',')
		bw.WriteString(strconv.FormatInt(off.Window[i], 10))
		bw.WriteByte(',')
		bw.WriteString(strconv.FormatInt(off.AllWindow[i], 10))
		for _, g := range getters {
			bw.WriteByte(',')
			bw.WriteString(g.get(i))
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
