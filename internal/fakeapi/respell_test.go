package fakeapi

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"rawwatch/api/v1alpha1"
)

// Every spelling of Respell is, to Kubernetes' decoding (metav1.WatchEvent
// and the object through sigs.k8s.io/json, case-sensitive), the frame or
// page it respells (an ERROR's Status says the same: its code, reason and
// message; a fieldsV1, kept as raw JSON, the same JSON), and is one line;
// and each differs from it.
func TestRespelledFramesReadAsTheOriginalToKubernetes(t *testing.T) {
	s := New()
	s.Put("ns", "a", "hello")
	s.Put("ns", "a", "again")
	obj := s.Objects()["ns/a"]
	for _, f := range [][]byte{frame("ADDED", obj), frame("MODIFIED", obj), frame("DELETED", obj), bookmark(9, true), bookmark(10, false),
		errorFrame(410, metav1.StatusReasonExpired, "too old resource version")} {
		want := kubernetesEvent(t, f)
		for n := range 5 {
			r := respell(f, n)
			if bytes.Equal(r, f) || bytes.IndexByte(r[:len(r)-1], '\n') >= 0 || r[len(r)-1] != '\n' {
				t.Errorf("spelling %d of %s: %q, not another line", n, f, r)
			}
			if got := kubernetesEvent(t, r); !reflect.DeepEqual(got, want) {
				t.Errorf("spelling %d of %s reads as %+v, want %+v", n, f, got, want)
			}
		}
	}
	for _, cont := range []string{"", "7:2"} {
		for rv := range int64(2) {
			plain, _ := listBody(100+rv, []*v1alpha1.MyResource{obj}, cont, func(*v1alpha1.MyResource) bool { return false }, false)
			respelled, _ := listBody(100+rv, []*v1alpha1.MyResource{obj}, cont, func(*v1alpha1.MyResource) bool { return false }, true)
			p, r := kubernetesList(t, plain), kubernetesList(t, respelled)
			if !reflect.DeepEqual(p, r) || len(r.Items) != 1 {
				t.Errorf("a page respelled (continue %q) reads as %+v, want %+v", cont, r, p)
			}
		}
	}
}

// event is a watch event as client-go reads it: its type and its object.
type event struct {
	Type   string
	Object any
}

func kubernetesEvent(t *testing.T, f []byte) event {
	t.Helper()
	var ev metav1.WatchEvent
	if err := kjson.UnmarshalCaseSensitivePreserveInts(f, &ev); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	if ev.Type == "ERROR" {
		var st metav1.Status
		if err := kjson.UnmarshalCaseSensitivePreserveInts(ev.Object.Raw, &st); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		return event{ev.Type, [3]any{st.Code, st.Reason, st.Message}}
	}
	var obj v1alpha1.MyResource
	if err := kjson.UnmarshalCaseSensitivePreserveInts(ev.Object.Raw, &obj); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	sameFields(t, &obj)
	return event{ev.Type, obj}
}

// sameFields writes obj's fieldsV1 in one spelling of their JSON.
func sameFields(t *testing.T, obj *v1alpha1.MyResource) {
	t.Helper()
	for _, e := range obj.ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		var v any
		if err := json.Unmarshal(e.FieldsV1.Raw, &v); err != nil {
			t.Fatal(err)
		}
		e.FieldsV1.Raw, _ = json.Marshal(v)
	}
}

func kubernetesList(t *testing.T, body io.ReadCloser) v1alpha1.MyResourceList {
	t.Helper()
	data, _ := io.ReadAll(body)
	var l v1alpha1.MyResourceList
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &l); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	for i := range l.Items {
		sameFields(t, &l.Items[i])
	}
	return l
}
