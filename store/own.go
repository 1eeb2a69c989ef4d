package store

import (
	"sync/atomic"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// own prepares an object the store takes ownership of, so that it costs as
// little memory as it can for as long as it is cached:
//
//   - managedFields go: server-side-apply bookkeeping, often the largest part
//     of an object, which a controller never reads;
//   - with share (Store.Share), the strings every object of a namespace and
//     type repeats (namespace, apiVersion, kind) are replaced by one shared
//     copy each (package unique), instead of one copy per object as the
//     JSON decoder made them.
func own[T Object](obj T, share bool) {
	obj.SetManagedFields(nil)
	if !share {
		return
	}
	obj.SetNamespace(lastNamespace.intern(obj.GetNamespace()))
	if k, ok := any(obj).(interface{ GetObjectKind() schema.ObjectKind }); ok {
		if tm, ok := k.GetObjectKind().(*metav1.TypeMeta); ok {
			tm.APIVersion, tm.Kind = lastAPIVersion.intern(tm.APIVersion), lastKind.intern(tm.Kind)
		}
	}
}

func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// lastInterned remembers the string intern gave last, for one field: a
// stream of one type in one namespace asks for the same three strings
// object after object, and comparing with the last one costs a fraction of
// unique.Make's lookup.
type lastInterned struct{ p atomic.Pointer[string] }

var lastNamespace, lastAPIVersion, lastKind lastInterned

func (l *lastInterned) intern(s string) string {
	if p := l.p.Load(); p != nil && *p == s {
		return *p
	}
	v := intern(s)
	l.p.Store(&v)
	return v
}

// DropAnnotations returns a transform (SetTransformKeepingLabels: it
// never changes labels) that deletes the
// annotations named by keys. The usual one is kubectl's
// last-applied-configuration: a copy of the whole object as its last client-side
// apply wrote it, often the largest part of an object a human manages with
// kubectl apply, and one no controller of the object needs.
func DropAnnotations[T Object](keys ...string) func(T) {
	return func(obj T) {
		a := obj.GetAnnotations()
		if len(a) == 0 {
			return
		}
		for _, k := range keys {
			delete(a, k)
		}
		if len(a) == 0 {
			obj.SetAnnotations(nil)
		}
	}
}
