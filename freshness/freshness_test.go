package freshness_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/freshness"
	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/watcher"
)

// heartbeat is the probe's object as a WATCH event carries it.
func heartbeat(t0 time.Time) watcher.Received {
	obj := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "probe",
		Annotations: map[string]string{freshness.Annotation: t0.Format(time.RFC3339Nano)}}}
	return watcher.Received{Type: "MODIFIED", Key: "ns/probe", Arrived: t0.Add(10 * time.Millisecond), Object: obj}
}

func TestProbeTimesEachHeartbeatOnceThroughEveryStage(t *testing.T) {
	var got []string
	p := &freshness.Probe{Key: "ns/probe", Observer: observe.Func(func(e observe.Event) {
		if m, ok := e.(freshness.Measured); ok {
			got = append(got, fmt.Sprintf("%s@%s", m.Stage, m.Written.Format("05")))
		}
	})}
	base := time.Now().Add(-time.Minute).Truncate(time.Minute)
	t0, t1 := base.Add(1*time.Second), base.Add(2*time.Second)

	// A reconcile that started before the heartbeat reached the store read
	// the old object: its end says nothing about t0.
	p.Observe(reconcile.Started{Key: "ns/probe"})
	p.Observe(heartbeat(t0))
	p.Observe(reconcile.Finished{Key: "ns/probe"})
	// Another key's reconcile, a failed one, then the right one.
	p.Observe(reconcile.Started{Key: "ns/other"})
	p.Observe(reconcile.Finished{Key: "ns/other"})
	p.Observe(reconcile.Started{Key: "ns/probe"})
	p.Observe(reconcile.Finished{Key: "ns/probe", Err: errors.New("conflict")})
	p.Observe(reconcile.Started{Key: "ns/probe"})
	p.Observe(reconcile.Finished{Key: "ns/probe"})
	// A relist hands the same heartbeat again; a later reconcile: nothing new.
	p.Observe(heartbeat(t0))
	p.Observe(reconcile.Started{Key: "ns/probe"})
	p.Observe(reconcile.Finished{Key: "ns/probe"})
	// Other objects and unreadable annotations are not heartbeats.
	other := heartbeat(t1)
	other.Key = "ns/other"
	p.Observe(other)
	bad := heartbeat(t1)
	bad.Object.SetAnnotations(map[string]string{freshness.Annotation: "yesterday"})
	p.Observe(bad)
	// The next heartbeat.
	p.Observe(heartbeat(t1))

	want := "[event@01 store@01 reconcile@01 event@02 store@02]"
	if fmt.Sprint(got) != want {
		t.Errorf("measured %v, want %v", got, want)
	}
}

func TestProbeEventStageIsTheFrameArrival(t *testing.T) {
	var took = map[freshness.Stage]time.Duration{}
	p := &freshness.Probe{Key: "ns/probe", Observer: observe.Func(func(e observe.Event) {
		if m, ok := e.(freshness.Measured); ok {
			took[m.Stage] = m.Took
		}
	})}
	t0 := time.Now().Add(-time.Second)
	p.Observe(heartbeat(t0))
	if took[freshness.Event] != 10*time.Millisecond {
		t.Errorf("event took %v, want the 10ms between write and arrival", took[freshness.Event])
	}
	if took[freshness.Store] < time.Second {
		t.Errorf("store took %v, want at least the second since the write", took[freshness.Store])
	}
}

// A server that fails every write gets one heartbeat per interval, no more.
func TestProbeWritesOncePerIntervalWhateverTheServerSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		writes, beats := 0, 0
		p := &freshness.Probe{Key: "ns/probe", Interval: 10 * time.Second,
			Write: func(context.Context, time.Time) error { writes++; return errors.New("500") },
			Observer: observe.Func(func(e observe.Event) {
				if b, ok := e.(freshness.Beat); ok && b.Err != nil {
					beats++
				}
			})}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute+time.Second)
		defer cancel()
		p.Run(ctx)
		if writes != 7 || beats != 7 {
			t.Errorf("%d writes (%d failed beats reported) in a minute at a 10 s interval, want 7", writes, beats)
		}
	})
}

// A write the server never answers is given up after WriteTimeout (or an
// interval, if longer): the heartbeats go on.
func TestProbeGivesUpAHungWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		writes := 0
		p := &freshness.Probe{Key: "ns/probe", Interval: time.Second,
			Write: func(ctx context.Context, _ time.Time) error { writes++; <-ctx.Done(); return ctx.Err() }}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.Run(ctx)
		if want := int(time.Minute / freshness.WriteTimeout); writes < want-1 || writes > want+1 {
			t.Errorf("%d writes in a minute of writes that hang, want about %d", writes, want)
		}
	})
}
