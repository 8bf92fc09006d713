package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/adaptive"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/fileread"
)

// Load limits: a configuration is trusted input, but a typo or an alias
// bomb must give an error, not exhaust memory.
const (
	maxFileSize    = 16 << 20
	maxDepth       = 64
	maxDescriptors = 200_000
)

// Load reads the configuration at path: one YAML file, or every *.yaml and
// *.yml file under a directory (recursively, in name order, skipping names
// that start with '.' such as the ..data links of a Kubernetes ConfigMap
// mount, and files with other extensions, each named in a warning unless
// it is plainly not rules — documentation, a Go file or an editor's
// backup, as the package doc lists: envoyproxy/ratelimit reads every file,
// so a ConfigMap key named config holds rules there). Each file holds one domain
// (several YAML documents may hold one each; empty documents are skipped).
// A domain may be declared only once across all files. A directory without
// configuration files loads as a Config without domains.
//
// When anything is wrong Load returns a nil Config and Problems, every
// problem found with its file and line. What loads but deserves a look is
// in the Config's Warnings.
func Load(path string) (*Config, error) {
	cfg, _, err := LoadWithWarnings(path)
	return cfg, err
}

// LoadWithWarnings is Load that keeps the warnings of an invalid
// configuration too: cfg and err are Load's, and warnings is every warning
// found, sorted by file and line, whether or not there were problems (when
// cfg is not nil they are its Warnings). A file that could not be read
// gives no warnings. `floodgate validate` prints them after the problems.
func LoadWithWarnings(path string) (cfg *Config, warnings Problems, err error) {
	srcs, skipped, probs := readSources(path)
	return loadSources(path, srcs, skipped, probs)
}

// loadSources is LoadWithWarnings on what readSources returned for path:
// the watcher loads the very bytes it fingerprinted.
func loadSources(path string, srcs []source, skipped []string, probs Problems) (*Config, Problems, error) {
	if len(probs) > 0 {
		return nil, nil, probs
	}
	cfg, warns, err := build(srcs)
	if ps, ok := err.(Problems); ok && len(srcs) == 1 && srcs[0].name == path && !isRuleFile(path) {
		// A file named on its own is read whatever its name, but one that
		// is not YAML fails with a YAML error that does not say why.
		for i := range ps {
			if strings.HasPrefix(ps[i].Message, "YAML syntax error") {
				ps[i].Message += " (" + filepath.Base(path) + " is not a .yaml or .yml file: is it the configuration? a directory loads only those)"
			}
		}
	}
	warns = withSkipped(path, cfg, warns, skipped)
	if err == nil && len(srcs) == 0 {
		// As envoyproxy/ratelimit does, an empty directory (a ConfigMap
		// not filled yet) is a configuration without domains.
		cfg.warnings = append(cfg.warnings, Problem{File: path, Message: "no *.yaml or *.yml files in the directory: no domain is configured, " +
			"so every request is allowed; files added later are loaded when the server reloads"})
		cfg.noFiles = true
		warns = cfg.Warnings()
	}
	return cfg, warns, err
}

// Parse compiles one file's content; name is used in problems and Pos.
func Parse(name string, data []byte) (*Config, error) {
	cfg, _, err := build([]source{{name, data}})
	return cfg, err
}

// Validate returns every problem of the configuration at path, or nil when
// it is valid: Load's problems as a list, for a program that checks
// configurations. `floodgate validate` reports the same and, like `floodgate
// serve --upstream`, also builds the gateway routes (gateway.Check).
func Validate(path string) []Problem {
	_, err := Load(path)
	var ps Problems
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ps):
		return ps
	}
	return []Problem{{File: path, Message: err.Error()}}
}

type source struct {
	name string
	data []byte
}

// readSources reads path as a file or a directory of YAML files. skipped
// are the directory's files that are not read: not hidden, and not named
// *.yaml or *.yml (see isFile).
func readSources(path string) (srcs []source, skipped []string, probs Problems) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, Problems{{File: path, Message: fmt.Sprintf("cannot read configuration: %v", unwrapPath(err))}}
	}
	if !info.IsDir() {
		data, err := readFile(path)
		if err != nil {
			return nil, nil, Problems{{File: path, Message: err.Error()}}
		}
		return []source{{path, data}}, nil, nil
	}
	// WalkDir does not enter a root that is a symbolic link (it Lstats
	// it): /etc/floodgate -> /srv/rules-v42, a "current" link swapped on
	// deploy, would load no rules and so limit nothing. A trailing
	// separator makes the link resolve while the files keep the names
	// under path. Links to directories below the root are not followed,
	// as WalkDir's, so a link cannot make a loop.
	root := path
	if li, err := os.Lstat(path); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		root = path + string(filepath.Separator)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			probs = append(probs, Problem{File: p, Message: fmt.Sprintf("cannot read: %v", unwrapPath(err))})
			return nil
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !isRuleFile(p) {
			if isFile(d, func() (fs.FileInfo, error) { return os.Stat(p) }) {
				skipped = append(skipped, p)
			}
			return nil
		}
		data, err := readFile(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Message: err.Error()})
			return nil
		}
		srcs = append(srcs, source{p, data})
		return nil
	})
	if err != nil {
		probs = append(probs, Problem{File: path, Message: err.Error()})
	}
	if p, ok := unreadRuleFiles(path, srcs, skipped); ok {
		probs = append(probs, p)
	}
	return srcs, skipped, probs
}

func readFile(p string) ([]byte, error) {
	data, err := fileread.Read(p, maxFileSize)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %v", err)
	}
	return data, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// The fields each mapping accepts. Envoy's come first.
var (
	rootFields = []string{"domain", "descriptors", "rate_limit", "hierarchy", "priorities", "default_priority", "hash_tag"}
	descFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "metadata", "hierarchy"}
	limitFields = []string{"unit", "unit_multiplier", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "period", "burst", "initial_tokens", "sub_windows", "warmup_period", "cold_factor",
		"max_burst_seconds", "retain", "queue_size", "delay", "max_wait", "lease_ttl",
		"strategy", "fallback", "max_waiters", "queue_order", "ceil", "lendable", "reserve", "priority", "adaptive"}
	adaptiveFields = []string{"min", "max", "initial", "latency_threshold", "quantile", "error_ratio",
		"decrease", "increase", "interval", "min_samples"}
	replacesFields = []string{"name"}
)

// fieldSynonyms are, by mapping, names a user may write for a field that
// are too far from its name to be found as a near miss ("limit" for
// requests_per_unit).
var fieldSynonyms = map[string]map[string]string{
	"the domain": {"rules": "descriptors", "limits": "descriptors"},
	"descriptor": {"limit": "rate_limit", "limits": "rate_limit", "rate": "rate_limit", "children": "descriptors",
		"rules": "descriptors"},
	"rate_limit": {"limit": "requests_per_unit", "rate": "requests_per_unit", "rps": "requests_per_unit",
		"qps": "requests_per_unit", "requests": "requests_per_unit", "max": "requests_per_unit",
		"max_requests": "requests_per_unit", "count": "requests_per_unit", "quota": "requests_per_unit",
		"per": "unit", "time_unit": "unit", "interval": "period", "window": "period", "duration": "period"},
}

// RateLimitFieldSynonym returns the rate_limit field a user most likely
// meant by name, a name no rate_limit has ("rps": "requests_per_unit",
// "window": "period"), or "" when name is no known synonym. name is
// matched as written (the loader lowercases it first).
func RateLimitFieldSynonym(name string) string { return fieldSynonyms["rate_limit"][name] }

// upstreamKeys are the field names envoyproxy/ratelimit knows, each with
// where it belongs. Its loader checks every key of a file against this one
// flat set, whatever the level, and ignores a known key at the wrong level
// (and an unknown key anywhere is an error). Floodgate does the same in
// Envoy's mappings (envoyMappings), with a warning, so that every file
// envoyproxy/ratelimit loads loads here and behaves the same.
var upstreamKeys = map[string]string{
	"domain":            "the top level",
	"descriptors":       "the domain or a descriptor",
	"key":               "a descriptor",
	"value":             "a descriptor",
	"rate_limit":        "a descriptor",
	"shadow_mode":       "a descriptor",
	"quota_mode":        "a descriptor",
	"detailed_metric":   "a descriptor",
	"value_to_metric":   "a descriptor",
	"share_threshold":   "a descriptor",
	"metadata":          "a descriptor",
	"unit":              "rate_limit",
	"unit_multiplier":   "rate_limit",
	"requests_per_unit": "rate_limit",
	"unlimited":         "rate_limit",
	"replaces":          "rate_limit",
	"name":              "rate_limit or a replaces entry",
}

// envoyMappings are the mappings of envoyproxy/ratelimit's format, by the
// name fields gives them. In them, as in envoyproxy/ratelimit (whose YAML
// reader is yaml.v2), a field set twice takes its last value (two mappings
// are merged, the later one's fields winning), with a warning; in
// Floodgate's own mappings a duplicate is an error.
var envoyMappings = map[string]bool{"the domain": true, "descriptor": true, "rate_limit": true, "replaces": true}

// fieldAlgos lists, for the algorithm-specific fields, the algorithms they
// apply to; setting one for another algorithm is an error rather than
// silently ignored.
var fieldAlgos = map[string][]algo.Kind{
	"burst":             {algo.TokenBucket, algo.GCRA, algo.Shaper},
	"queue_size":        {algo.Shaper},
	"delay":             {algo.Shaper},
	"initial_tokens":    {algo.TokenBucket},
	"sub_windows":       {algo.SlidingWindow},
	"warmup_period":     {algo.SmoothWarmup},
	"cold_factor":       {algo.SmoothWarmup},
	"max_burst_seconds": {algo.SmoothBursty},
	"retain":            {algo.TokenBucket, algo.SmoothBursty},
	"lease_ttl":         {algo.Concurrency},
}

