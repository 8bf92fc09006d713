package policy

import (
	"errors"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// SectionFunc compiles a domain-level section of the configuration that
// another package defines, such as package dimension's "dimensions" (how
// HTTP requests become descriptors), which policy cannot import. decode
// fills v (a pointer to a struct with yaml tags) from the section, after
// checking that every field of the section is one of v's: an unknown one
// is reported, and decode still fills v and returns nil, so that f goes on
// checking the rest (the section is not kept, and f's problems that may
// follow from the misspelt field are left out). The returned value is
// kept in Domain.Sections. An error that names a field path
// ("pkg: descriptors[1].entries[0].source: message") is reported at that
// field's line or, when the field is missing, at the line of the mapping
// that lacks it (its list entry, say). Errors joined with errors.Join are
// each reported so: one load lists every problem of the section.
type SectionFunc func(decode func(v any) error) (any, error)

var (
	sectionsMu sync.RWMutex
	sections   = map[string]SectionFunc{}
)

// RegisterSection makes name a known domain-level field compiled by f.
// Register before loading, e.g. from the package that owns the section
// (package gateway registers "gateway"); a later registration of the
// same name replaces the earlier one. Envoy's fields cannot be registered.
func RegisterSection(name string, f SectionFunc) {
	if slices.Contains(rootFields, name) || f == nil {
		return
	}
	sectionsMu.Lock()
	sections[name] = f
	sectionsMu.Unlock()
}

func sectionFunc(name string) SectionFunc {
	sectionsMu.RLock()
	defer sectionsMu.RUnlock()
	return sections[name]
}

func sectionNames() []string {
	sectionsMu.RLock()
	defer sectionsMu.RUnlock()
	names := make([]string, 0, len(sections))
	for n := range sections {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var fieldPath = regexp.MustCompile(`^[a-z0-9_]+(\[\d+\])?(\.[a-z0-9_]+(\[\d+\])?)*$`)

// section compiles one registered section into d.Sections. Unknown fields
// do not stop it: fn still checks what is known, as the rest of the file
// is checked, but its problems that may follow from a misspelt field are
// left out (see consequence), and the section is not kept.
func (l *loader) section(d *Domain, name string, f field, fn SectionFunc) {
	n := resolve(f.val)
	if isNull(n) {
		return
	}
	unknown := false
	var decodeErr error
	typos := map[*yaml.Node][]string{}
	decode := func(v any) error {
		t := reflect.TypeOf(v)
		if t == nil || t.Kind() != reflect.Pointer {
			decodeErr = errors.New("policy: section decode needs a pointer")
			return decodeErr
		}
		before := len(l.probs)
		l.checkKnown(n, t, name, 0, typos)
		unknown = len(l.probs) > before
		if err := n.Decode(v); err != nil {
			decodeErr = err
			var te *yaml.TypeError
			if errors.As(err, &te) {
				for _, msg := range te.Errors {
					line := f.line()
					if m := yamlLine.FindStringSubmatch("yaml: " + msg); m != nil {
						line, _ = strconv.Atoi(m[1])
						msg = m[2]
					}
					l.errf(line, "%s: %s", name, msg)
				}
			} else {
				l.errf(f.line(), "%s: %v", name, err)
			}
			return err
		}
		return nil
	}
	v, err := fn(decode)
	if decodeErr != nil {
		return
	}
	if err != nil {
	problems:
		for _, err := range flatten(err) {
			line, msg := f.line(), err.Error()
			parts := strings.SplitN(msg, ": ", 3)
			for i := 0; i < len(parts)-1; i++ {
				if !fieldPath.MatchString(parts[i]) {
					continue
				}
				if consequence(n, parts[i], typos) {
					continue problems
				}
				if at := nodeAt(n, parts[i]); at != nil {
					line, msg = at.Line, strings.Join(parts[i:], ": ")
					break
				}
			}
			l.errf(line, "%s: %s", name, msg)
		}
		return
	}
	if unknown {
		return
	}
	if d.Sections == nil {
		d.Sections = map[string]any{}
	}
	d.Sections[name] = v
}

// consequence reports whether a problem of the field at path under n may
// follow from an unknown field (in typos: the mappings holding one, with
// the known fields they look like): the path's last field is missing where
// an unknown field looks like it ("rutes" for a missing "routes"), or it is
// itself a mapping holding an unknown field.
func consequence(n *yaml.Node, path string, typos map[*yaml.Node][]string) bool {
	if len(typos) == 0 {
		return false
	}
	parts := strings.Split(path, ".")
	for pi, part := range parts {
		var f pathField
		if n, f = lookUp(n, part); n == nil {
			return false
		}
		if f.key == nil {
			return pi == len(parts)-1 && slices.Contains(typos[n], f.name)
		}
		if f.indexed && f.val == nil {
			return false
		}
		if pi == len(parts)-1 {
			_, ok := typos[f.val]
			return ok
		}
		n = f.val
	}
	return false
}

// pathField is one step of a path under a mapping (see lookUp).
type pathField struct {
	name    string
	indexed bool // the step names a list element: "entries[0]"
	// key is the field's key node, nil when the mapping lacks the field;
	// val its value, resolved, or for an indexed step the element, nil
	// when the value is not a list that long.
	key, val *yaml.Node
}

// lookUp takes one step of a path ("routes", "entries[0]") into n: it
// returns n resolved, nil when n is not a mapping or the step is not a
// field name with an optional index, and the field the step names.
func lookUp(n *yaml.Node, part string) (*yaml.Node, pathField) {
	m := pathPart.FindStringSubmatch(part)
	n = resolve(n)
	if m == nil || n == nil || n.Kind != yaml.MappingNode {
		return nil, pathField{}
	}
	f := pathField{name: m[1], indexed: m[2] != ""}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == f.name {
			f.key, f.val = n.Content[i], resolve(n.Content[i+1])
		}
	}
	if f.key != nil && f.indexed {
		idx, _ := strconv.Atoi(m[2])
		if f.val == nil || f.val.Kind != yaml.SequenceNode || idx >= len(f.val.Content) {
			f.val = nil
		} else {
			f.val = resolve(f.val.Content[idx])
		}
	}
	return n, f
}

// flatten lists the errors err joins (errors.Join, at any depth), or err.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		if e != nil {
			out = append(out, flatten(e)...)
		}
	}
	return out
}

