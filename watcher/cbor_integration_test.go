package watcher_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"rawwatch/codec"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/store"
	"rawwatch/watcher"
)

// contentTypes records the Content-Type of every response a config's
// clients get.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *contentTypes) install(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	c.seen = map[string]int{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				c.mu.Lock()
				c.seen[resp.Header.Get("Content-Type")]++
				c.mu.Unlock()
			}
			return resp, err
		})
	})
	return cfg
}

func (c *contentTypes) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.seen)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Against kube-apiserver with CBORServingAndStorage on, a CBOR watcher
// lists in CBOR pages (application/cbor) and watches a CBOR Sequence
// (application/cbor-seq), and its store ends equal to a JSON watcher's and
// to the server, through creates, updates and deletes.
func TestCBORWireAgainstTheAPIServer(t *testing.T) {
	cp, ns, c := testkit.Start(t)
	api := testkit.APIServer(t, cp, "apiserver-cbor", controlplane.CBORGate)
	ctx := context.Background()
	testkit.Objects(t, c, ns, "obj", 40)

	var cborTypes, jsonTypes contentTypes
	var logs testkit.Logs
	viaCBOR := startWire(t, cborTypes.install(api.Config()), ns,
		watcher.Options[object]{PageSize: 7}, logs.Logger(0), codec.WireCBOR)
	viaJSON := start(t, jsonTypes.install(api.Config()), ns, watcher.Options[object]{PageSize: 7})
	// A WatchList over CBOR: the initial events and their closing bookmark
	// (annotated k8s.io/initial-events-end) come as CBOR frames.
	var watchListTypes contentTypes
	viaCBORWatchList := startWire(t, watchListTypes.install(api.Config()), ns,
		watcher.Options[object]{WatchList: true}, logs.Logger(0), codec.WireCBOR)

	for i := range 10 {
		testkit.Touch(t, c, ns, fmt.Sprintf("obj-%d", i))
	}
	for i := 10; i < 15; i++ {
		if err := c.Delete(ctx, ns, fmt.Sprintf("obj-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	last := testkit.Create(t, c, ns, "late", "after the list")
	for _, r := range []*running{viaCBOR, viaJSON, viaCBORWatchList} {
		testkit.Eventually(t, 30*time.Second, func() bool {
			o, ok := r.store.Get(ns + "/late")
			return ok && o.ResourceVersion == last.ResourceVersion
		}, "the last write did not reach the store")
		assertStoreMatchesServer(t, c, ns, r.store)
	}
	want := storeContents(viaJSON.store)
	for _, r := range []*running{viaCBOR, viaCBORWatchList} {
		if got := storeContents(r.store); !reflect.DeepEqual(got, want) {
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: CBOR store %+v, JSON store %+v", k, got[k], want[k])
				}
			}
			t.Errorf("the stores differ (%d and %d objects)", len(got), len(want))
		}
	}
	if got := watchListTypes.get(); len(got) != 1 || got["application/cbor-seq"] != 1 {
		t.Errorf("the CBOR WatchList's responses by Content-Type: %v, want one application/cbor-seq (no LIST)", got)
	}
	if viaCBOR.rec.Count(store.Updated) != viaJSON.rec.Count(store.Updated) || viaCBOR.rec.Count(store.Deleted) != 5 {
		t.Errorf("deltas: CBOR %d updated %d deleted, JSON %d updated %d deleted", viaCBOR.rec.Count(store.Updated),
			viaCBOR.rec.Count(store.Deleted), viaJSON.rec.Count(store.Updated), viaJSON.rec.Count(store.Deleted))
	}
	got := cborTypes.get()
	if got["application/cbor"] < 6 || got["application/cbor-seq"] < 1 || got["application/json"] > 0 {
		t.Errorf("the CBOR watcher's responses by Content-Type: %v; want its 6 LIST pages as application/cbor, the WATCH as application/cbor-seq, nothing in JSON", got)
	}
	if n := logs.Count("does not serve CBOR"); n != 0 {
		t.Errorf("the CBOR watcher fell back to JSON: %v", logs.Grep("CBOR"))
	}
	t.Logf("responses: CBOR watcher %v; JSON watcher %v", got, jsonTypes.get())
}

// Against kube-apiserver with the gate off (its default), a CBOR watcher
// gets JSON, says so once, and works as a JSON watcher.
func TestCBORWireFallsBackWithTheGateOff(t *testing.T) {
	cp, ns, c := testkit.Start(t)
	testkit.Objects(t, c, ns, "obj", 10)
	var types contentTypes
	var logs testkit.Logs
	r := startWire(t, types.install(cp.Config()), ns, watcher.Options[object]{PageSize: 3}, logs.Logger(0), codec.WireCBOR)
	testkit.Touch(t, c, ns, "obj-1")
	touched, err := c.Get(context.Background(), ns, "obj-1")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, ok := r.store.Get(ns + "/obj-1")
		return ok && o.ResourceVersion == touched.ResourceVersion
	}, "the update did not reach the store")
	assertStoreMatchesServer(t, c, ns, r.store)
	if n := logs.Count("does not serve CBOR"); n != 1 {
		t.Errorf("%d log lines about the fallback, want 1: %v", n, logs.Grep("CBOR"))
	}
	got := types.get()
	if got["application/json"] < 5 || got["application/cbor"]+got["application/cbor-seq"] > 0 {
		t.Errorf("responses by Content-Type: %v; want JSON only (4 pages and a WATCH)", got)
	}
	t.Logf("responses: %v; log: %v", got, logs.Grep("CBOR"))
}

// storeContents is what a store holds, by key, in a comparable form.
func storeContents(s *store.Store[object]) map[string]string {
	out := map[string]string{}
	for _, o := range s.List() {
		labels := make([]string, 0, len(o.Labels))
		for k, v := range o.Labels {
			labels = append(labels, k+"="+v)
		}
		slices.Sort(labels)
		out[store.KeyOf(o)] = fmt.Sprintf("%s %s %s gen=%d created=%s labels=%v spec=%+v status=%+v",
			o.APIVersion+"/"+o.Kind, o.UID, o.ResourceVersion, o.Generation, o.CreationTimestamp.UTC().Format(time.RFC3339), labels, o.Spec, o.Status)
	}
	return out
}