// field is one key: value pair of a mapping.
type field struct {
	key, val *yaml.Node
}

func (f field) line() int {
	if f.val != nil && f.val.Line > 0 {
		return f.val.Line
	}
	return f.key.Line
}

// loader collects problems and warnings while it builds a Config.
type loader struct {
	file     string
	probs    Problems
	warns    Problems
	budget   int
	ruleSrcs map[*Rule]map[string]field
	lendable map[*Rule]bool // rules whose lendable was written with a valid value
	// notes describes the key problems of the mapping fields read last.
	notes keyNotes
}

// keyNotes records the key problems of one mapping: the known names that
// unknown keys looked like typos of, and whether a key was not a string.
// A required field then missing was most likely written with that key, so
// "missing" would repeat the problem already reported.
type keyNotes struct {
	suggested map[string]bool
	nonString bool
}

// reported reports whether the problem of the required field name being
// missing has most likely been reported already.
func (n keyNotes) reported(name string) bool { return n.nonString || n.suggested[name] }

func (l *loader) errf(line int, format string, args ...any) {
	l.probs = append(l.probs, Problem{File: l.file, Line: line, Message: fmt.Sprintf(format, args...)})
}

// warnf records something the configuration does that loads, but perhaps
// not as its author meant (Config.Warnings).
func (l *loader) warnf(line int, format string, args ...any) {
	l.warns = append(l.warns, Problem{File: l.file, Line: line, Message: fmt.Sprintf(format, args...)})
}

// build parses and compiles every source; duplicate domains are errors.
// warns is every warning found, sorted, also when err is not nil.
func build(srcs []source) (cfg *Config, warns Problems, err error) {
	l := &loader{budget: maxDescriptors, ruleSrcs: map[*Rule]map[string]field{}, lendable: map[*Rule]bool{}}
	cfg = &Config{domains: map[string]*Domain{}}
	var dups []*Domain
	for _, s := range srcs {
		l.file = s.name
		for _, d := range l.parseFile(s.data) {
			if prev, ok := cfg.domains[d.Name]; ok {
				l.errf(d.Pos.Line, "duplicate domain %q (first declared at %s)", d.Name, prev.Pos)
				dups = append(dups, d)
				continue
			}
			cfg.domains[d.Name] = d
			cfg.names = append(cfg.names, d.Name)
		}
	}
	sort.Strings(cfg.names)
	for _, n := range cfg.names {
		d := cfg.domains[n]
		l.file = d.Pos.File
		l.finish(d)
		for _, r := range d.rules {
			r.index = len(cfg.rules)
			cfg.rules = append(cfg.rules, r)
		}
	}
	// A duplicate is checked all the same, so that one run reports every
	// problem of every file; it never joins the configuration.
	for _, d := range dups {
		l.file = d.Pos.File
		l.finish(d)
	}
	l.warns.sort()
	if len(l.probs) > 0 {
		l.probs.sort()
		return nil, l.warns, l.probs
	}
	cfg.warnings = l.warns
	return cfg, slices.Clone(l.warns), nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile decodes every YAML document of one file into a Domain.
func (l *loader) parseFile(data []byte) (out []*Domain) {
	defer func() {
		// The YAML parser is third-party code; a panic on hostile input
		// must still be a problem, not a crash.
		if r := recover(); r != nil {
			l.errf(1, "YAML parser failed: %v", r)
			out = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			l.syntax(data, err)
			return out
		}
		root := &doc
		if root.Kind == yaml.DocumentNode {
			if len(root.Content) == 0 {
				continue // an empty document, e.g. after a trailing "---"
			}
			root = root.Content[0]
		}
		if isNull(resolve(root)) {
			continue
		}
		docs = append(docs, root)
		if d := l.domain(root); d != nil {
			out = append(out, d)
		}
	}
	switch {
	case len(docs) == 0:
		// envoyproxy/ratelimit refuses such a file in the same words.
		l.errf(1, "config file cannot have empty domain: the file holds no YAML document (it is empty or only comments): "+
			"write domain: <name> and its descriptors in it, or remove it")
	case len(docs) > 1:
		var names []string
		for _, d := range out[min(1, len(out)):] {
			names = append(names, strconv.Quote(d.Name))
		}
		also := ""
		if len(names) > 0 {
			also = ", so it would not load " + strings.Join(names, ", ")
		}
		l.warnf(docs[1].Line, "this file holds %d YAML documents and Floodgate loads a domain from each; envoyproxy/ratelimit reads only the first%s",
			len(docs), also)
	}
	return out
}

// syntax reports a YAML syntax error at its line. The parser names the line
// where the enclosing block began (a mapping that "did not find expected
// key" may have started lines above the misindented one), so the line is
// refined to the shortest prefix of the file that fails the same way.
func (l *loader) syntax(data []byte, err error) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if k := firstFailingLine(data, m[2]); k > 0 {
			line = k
		}
		hint := ""
		if tabError(m[2]) && indentedWithTab(data, line) {
			// yaml.v3 says only "found character that cannot start any
			// token" of a tab in the indentation.
			hint = fmt.Sprintf(" (line %d is indented with a tab; YAML indents with spaces)", line)
		}
		l.errf(line, "YAML syntax error: %s%s", m[2], hint)
		return
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	l.errf(badByteLine(data), "YAML syntax error: %s", msg)
}

// unitNames are the units ParseUnit knows.
var unitNames = []string{"second", "minute", "hour", "day", "week", "month", "year"}

// unitAbbrevs are the short names of units that are too short to be
// found as near misses.
var unitAbbrevs = map[string]string{"s": "second", "sec": "second", "secs": "second", "m": "minute", "min": "minute",
	"mins": "minute", "h": "hour", "hr": "hour", "hrs": "hour", "d": "day", "w": "week", "wk": "week", "mo": "month",
	"y": "year", "yr": "year"}

// unitHint says what to write in place of the unit s that ParseUnit
// refuses: the unit it is a near miss of ("minutes", "hourly"), else a
// period when s is a duration a period may be ("1m", "90d"), else period
// for any other length ("fortnight", "1ns").
func unitHint(s string) string {
	u := strings.ToLower(strings.TrimSpace(s))
	best := unitAbbrevs[u]
	if best == "" {
		best = closest(u, unitNames)
	}
	if best != "" {
		return fmt.Sprintf(": did you mean %q?", best)
	}
	if d, err := parseDuration(s); err == nil && d >= time.Microsecond && d < maxPeriod {
		// A period outside [1µs, 2^53µs) would be refused in turn.
		return fmt.Sprintf(": for a period of %s, write period: %s in place of unit", s, s)
	}
	return "; for another length, write period: in place of unit (such as period: 14d or period: 90s)"
}

// tabError reports whether yaml.v3's message msg is one a tab in the
// indentation gives. Another (a flow mapping's missing }) on a line
// indented with a tab, where YAML allows one, is not the tab's doing.
func tabError(msg string) bool {
	return msg == "found character that cannot start any token" || strings.HasPrefix(msg, "found a tab character")
}

// indentedWithTab reports whether the 1-based line of data has a tab in
// its leading whitespace.
func indentedWithTab(data []byte, line int) bool {
	for i := 1; i < line; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return false
		}
		data = data[j+1:]
	}
	for _, c := range data {
		switch c {
		case '\t':
			return true
		case ' ':
		default:
			return false
		}
	}
	return false
}

// firstFailingLine returns the smallest k such that the file's first k
// lines fail to parse with the message want, found by bisection (a prefix
// that fails so keeps failing so when lines are added), or 0.
func firstFailingLine(data []byte, want string) int {
	ends := []int{}
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(k int) bool { return yamlError(data[:ends[k-1]]) == want }
	lo, hi := 1, len(ends)
	if !fails(hi) {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// yamlError returns the message (without "yaml: line N: ") of the first
// syntax error in data, or "".
func yamlError(data []byte) (msg string) {
	defer func() {
		if recover() != nil {
			msg = "panic"
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			return ""
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			return m[2]
		}
		return err.Error()
	}
}

// badByteLine finds the line of the first byte a YAML reader rejects
// (invalid UTF-8 or a control character), for errors that carry no line.
func badByteLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return line
		}
		if r == '\n' {
			line++
		} else if r < 0x20 && r != '\t' && r != '\r' {
			return line
		}
		i += size
	}
	return 1
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 32; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// fields reads a mapping: every key once, every key known. Merge keys
// ("<<: *anchor") contribute the fields the mapping does not set itself.
// ok is false when n is not a mapping (a problem has been reported unless
// n is null, which reads as an empty mapping). In Envoy's mappings
// (envoyMappings) a key envoyproxy/ratelimit knows at another level is
// ignored and a duplicate key takes its last value, each with a warning,
// as envoyproxy/ratelimit's loader does.
func (l *loader) fields(n *yaml.Node, what string, known []string) (map[string]field, bool) {
	n = resolve(n)
	if isNull(n) {
		return map[string]field{}, true
	}
	if n.Kind != yaml.MappingNode {
		hint := ""
		if what == "rate_limit" {
			hint = " (write it as rate_limit: {unit: second, requests_per_unit: 5}, or its fields indented on the lines below it)"
		}
		l.errf(n.Line, "%s must be a mapping, got %s%s", what, kindName(n), hint)
		return nil, false
	}
	envoy := envoyMappings[what]
	var notes keyNotes
	defer func() { l.notes = notes }()
	fs := map[string]field{}
	var merged []map[string]field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Tag == "!!merge" || (k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Style == 0) {
			merged = append(merged, l.merge(v, what, known)...)
			continue
		}
		if !l.stringKey(k, what) {
			notes.nonString = true
			continue
		}
		f := field{k, v}
		prev, dup := fs[k.Value]
		switch {
		case !slices.Contains(known, k.Value):
			if _, ok := upstreamKeys[k.Value]; ok && envoy {
				l.misplaced(what, f)
				continue
			}
			c := closest(k.Value, known)
			if c == "" {
				c = fieldSynonyms[what][strings.ToLower(k.Value)]
			}
			hint := ""
			if c != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			if what == "descriptor" && slices.Contains(limitFields, k.Value) {
				hint = " (it belongs inside rate_limit:)"
			}
			l.errf(k.Line, "unknown field %q in %s%s", k.Value, what, hint)
			if c != "" {
				if notes.suggested == nil {
					notes.suggested = map[string]bool{}
				}
				notes.suggested[c] = true
			}
		case dup && !envoy:
			l.errf(k.Line, "duplicate field %q in %s (first at line %d)", k.Value, what, prev.key.Line)
		case dup:
			fs[k.Value] = l.duplicate(what, prev, f)
		default:
			fs[k.Value] = f
		}
	}
	for _, m := range merged {
		for name, f := range m {
			if _, ok := fs[name]; !ok {
				fs[name] = f
			}
		}
	}
	return fs, true
}

