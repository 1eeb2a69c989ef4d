package watcher_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/store"
	"rawwatch/watcher"
)

// kinds is the kinds of srv's requests from the n-th on.
func kinds(srv *fakeapi.Server, n int) []string {
	var out []string
	for _, r := range srv.Requests()[n:] {
		out = append(out, r.Kind)
	}
	return out
}

// Relist cuts the WATCH in flight short and lists again, after its prepare
// ran on the loop's goroutine (here: a Filter that now refuses everything,
// so the relist empties the store); a prepare that says false withdraws
// it: the WATCH is made again, and nothing is listed.
func TestRelistCutsTheWatchAndListsAfterItsPrepare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeapi.New()
		for _, name := range []string{"a", "b"} {
			srv.Put("ns", name, "v0")
		}
		keepAll := true // the loop's goroutine only: Filter and prepare
		s := store.New[object]()
		w := watcher.New(srv, s, watcher.Options[object]{
			Codec:  watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind},
			Filter: func(object) bool { return keepAll },
		})
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		<-w.Synced()
		time.Sleep(time.Second) // the WATCH is open
		synctest.Wait()

		n := len(srv.Requests())
		w.Relist(func() bool { return false })
		time.Sleep(time.Second)
		synctest.Wait()
		if got := kinds(srv, n); len(got) != 1 || got[0] != "WATCH" {
			t.Errorf("after a withdrawn Relist, requests %v; want the WATCH again, no LIST", got)
		}

		n = len(srv.Requests())
		w.Relist(func() bool { keepAll = false; return true })
		time.Sleep(time.Second)
		synctest.Wait()
		if got := kinds(srv, n); len(got) != 2 || got[0] != "LIST" || got[1] != "WATCH" {
			t.Errorf("after a Relist, requests %v; want a LIST, then a WATCH", got)
		}
		if s.Len() != 0 {
			t.Errorf("the store holds %d objects after a relist whose prepare made the Filter refuse them all", s.Len())
		}
		if p := w.Position(); p.Lists != 2 || p.Since == "" {
			t.Errorf("position %+v after two lists", p)
		}
		cancel()
		<-done
	})
}
