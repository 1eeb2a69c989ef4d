package ring

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"rawwatch/internal/openfinding"
)

// A leaving mark written by anyone but the holder (an operator who
// annotates a live member's Lease as the collector would, with its
// renewTime) must not make two members work one slot: the holder does
// not read its own mark, and works on until its fence. b is cut off from
// the server just after the mark (its renewals fail): it fences itself
// 3.5 s after its last renewal, and a must not Work b's slots before.
func TestALeavingMarkWrittenOnALiveMemberSplitsNoBrain(t *testing.T) {
	openfinding.Skip(t)
	now := epoch
	client, a, b := pair(t, &now, "a", "b")
	ctx := klog.NewContext(context.Background(), klog.Background())
	cut, acting := false, "" // b's requests fail while cut
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cut && acting == "b" {
			return true, nil, apierrors.NewInternalError(errors.New("cut off"))
		}
		return false, nil, nil
	})
	step := func(when string) {
		for _, m := range []*Member{a, b} {
			acting = m.cfg.Identity
			m.round(ctx, klog.Background())
			acting = ""
			noSplit(t, when, a, b)
			now = now.Add(10 * time.Millisecond)
		}
		now = now.Add(renew - 20*time.Millisecond)
	}
	for range 20 {
		step("a and b join")
	}
	divided(t, a, b)
	leases := client.CoordinationV1().Leases("ns")
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[AnnotationLeaving] = mark(l.Spec.RenewTime.Time) // as the collector writes it
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cut = true
	start := now
	for range 10 {
		step(fmt.Sprintf("%s after an operator marked b's live Lease leaving, b cut off", now.Sub(start)))
	}
}