// stringKey reports whether k is a field name: a string. Other keys (a
// number, a list) are a problem, in envoyproxy/ratelimit's words.
func (l *loader) stringKey(k *yaml.Node, what string) bool {
	switch {
	case k.Kind != yaml.ScalarNode:
		l.errf(k.Line, "key is not of type string: %s (in %s, whose field names are strings)", kindName(k), what)
		return false
	case k.Tag != "!!str":
		l.errf(k.Line, "key is not of type string: %s (in %s: quote it to make it a name)", k.Value, what)
		return false
	}
	return true
}

// duplicate resolves a field set twice in one of Envoy's mappings the way
// envoyproxy/ratelimit's yaml.v2 does: the later value wins, except that
// two mappings are merged, the later one's fields winning (yaml.v2 decodes
// the second into the struct the first filled). It warns, naming both
// lines.
func (l *loader) duplicate(what string, prev, f field) field {
	a, b := prev.val, f.val
	if a != nil && b != nil && a.Kind == yaml.MappingNode && b.Kind == yaml.MappingNode {
		l.warnf(f.key.Line, "duplicate field %q in %s (first at line %d): the two are merged, this one's fields winning, as in envoyproxy/ratelimit",
			f.key.Value, what, prev.key.Line)
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: a.Line, Column: a.Column,
			Content: slices.Concat(a.Content, b.Content)}
		return field{prev.key, m}
	}
	l.warnf(f.key.Line, "duplicate field %q in %s (first at line %d): this one wins, as in envoyproxy/ratelimit",
		f.key.Value, what, prev.key.Line)
	return f
}

// misplaced handles a field envoyproxy/ratelimit knows, found at a level
// where it means nothing: envoyproxy/ratelimit ignores it (its key check is
// flat), so it is ignored here too, with a warning saying where it
// belongs. Its value must still pass envoyproxy/ratelimit's key check.
func (l *loader) misplaced(what string, f field) {
	if !l.flatKeys(f.val, true) {
		return
	}
	name := f.key.Value
	switch {
	case what == "rate_limit" && name == "shadow_mode":
		l.warnf(f.key.Line, "field \"shadow_mode\" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: "+
			"this rule is enforced, not shadowed; set shadow_mode on the descriptor to shadow it")
	case what == "rate_limit" && name == "quota_mode":
		l.warnf(f.key.Line, "field \"quota_mode\" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: "+
			"this rule is enforced, not in quota mode; set quota_mode on the descriptor for that")
	case what == "rate_limit" && name == "descriptors":
		l.warnf(f.key.Line, "field \"descriptors\" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: "+
			"the descriptors under it are not loaded and limit nothing; to nest them in this descriptor, "+
			"indent descriptors: as far as rate_limit:, not under it")
	default:
		l.warnf(f.key.Line, "field %q is ignored in %s, as envoyproxy/ratelimit ignores it there; it belongs in %s",
			name, what, upstreamKeys[name])
	}
}

// flatKeys applies envoyproxy/ratelimit's key check to a value it ignores:
// every key of every mapping within is one it knows (a metadata block's
// content is free), and lists hold mappings. With report, each breach is a
// problem. It returns whether n passes. Each node is looked at once, so an
// alias repeated many times costs nothing more.
func (l *loader) flatKeys(n *yaml.Node, report bool) bool {
	seen := map[*yaml.Node]bool{}
	ok := true
	fail := func(line int, format string, args ...any) {
		ok = false
		if report {
			l.errf(line, format, args...)
		}
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		n = resolve(n)
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				switch _, known := upstreamKeys[k.Value]; {
				case k.Tag == "!!merge":
					walk(n.Content[i+1])
				case k.Kind != yaml.ScalarNode || k.Tag != "!!str":
					fail(k.Line, "key is not of type string: %s", kindName(k))
				case !known:
					fail(k.Line, "unknown field %q (within a field that is ignored here)", k.Value)
				case k.Value != "metadata":
					walk(n.Content[i+1])
				}
			}
		case yaml.SequenceNode:
			for _, e := range n.Content {
				if r := resolve(e); r == nil || r.Kind != yaml.MappingNode {
					fail(e.Line, "a list here holds mappings only, got %s", kindName(e))
					continue
				}
				walk(e)
			}
		}
	}
	walk(n)
	return ok
}

