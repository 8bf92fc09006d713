package sim

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNegativesUseOneMinus: the table writes a minus as U+2212 (the
// per-key column's "−0.0%", the header's "+/−"), and so does "vs ideal"
// for a contender that admits less than the ideal, in the text table and
// in the HTML one: it used to print fmt's hyphen-minus there (-2.5%).
func TestNegativesUseOneMinus(t *testing.T) {
	zero := int64(0)
	sc := &Scenario{
		Duration: sec(4), Limit: 10, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 20}},
		Contenders: []Contender{{Algorithm: "token_bucket", InitialTokens: &zero}},
	}
	res := run(t, sc)
	c := res.Contenders[0].Metrics.AdmittedUnits
	if ideal := res.Ideal.Metrics.AdmittedUnits; c >= ideal {
		t.Fatalf("an empty bucket admitted %d units, the ideal %d: want fewer", c, ideal)
	}
	hyphenNumber := regexp.MustCompile(`-[0-9]`)
	var b bytes.Buffer
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(b.String(), "\n\nadmitted units:")
	if !strings.Contains(table, " −") || hyphenNumber.MatchString(table) {
		t.Errorf("text table writes a negative with a hyphen-minus, or none with U+2212:\n%s", table)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, res); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	_, html, _ := strings.Cut(string(page), "<table>")
	html, _, _ = strings.Cut(html, "</table>")
	if !strings.Contains(html, "<td>−") || hyphenNumber.MatchString(html) {
		t.Errorf("HTML table writes a negative with a hyphen-minus, or none with U+2212:\n%s", html)
	}
}
