package codec

import (
	"bytes"
	"errors"
	"testing"

	"rawwatch/watcher"
)

// A frame broken inside managedFields breaks the stream, as it does for
// Kubernetes' decoder, also when MyResource's own decoder declines the
// object (a key given twice) and the frame is read by the envelope walk,
// which cuts managedFields out instead of decoding them.
func TestAFrameBrokenInsideManagedFieldsBreaksTheStream(t *testing.T) {
	for name, entry := range map[string]string{
		"tru":         `"x":tru`,
		"01":          `"x":01`,
		"1e":          `"x":1e`,
		"in fieldsV1": `"fieldsV1":{"f:spec":nul}`,
	} {
		for declined, spec := range map[bool]string{false: `{"message":"six"}`, true: `{"message":"five","message":"six"}`} {
			meta := `"metadata":{"name":"a","namespace":"ns","uid":"u-a","resourceVersion":"6",` +
				`"managedFields":[{"manager":"m","time":"2026-12-01T10:00:00Z"},{` + entry + `}]}`
			next := `{` + objHead + `,"metadata":{"name":"b","namespace":"ns","uid":"u-b","resourceVersion":"7"}}`
			stream := framedEvent(watcher.Modified, `{`+objHead+`,`+meta+`,"spec":`+spec+`}`) + framedEvent(watcher.Added, next)
			events := codec.DecodeEvents(bytes.NewReader([]byte(stream)))
			ev, err := events.Next()
			var skip *watcher.SkipError
			if err == nil || errors.As(err, &skip) {
				t.Errorf("%s in managedFields (declined by the type's decoder: %v): %v, %v; want the stream broken", name, declined, ev.Object, err)
			}
		}
	}
}