func (l *loader) merge(v *yaml.Node, what string, known []string) []map[string]field {
	if v == nil {
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		if m, ok := l.fields(v, what, known); ok {
			return []map[string]field{m}
		}
	case yaml.SequenceNode:
		var out []map[string]field
		for _, e := range v.Content {
			e = resolve(e)
			if e == nil || e.Kind != yaml.MappingNode {
				l.errf(v.Line, "%s: a merge (<<) takes mappings", what)
				continue
			}
			if m, ok := l.fields(e, what, known); ok {
				out = append(out, m)
			}
		}
		return out
	default:
		l.errf(v.Line, "%s: a merge (<<) takes a mapping or a list of mappings", what)
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// Scalar readers. Each reports its own problem and returns ok=false.

func (l *loader) str(f field, name string) (string, bool) {
	if isNull(f.val) {
		return "", true
	}
	if f.val.Kind != yaml.ScalarNode {
		l.errf(f.line(), "%s must be a string, got %s", name, kindName(f.val))
		return "", false
	}
	return f.val.Value, true
}

func (l *loader) boolean(f field, name string) (bool, bool) {
	if isNull(f.val) {
		return false, true
	}
	if f.val.Kind == yaml.ScalarNode {
		switch strings.ToLower(f.val.Value) {
		case "true", "yes", "on":
			return true, true
		case "false", "no", "off":
			return false, true
		}
	}
	l.errf(f.line(), "%s must be true or false, got %s", name, kindName(f.val))
	return false, false
}

func (l *loader) integer(f field, name string) (int64, bool) {
	if f.val != nil && f.val.Kind == yaml.ScalarNode && (f.val.Tag == "!!int" || f.val.Tag == "!!float") {
		s := strings.ReplaceAll(f.val.Value, "_", "")
		if v, err := strconv.ParseInt(s, 0, 64); err == nil {
			return v, true
		}
		if x, err := strconv.ParseFloat(s, 64); err == nil && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
		l.errf(f.line(), "%s must be a whole number below 2^63, got %s", name, f.val.Value)
		return 0, false
	}
	l.errf(f.line(), "%s must be a whole number, got %s", name, kindName(f.val))
	return 0, false
}

func (l *loader) number(f field, name string) (float64, bool) {
	if f.val != nil && f.val.Kind == yaml.ScalarNode && (f.val.Tag == "!!int" || f.val.Tag == "!!float") {
		v, err := strconv.ParseFloat(strings.ReplaceAll(f.val.Value, "_", ""), 64)
		if err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, true
		}
	}
	l.errf(f.line(), "%s must be a number, got %s", name, kindName(f.val))
	return 0, false
}

func (l *loader) duration(f field, name string) (time.Duration, bool) {
	if f.val != nil && f.val.Kind == yaml.ScalarNode {
		d, err := parseDuration(f.val.Value)
		switch {
		case errors.Is(err, errDurationRange):
			l.errf(f.line(), "%s must be below 2^63ns (about 292 years), got %s", name, f.val.Value)
			return 0, false
		case err != nil:
		case d <= 0:
			l.errf(f.line(), "%s must be positive, got %s", name, f.val.Value)
			return 0, false
		default:
			return d, true
		}
	}
	l.errf(f.line(), "%s must be a duration such as 500ms, 30s, 5m, 36h or 7d, got %s", name, kindName(f.val))
	return 0, false
}

// retain reads retain, whose whole range one message states: 0, which the
// Go API (algo.Params.Retain) takes as the default, is no value to write
// here (leave the field out), as no other duration's 0 is.
func (l *loader) retain(f field) time.Duration {
	if f.val != nil && f.val.Kind == yaml.ScalarNode {
		if d, err := parseDuration(f.val.Value); err == nil || errors.Is(err, errDurationRange) {
			if err != nil || d < time.Microsecond || d >= maxPeriod {
				l.errf(f.line(), "retain must be at least 1µs and below 2^53µs (about 285 years), got %s; leave it out for the default, 1h", f.val.Value)
				return 0
			}
			return d
		}
	}
	l.duration(f, "retain") // not a duration: its message
	return 0
}

// period reads period, whose upper bound (2^53µs, algo.Compile's) one
// message states, whether or not time.Duration holds the value.
func (l *loader) period(f field) time.Duration {
	if f.val != nil && f.val.Kind == yaml.ScalarNode {
		if d, err := parseDuration(f.val.Value); errors.Is(err, errDurationRange) || (err == nil && d >= maxPeriod) {
			l.errf(f.line(), "period %s is too long: a limit's period must be below 2^53µs (about 285 years, 104249 days); shorten it", f.val.Value)
			return 0
		}
	}
	d, _ := l.duration(f, "period")
	return d
}

var (
	dayPart = regexp.MustCompile(`^(\d+)([dw])(.*)$`)
	// goDuration is time.ParseDuration's syntax: what it refuses in it
	// overflows.
	goDuration = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

// errDurationRange is parseDuration's error for a duration written right
// but beyond time.Duration's range (2^63ns, about 292 years).
var errDurationRange = errors.New("duration out of range")

// parseDuration is time.ParseDuration plus leading whole days ("7d",
// "1d12h") and weeks ("2w"). A duration too long for time.Duration is
// errDurationRange.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if m := dayPart.FindStringSubmatch(s); m != nil {
		unit := 24 * time.Hour
		if m[2] == "w" {
			unit *= 7
		}
		var rest time.Duration
		if m[3] != "" {
			var err error
			rest, err = time.ParseDuration(m[3])
			switch {
			case err != nil && goDuration.MatchString(m[3]):
				return 0, errDurationRange
			case err != nil || rest < 0:
				return 0, fmt.Errorf("bad duration %q", s)
			}
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > (math.MaxInt64-int64(rest))/int64(unit) {
			return 0, errDurationRange
		}
		return time.Duration(n)*unit + rest, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil && goDuration.MatchString(s) {
		return 0, errDurationRange
	}
	return d, err
}

// domain reads one YAML document's content.
func (l *loader) domain(root *yaml.Node) *Domain {
	fs, ok := l.fields(root, "the domain", append(slices.Clip(rootFields), sectionNames()...))
	if !ok {
		return nil
	}
	line := max(root.Line, 1)
	d := &Domain{Pos: Pos{l.file, line}}
	f, has := fs["domain"]
	switch name, ok := l.str(f, "domain"); {
	case !has && l.notes.reported("domain"):
		return nil
	case !has:
		l.errf(line, "config file cannot have empty domain: the domain field is missing; write domain: <name> at the top of the file")
		return nil
	case !ok:
		return nil
	case strings.TrimSpace(name) == "":
		l.errf(f.line(), "config file cannot have empty domain")
		return nil
	default:
		d.Name = name
		d.Pos.Line = f.key.Line
	}
	if f, ok := fs["hierarchy"]; ok {
		d.Hierarchy, _ = l.boolean(f, "hierarchy")
	}
	if f, ok := fs["hash_tag"]; ok {
		d.HashTag, _ = l.boolean(f, "hash_tag")
	}
	if f, ok := fs["priorities"]; ok {
		l.priorities(d, f)
	}
	if f, ok := fs["default_priority"]; ok {
		if s, ok := l.str(f, "default_priority"); ok {
			if len(d.Priorities) == 0 {
				l.errf(f.line(), "default_priority needs a priorities list")
			} else if i := d.priorityRank(s); i < 0 {
				l.errf(f.line(), "default_priority %q is not one of the priorities (%s)", s, strings.Join(d.Priorities, ", "))
			} else {
				d.DefaultPriority = d.Priorities[i] // as declared: names match ignoring case
			}
		}
	} else if len(d.Priorities) > 0 {
		d.DefaultPriority = d.Priorities[len(d.Priorities)-1]
	}
	if f, ok := fs["descriptors"]; ok {
		d.Descriptors = l.descriptors(d, nil, f, &d.top, "", 1)
	}
	if f, ok := fs["rate_limit"]; ok && !isNull(f.val) {
		l.root(d, f)
	}
	for _, name := range sectionNames() {
		if f, ok := fs[name]; ok {
			l.section(d, name, f, sectionFunc(name))
		}
	}
	return d
}

// root reads the domain's rate_limit, the root of its hierarchy. Without
// a hierarchical rule it applies to nothing: envoyproxy/ratelimit ignores
// a domain-level rate_limit, so one written in its terms is ignored here
// too, with a warning; one using Floodgate's fields is an error (finish).
func (l *loader) root(d *Domain, f field) {
	hierarchical := d.Hierarchy
	for _, r := range d.rules {
		hierarchical = hierarchical || r.Hierarchical
	}
	if !hierarchical && l.flatKeys(f.val, false) {
		l.warnf(f.key.Line, "rate_limit at the domain level is ignored, as envoyproxy/ratelimit ignores it: here it is the root of a hierarchy, "+
			"and no rule of domain %q is hierarchical (set hierarchy: true on the domain or on descriptors to use it)", d.Name)
		return
	}
	d.Root = l.rule(d, nil, f)
	if d.Root == nil {
		return
	}
	d.Root.Name = d.Name
	if n, ok := l.ruleSrcs[d.Root]["name"]; ok {
		if s, ok := l.str(n, "name"); ok && s != "" {
			d.Root.Name, d.Root.named = s, true
		}
	}
}

func (l *loader) priorities(d *Domain, f field) {
	if f.val == nil || f.val.Kind != yaml.SequenceNode {
		l.errf(f.line(), "priorities must be a list of class names, highest first")
		return
	}
	for _, e := range f.val.Content {
		e = resolve(e)
		if e == nil || e.Kind != yaml.ScalarNode || strings.TrimSpace(e.Value) == "" || e.Tag == "!!null" {
			l.errf(f.line(), "priorities: every class is a non-empty name")
			continue
		}
		if i := d.priorityRank(e.Value); i >= 0 {
			if d.Priorities[i] == e.Value {
				l.errf(e.Line, "priorities: duplicate class %q", e.Value)
			} else {
				l.errf(e.Line, "priorities: class %q differs from %q only by case, and a request's class is matched ignoring case: give the two different names", e.Value, d.Priorities[i])
			}
			continue
		}
		if strings.TrimSpace(e.Value) != e.Value {
			l.errf(e.Line, "priorities: class %q has spaces around it, and a request's class is matched without them: remove them", e.Value)
			continue
		}
		d.Priorities = append(d.Priorities, e.Value)
	}
}

// descriptors reads a list of descriptors into parent's level.
func (l *loader) descriptors(d *Domain, parent *Node, f field, lv *level, path string, depth int) []*Node {
	if isNull(f.val) {
		return nil
	}
	if f.val.Kind != yaml.SequenceNode {
		hint := ""
		if f.val.Kind == yaml.MappingNode {
			hint = `: start each descriptor with "- ", as in "- key: user"`
		}
		l.errf(f.line(), "descriptors must be a list, got %s%s", kindName(f.val), hint)
		return nil
	}
	if depth > maxDepth {
		l.errf(f.line(), "descriptors nested deeper than %d levels", maxDepth)
		return nil
	}
	var out []*Node
	seen := map[entryKey]*Node{}
	for _, e := range f.val.Content {
		if l.budget--; l.budget < 0 {
			if l.budget == -1 {
				l.errf(e.Line, "more than %d descriptors (is an alias repeated?)", maxDescriptors)
			}
			return out
		}
		n := l.descriptor(d, parent, e, path, depth)
		if n == nil {
			continue
		}
		k := entryKey{n.Key, n.Value}
		if prev, ok := seen[k]; ok {
			what := fmt.Sprintf("key %q", n.Key)
			if n.Value != "" {
				what += fmt.Sprintf(" value %q", n.Value)
			}
			l.errf(n.Pos.Line, "duplicate descriptor %s (first at line %d)", what, prev.Pos.Line)
			continue
		}
		seen[k] = n
		lv.add(n)
		out = append(out, n)
	}
	return out
}

func (l *loader) descriptor(d *Domain, parent *Node, e *yaml.Node, path string, depth int) *Node {
	e = resolve(e)
	if e == nil {
		return nil
	}
	fs, ok := l.fields(e, "descriptor", descFields)
	if !ok {
		return nil
	}
	n := &Node{Pos: Pos{l.file, e.Line}, Parent: parent, depth: depth}
	kf, has := fs["key"]
	key, ok := l.str(kf, "key")
	switch {
	case !has && l.notes.reported("key"):
		return nil
	case !has || (ok && key == ""):
		l.errf(e.Line, "descriptor has empty key: every descriptor needs key: <name>, the entry key of the requests it matches")
		return nil
	case !ok:
		return nil
	}
	n.Key = key
	if vf, ok := fs["value"]; ok {
		n.Value, _ = l.str(vf, "value")
	}
	if strings.Contains(n.Value, "*") {
		n.pattern = strings.Split(n.Value, "*")
	}
	if f, ok := fs["metadata"]; ok && !isNull(f.val) && f.val.Kind != yaml.MappingNode {
		l.errf(f.line(), "metadata must be a mapping, got %s", kindName(f.val))
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"shadow_mode", &n.ShadowMode}, {"quota_mode", &n.QuotaMode}, {"detailed_metric", &n.DetailedMetric}, {"share_threshold", &n.ShareThreshold}} {
		if f, ok := fs[b.name]; ok {
			*b.dst, _ = l.boolean(f, b.name)
		}
	}
	if f, ok := fs["value_to_metric"]; ok {
		n.valueToMetric, _ = l.boolean(f, "value_to_metric")
	}
	if n.ShareThreshold && n.pattern == nil {
		l.errf(fs["share_threshold"].line(), "share_threshold can only be used with wildcard values (containing '*'), not %q", n.Value)
	}
	n.Hierarchy = d.Hierarchy
	if parent != nil {
		n.Hierarchy = parent.Hierarchy
	}
	if f, ok := fs["hierarchy"]; ok {
		n.Hierarchy, _ = l.boolean(f, "hierarchy")
	}
	seg := n.Key
	if n.Value != "" {
		seg += "_" + n.Value
	}
	if path != "" {
		seg = path + "." + seg
	}
	if f, ok := fs["rate_limit"]; ok && !isNull(f.val) {
		if r := l.rule(d, n, f); r != nil {
			r.Path = seg
			r.Name = seg
			if nf, ok := l.ruleSrcs[r]["name"]; ok {
				if s, ok := l.str(nf, "name"); ok && s != "" {
					r.Name, r.named = s, true
				}
			}
			// quota_mode answers OK over the limit as shadow_mode does
			// (envoyproxy/ratelimit also lists the violation in the
			// response's dynamic metadata, which Floodgate does not send).
			r.Shadow = r.Shadow || n.ShadowMode || n.QuotaMode
			l.shadowStrategy(r, n)
			r.Hierarchical = n.Hierarchy
			r.DetailedMetric, r.ShareThreshold = n.DetailedMetric, n.ShareThreshold
			n.Rule = r
		}
	}
	if f, ok := fs["descriptors"]; ok {
		n.Children = l.descriptors(d, n, f, &n.sub, seg, depth+1)
	}
	if n.Rule != nil {
		d.rules = append(d.rules, n.Rule)
	}
	return n
}

// rule reads a rate_limit block's own fields; finish checks what depends on
// the rest of the domain.
func (l *loader) rule(d *Domain, n *Node, f field) *Rule {
	fs, ok := l.fields(f.val, "rate_limit", limitFields)
	if !ok {
		return nil
	}
	notes := l.notes
	before := len(l.probs)
	r := &Rule{Domain: d.Name, Node: n, Pos: Pos{l.file, f.key.Line}, Strategy: StrategyReject, Lendable: 1}
	l.ruleSrcs[r] = fs
	if f, ok := fs["unlimited"]; ok {
		r.Unlimited, _ = l.boolean(f, "unlimited")
	}
	if f, ok := fs["replaces"]; ok && !isNull(f.val) {
		if f.val.Kind != yaml.SequenceNode {
			l.errf(f.line(), "replaces must be a list of {name: ...}")
		} else {
			for _, e := range f.val.Content {
				rf, ok := l.fields(e, "replaces", replacesFields)
				if !ok {
					continue
				}
				name, _ := l.str(rf["name"], "name")
				if strings.TrimSpace(name) == "" {
					l.errf(max(e.Line, f.line()), "should not have an empty replaces entry")
					continue
				}
				r.Replaces = append(r.Replaces, name)
			}
		}
	}
	if f, ok := fs["strategy"]; ok {
		if s, ok := l.str(f, "strategy"); ok {
			switch s = strings.ToLower(s); s {
			case StrategyReject, StrategyWait, StrategyDegrade, StrategyShadow:
				r.Strategy = s
			default:
				l.errf(f.line(), "unknown strategy %q (want reject, wait, degrade or shadow)", s)
			}
		}
	}
	r.Shadow = r.Strategy == StrategyShadow
	if f, ok := fs["fallback"]; ok {
		r.Fallback, _ = l.str(f, "fallback")
		if r.Strategy != StrategyDegrade {
			l.errf(f.line(), "fallback applies to strategy: degrade")
		}
	}
	if r.Strategy == StrategyDegrade && strings.TrimSpace(r.Fallback) == "" {
		l.errf(fs["strategy"].line(), "strategy degrade needs a fallback name")
	}
	if f, ok := fs["max_waiters"]; ok {
		if v, ok := l.integer(f, "max_waiters"); ok {
			if v < 1 || v > 1<<20 {
				l.errf(f.line(), "max_waiters must be between 1 and 1048576, got %d", v)
			}
			r.MaxWaiters = int(v)
		}
		if r.Strategy != StrategyWait {
			l.errf(f.line(), "max_waiters applies to strategy: wait")
		}
	}
	if f, ok := fs["queue_order"]; ok {
		if s, ok := l.str(f, "queue_order"); ok {
			switch s = strings.ToLower(s); s {
			case "fifo", "priority":
				r.QueueOrder = s
			default:
				l.errf(f.line(), "unknown queue_order %q (want fifo or priority)", s)
			}
		}
		if r.Strategy != StrategyWait {
			l.errf(f.line(), "queue_order applies to strategy: wait")
		}
	}
	if f, ok := fs["priority"]; ok {
		r.Priority, _ = l.str(f, "priority")
	}
	if f, ok := fs["ceil"]; ok {
		if v, ok := l.integer(f, "ceil"); ok {
			if v <= 0 {
				l.errf(f.line(), "ceil must be > 0, got %d", v)
			} else {
				r.Ceil = v
			}
		}
	}
	if f, ok := fs["lendable"]; ok {
		if v, ok := l.number(f, "lendable"); ok {
			if v <= 0 || v > 1 {
				l.errf(f.line(), "lendable must be a share in (0, 1], got %g", v)
			} else {
				r.Lendable = v
				l.lendable[r] = true
			}
		}
	}
	if f, ok := fs["reserve"]; ok {
		l.reserve(r, f)
	}
	if f, ok := fs["adaptive"]; ok && !isNull(f.val) {
		l.adaptive(r, f)
	}

	if r.Unlimited {
		for _, name := range limitFields {
			switch name {
			case "unlimited", "name", "replaces", "requests_per_unit":
				// Envoy accepts (and ignores) requests_per_unit here.
				continue
			case "unit":
				// envoyproxy/ratelimit refuses a unit it knows beside
				// unlimited, and loads any other (an empty or null one,
				// as a template may leave it, or a misspelt one).
				if f, ok := fs[name]; ok {
					if s, ok := l.str(f, "unit"); ok {
						if _, _, known := ParseUnit(s); known {
							l.errf(f.key.Line, "should not specify rate limit unit when unlimited")
						} else {
							l.warnf(f.key.Line, "unit %q is ignored: the rate limit is unlimited (remove it)", s)
						}
					}
				}
				continue
			}
			if f, ok := fs[name]; ok {
				l.errf(f.key.Line, "%s does not apply to an unlimited rate limit", name)
			}
		}
		if len(l.probs) > before {
			return nil
		}
		return r
	}
	l.params(r, fs, notes)
	if len(l.probs) > before {
		// Keep the rule so later checks (replaces, names) do not cascade
		// into spurious problems, but do not compile it.
		r.broken = true
	}
	return r
}

// shadowStrategy warns of a wait or degrade strategy on a rule its
// descriptor shadows: a shadow rule never refuses, so the strategy does
// nothing. It is a warning, not an error: shadow_mode (or quota_mode) is
// how a rule written as it will be enforced is tried first, and the
// strategy applies once the flag is removed (as with the server's global
// shadow mode, which no configuration shows).
func (l *loader) shadowStrategy(r *Rule, n *Node) {
	if (!n.ShadowMode && !n.QuotaMode) || (r.Strategy != StrategyWait && r.Strategy != StrategyDegrade) {
		return
	}
	flag := "shadow_mode"
	if !n.ShadowMode {
		flag = "quota_mode"
	}
	what := "no request waits (and its shadow refusals include requests a wait would have admitted)"
	if r.Strategy == StrategyDegrade {
		what = "no fallback runs"
	}
	l.warnf(l.ruleSrcs[r]["strategy"].line(), "strategy %s does nothing while the descriptor's %s is on: the rule never refuses, so %s; it applies once %s is removed",
		r.Strategy, flag, what, flag)
}

// checkAdaptiveNames refuses a rule with an adaptive block whose name
// another rule of its domain shares: its controller, its samples
// (/v1/observe names a domain and a rule), its rate scale and its metric
// are keyed by domain and name, so the rules could not be told apart (a
// runtime override or a manual scale applies to every rule of a name,
// which is fine for a fixed limit, not for one a controller steers).
func (l *loader) checkAdaptiveNames(d *Domain) {
	byName := map[string][]*Rule{}
	for _, r := range d.rules {
		byName[r.Name] = append(byName[r.Name], r)
	}
	for _, r := range d.rules {
		same := byName[r.Name]
		if r.Adaptive == nil || len(same) < 2 {
			continue
		}
		var lines []string
		for _, o := range same {
			if o != r {
				lines = append(lines, strconv.Itoa(o.Pos.Line))
			}
		}
		line := r.Pos.Line
		if f, ok := l.ruleSrcs[r]["adaptive"]; ok {
			line = f.line()
		}
		l.errf(line, "adaptive: the rule name %q is shared with the rate_limit at line %s of domain %q: a rule with an adaptive block needs a name of its own "+
			"(its controller, samples, rate scale and metric are keyed by domain and name)", r.Name, strings.Join(lines, ", "), d.Name)
	}
}

// adaptive reads an adaptive block into an adaptive.Config and validates
// it with adaptive.New.
func (l *loader) adaptive(r *Rule, f field) {
	fs, ok := l.fields(f.val, "adaptive", adaptiveFields)
	if !ok {
		return
	}
	var c adaptive.Config
	floats := map[string]*float64{"min": &c.Min, "max": &c.Max, "initial": &c.Initial, "quantile": &c.Quantile,
		"error_ratio": &c.ErrorRatio, "decrease": &c.Decrease, "increase": &c.Increase}
	bad := false
	for name, dst := range floats {
		if x, ok := fs[name]; ok {
			v, ok := l.number(x, "adaptive: "+name)
			bad = bad || !ok
			*dst = v
		}
	}
	for name, dst := range map[string]*time.Duration{"latency_threshold": &c.LatencyThreshold, "interval": &c.Interval} {
		if x, ok := fs[name]; ok {
			v, ok := l.duration(x, "adaptive: "+name)
			bad = bad || !ok
			*dst = v
		}
	}
	if x, ok := fs["min_samples"]; ok {
		v, ok := l.integer(x, "adaptive: min_samples")
		bad = bad || !ok
		c.MinSamples = v
	}
	// A zero written out is not the field left out: the Go API's zero
	// means the default, a written one would mean what it says, and for
	// these it says something impossible.
	parsed := !bad
	for _, name := range []string{"min", "max", "initial", "quantile", "decrease", "increase", "min_samples"} {
		x, ok := fs[name]
		if !ok || !parsed {
			continue
		}
		var zero bool
		if name == "min_samples" {
			zero = c.MinSamples == 0
		} else {
			zero = *floats[name] == 0
		}
		if zero {
			l.errf(x.line(), "adaptive: %s 0: %s", name, adaptiveZero[name])
			bad = true
		}
	}
	if bad {
		return
	}
	norm, err := adaptive.Normalize(c)
	if err != nil {
		line := f.line()
		msg := strings.TrimPrefix(err.Error(), "adaptive: ")
		for name, x := range fs {
			if strings.HasPrefix(msg, name+" ") {
				line = x.line()
			}
		}
		l.errf(line, "adaptive: %s", msg)
		return
	}
	r.Adaptive = &norm // with its defaults: what validate -v and the admin API show
}

// adaptiveZero says why a written 0 is refused, and what leaving the field
// out gives.
var adaptiveZero = map[string]string{
	"min":         "must be at least 0.000001 (leave min out for the default 0.1)",
	"max":         "must be at least min (leave max out for the default 1)",
	"initial":     "must be in [min, max] (leave initial out to start at max)",
	"quantile":    "must be in (0, 1] (leave quantile out for the default 0.99)",
	"decrease":    "must be in (0, 1) (leave decrease out for the default 0.7)",
	"increase":    "must be positive (leave increase out for the default 0.05)",
	"min_samples": "must be at least 1: an interval without samples is no evidence (leave min_samples out for the default 10)",
}

func (l *loader) reserve(r *Rule, f field) {
	fs := resolve(f.val)
	if fs == nil || fs.Kind != yaml.MappingNode {
		l.errf(f.line(), "reserve must map priority classes to shares, e.g. {low: 0.3}")
		return
	}
	r.Reserve = map[string]float64{}
	for i := 0; i+1 < len(fs.Content); i += 2 {
		k := fs.Content[i]
		class := k.Value
		if _, dup := r.Reserve[class]; dup {
			l.errf(k.Line, "reserve: duplicate class %q", class)
			continue
		}
		v, ok := l.number(field{k, resolve(fs.Content[i+1])}, "reserve: "+class)
		if !ok {
			continue
		}
		if v < 0 || v >= 1 {
			l.errf(k.Line, "reserve: %s: the share must be in [0, 1), got %g", class, v)
			continue
		}
		r.Reserve[class] = v
	}
}

// params reads the limit itself: unit (and unit_multiplier) or period,
// requests_per_unit and the algorithm with its parameters. notes are the
// mapping's key problems: a required field that seems missing because its
// key was misspelled is not reported twice.
func (l *loader) params(r *Rule, fs map[string]field, notes keyNotes) {
	p := algo.Params{Algorithm: algo.FixedWindow}
	// knownAlgo is false when the algorithm field is bad: the checks that
	// depend on the algorithm are skipped (they would only guess), the
	// others still report every problem of the rule.
	knownAlgo := true
	if f, ok := fs["algorithm"]; ok {
		knownAlgo = false
		if s, ok := l.str(f, "algorithm"); ok {
			k, err := algo.ParseKind(s)
			if err != nil {
				if c := closest(strings.ToLower(s), kindNames()); c != "" {
					l.errf(f.line(), "unknown algorithm %q: did you mean %q? (want one of %s)", s, c, kindList())
				} else {
					l.errf(f.line(), "unknown algorithm %q (want one of %s)", s, kindList())
				}
			} else {
				p.Algorithm, knownAlgo = k, true
			}
		}
	}
	uf, hasUnit := fs["unit"]
	pf, hasPeriod := fs["period"]
	mult := l.unitMultiplier(fs, hasUnit, hasPeriod)
	switch {
	case hasUnit && hasPeriod:
		l.errf(pf.key.Line, "set unit or period, not both")
	case hasUnit:
		s, ok := l.str(uf, "unit")
		if !ok {
			break
		}
		u := strings.ToLower(s)
		switch d, cal, ok := ParseUnit(u); {
		case !ok:
			l.errf(uf.line(), "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)%s", s, unitHint(s))
		case cal == algo.CalendarNone && mult > maxPeriod/d:
			l.errf(fs["unit_multiplier"].line(), "unit_multiplier %d makes a period of more than 2^53µs (about 285 years)", mult)
		case cal == algo.CalendarNone:
			p.Period, r.Unit, r.UnitMultiplier = d*time.Duration(mult), u, int64(mult)
		case mult > 1:
			l.errf(fs["unit_multiplier"].line(), "unit_multiplier applies to second, minute, hour, day and week; %s is a calendar period "+
				"(for a window of several months, use a period such as 90d)", u)
		default:
			r.Unit, r.UnitMultiplier, p.Calendar = u, 1, cal
			if knownAlgo && p.Algorithm != algo.FixedWindow {
				l.errf(uf.line(), "unit %s is a calendar period for fixed_window only; use a period such as 30d with %s", u, p.Algorithm)
			}
		}
	case hasPeriod:
		p.Period = l.period(pf)
	case knownAlgo && p.Algorithm != algo.Concurrency:
		if _, ok := fs["unit_multiplier"]; ok || notes.reported("unit") || notes.reported("period") {
			r.broken = true // the problem that explains it has been reported
			break
		}
		l.errf(r.Pos.Line, "rate_limit needs a unit (second, minute, hour, day, week, month, year) or a period")
	}
	rf, hasRPU := fs["requests_per_unit"]
	switch {
	case !hasRPU && notes.reported("requests_per_unit"):
		r.broken = true
	case !hasRPU:
		l.errf(r.Pos.Line, "rate_limit needs requests_per_unit (0 blocks every request)")
	default:
		v, ok := l.integer(rf, "requests_per_unit")
		switch {
		case !ok:
		case v < 0:
			l.errf(rf.line(), "requests_per_unit must be >= 0, got %d", v)
		case v >= 1<<53:
			l.errf(rf.line(), "requests_per_unit must be below 2^53, got %d", v)
		case v == 0:
			r.Deny = true
		default:
			p.Limit = v
		}
	}
	for name, algos := range fieldAlgos {
		if f, ok := fs[name]; ok && knownAlgo && !slices.Contains(algos, p.Algorithm) {
			names := make([]string, len(algos))
			for i, k := range algos {
				names[i] = k.String()
			}
			list := names[0]
			if n := len(names); n > 1 {
				list = strings.Join(names[:n-1], ", ") + " and " + names[n-1]
			}
			l.errf(f.key.Line, "%s applies to %s, not %s", name, list, p.Algorithm)
		}
	}
	if f, ok := fs["max_wait"]; ok {
		r.MaxWait, _ = l.duration(f, "max_wait")
	}
	if r.Deny {
		for _, name := range []string{"algorithm", "burst", "queue_size", "delay", "initial_tokens", "sub_windows",
			"warmup_period", "cold_factor", "max_burst_seconds", "retain", "lease_ttl", "ceil", "lendable", "reserve", "adaptive"} {
			if f, ok := fs[name]; ok {
				l.errf(f.key.Line, "requests_per_unit 0 blocks every request; %s does not apply (zero is not a rate)", name)
			}
		}
		// No wait ever admits a request to a rule that admits none
		// (the engine answers it reject), and no override can give it
		// a rate.
		switch f, hasWait := fs["max_wait"]; {
		case r.Strategy == StrategyWait:
			wait := "strategy wait"
			if r.MaxWait > 0 {
				wait += " (max_wait " + formatDuration(r.MaxWait) + ")"
			}
			l.errf(fs["strategy"].line(), "requests_per_unit 0 blocks every request; %s does not apply: no wait ever admits a request (use reject, the default, or degrade)", wait)
		case hasWait:
			l.errf(f.key.Line, "max_wait applies to strategy: wait and to the smooth algorithms")
		}
		// The window stays known: it is the status's window and reset
		// time (the engine reads Params.Period and Calendar).
		r.Params = algo.Params{Period: p.Period, Calendar: p.Calendar}
		return
	}
	ints := []struct {
		name string
		dst  *int64
	}{{"burst", &p.Burst}, {"queue_size", &p.Burst}, {"delay", &p.Delay}}
	for _, x := range ints {
		if f, ok := fs[x.name]; ok {
			if v, ok := l.integer(f, x.name); ok {
				switch {
				case v < 0:
					l.errf(f.line(), "%s must be >= 0, got %d", x.name, v)
				case v == 0 && x.name == "burst" && (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA):
					// algo reads a Burst of 0 as unset (a capacity of
					// requests_per_unit); written out, it asks for a bucket
					// that holds nothing, which would admit nothing.
					l.errf(f.line(), "burst must be >= 1 for %s, got 0 (a bucket of capacity 0 admits nothing); leave burst out for a capacity of requests_per_unit", p.Algorithm)
				}
				*x.dst = v
			}
		}
	}
	if _, b := fs["burst"]; b {
		if f, q := fs["queue_size"]; q {
			l.errf(f.key.Line, "set burst or queue_size, not both (for the shaper they are the same)")
		}
	}
	if f, ok := fs["initial_tokens"]; ok {
		if v, ok := l.integer(f, "initial_tokens"); ok {
			p.InitialTokens = &v
		}
	}
	if f, ok := fs["sub_windows"]; ok {
		if v, ok := l.integer(f, "sub_windows"); ok {
			if v < 1 || v > 3600 {
				l.errf(f.line(), "sub_windows must be between 1 and 3600, got %d", v)
			}
			p.SubWindows = int(min(max(v, 0), 1<<20))
		}
	}
	durs := []struct {
		name string
		dst  *time.Duration
	}{{"warmup_period", &p.WarmupPeriod}, {"lease_ttl", &p.LeaseTTL}}
	for _, x := range durs {
		if f, ok := fs[x.name]; ok {
			*x.dst, _ = l.duration(f, x.name)
		}
	}
	if f, ok := fs["retain"]; ok {
		p.Retain = l.retain(f)
	}
	floats := []struct {
		name string
		dst  *float64
		min  float64
	}{{"cold_factor", &p.ColdFactor, 1}, {"max_burst_seconds", &p.MaxBurstSeconds, 0}}
	for _, x := range floats {
		if f, ok := fs[x.name]; ok {
			if v, ok := l.number(f, x.name); ok {
				if v <= x.min || v > 1e6 {
					l.errf(f.line(), "%s must be > %g and at most 1e6, got %g", x.name, x.min, v)
				}
				*x.dst = v
			}
		}
	}
	smooth := p.Algorithm == algo.SmoothBursty || p.Algorithm == algo.SmoothWarmup
	if f, ok := fs["max_wait"]; ok {
		switch {
		case smooth:
			p.MaxWait = r.MaxWait
		case knownAlgo && r.Strategy != StrategyWait:
			l.errf(f.key.Line, "max_wait applies to strategy: wait and to the smooth algorithms")
		}
	}
	if r.Strategy == StrategyWait && r.MaxWait == 0 {
		if _, ok := fs["max_wait"]; !ok {
			l.errf(fs["strategy"].line(), "strategy wait needs max_wait, how long a request may wait")
		}
	}
	if r.Strategy == StrategyWait && p.Algorithm == algo.Concurrency {
		// A waiter retries when the refusal says capacity is due: for a
		// slot that is its lease's expiry, since a release, on this
		// instance or another, is not announced.
		l.errf(fs["strategy"].line(), "strategy wait does not apply to a concurrency limit: a waiting request would not learn of a slot given back, only of its lease expiring; use reject")
	}
	// algo.Compile takes retain on a bucket whose initial tokens fill it,
	// as a limit scaled down (an override, a share) may round them up to
	// the burst; written so, it does nothing.
	if f, ok := fs["retain"]; ok && p.Retain > 0 && p.Algorithm == algo.TokenBucket && p.InitialTokens != nil {
		capacity := p.Burst
		if capacity == 0 {
			capacity = p.Limit
		}
		if *p.InitialTokens == capacity {
			l.warnf(f.key.Line, "retain does nothing here: initial_tokens %d is the bucket's capacity, so a fresh key starts full and forgetting a full one loses nothing; drop retain, or set initial_tokens below %d", capacity, capacity)
		}
	}
	r.Params = p
}

// maxPeriod is the longest period algo.Compile takes: 2^53 µs.
const maxPeriod = time.Duration(1<<53) * time.Microsecond

// unitMultiplier reads unit_multiplier (envoyproxy/ratelimit's): the
// period is unit × unit_multiplier. It multiplies a unit, so it takes one,
// and not a period (which states the whole length). It returns 1 when the
// field is absent or wrong.
func (l *loader) unitMultiplier(fs map[string]field, hasUnit, hasPeriod bool) time.Duration {
	f, ok := fs["unit_multiplier"]
	if !ok {
		return 1
	}
	v, ok := l.integer(f, "unit_multiplier")
	switch {
	case !ok:
	case v < 1:
		l.errf(f.line(), "unit_multiplier must be greater than 0, got %d", v)
	case hasPeriod:
		l.errf(f.key.Line, "unit_multiplier multiplies unit, and period states the whole length: set unit and unit_multiplier, or period alone (e.g. period: 5m)")
	case !hasUnit:
		l.errf(f.key.Line, "unit_multiplier needs a unit to multiply (second, minute, hour, day or week)")
	default:
		return time.Duration(v)
	}
	return 1
}

func kindList() string { return strings.Join(kindNames(), ", ") }

// kindNames are the algorithms' names, as the configuration writes them.
func kindNames() []string {
	names := make([]string, 0, 9)
	for _, k := range algo.Kinds() {
		names = append(names, k.String())
	}
	return names
}

// burstWord matches the field name burst in an algo.Compile error (not
// max_burst_seconds).
var burstWord = regexp.MustCompile(`\bburst\b`)

// compileField maps the field an algo.Compile error names to the YAML
// field to point at.
var compileField = map[string]string{
	"limit":             "requests_per_unit",
	"period":            "period",
	"calendar":          "unit",
	"burst":             "burst",
	"delay":             "delay",
	"sub_windows":       "sub_windows",
	"initial_tokens":    "initial_tokens",
	"algorithm":         "algorithm",
	"warmup_period":     "warmup_period",
	"cold_factor":       "cold_factor",
	"max_burst_seconds": "max_burst_seconds",
	"retain":            "retain",
	"ceil":              "ceil",
	"lendable":          "lendable",
	"reserve":           "reserve",
}

// finish links what depends on the whole domain: the hierarchy, replaces,
// priority classes; then compiles every rule.
func (l *loader) finish(d *Domain) {
	if d.Root != nil {
		d.rules = append([]*Rule{d.Root}, d.rules...)
	}
	named := map[string]bool{}
	hierarchical := false
	for _, r := range d.rules {
		if r.named {
			named[r.Name] = true
		}
		if r != d.Root && r.Hierarchical {
			hierarchical = true
		}
	}
	if d.Root != nil && !hierarchical {
		l.errf(d.Root.Pos.Line, "the domain's rate_limit is the root of the hierarchy and applies to hierarchical rules only: set hierarchy: true on the domain or on descriptors")
	}
	l.checkAdaptiveNames(d)
	compiled := map[*Rule]ruleLimits{}
	for _, r := range d.rules {
		fs := l.ruleSrcs[r]
		line := func(name string) int {
			if f, ok := fs[name]; ok {
				return f.line()
			}
			return r.Pos.Line
		}
		for _, name := range r.Replaces {
			own := ""
			if r.named {
				own = r.Name
			}
			switch {
			case name == own:
				l.errf(line("replaces"), "replaces should not contain name of same descriptor (%q)", name)
			case !named[name]:
				l.errf(line("replaces"), "replaces %q: no rate_limit in domain %q has that name", name, d.Name)
			}
		}
		if r.Priority != "" {
			if i := d.priorityRank(r.Priority); i < 0 {
				l.errf(line("priority"), "priority %q is not a class of the domain's priorities%s", r.Priority, classList(d))
			} else {
				r.Priority = d.Priorities[i] // as declared: names match ignoring case
			}
		}
		l.checkReserve(d, r, line("reserve"))
		if r != d.Root && r.Hierarchical {
			r.parent = d.Root
			for a := r.Node.Parent; a != nil; a = a.Parent {
				if a.Rule != nil && !a.Rule.Unlimited {
					r.parent = a.Rule
					break
				}
			}
		}
		switch {
		case r.Ceil > 0 && r.parent == nil:
			l.errf(line("ceil"), "ceil lets a rule borrow from its parent, and this one has none: set hierarchy: true and give an enclosing descriptor (or the domain) a rate_limit")
		case r.Ceil > 0 && r.parent.Deny:
			l.errf(line("ceil"), "ceil lets a rule borrow from its parent, and its parent %q (line %d) has nothing to lend: requests_per_unit 0 blocks every request, "+
				"this rule's included; remove ceil, or give the parent a rate", r.parent.Name, r.parent.Pos.Line)
		}
		if r.Node != nil {
			static := !r.DetailedMetric
			for n := r.Node; n != nil; n = n.Parent {
				static = static && !n.valueToMetric
			}
			if static {
				r.metricKey = d.Name + "." + r.Path
			}
		}
		if r.Unlimited || r.Deny || r.broken {
			continue
		}
		rl, err := deriveLimits(d, r, r.Params)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), algo.ErrInvalid.Error()+": ")
			name := msg
			if i := strings.Index(msg, ": "); i >= 0 {
				name = msg[:i]
				if yf, ok := compileField[name]; ok {
					msg = yf + msg[i:]
					name = yf
				}
			}
			if _, ok := fs[name]; !ok && name == "period" {
				name = "unit"
			}
			// A shaper's queue may be written queue_size, burst's other
			// name: name the field the file uses.
			if _, b := fs["burst"]; !b {
				if _, q := fs["queue_size"]; q {
					msg = burstWord.ReplaceAllString(msg, "queue_size")
					if name == "burst" {
						name = "queue_size"
					}
				}
			}
			l.errf(line(name), "%s", msg)
			continue
		}
		r.limit, r.fp = rl.rate, rl.fp
		compiled[r] = rl
		l.checkMaxWait(r, fs)
		l.checkAdaptiveFloor(r, fs)
	}
	l.checkBorrowing(d, compiled)
}

