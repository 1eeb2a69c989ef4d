package sharding

import (
	"fmt"
	"slices"
	"testing"
)

// A fuzz test of the queue's invariants. Each input byte string is read as
// a program of operations, run against the real queue and against a model
// that states the rules in the simplest way; after every operation the two
// must agree. The seed corpus is in testdata/fuzz/; to search longer:
//
//	go test ./sharding -run '^$' -fuzz FuzzDeletionsFirst -fuzztime 5m

// A queue ordered by DeletionsFirst, single-threaded, against a model of
// its rules: a key waits at most once; a key being processed is never
// handed out; a key added while processed comes back exactly once after
// Done; keys come out in the order they became dirty, those with a
// deletion before all others (its worker takes the deletion: Get clears it).
func FuzzDeletionsFirst(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		q := newOrdered()
		var first, order []string // model: dirty keys waiting, in order
		dirty, processing, urgent := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, op := range data {
			key := fmt.Sprint("k", op/4%6)
			switch op % 4 {
			case 0: // Add
				q.Add(key)
				if !dirty[key] {
					dirty[key] = true
					if !processing[key] {
						order = append(order, key)
					}
				}
			case 1: // a deletion
				q.deleted(key)
				if urgent[key] {
					break
				}
				urgent[key] = true
				if dirty[key] && !processing[key] {
					order = slices.DeleteFunc(order, func(k string) bool { return k == key })
				}
				if !processing[key] {
					first = append(first, key)
				}
				dirty[key] = true
			case 2: // Get, when the model says one is ready (Get would block otherwise)
				if len(first)+len(order) == 0 {
					continue
				}
				want := &order
				if len(first) > 0 {
					want = &first
				}
				got, shutdown := q.get()
				if shutdown || got != (*want)[0] {
					t.Fatalf("Get = %q (shutdown %v), model says %q (first %v, then %v)", got, shutdown, (*want)[0], first, order)
				}
				if processing[got] {
					t.Fatalf("%s handed out while being processed", got)
				}
				*want = (*want)[1:]
				processing[got], dirty[got], urgent[got] = true, false, false
			case 3: // Done, for the key the byte names if it is being processed
				if !processing[key] {
					continue
				}
				q.Done(key)
				delete(processing, key)
				switch {
				case urgent[key]:
					first = append(first, key)
				case dirty[key]:
					order = append(order, key)
				}
			}
			if q.Len() != len(first)+len(order) {
				t.Fatalf("queue length %d, model %d (%v, then %v)", q.Len(), len(first)+len(order), first, order)
			}
		}
		q.ShutDown()
		if _, shutdown := q.Get(); !shutdown {
			t.Fatal("Get after ShutDown must report shutdown")
		}
		before := q.Len()
		for key := range processing {
			q.Add(key)
			q.deleted(key)
			q.Done(key)
		}
		if q.Len() != before {
			t.Fatalf("%d keys queued after the last Done, %d before: a key came back after ShutDown", q.Len(), before)
		}
	})
}
