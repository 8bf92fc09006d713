package policy

import (
	"errors"
	"fmt"
	"testing"
)

// TestSectionProblemsAtTheirLines: a registered section's problems are
// each reported at the line of their field, several joined with
// errors.Join all reported, in file order, and a missing field at the line
// of the entry that lacks it.
func TestSectionProblemsAtTheirLines(t *testing.T) {
	type item struct {
		Name string `yaml:"name"`
		Size int    `yaml:"size"`
	}
	RegisterSection("gadgets", func(decode func(any) error) (any, error) {
		var s struct {
			Limit int    `yaml:"limit"`
			Items []item `yaml:"items"`
		}
		if err := decode(&s); err != nil {
			return nil, err
		}
		var errs []error
		for i, it := range s.Items {
			if it.Name == "" {
				errs = append(errs, fmt.Errorf("items[%d].name: missing", i))
			}
			if it.Size < 0 {
				errs = append(errs, fmt.Errorf("items[%d].size: must be >= 0, got %d", i, it.Size))
			}
		}
		if s.Limit < 0 {
			errs = append(errs, fmt.Errorf("limit: must be >= 0, got %d", s.Limit))
		}
		return &s, errors.Join(errs...)
	})
	t.Cleanup(func() {
		sectionsMu.Lock()
		delete(sections, "gadgets")
		sectionsMu.Unlock()
	})
	body := "domain: d\n" +
		"gadgets:\n" +
		"  items:\n" +
		"    - name: a\n" + // 4
		"      size: -1\n" + // 5
		"    - size: 2\n" + // 6: no name
		"    - {size: -3}\n" + // 7: no name, bad size
		"  limit: -2\n" // 8
	want := "g.yaml:5: gadgets: items[0].size: must be >= 0, got -1\n" +
		"g.yaml:6: gadgets: items[1].name: missing\n" +
		"g.yaml:7: gadgets: items[2].name: missing\n" +
		"g.yaml:7: gadgets: items[2].size: must be >= 0, got -3\n" +
		"g.yaml:8: gadgets: limit: must be >= 0, got -2"
	if _, err := Parse("g.yaml", []byte(body)); err == nil || err.Error() != want {
		t.Errorf("Parse:\n got %v\nwant %s", err, want)
	}
	// An unknown field does not hide the others' problems, but one that
	// may follow from it (the missing name it looks like) is left out.
	body = "domain: d\n" +
		"gadgets:\n" +
		"  items:\n" +
		"    - nmae: a\n" + // 4
		"      size: -1\n" + // 5
		"    - size: 2\n" + // 6: no name
		"  limit: -2\n" // 7
	want = "g.yaml:4: unknown field \"nmae\" in gadgets.items[0] (did you mean \"name\"?)\n" +
		"g.yaml:5: gadgets: items[0].size: must be >= 0, got -1\n" +
		"g.yaml:6: gadgets: items[1].name: missing\n" +
		"g.yaml:7: gadgets: limit: must be >= 0, got -2"
	if _, err := Parse("g.yaml", []byte(body)); err == nil || err.Error() != want {
		t.Errorf("Parse with an unknown field:\n got %v\nwant %s", err, want)
	}
}