// checkAdaptiveFloor warns when an adaptive rule, cut to its floor
// (requests_per_unit scaled by min, as an Engine scales it: rounded down,
// at least 1), admits fewer than min_samples requests per interval on
// average: a rule held at its floor is judged only once the samples
// carried over from several intervals reach min_samples, and not at all
// while intervals come without samples (an empty one drops those
// carried), so its factor may not be raised and the rule can stay cut.
// Concurrency limits (slots, not a rate) and calendar windows are not
// checked.
func (l *loader) checkAdaptiveFloor(r *Rule, fs map[string]field) {
	a := r.Adaptive
	p := r.limit.Params()
	if a == nil || p.Algorithm == algo.Concurrency || p.Calendar != algo.CalendarNone || p.Period <= 0 || a.Interval <= 0 {
		return
	}
	floor := scaled(p, a.Min).Limit
	perInterval := float64(floor) * float64(a.Interval) / float64(p.Period)
	if perInterval >= float64(a.MinSamples) {
		return
	}
	var fixes []string
	if m := float64(a.MinSamples) * float64(p.Period) / (float64(p.Limit) * float64(a.Interval)); m <= a.Max {
		step := math.Pow(10, math.Floor(math.Log10(m))-2)
		fixes = append(fixes, "raise min to at least "+strconv.FormatFloat(math.Min(math.Ceil(m/step-1e-6)*step, a.Max), 'g', 3, 64))
	}
	need := time.Duration(math.Ceil(float64(a.MinSamples) * float64(p.Period) / float64(floor)))
	need = (need + time.Millisecond - 1).Truncate(time.Millisecond)
	fixes = append(fixes, "raise interval to at least "+formatDuration(need))
	if n := int64(perInterval); n >= 1 {
		fixes = append(fixes, "lower min_samples to at most "+strconv.FormatInt(n, 10))
	}
	l.warnf(fs["adaptive"].line(), "adaptive: cut to its floor (min %g), this rule admits %d per %s, %s per interval of %s, fewer than min_samples %d: "+
		"held there, no interval has samples enough to be judged alone, so its factor rises only once samples carried over from several intervals reach min_samples, "+
		"and not while intervals come without samples (which drop those carried): the rule can stay cut; %s",
		a.Min, floor, formatDuration(p.Period), strconv.FormatFloat(perInterval, 'g', 3, 64), formatDuration(a.Interval), a.MinSamples, orList(fixes))
}

