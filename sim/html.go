package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"html"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/sim/chart"
)

// NamedChart is a chart with the file name (without extension) it is
// written under and a sentence saying what it shows.
type NamedChart struct {
	// Name is the file name without extension, e.g. "count-01-fixed-window".
	Name string
	// Caption says what the chart shows, in a sentence.
	Caption string
	// Chart is the chart itself.
	Chart *chart.Chart
}

// timeAxis picks the unit of the x axis for a run of length d.
func timeAxis(d time.Duration) (label string, div float64) {
	switch {
	case d <= 20*time.Minute:
		return "time (s)", 1
	case d <= 20*time.Hour:
		return "time (min)", 60
	}
	return "time (h)", 3600
}

func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case r == '×':
			b.WriteRune('x')
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

// Charts builds the report's charts from a result:
//
//   - count-NN-…: for each fixed or sliding window on one limiter, the count
//     the algorithm keeps of the focus key's requests (dashed orange)
//     against the perfect sliding window's count (grey), named in the
//     title: the articles' figures;
//   - rate: every contender's admitted rate over time against the offered
//     rate and the limit, with the scale events marked;
//   - rate-NN-…: the same for one contender at a time (runs with several keys);
//   - window-NN-…: for each contender, one key's admitted units in the
//     trailing window (dashed orange) against the ideal's for the same key
//     (grey), the limit (dotted red) and the scale events. The key is named
//     in the title: the one the contender took furthest over the limit when
//     Run had WithWorstKeyWindows and the contender exceeded the limit
//     (ContenderResult.Worst), the focus key otherwise.
func Charts(res *Result) []NamedChart {
	sc := res.Scenario
	xl, div := timeAxis(sc.Duration.D())
	n := res.Bins()
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = res.BinEnd(i).Seconds() / div
	}
	i64 := func(v []int64, scale float64) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x) * scale
		}
		return out
	}
	per := fmtDur(sc.Period.D())
	limitRule := chart.Rule{At: float64(sc.Limit), Label: fmt.Sprintf("limit %d per %s", sc.Limit, per)}
	focus := fmt.Sprintf("key %d", sc.FocusKey)
	// The counts are in units: requests only when every request costs 1.
	counted := "requests"
	if res.Offered.Metrics.Units != res.Offered.Metrics.Requests {
		counted = "units"
	}
	var out []NamedChart
	for i, c := range res.Contenders {
		if c.Series.Estimate == nil {
			continue
		}
		out = append(out, NamedChart{
			Name:    fmt.Sprintf("count-%02d-%s", i+1, slug(c.Name)),
			Caption: fmt.Sprintf("What %s counts (dashed orange) against the perfect sliding window's count of the same requests (grey), for %s.", c.Name, focus),
			Chart: &chart.Chart{
				Title:  fmt.Sprintf("%s vs a perfect sliding window, %s", c.Name, focus),
				XLabel: xl, YLabel: fmt.Sprintf("%s counted in the last %s", counted, per),
				Lines: []chart.Line{
					{Name: "perfect sliding window", X: xs, Y: i64(res.Offered.Series.Window, 1), Color: chart.Grey},
					{Name: c.Name, X: xs, Y: c.Series.Estimate, Color: chart.Orange, Dashed: true},
				},
				HRules: []chart.Rule{limitRule},
			},
		})
	}
	perSec := 1 / sc.Period.D().Seconds()
	ratePer := fmt.Sprintf("units/s admitted, averaged over the last %s", per)
	var rules []chart.Rule
	if keys := res.Keys; keys > 0 && keys <= 100_000 {
		lim := float64(sc.Limit) * float64(keys) * perSec
		label := fmt.Sprintf("limit %s/s", trimFloat(lim))
		if keys > 1 {
			label = fmt.Sprintf("limit: %d keys × %d per %s", keys, sc.Limit, per)
		}
		rules = append(rules, chart.Rule{At: lim, Label: label})
	}
	var events []chart.Rule
	for _, e := range sc.Events {
		events = append(events, chart.Rule{At: e.At.D().Seconds() / div, Label: "scale to " + count(e.Instances, "instance"), Color: chart.Palette[8]})
	}
	var windows []NamedChart
	for i, c := range res.Contenders {
		key, win, idealWin := sc.FocusKey, c.Series.Window, res.Ideal.Series.Window
		which := fmt.Sprintf("Key %d is the focus key.", key)
		if c.Worst != nil {
			key, win, idealWin = c.Worst.Key, c.Worst.Window, c.Worst.Ideal
			which = fmt.Sprintf("Key %d is the key %s took furthest over the limit (%d in one window).", key, c.Name, c.Metrics.MaxWindow)
		}
		windows = append(windows, NamedChart{
			Name:    fmt.Sprintf("window-%02d-%s", i+1, slug(c.Name)),
			Caption: fmt.Sprintf("Units %s admitted for key %d in the trailing %s (dashed orange) against the ideal limiter's for the same key (grey) and the limit. %s", c.Name, key, per, which),
			Chart: &chart.Chart{
				Title:  fmt.Sprintf("%s: key %d, admitted in the last %s", c.Name, key, per),
				XLabel: xl, YLabel: fmt.Sprintf("units admitted for key %d in the last %s", key, per),
				Lines: []chart.Line{
					{Name: "ideal (perfect sliding window)", X: xs, Y: i64(idealWin, 1), Color: chart.Grey},
					{Name: c.Name, X: xs, Y: i64(win, 1), Color: chart.Orange, Dashed: true},
				},
				HRules: []chart.Rule{limitRule},
				VRules: events,
			},
		})
	}
	offeredLine := chart.Line{Name: "offered", X: xs, Y: i64(res.Offered.Series.AllWindow, perSec), Color: chart.Light, Width: 1.5}
	idealLine := chart.Line{Name: "ideal (perfect sliding window)", X: xs, Y: i64(res.Ideal.Series.AllWindow, perSec), Color: chart.Grey, Width: 3}
	rate := &chart.Chart{
		Title:  "admitted rate per contender",
		XLabel: xl, YLabel: ratePer,
		Lines:  []chart.Line{offeredLine, idealLine},
		HRules: rules, VRules: events,
	}
	for i, c := range res.Contenders {
		rate.Lines = append(rate.Lines, chart.Line{Name: c.Name, X: xs, Y: i64(c.Series.AllWindow, perSec), Color: chart.Palette[i%len(chart.Palette)], Width: 1.5, Dashed: i >= len(chart.Palette)})
	}
	out = append(out, NamedChart{
		Name:    "rate",
		Caption: "Units admitted per second by each contender over all keys (averaged over one window), against the offered rate (light grey), the ideal limiter (grey) and the sum of the limits of the keys seen.",
		Chart:   rate,
	})
	if res.Keys > 1 {
		for i, c := range res.Contenders {
			out = append(out, NamedChart{
				Name:    fmt.Sprintf("rate-%02d-%s", i+1, slug(c.Name)),
				Caption: fmt.Sprintf("The rate %s admitted over all keys (dashed orange) against the ideal limiter's (grey), the offered rate (light grey) and the sum of the keys' limits.", c.Name),
				Chart: &chart.Chart{
					Title:  fmt.Sprintf("%s: admitted rate", c.Name),
					XLabel: xl, YLabel: ratePer,
					Lines: []chart.Line{offeredLine, idealLine,
						{Name: c.Name, X: xs, Y: i64(c.Series.AllWindow, perSec), Color: chart.Orange, Dashed: true}},
					HRules: rules, VRules: events,
				},
			})
		}
	}
	return append(out, windows...)
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// chartFile matches the names Charts gives its charts, with the extensions
// WriteReport writes them under: rate, count-NN-…, rate-NN-… and
// window-NN-…, each .svg or .png.
var chartFile = regexp.MustCompile(`^(rate|(count|rate|window)-[0-9]{2,}-[a-z0-9-]*)\.(svg|png)$`)

