package store

import "rawwatch/store/share"

// own prepares an object the store takes: its managedFields go (often the
// largest part, which a controller never reads); with Share, its strings
// are interned.
func own[T Object](obj T, shared bool) {
	obj.SetManagedFields(nil)
	if shared {
		share.Intern(obj)
	}
}

// DropAnnotations returns a transform that deletes the annotations named
// by keys and never changes labels (SetTransformKeepingLabels), such as
// kubectl's last-applied-configuration: a copy of the whole object.
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