// orList joins items as "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// checkBorrowing checks what depends on both ends of borrowing, once every
// rule knows its parent: lendable on a rule no child borrows from (an
// error: the lend pool would never be charged; no override or per-request
// limit can add a ceil), and a ceil above what its parent can admit (a
// warning: borrowing still works, up to the parent's limit, and an override
// or an adaptive factor may raise the parent at run time).
func (l *loader) checkBorrowing(d *Domain, compiled map[*Rule]ruleLimits) {
	lenders := map[*Rule]bool{}
	for _, r := range d.rules {
		// A ceil written at all, even a wrong one (reported), makes
		// its parent a lender: no second problem about the parent.
		if _, ok := l.ruleSrcs[r]["ceil"]; ok && r.parent != nil {
			lenders[r.parent] = true
		}
	}
	for _, r := range d.rules {
		if l.lendable[r] && !lenders[r] && !r.Unlimited && !r.Deny {
			l.errf(l.ruleSrcs[r]["lendable"].line(), "lendable is the share of this limit its children may borrow, and none can: no rule has it as its parent "+
				"(the nearest limited rule above a hierarchical rule) and a ceil; remove lendable, or give such a child a ceil")
		}
		l.checkCeil(r, compiled)
	}
}

// checkCeil warns when r's ceil can never be reached because its parent
// refuses first: every request r admits is charged to the parent too, so
// with the same algorithm and window (the same store key fingerprint:
// windows aligned alike, buckets refilling alike) the ceiling's count never
// passes the parent's. The parent's cap is its ceil when it borrows
// itself. For buckets the ceiling must also hold at least the parent's
// capacity, or a burst can meet it first. Other algorithms, and periods
// that differ, are not compared: there it is not certain.
func (l *loader) checkCeil(r *Rule, compiled map[*Rule]ruleLimits) {
	if r.parent == nil {
		return
	}
	c, pl := compiled[r].ceil, compiled[r.parent]
	limit, what := pl.rate, "limit"
	if pl.ceil != nil {
		limit, what = pl.ceil, "ceil"
	}
	if c == nil || limit == nil {
		return
	}
	cp, pp := c.Params(), limit.Params()
	switch cp.Algorithm {
	case algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow, algo.TokenBucket, algo.GCRA:
	default:
		return
	}
	if fingerprint(cp) != fingerprint(pp) || cp.Limit <= pp.Limit || c.Capacity() < limit.Capacity() {
		return
	}
	l.warnf(l.ruleSrcs[r]["ceil"].line(), "ceil %d can never be reached: the parent %q, whose %s is %d in the same algorithm and period, is charged for every request of this rule "+
		"and refuses first; lower the ceil to %d, or raise the parent", r.Ceil, r.parent.Name, what, pp.Limit, pp.Limit)
}

