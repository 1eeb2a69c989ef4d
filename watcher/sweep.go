package watcher

import (
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecodeList reads a LIST response in JSON from r, as the loop reads its
// pages: each object decoded is given to add; each item that cannot be,
// to skip (with its key and UID when they could be read). For a caller
// that lists beside the loop (package sharding's sweep).
func DecodeList[T Object](r io.Reader, c Codec[T], add func(T), skip func(*SkipError)) (metav1.ListMeta, error) {
	return decodeList(r, c, add, skip)
}
