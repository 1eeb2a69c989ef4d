package store

import "rawwatch/store/detect"

// DetectMutations turns the mutation detector (package detect) on for this
// store, whatever the environment says. Call it before the store is first
// written.
func (s *Store[T]) DetectMutations() {
	if s.detector == nil {
		s.detector = detect.New[T](true)
	}
}

// DetectsMutations tells whether the store runs the mutation detector.
func (s *Store[T]) DetectsMutations() bool { return s.detector != nil }

// CheckMutations returns the first object that differs from the detector's
// copy of it (nil without the detector). Call it now and then.
func (s *Store[T]) CheckMutations() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.detector.CheckAll(s.items)
}
