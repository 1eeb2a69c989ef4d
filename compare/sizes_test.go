package compare

import (
	"strings"
	"testing"
)

// The sizes report pairs each raw consumer with the informer that gets its
// state the same way, counts payload 0 in both places, and marks a consumer
// that failed its check.
func TestSizesReportRendersRatiosAndBothPlaces(t *testing.T) {
	r := &SizesReport{Objects: 10000}
	add := func(place string, payload int, kind string, perObject float64, ok bool) {
		r.Points = append(r.Points, SizePoint{Place: place, Payload: payload, Kind: kind, HeapPerObject: perObject, Correct: ok})
	}
	for _, k := range []string{KindRaw, KindInformerList} {
		add(PlaceOwn, 0, k, map[string]float64{KindRaw: 1000, KindInformerList: 1500}[k], true)
		add(PlaceOwn, 2048, k, map[string]float64{KindRaw: 3400, KindInformerList: 4000}[k], true)
		add(PlaceLastApplied, 2048, k, map[string]float64{KindRaw: 1000, KindInformerList: 4000}[k], k == KindRaw)
	}
	md := r.Markdown()
	for _, want := range []string{
		"| 0 B | 1000 B | 1500 B | 0.67 | – |", // payload 0, under the first place
		"| 2048 B | 3400 B | 4000 B | 0.85 | – |",
		"| 2048 B | 1000 B | 4000 B (FAILED its check) | 0.25 | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "| 0 B | 1000 B | 1500 B |"); n != 2 {
		t.Errorf("payload 0 appears in %d tables, want both", n)
	}
	svg := r.SVG()
	if n := strings.Count(svg, "<polyline"); n != 4 {
		t.Errorf("%d lines drawn, want 2 kinds × 2 places", n)
	}
	if !strings.Contains(svg, "in "+PlaceLastApplied) {
		t.Error("the chart does not name the last-applied panel")
	}
}