// checkKnown reports mapping keys that t (a struct, through slices and
// pointers) has no yaml field for, and records in typos each mapping that
// holds one, with the known field each looks like ("" for none).
func (l *loader) checkKnown(n *yaml.Node, t reflect.Type, where string, depth int, typos map[*yaml.Node][]string) {
	n = resolve(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n == nil || depth > 16 {
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = t.Field(i).Type
				names = append(names, name)
			}
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			switch {
			case !ok:
				l.errf(k.Line, "unknown field %q in %s%s", k.Value, where, suggest(k.Value, names))
				typos[n] = append(typos[n], closest(k.Value, names))
			case seen[k.Value] > 0:
				l.errf(k.Line, "duplicate field %q in %s (first at line %d)", k.Value, where, seen[k.Value])
			default:
				seen[k.Value] = k.Line
				l.checkKnown(n.Content[i+1], ft, where+"."+k.Value, depth+1, typos)
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			l.checkKnown(e, t.Elem(), where+"["+strconv.Itoa(i)+"]", depth+1, typos)
		}
	}
}

var pathPart = regexp.MustCompile(`^([a-z0-9_]+)(?:\[(\d+)\])?$`)

// nodeAt finds the node a path such as "descriptors[1].entries[0].source"
// names under n (the value when it is a scalar or a list element, else its
// key); when only the last field of a path of several is missing, the
// mapping that lacks it, where a required field is wanted; else nil (a
// single word may be a package's name: "gateway: routes: ...").
func nodeAt(n *yaml.Node, path string) *yaml.Node {
	parts := strings.Split(path, ".")
	for pi, part := range parts {
		var f pathField
		if n, f = lookUp(n, part); n == nil {
			return nil
		}
		if f.key == nil {
			if pi > 0 && pi == len(parts)-1 && !f.indexed {
				return n
			}
			return nil
		}
		if f.indexed && f.val == nil {
			return f.key
		}
		if pi == len(parts)-1 {
			if f.val != nil && (f.val.Kind == yaml.ScalarNode || f.indexed) {
				return f.val
			}
			return f.key
		}
		n = f.val
	}
	return n
}
