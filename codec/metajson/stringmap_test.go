package metajson

import (
	"fmt"
	"reflect"
	"testing"
)

// StringMap makes the map Plain makes, its values in one allocation or
// one at a time: of a key given twice the last, escaped values, more
// values than one allocation takes, an empty object.
func TestStringMapIsPlainsMap(t *testing.T) {
	many := `{`
	for i := range stringMapBatch + 3 {
		many += fmt.Sprintf(`"k%d":"v%d",`, i, i)
	}
	many += `"k0":"last"}`
	for _, in := range []string{`{}`, `{"a":"1","b":"","a":"2"}`, `{"a":"1","b":"\u00e9","a":"3"}`, `{"a":"\n"}`, many,
		`{"app.kubernetes.io/name":"x","tier":"backend"}`} {
		var want map[string]string
		if err := Plain([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		got, err := NewDecoder([]byte(in), Options{}).StringMap()
		if err == ErrDecline {
			continue // Plain decodes it: allowed
		}
		if err != nil || !reflect.DeepEqual(got, want) || got == nil {
			t.Errorf("StringMap(%s) = %v, %v; Plain: %v", in, got, err, want)
		}
	}
}