// checkMaxWait warns when a wait rule's max_wait is shorter than the
// longest the rule can make a request of one unit wait, where the
// algorithm gives capacity back on a schedule the traffic does not change:
// a fixed window all at once when it turns (every period), a bucket one
// unit every period / requests_per_unit (at the fastest rate an adaptive
// factor allows). A request refused further from that moment than max_wait
// is rejected at once. Sliding windows give capacity back as past
// admissions age out, which depends on the traffic, and a rule that
// borrows may be admitted on its parent's capacity: neither is warned.
func (l *loader) checkMaxWait(r *Rule, fs map[string]field) {
	if r.Strategy != StrategyWait || r.MaxWait <= 0 || r.Ceil > 0 {
		return
	}
	p := r.limit.Params()
	switch p.Algorithm {
	case algo.FixedWindow:
		need, window := p.Period, "window ("+formatDuration(p.Period)+")"
		switch p.Calendar {
		case algo.CalendarMonth:
			need, window = 28*24*time.Hour, "window (a calendar month)"
		case algo.CalendarYear:
			need, window = 365*24*time.Hour, "window (a calendar year)"
		}
		if r.MaxWait < need {
			l.warnf(fs["max_wait"].line(), "max_wait %s is shorter than this rule's %s: a fixed window gives capacity back only when it turns, "+
				"so only a request refused within %s of the window's end can wait, and one refused earlier is rejected at once; "+
				"for every refused request to be able to wait, set max_wait to the window, or use token_bucket or gcra, which give units back one at a time",
				formatDuration(r.MaxWait), window, formatDuration(r.MaxWait))
		}
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		rate := float64(p.Limit)
		if r.Adaptive != nil && r.Adaptive.Max > 1 {
			rate *= r.Adaptive.Max
		}
		need := time.Duration(math.Ceil(float64(p.Period) / rate))
		if float64(r.MaxWait)*rate < float64(p.Period) {
			l.warnf(fs["max_wait"].line(), "max_wait %s is shorter than the %s this rule takes to give one unit back (period / requests_per_unit): "+
				"a request of one unit it refuses can wait only when its unit is due within %s, and is rejected at once otherwise; "+
				"for every such request to be able to wait, set max_wait to at least %s",
				formatDuration(r.MaxWait), formatDuration(need), formatDuration(r.MaxWait), formatDuration(need))
		}
	}
}

