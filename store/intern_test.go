package store

import (
	"fmt"
	"sync"
	"testing"

	"rawwatch/api/v1alpha1"
)

// own's last-string check is shared by every store in the process (sharded
// replicas, the comparison harness): stores upserting objects of different
// namespaces at once each keep their own objects' namespaces (run with -race).
func TestStoresInterningAtOnceEachKeepTheirObjectsNamespaces(t *testing.T) {
	const stores, objects = 4, 500
	var wg sync.WaitGroup
	res := make([]*Store[*v1alpha1.MyResource], stores)
	for s := range stores {
		res[s] = shared()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range objects {
				res[s].Upsert(obj(fmt.Sprintf("ns-%d-%d", s, i%3), fmt.Sprint(i), "1"))
			}
		}()
	}
	wg.Wait()
	for s, st := range res {
		for i := range objects {
			o, ok := st.Get(fmt.Sprintf("ns-%d-%d/%d", s, i%3, i))
			if !ok {
				t.Fatalf("store %d lost object %d", s, i)
			}
			if o.Namespace != fmt.Sprintf("ns-%d-%d", s, i%3) {
				t.Fatalf("store %d object %d: namespace %q", s, i, o.Namespace)
			}
		}
	}
}
