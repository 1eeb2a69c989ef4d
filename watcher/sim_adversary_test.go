package watcher_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/store"
	"rawwatch/watcher"
)

// restoredOnFirstWatch is a fake apiserver that restarts on an etcd restored
// from an older snapshot between the watcher's first LIST and its first
// WATCH: that WATCH is answered as kube-apiserver answers while a process
// that has just started installs its API groups (503 "before all known HTTP
// paths have been installed"), and from then on the server is the restored
// one.
type restoredOnFirstWatch struct {
	*fakeapi.Server
	snap fakeapi.State
	err  error
	mu   sync.Mutex
	done bool
	at   time.Time
}

func (r *restoredOnFirstWatch) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	r.mu.Lock()
	first := !r.done
	r.done = true
	r.mu.Unlock()
	if first {
		r.Server.Restore(r.snap, 0)
		r.mu.Lock()
		r.at = time.Now()
		r.mu.Unlock()
		return nil, r.err
	}
	return r.Server.Watch(ctx, opts)
}

func (r *restoredOnFirstWatch) restoredAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}

// From the review of c26aaf3 and 3cdac33 (written against 3cdac33; it holds since 70866c0, which counts only the relist of a server that said it had just started as made since it started): "time travel is still found at the first
// request that gets through". A list at resourceVersion R, then the server
// restarts on an etcd restored to before R, and the WATCH from R is
// answered 503 "paths not installed". The machine takes the list for one
// "made since the server started" (no stream opened since it) and WATCHes
// from R after the wait; the restored watch cache accepts a WATCH from the
// future and sends nothing, so the time travel is found only by the
// watchdog's probe, a silence limit (150 s) later. Meanwhile the store holds
// objects the server no longer has. Before 3cdac33 the wait led to the
// relist, which found it at once.
//
// The same with the watch cache's 429 "storage is (re)initializing": a
// restarted server says that too, and the list before it was not made
// since that server started.
func TestAdversaryTimeTravelBehindPathsMissingIsFoundAtOnce(t *testing.T) {
	for _, first := range []error{
		apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again"),
		apierrors.NewTooManyRequests("storage is (re)initializing", 1),
	} {
		t.Run(first.Error()[:20], func(t *testing.T) { timeTravelBehind(t, first) })
	}
}

func timeTravelBehind(t *testing.T, first error) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakeapi.New()
		srv.WatchCache = true
		for i := range 3 {
			srv.Put("ns", fmt.Sprintf("obj-%d", i), "before the snapshot")
		}
		snap := srv.Save()
		for i := range 3 {
			srv.Put("ns", fmt.Sprintf("born-%d", i), "after the snapshot")
		}
		src := &restoredOnFirstWatch{Server: srv, snap: snap, err: first}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), funcr.New(func(string, string) {}, funcr.Options{})))
		st := store.New[object]()
		w := watcher.New(src, st, watcher.Options[object]{Codec: watcher.Codec[object]{GVK: v1alpha1.GroupVersionKind}})
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		equal := func() bool {
			objs := srv.Objects()
			if st.Len() != len(objs) {
				return false
			}
			for k, o := range objs {
				if got, ok := st.Get(k); !ok || got.UID != o.UID {
					return false
				}
			}
			return true
		}
		start := time.Now()
		for src.restoredAt().IsZero() || !equal() {
			if time.Since(start) > 10*time.Minute {
				t.Fatal("the store never equalled the restored server")
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The first wait is at most Backoff.Initial; the request after it
		// (a relist, or a probe and then the relist) gets through.
		took := time.Since(src.restoredAt())
		if bound := watcher.DefaultBackoff.Initial + 5*time.Second; took > bound {
			t.Errorf("the store held %d objects the restored server does not have for %s after the restore "+
				"(hidden behind %q to the WATCH after the list); want the time travel found "+
				"at the first request after the %s wait, within %s", 3, took.Round(time.Second), first, watcher.DefaultBackoff.Initial, bound)
		}
	})
}

// From the review of 39b6e79 (it failed: 'the store fell 349 changes behind the server (3m0s into a fault of an ERROR after each event ...); want at most 120'; now a second such stream in a row relists: Machine.erroredOn): through a stream that breaks with an ERROR after each
// event (the scorecard's flap-error) while the resource changes steadily,
// every WATCH carries one change and the loop re-watches from it after the
// backoff (15 s to 30 s at the cap): it takes in 2 to 4 changes a minute,
// and falls further behind the server every minute the fault lasts. Before
// 39b6e79 each such ERROR relisted (after the backoff, once the first relist
// had been made), so the store was never more than one backoff wait of
// changes behind; client-go's informer relists too. Hold the store to that:
// at most the changes of two backoff caps behind, at every second of a
// three-minute fault.
func TestAdversaryErrorAfterEachEventKeepsUp(t *testing.T) {
	runSim(t, 3, watcher.Options[object]{}, func(s *sim) {
		s.breakStreams(fakeapi.ErrorAfterFirstEvent)
		const every = 500 * time.Millisecond
		bound := int64(2 * watcher.DefaultBackoff.Max / every)
		var worst int64
		var worstAt time.Duration
		for i := range int(3 * time.Minute / every) {
			s.srv.Put("ns", fmt.Sprintf("obj-%d", i%3), fmt.Sprintf("v%d", i))
			s.sleep(every)
			var have, at int64
			fmt.Sscan(s.w.ResourceVersion(), &have)
			fmt.Sscan(s.srv.ResourceVersion(), &at)
			if lag := at - have; lag > worst {
				worst, worstAt = lag, time.Duration(i+1)*every
			}
		}
		if worst > bound {
			s.t.Errorf("the store fell %d changes behind the server (%s into a fault of an ERROR after each event, "+
				"a change every %s; %d LISTs, %d WATCHes); want at most %d, two backoff caps of changes",
				worst, worstAt, every, s.count("LIST", s.start, time.Now()), s.count("WATCH", s.start, time.Now()), bound)
		}
	})
}
