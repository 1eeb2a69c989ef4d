package store

import "rawwatch/store/share"

// own prepares an object the store takes ownership of: its managedFields
// go (server-side-apply bookkeeping, often the largest part of an object,
// which a controller never reads); with Share, its repeated strings are
// interned (share.Intern).
func own[T Object](obj T, shared bool) {
	obj.SetManagedFields(nil)
	if shared {
		share.Intern(obj)
	}
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
