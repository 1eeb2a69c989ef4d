package queue

import (
	"fmt"
	"testing"
)

// A fuzz test of the queue's invariants. Each input byte string is read as
// a program of operations, run against the real queue and against a model
// that states the rules in the simplest way; after every operation the two
// must agree. The seed corpus is in testdata/fuzz/; to search longer:
//
//	go test ./queue -run '^$' -fuzz FuzzQueue -fuzztime 5m

// The queue, single-threaded, against a model of its rules: a key waits at
// most once; a key being processed is never handed out; a key added while
// processed comes back exactly once after Done; keys come out in the order
// they became dirty.
func FuzzQueue(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		q := New(nil)
		var order []string // model: dirty keys waiting, in order
		dirty, processing := map[string]bool{}, map[string]bool{}
		for _, op := range data {
			key := fmt.Sprint("k", op/4%6)
			switch op % 4 {
			case 0, 1: // Add, or AddAfter without a delay (an Add)
				if op%4 == 0 {
					q.Add(key)
				} else {
					q.AddAfter(key, 0)
				}
				if !dirty[key] {
					dirty[key] = true
					if !processing[key] {
						order = append(order, key)
					}
				}
			case 2: // Get, when the model says one is ready (Get would block otherwise)
				if len(order) == 0 {
					continue
				}
				got, shutdown := q.Get()
				if shutdown || got != order[0] {
					t.Fatalf("Get = %q (shutdown %v), model says %q (of %v)", got, shutdown, order[0], order)
				}
				if processing[got] {
					t.Fatalf("%s handed out while being processed", got)
				}
				order = order[1:]
				processing[got], dirty[got] = true, false
			case 3: // Done, for the key the byte names if it is being processed
				if !processing[key] {
					continue
				}
				q.Done(key)
				delete(processing, key)
				if dirty[key] {
					order = append(order, key)
				}
			}
			if q.Len() != len(order) {
				t.Fatalf("queue length %d, model %d (%v)", q.Len(), len(order), order)
			}
		}
		q.ShutDown()
		if _, shutdown := q.Get(); !shutdown {
			t.Fatal("Get after ShutDown must report shutdown")
		}
		before := q.Len()
		for key := range processing {
			q.Add(key)
			q.Done(key)
		}
		if q.Len() != before {
			t.Fatalf("%d keys queued after the last Done, %d before: a key came back after ShutDown", q.Len(), before)
		}
	})
}
