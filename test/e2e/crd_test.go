package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
)

// The CRD's OpenAPI schema (generated from the Go markers) rejects bad input
// at the API server, before any controller sees it.
func TestSchemaRejectsInvalidMyResources(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	cases := map[string]*v1alpha1.MyResource{
		"empty message":    testkit.New(ns, "empty", ""),
		"message too long": testkit.New(ns, "long", strings.Repeat("x", 257)),
	}
	for name, obj := range cases {
		_, err := c.Create(ctx, obj)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want 422 Invalid", name, err)
		}
	}
	// Objects the Go type could not even express, as raw JSON. Each error
	// must name the field at fault.
	for name, tc := range map[string]struct{ body, field string }{
		"missing spec":    {`{"metadata":{"name":"nospec"}}`, "spec"},
		"message number":  {`{"metadata":{"name":"number"},"spec":{"message":17}}`, "spec.message"},
		"message null":    {`{"metadata":{"name":"null"},"spec":{"message":null}}`, "spec.message"},
		"spec is a list":  {`{"metadata":{"name":"list"},"spec":["message"]}`, "spec"},
		"uppercase name":  {`{"metadata":{"name":"NotDNS"},"spec":{"message":"hi"}}`, "metadata.name"},
		"status phase":    {`{"metadata":{"name":"phase"},"spec":{"message":"hi"},"status":{"phase":"Exploded"}}`, ""},
		"unknown, strict": {`{"metadata":{"name":"strict"},"spec":{"message":"hi","colour":"red"}}`, "colour"},
	} {
		body := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource",` + tc.body[1:]
		req := c.REST().Post().Namespace(ns).Resource(v1alpha1.Resource).Body([]byte(body)).
			SetHeader("Content-Type", "application/json")
		if name == "unknown, strict" {
			req = req.Param("fieldValidation", "Strict") // kubectl apply --validate=strict
		}
		err := req.Do(ctx).Error()
		switch {
		case name == "status phase":
			// status is not writable on create: it is dropped, not rejected.
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case name == "unknown, strict":
			if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.colour"`) {
				t.Errorf("%s: got %v, want 400 naming the unknown field", name, err)
			}
		case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field):
			t.Errorf("%s: got %v, want 422 naming %s", name, err, tc.field)
		}
	}
	if o, err := c.Get(ctx, ns, "phase"); err != nil || o.Status.Phase != "" {
		t.Errorf("status sent on create: %v, phase %q; want it dropped", err, o.Status.Phase)
	}
	// Without strict validation an unknown field is pruned, never stored.
	raw := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"pruned"},"spec":{"message":"hi","colour":"red"}}`
	stored, err := c.REST().Post().Namespace(ns).Resource(v1alpha1.Resource).Body([]byte(raw)).
		SetHeader("Content-Type", "application/json").Do(ctx).Raw()
	if err != nil || strings.Contains(string(stored), "colour") {
		t.Errorf("unknown field without strict validation: %v; stored %s", err, stored)
	}

	// The status is validated through /status too.
	ok := testkit.Create(t, c, ns, "ok", "fine")
	for name, mutate := range map[string]func(*v1alpha1.MyResource){
		"phase outside the enum": func(o *v1alpha1.MyResource) { o.Status.Phase = "Exploded" },
		"message too long":       func(o *v1alpha1.MyResource) { o.Status.Message = strings.Repeat("x", 1025) },
		"condition status":       func(o *v1alpha1.MyResource) { o.Status.Conditions = []metav1.Condition{badCondition("Maybe")} },
		"duplicate condition": func(o *v1alpha1.MyResource) {
			o.Status.Conditions = []metav1.Condition{badCondition("True"), badCondition("False")}
		},
	} {
		bad := ok.DeepCopy()
		mutate(bad)
		if _, err := c.UpdateStatus(ctx, bad); !apierrors.IsInvalid(err) {
			t.Errorf("status with %s: got %v, want 422", name, err)
		}
	}
}

func badCondition(status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionReady, Status: status, Reason: "Test", Message: "m",
		LastTransitionTime: metav1.Now()}
}

// kubectl get shows PHASE, MESSAGE and AGE: the server's Table view lists them.
func TestPrinterColumns(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	testkit.Create(t, c, ns, "cols", "x")
	body, err := c.REST().Get().Namespace(ns).Resource(v1alpha1.Resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range table.ColumnDefinitions {
		names = append(names, strings.ToUpper(col.Name))
	}
	if got := strings.Join(names, ","); got != "NAME,PHASE,MESSAGE,AGE" {
		t.Errorf("columns = %s, want NAME,PHASE,MESSAGE,AGE", got)
	}
}
