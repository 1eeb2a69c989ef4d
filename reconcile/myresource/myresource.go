// Package myresource is the MyResource-specific half of the controller, the
// Reconciler that package reconcile's generic Controller calls. It reads the
// object from the store, never modifies the cached copy, computes the status
// the object should have (a pure function, Desired), and writes it through
// the /status subresource only when it differs, so a re-run with nothing
// changed makes no request. It records a Kubernetes Event on a status write
// (EventPolicy).
package myresource

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// FailMessage is the spec.message that makes reconciliation fail on purpose.
const FailMessage = "fail"

// ErrRequestedFailure is returned for objects whose spec asks to fail.
var ErrRequestedFailure = errors.New(`spec.message is "fail": failing on purpose`)

// Event reasons the reconciler records.
const (
	ReasonProcessed = "Processed"
	ReasonFailed    = "ReconcileFailed"
)

// StatusWriter writes an object's status through the /status subresource.
type StatusWriter interface {
	UpdateStatus(ctx context.Context, obj *v1alpha1.MyResource) (*v1alpha1.MyResource, error)
}

// Getter reads an object by key (namespace/name) from a cache: this
// project's store.Store, or anything else that holds MyResources (the
// comparison harness backs it with an informer's indexer).
type Getter interface {
	Get(key string) (*v1alpha1.MyResource, bool)
}

// EventPolicy says which status writes the reconciler records an Event for.
type EventPolicy string

const (
	// EventsAll: every status write, a Normal Processed or a Warning
	// ReconcileFailed (the zero value means this too).
	EventsAll EventPolicy = "all"
	// EventsWarnings: only Warning ReconcileFailed; a success shows in the
	// status (phase Processed, condition Ready) and nowhere else.
	EventsWarnings EventPolicy = "warnings"
	// EventsNone: no Events.
	EventsNone EventPolicy = "none"
)

// ParseEventPolicy reads "all", "warnings" or "none".
func ParseEventPolicy(s string) (EventPolicy, error) {
	switch p := EventPolicy(s); p {
	case EventsAll, EventsWarnings, EventsNone:
		return p, nil
	}
	return "", fmt.Errorf("event policy %q: want all, warnings or none", s)
}

// Reconciler reconciles MyResources.
type Reconciler struct {
	Store    Getter
	Client   StatusWriter
	Recorder record.EventRecorder
	// Events says which writes get an Event (default EventsAll).
	Events EventPolicy
	// Now gives the time for condition transitions (default metav1.Now).
	Now func() metav1.Time
}

// Reconcile brings one key's status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	obj, exists := r.Store.Get(key)
	if !exists {
		return nil
	}

	desired := Desired(obj, r.now())
	if equality.Semantic.DeepEqual(obj.Status, desired) {
		return failure(desired) // nothing to write; a Failed object still retries
	}
	updated := obj.DeepCopy() // the cached object is shared: never modify it
	updated.Status = desired
	if _, err := r.Client.UpdateStatus(ctx, updated); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; its DELETED event is on its way
		}
		return fmt.Errorf("updating status of %s: %w", key, err)
	}
	klog.FromContext(ctx).V(2).Info("Status written", "phase", desired.Phase,
		"generation", obj.Generation, "resourceVersion", obj.ResourceVersion)
	switch {
	case r.Recorder == nil || r.Events == EventsNone:
	case desired.Phase == v1alpha1.PhaseFailed:
		r.Recorder.Event(obj, corev1.EventTypeWarning, ReasonFailed, desired.Message)
	case r.Events != EventsWarnings:
		r.Recorder.Eventf(obj, corev1.EventTypeNormal, ReasonProcessed, "Processed generation %d", obj.Generation)
	}
	return failure(desired)
}

// Deleted handles an object that left the cluster. The controller owns no
// other objects, so there is nothing to delete in turn: it logs the deletion
// with the last state it knew. A tombstone whose UID is the one in the store
// is no deletion (the object is back, as it was): nothing to do.
func (r *Reconciler) Deleted(ctx context.Context, d store.Delta[*v1alpha1.MyResource]) error {
	last := d.Object
	if obj, ok := r.Store.Get(d.Key); ok && obj.UID == last.UID {
		return nil
	}
	klog.FromContext(ctx).Info("MyResource deleted", "uid", last.UID,
		"lastResourceVersion", last.ResourceVersion, "lastPhase", last.Status.Phase,
		"finalStateUnknown", d.FinalStateUnknown)
	return nil
}

func failure(st v1alpha1.MyResourceStatus) error {
	if st.Phase == v1alpha1.PhaseFailed {
		return ErrRequestedFailure
	}
	return nil
}

// Desired is the status obj should have: a pure function of the object (and
// the clock, for a condition that changes). Conditions keep their
// lastTransitionTime when their status does not change, so Desired of an
// up-to-date object equals its current status.
func Desired(obj *v1alpha1.MyResource, now metav1.Time) v1alpha1.MyResourceStatus {
	st := *obj.Status.DeepCopy()
	st.ObservedGeneration = obj.Generation
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: obj.Generation, LastTransitionTime: now}
	if obj.Spec.Message == FailMessage {
		st.Phase = v1alpha1.PhaseFailed
		st.Message = ErrRequestedFailure.Error()
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonFailed, st.Message
	} else {
		st.Phase = v1alpha1.PhaseProcessed
		st.Message = obj.Spec.Message
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonProcessed, "processed generation "+fmt.Sprint(obj.Generation)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

func (r *Reconciler) now() metav1.Time {
	if r.Now != nil {
		return r.Now()
	}
	return metav1.Now()
}