func classList(d *Domain) string {
	if len(d.Priorities) == 0 {
		return " (the domain declares no priorities)"
	}
	return " (" + strings.Join(d.Priorities, ", ") + ")"
}

// checkReserve validates a rule's reserve against the domain's classes:
// known classes, and shares that do not shrink down the list (a lower class
// cannot be allowed more of the limit than a higher one).
func (l *loader) checkReserve(d *Domain, r *Rule, line int) {
	if len(r.Reserve) == 0 {
		return
	}
	// Classes are named as declared (names match ignoring case).
	byClass := make(map[string]float64, len(r.Reserve))
	for _, class := range l.reserveClasses(r) {
		i := d.priorityRank(class)
		if i < 0 {
			l.errf(l.reserveLine(r, class, line), "reserve: %q is not a class of the domain's priorities%s", class, classList(d))
			return
		}
		if _, dup := byClass[d.Priorities[i]]; dup {
			l.errf(l.reserveLine(r, class, line), "reserve: %q names class %s a second time (class names match ignoring case)", class, d.Priorities[i])
			return
		}
		byClass[d.Priorities[i]] = r.Reserve[class]
	}
	r.Reserve = byClass
	if top := d.Priorities[0]; r.Reserve[top] > 0 {
		below := "the domain has no class below it"
		if len(d.Priorities) > 1 {
			below = strings.Join(d.Priorities[1:], ", ")
		}
		l.errf(l.reserveLine(r, top, line), "reserve: %s is the highest priority class: a reserve keeps its share of the limit from that class "+
			"and every class below it, so no request could use this %g of the limit; reserve for a lower class (%s), "+
			"or lower requests_per_unit to lower the limit for everyone", top, r.Reserve[top], below)
		return
	}
	prev, prevClass := 0.0, ""
	for _, class := range d.Priorities {
		share, ok := r.Reserve[class]
		if !ok {
			continue
		}
		if share < prev {
			l.errf(line, "reserve: %s (%g) is lower than %s (%g) above it; a lower class cannot use more of the limit", class, share, prevClass, prev)
			return
		}
		prev, prevClass = share, class
	}
}

// reserveClasses returns the classes of r's reserve in file order.
func (l *loader) reserveClasses(r *Rule) []string {
	out := make([]string, 0, len(r.Reserve))
	if n := resolve(l.ruleSrcs[r]["reserve"].val); n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if _, ok := r.Reserve[n.Content[i].Value]; ok && !slices.Contains(out, n.Content[i].Value) {
				out = append(out, n.Content[i].Value)
			}
		}
	}
	if len(out) != len(r.Reserve) { // not from a file
		return slices.Sorted(maps.Keys(r.Reserve))
	}
	return out
}

// reserveLine returns the line of class's entry in r's reserve mapping,
// else def.
func (l *loader) reserveLine(r *Rule, class string, def int) int {
	n := resolve(l.ruleSrcs[r]["reserve"].val)
	if n == nil || n.Kind != yaml.MappingNode {
		return def
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == class {
			return n.Content[i].Line
		}
	}
	return def
}