// removeStaleCharts removes from dir the chart files of an earlier report
// that this one, with charts, does not write (an earlier run had more
// contenders, or other names): left there, the folder would hold charts
// index.html does not show. Only regular files named as Charts names its
// charts go; whatever else the folder holds stays.
func removeStaleCharts(dir string, charts []NamedChart) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, c := range charts {
		keep[c.Name+".svg"], keep[c.Name+".png"] = true, true
	}
	for _, e := range entries {
		if name := e.Name(); e.Type().IsRegular() && chartFile.MatchString(name) && !keep[name] {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// WriteReport writes the report folder dir (created if needed): index.html
// with the table and every chart, each chart as NAME.svg and NAME.png,
// series.csv, table.txt and scenario.yaml. The chart files of an earlier
// report in dir that this one does not write are removed (see Charts for
// their names); other files are left alone.
func WriteReport(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// index.html is written last, as the sign that the report is complete:
	// the one of an earlier run into the same folder goes first, so that a
	// write that fails half-way does not leave it presenting the old table
	// beside the new charts.
	if err := os.Remove(filepath.Join(dir, "index.html")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	write := func(name string, fill func(*bufio.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		if err := fill(bw); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	charts := Charts(res)
	if err := removeStaleCharts(dir, charts); err != nil {
		return err
	}
	for _, c := range charts {
		if err := write(c.Name+".svg", func(w *bufio.Writer) error { return c.Chart.SVG(w) }); err != nil {
			return err
		}
		if err := write(c.Name+".png", func(w *bufio.Writer) error { return c.Chart.PNG(w) }); err != nil {
			return err
		}
	}
	if err := write("series.csv", func(w *bufio.Writer) error { return WriteCSV(w, res) }); err != nil {
		return err
	}
	var table bytes.Buffer
	if err := WriteTable(&table, res); err != nil {
		return err
	}
	if err := write("table.txt", func(w *bufio.Writer) error { _, err := w.Write(table.Bytes()); return err }); err != nil {
		return err
	}
	// A replayed log is named by its absolute path, so that the
	// scenario.yaml reruns from any directory, as a report is meant to.
	written := *res.Scenario
	written.Traffic = slices.Clone(written.Traffic)
	for i := range written.Traffic {
		s := &written.Traffic[i]
		if s.Kind == SourceReplay && s.File != "" && !filepath.IsAbs(s.File) {
			abs, err := filepath.Abs(s.File)
			if err != nil {
				return fmt.Errorf("scenario.yaml: %w", err)
			}
			s.File = abs
		}
	}
	scYAML, err := yaml.Marshal(&written)
	if err != nil {
		return err
	}
	if err := write("scenario.yaml", func(w *bufio.Writer) error { _, err := w.Write(scYAML); return err }); err != nil {
		return err
	}
	return write("index.html", func(w *bufio.Writer) error {
		sc := res.Scenario
		e := html.EscapeString
		fmt.Fprintf(w, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>floodgate sim: %s</title>\n", e(sc.Name))
		w.WriteString(`<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}` +
			`table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}` +
			`td:first-child,th:first-child{text-align:left}figure{margin:2em 0}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>` + "\n")
		fmt.Fprintf(w, "<h1>floodgate sim: %s</h1>\n", e(sc.Name))
		fmt.Fprintf(w, "<p>%v simulated, limit %d per %s per key, seed %d, %s offered. Every decision is judged against a perfect sliding window over what the contender admitted. Files: <a href=\"series.csv\">series.csv</a> (every series), <a href=\"table.txt\">table.txt</a>, <a href=\"scenario.yaml\">scenario.yaml</a> (rerun with <code>floodgate sim --scenario scenario.yaml</code>).</p>\n",
			sc.Duration.D(), sc.Limit, e(fmtDur(sc.Period.D())), sc.Seed, count(res.Offered.Metrics.Requests, "request"))
		w.WriteString("<table><tr><th>contender</th><th>admitted units</th><th>vs ideal</th><th>per-key units +/− ideal</th><th>over-admitted reqs</th><th>under-admitted reqs</th><th>wrong decisions</th><th>max in a window</th><th>latency avg / max</th><th>store calls / decision</th></tr>\n")
		for _, c := range append([]ContenderResult{res.Ideal}, res.Contenders...) {
			r := tableRow(c.Metrics, res)
			fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				e(c.Name), e(r.admitted), e(r.vs), e(r.perKey), e(r.over), e(r.under), e(r.wrong), e(r.maxWin), e(r.latency), e(r.calls))
		}
		fmt.Fprintf(w, "</table>\n<pre>%s</pre>\n", e(tableLegend))
		for _, c := range charts {
			fmt.Fprintf(w, "<figure><img src=\"%s.svg\" alt=\"%s\"><figcaption>%s (<a href=\"%s.png\">PNG</a>)</figcaption></figure>\n",
				e(c.Name), e(c.Chart.Title), e(c.Caption), e(c.Name))
		}
		fmt.Fprintf(w, "<h2>Scenario</h2><pre>%s</pre>\n</body></html>\n", e(string(scYAML)))
		return nil
	})
}
