package sharding_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// listOnly is a Source that answers every LIST with page and no WATCH.
type listOnly struct{ page string }

func (l listOnly) List(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(l.page)), nil
}

func (l listOnly) Watch(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	return nil, errors.New("no watch")
}

const objHead = `"apiVersion":"example.com/v1alpha1","kind":"MyResource"`

// The sweep (app/sharding.go's handoff) with a listed item of the
// stored object's key and UID, undecodable because one metadata field has
// the wrong type: a skip reads the identity (name, namespace,
// resourceVersion, UID), so the sweep keeps the object the server lists
// (reporting it deleted would hand the new owner a spurious deletion).
func TestSweepKeepsAnObjectWhoseMetadataHasOneBadField(t *testing.T) {
	st := store.New[object]()
	var stored object
	if err := json.Unmarshal([]byte(`{`+objHead+`,"metadata":{"name":"a","namespace":"default","uid":"uid-a","resourceVersion":"3"},"spec":{"message":"x"}}`), &stored); err != nil {
		t.Fatal(err)
	}
	st.Upsert(stored)
	item := `{` + objHead + `,"metadata":{"name":"a","namespace":"default","uid":"uid-a","resourceVersion":"4","generation":"2"},"spec":{"message":"x"}}`
	page := `{"apiVersion":"example.com/v1alpha1","kind":"MyResourceList","metadata":{"resourceVersion":"20"},"items":[` + item + `]}`
	w := sharding.NewWatcher[object](listOnly{page}, st, watcher.Options[object]{Codec: codec}, nil)
	res, err := w.Sweep(context.Background(), shard.All())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) > 0 {
		var keys []string
		for _, d := range res.Deleted {
			keys = append(keys, d.Key)
		}
		t.Errorf("the sweep reported %v deleted; the list has default/a under the stored UID (undecodable: metadata.generation a string)", keys)
	}
}
