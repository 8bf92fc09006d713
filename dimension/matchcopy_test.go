package dimension

import (
	"net/http/httptest"
	"testing"
)

// An Extractor is immutable: changing the Spec's MatchSpec after
// NewExtractor changes nothing it extracts (it shared the caller's
// pointer).
func TestExtractorKeepsItsOwnMatch(t *testing.T) {
	m := &MatchSpec{Exact: "GET"}
	x, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{{Entries: []EntrySpec{
		{Source: "method", Key: "is_get", Value: "yes", Match: m},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	m.Exact = "POST"
	ds, err := x.Descriptors(httptest.NewRequest("GET", "/", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || len(ds[0].Entries) != 1 || ds[0].Entries[0] != (Entry{Key: "is_get", Value: "yes"}) {
		t.Errorf("GET after the caller changed its MatchSpec to POST: %+v, want [{is_get yes}]", ds)
	}
}
