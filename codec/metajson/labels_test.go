package metajson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// readLabels reads text as the labels of an object: with c (nil: none), in
// the decoder d, after a prefix, with more text after the labels.
func readLabels(d *Decoder, c *LabelCache, text string) (map[string]string, error) {
	data := []byte(`{"labels":` + text + `,"after":{"x":"}"}}`)
	d.Reset(data, Options{Labels: c})
	var m map[string]string
	err := d.Object(func(key []byte) (err error) {
		if string(key) == "labels" {
			m, err = d.labels()
			return err
		}
		_, err = d.Skip()
		return err
	})
	return m, err
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

var labelTexts = []string{
	`{"app":"x"}`, `{"app":"x","tier":"web"}`, `{ "app" : "x" }`, `{}`,
	`{"app":"x\"}{"}`, `{"app":"caf\u00e9"}`, `{"app":"x","app":"y"}`, `{"app":"` + "\xff" + `"}`,
	`{"a\u0070p":"x"}`, `{"` + "\xff" + `":"x"}`, `{"app":1}`, `{"app":null}`, `{"app":"x",}`,
	`{"big":"` + strings.Repeat("b", labelCacheMax) + `"}`,
}

// A LabelCache gives a labels object written as the last one read the same
// map, and what it gives is always what StringMap makes (and encoding/json
// into a map): every text after every other, each twice, alternating.
func TestLabelCacheGivesWhatStringMapMakes(t *testing.T) {
	var c LabelCache
	var d, fresh Decoder
	for _, a := range labelTexts {
		for _, b := range labelTexts {
			var prev map[string]string
			for i, text := range []string{a, a, b, a, b, b} {
				got, err := readLabels(&d, &c, text)
				want, werr := readLabels(&fresh, nil, text)
				if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
					t.Fatalf("%q after %q: cache %v (%v), StringMap %v (%v)", text, a, got, err, want, werr)
				}
				if werr == nil {
					var plain map[string]string
					if Plain([]byte(text), &plain) != nil || !reflect.DeepEqual(plain, want) {
						t.Fatalf("%q: StringMap %v, encoding/json %v", text, want, plain)
					}
				}
				repeated := i > 0 && text == []string{a, a, b, a, b, b}[i-1]
				if err == nil && repeated && len(text) <= labelCacheMax && !sameMap(got, prev) {
					t.Errorf("%q read twice in a row: two maps", text)
				}
				if err == nil && !repeated && i > 0 && prev != nil && sameMap(got, prev) {
					t.Errorf("%q after another text: the last text's map", text)
				}
				prev = got
			}
		}
	}
}

// Labels read from the cache cost no allocation; labels too long for it
// are not kept.
func TestLabelCacheHit(t *testing.T) {
	var c LabelCache
	var d Decoder
	text := `{"app":"compare","tier":"web"}`
	first, _ := readLabels(&d, &c, text)
	data := []byte(text)
	if n := testing.AllocsPerRun(100, func() {
		d.Reset(data, Options{Labels: &c})
		if m, err := d.labels(); err != nil || !sameMap(m, first) {
			t.Fatalf("%v %v", m, err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per labels read from the cache", n)
	}
	big := `{"big":"` + strings.Repeat("b", labelCacheMax) + `"}`
	readLabels(&d, &c, big)
	if len(c.text) > labelCacheMax || !sameMap(c.m, first) {
		t.Errorf("the cache kept %d bytes (%v its last map)", len(c.text), sameMap(c.m, first))
	}
	var m map[string]string
	if json.Unmarshal([]byte(big), &m) != nil || len(m["big"]) != labelCacheMax {
		t.Fatal("bad test text")
	}
}

// The text a LabelCache keeps is bounded by its room, not by what append's
// growth makes of it: labels of 2,200 bytes, then of labelCacheMax, left a
// buffer of 5,376 bytes.
func TestLabelCacheHoldsAtMostItsBound(t *testing.T) {
	var c LabelCache
	var d Decoder
	for _, n := range []int{100, 2200, 3000, labelCacheMax, 500, labelCacheMax} {
		text := `{"b":"` + strings.Repeat("b", n-len(`{"b":""}`)) + `"}`
		if _, err := readLabels(&d, &c, text); err != nil || len(c.text) != n {
			t.Fatalf("%d bytes of labels: %v, kept %d", n, err, len(c.text))
		}
		if cap(c.text) > labelCacheMax {
			t.Fatalf("after labels of %d bytes the cache holds %d bytes of text, more than its %d", n, cap(c.text), labelCacheMax)
		}
	}
}
