package metajson

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkTime holds Decoder.Time to metav1.Time.UnmarshalJSON on the JSON
// string of inside s: the same time.Time, to the bit (location pointer and
// no monotonic reading included), or a decline where that one fails.
func checkTime(t *testing.T, s string) {
	t.Helper()
	data := []byte(`"` + s + `"`)
	var want metav1.Time
	werr := want.UnmarshalJSON(data)
	var got metav1.Time
	d := NewDecoder(data, Options{})
	if err := d.Whole(func() error { return d.Time(&got) }); err != nil {
		return // declined: UnmarshalJSON decides
	}
	if werr != nil {
		t.Fatalf("Time took %q, which metav1.Time refuses: %v", s, werr)
	}
	if got.Time != want.Time || got.Location() != want.Location() {
		t.Fatalf("Time(%q) = %#v, metav1.Time %#v", s, got.Time, want.Time)
	}
	if ut, ok := utcSeconds([]byte(s)); ok {
		if pt, err := time.Parse(time.RFC3339, s); err != nil || ut != pt {
			t.Fatalf("utcSeconds(%q) = %#v, time.Parse %#v, %v", s, ut, pt, err)
		}
	}
}

var times = []string{
	"2026-12-01T00:00:00Z", "2026-12-01T23:59:59Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
	"2024-02-29T12:00:00Z", "2000-02-29T12:00:00Z", "1900-02-29T12:00:00Z", "2023-02-29T12:00:00Z",
	"2026-04-31T00:00:00Z", "2026-12-32T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z",
	"2026-12-00T00:00:00Z", "2026-12-01T24:00:00Z", "2026-12-01T00:60:00Z", "2026-12-01T00:00:60Z",
	"2026-12-01T00:00:00z", "2026-12-01t00:00:00Z", "2026-12-01 00:00:00Z", "2026-12-01T00:00:00.5Z",
	"2026-12-01T02:00:00+02:00", "2026-12-01T00:00:00", "+026-12-01T00:00:00Z", "2026-1a-01T00:00:00Z",
	"2026-12-01T00:00:0/Z", "2026-12-01T00:00:00ZZ", "",
}

func TestTimeAgreesWithMetav1(t *testing.T) {
	for _, s := range times {
		checkTime(t, s)
	}
	// Every day of every month, and one beyond, in leap and common years.
	for _, y := range []int{0, 4, 1900, 2000, 2023, 2024, 2100, 9999} {
		for mo := 0; mo <= 13; mo++ {
			for day := 0; day <= 32; day++ {
				checkTime(t, fmt.Sprintf("%04d-%02d-%02dT23:59:59Z", y, mo, day))
			}
		}
	}
	// The fast path must take what Kubernetes writes.
	if _, ok := utcSeconds([]byte("2026-12-01T10:00:00Z")); !ok {
		t.Error("utcSeconds declined a UTC time of whole seconds")
	}
}

// FuzzTime searches for a time string Decoder.Time reads otherwise than
// metav1.Time:
//
//	go test ./codec/metajson -run '^$' -fuzz FuzzTime -fuzztime 1m
func FuzzTime(f *testing.F) {
	for _, s := range times {
		f.Add(s)
	}
	f.Fuzz(checkTime)
}
