package watcher

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whether an error means an expired resourceVersion, or one the server has
// not reached, is client-go's Reflector's to say (isExpiredError,
// isTooLargeResourceVersionError): by the Status's reason and code, never
// by the words of its message alone.
func TestClassifyFindsExpiryAndTooLargeAsTheReflectorDoes(t *testing.T) {
	status := func(code int32, reason metav1.StatusReason, message string, causes ...metav1.CauseType) error {
		s := metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}
		for _, c := range causes {
			if s.Details == nil {
				s.Details = &metav1.StatusDetails{}
			}
			s.Details.Causes = append(s.Details.Causes, metav1.StatusCause{Type: c})
		}
		return &apierrors.StatusError{ErrStatus: s}
	}
	const old, large = "too old resource version: 5 (9)", "Too large resource version: 9, current: 5"
	for _, err := range []error{
		status(410, metav1.StatusReasonExpired, old),
		status(410, metav1.StatusReasonGone, "gone"),
		status(500, metav1.StatusReasonExpired, "expired"),
		status(410, "", "a bare 410"),
		status(410, "SomethingNew", "a reason of a later server"),
		status(410, metav1.StatusReasonNotFound, "a known reason, another code"),
		status(500, metav1.StatusReasonInternalError, old),
		status(503, metav1.StatusReasonServiceUnavailable, "etcd: "+old),
		errors.New("watch ERROR: " + old),
		fmt.Errorf("wrapped: %w", status(410, metav1.StatusReasonExpired, old)),
		status(504, metav1.StatusReasonTimeout, large, metav1.CauseTypeResourceVersionTooLarge),
		status(504, metav1.StatusReasonTimeout, large),
		status(500, metav1.StatusReasonInternalError, large),
		status(429, metav1.StatusReasonTooManyRequests, "slow", metav1.CauseTypeResourceVersionTooLarge),
		errors.New(large),
	} {
		expired := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		tooLarge := apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) ||
			apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version")
		class, _ := Classify(err)
		if (class == Expired) != expired || !expired && (class == TooLargeRV) != tooLarge {
			code := 0
			var s apierrors.APIStatus
			if errors.As(err, &s) {
				code = int(s.Status().Code)
			}
			t.Errorf("%q (%d %s): class %s; the Reflector finds it expired %v, too large %v",
				err, code, http.StatusText(code), class, expired, tooLarge)
		}
	}
}
