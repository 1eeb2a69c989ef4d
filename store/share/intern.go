package share

import (
	"sync/atomic"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Intern replaces the strings every object of a namespace and type repeats
// (namespace, apiVersion, kind) by one shared copy each (package unique),
// instead of one copy per object as the JSON decoder made them.
func Intern(obj metav1.Object) {
	obj.SetNamespace(lastNamespace.intern(obj.GetNamespace()))
	if k, ok := obj.(interface{ GetObjectKind() schema.ObjectKind }); ok {
		if tm, ok := k.GetObjectKind().(*metav1.TypeMeta); ok {
			tm.APIVersion, tm.Kind = lastAPIVersion.intern(tm.APIVersion), lastKind.intern(tm.Kind)
		}
	}
}

// lastInterned remembers the string it interned last, for one field: a
// stream of one type in one namespace asks for the same three strings
// object after object, and comparing with the last one costs a fraction of
// unique.Make's lookup.
type lastInterned struct{ p atomic.Pointer[string] }

var lastNamespace, lastAPIVersion, lastKind lastInterned

func (l *lastInterned) intern(s string) string {
	if p := l.p.Load(); p != nil && *p == s {
		return *p
	}
	v := s
	if s != "" {
		v = unique.Make(s).Value()
	}
	l.p.Store(&v)
	return v
}
