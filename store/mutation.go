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

// CheckMutations compares every object with the copy the mutation detector
// made of it as it was stored, and returns the first difference (nil
// without the detector). A program that runs the detector calls it now and
// then, as client-go's detector checks every second.
func (s *Store[T]) CheckMutations() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.detector.CheckAll(s.items)
}
