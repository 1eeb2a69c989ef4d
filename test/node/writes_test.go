package node

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"rawwatch/internal/testkit"
)

var myresources = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "myresources"}

// statusWrites counts, from a watch of a namespace's MyResources resumed
// from its last event whenever the server ends it, the status writes each generation of each object got: an
// event whose status differs from the object's previous one is a write
// (nobody but the controller writes status). The controller writes a
// generation's status once; a second write of the same generation is an
// object reconciled twice (by two replicas, or by one that forgot).
type statusWrites struct {
	mu     sync.Mutex
	last   map[string]string // uid: status JSON
	writes map[string]int    // "uid generation": writes
	broken error
	cancel context.CancelFunc
	done   chan struct{}
}

func watchStatusWrites(t *testing.T, ns string) *statusWrites {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cluster.Config())
	ctx, cancel := context.WithCancel(context.Background())
	open := func(rv string) (watch.Interface, error) {
		return dyn.Resource(myresources).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	}
	w, err := open("")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &statusWrites{last: map[string]string{}, writes: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	fail := func(err error) {
		s.mu.Lock()
		s.broken = err
		s.mu.Unlock()
	}
	go func() {
		defer close(s.done)
		rv := ""
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					fail(fmt.Errorf("watch error: %v", ev.Object))
					return
				}
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type == watch.Bookmark {
					continue
				}
				st, _ := json.Marshal(u.Object["status"])
				uid := string(u.GetUID())
				s.mu.Lock()
				if ev.Type != watch.Deleted && u.Object["status"] != nil && s.last[uid] != string(st) {
					s.writes[fmt.Sprintf("%s %d", uid, u.GetGeneration())]++
				}
				s.last[uid] = string(st)
				s.mu.Unlock()
			}
			if ctx.Err() != nil {
				return
			}
			// The server ended the watch at its timeout: go on from the
			// last event, so no write is missed or counted twice.
			if w, err = open(rv); err != nil {
				fail(fmt.Errorf("watching again from %s: %v", rv, err))
				return
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *statusWrites) stop() {
	s.cancel()
	<-s.done
}

// twice are the object generations written more than once, and the number
// of generations written.
func (s *statusWrites) twice(t *testing.T) (twice []string, generations int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		t.Fatalf("counting status writes: %v", s.broken)
	}
	for k, n := range s.writes {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s: %d writes", k, n))
		}
	}
	sort.Strings(twice)
	return twice, len(s.writes)
}

// processedObjects makes a namespace, starts counting its status writes, and
// creates n MyResources (before-0...) there, waiting until each is
// reconciled.
func processedObjects(t *testing.T, n int) (string, *statusWrites) {
	t.Helper()
	ns := testkit.Namespace(t, cluster.Config())
	writes := watchStatusWrites(t, ns)
	testkit.Objects(t, mr, ns, "before", n)
	waitProcessed(t, ns, n, 2*time.Minute)
	return ns, writes
}
