package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrorClass is what the loop needs to know about an error: which way to go next.
type ErrorClass int

const (
	// NoError: the request or stream ended normally.
	NoError ErrorClass = iota
	// Canceled: our own context ended; the loop stops.
	Canceled
	// Expired: the resourceVersion (or continue token) we asked for is gone
	// from the server's history (410). Only a fresh LIST can help.
	Expired
	// TooLargeRV: the server has not caught up with the resourceVersion we
	// asked for (a lagging watch cache).
	TooLargeRV
	// Throttled: HTTP 429; the server may say how long to wait (Retry-After).
	Throttled
	// Denied: HTTP 401 or 403: credentials or RBAC are wrong; the loop logs
	// it loudly and backs off.
	Denied
	// Refused: HTTP 400, 405 or 422 (for a WatchList: a server without it).
	Refused
	// Transient: anything else (a refused or cut connection, 5xx, a timeout,
	// a broken stream): retry the same step.
	Transient
)

func (c ErrorClass) String() string {
	return [...]string{"none", "canceled", "expired", "too-large-rv", "throttled", "denied", "refused", "transient"}[c]
}

// Classify sorts err into an ErrorClass. retryAfter is the delay the server
// asked for, if any.
func Classify(err error) (class ErrorClass, retryAfter time.Duration) {
	if err == nil {
		return NoError, 0
	}
	if errors.Is(err, context.Canceled) {
		return Canceled, 0
	}
	if errors.As(err, new(*UnexpectedErrorObject)) {
		return Transient, 0 // whatever it says
	}
	if s, ok := apierrors.SuggestsClientDelay(err); ok {
		retryAfter = time.Duration(s) * time.Second
	}
	switch {
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return Expired, 0
	case isTooLargeRV(err):
		return TooLargeRV, retryAfter
	case apierrors.IsTooManyRequests(err):
		return Throttled, retryAfter
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return Denied, 0
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err):
		return Refused, 0
	}
	return Transient, retryAfter
}

// isTooLargeRV is client-go's Reflector's isTooLargeResourceVersionError:
// the Status's cause, or (older servers) a timeout whose message says so.
func isTooLargeRV(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) ||
		apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version")
}

// serverStarting reports whether err is kube-apiserver's word that it, or
// its watch cache, has just started (a 503 or a 429 with no cause of its
// own: the text is all there is): its history begins now, and a WATCH from
// an older resourceVersion meets 410 once anything was written.
func serverStarting(err error) bool {
	if err == nil || errors.As(err, new(*UnexpectedErrorObject)) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "storage is (re)initializing") ||
		strings.Contains(msg, "before all known HTTP paths have been installed")
}

// UnexpectedErrorObject is an ERROR event whose object is not a Status: an
// error of its own, which client-go retries whatever words it holds.
type UnexpectedErrorObject struct {
	Object string // as the stream carried it, cut short
	Err    error  // FromObject's
}

func (e *UnexpectedErrorObject) Error() string {
	return fmt.Sprintf("watch ERROR event without a Status (%v): %s", e.Err, e.Object)
}
