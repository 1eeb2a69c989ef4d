package watcher_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
	"rawwatch/watcher"
	"rawwatch/wire"
)

// The whole loop against kube-apiserver's own answers, replayed from
// testdata/wire: with LIST (two pages at one continue token, then the WATCH
// from the list's resourceVersion, which delivers the changes made after it)
// and with WatchList (one stream), the store ends as the server was after
// the recording's writes, and the handler heard each change once.
func TestLoopOnRecordedAnswers(t *testing.T) {
	for _, watchList := range []bool{false, true} {
		t.Run(map[bool]string{false: "list", true: "watch-list"}[watchList], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				src, err := wire.NewReplay()
				if err != nil {
					t.Fatal(err)
				}
				s := store.New[object]()
				var deltas []string
				w := watcher.New(src, s, watcher.Options[object]{
					PageSize: 2, WatchList: watchList, Rand: func() float64 { return 0.5 },
					Codec:   watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind},
					Handler: func(d store.Delta[object]) { deltas = append(deltas, d.Type.String()+" "+d.Key) },
				})
				ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), funcr.New(func(string, string) {}, funcr.Options{})))
				done := make(chan struct{})
				go func() { w.Run(ctx); close(done) }()
				time.Sleep(time.Minute)
				synctest.Wait()
				cancel()
				<-done

				var got []string
				for _, o := range s.List() {
					got = append(got, o.Name+"="+o.Spec.Message)
				}
				sort.Strings(got)
				if want := "extra=created while watched,greeting=watched without informers,hello=hello again"; strings.Join(got, ",") != want {
					t.Errorf("store: %s; want %s", strings.Join(got, ","), want)
				}
				sort.Strings(deltas)
				if want := "Added default/broken,Added default/extra,Added default/greeting,Added default/hello,Deleted default/broken,Updated default/hello"; strings.Join(deltas, ",") != want {
					t.Errorf("deltas: %s; want %s", strings.Join(deltas, ","), want)
				}
			})
		})
	}
}
