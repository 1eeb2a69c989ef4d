package compare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// replayData builds a LIST body of n objects at resourceVersion 1, and a
// WATCH body of m MODIFIED events, round-robin over them, at RVs 2, 3, ...,
// split into its frames (each ends in its newline).
//
// The objects are shaped as kube-apiserver writes a custom resource that a
// chart created and a controller keeps the status of (replayObject), with
// the encoding of the recorded answers in testdata/wire: keys in sorted
// order (the server encodes a custom resource as a map) inside a
// WatchEvent's envelope ("type" first), times to the
// second, managedFields with fieldsV1 as the server builds them.
func replayData(n, m int) (list []byte, frames [][]byte) {
	items := make([]any, n)
	for i := range items {
		items[i] = replayObject(i, 1, 0)
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResourceList",
		"metadata": map[string]any{"resourceVersion": "1"}, "items": items})
	if err != nil {
		panic(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for e := range m {
		// The envelope is metav1.WatchEvent's (type first), the object a map.
		ev := struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}{"MODIFIED", replayObject(e%n, e+2, e/n+1)}
		if err := enc.Encode(ev); err != nil {
			panic(err)
		}
	}
	frames = bytes.SplitAfter(buf.Bytes(), []byte("\n"))
	return list, frames[:len(frames)-1] // the last split is empty
}

var replayEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// replayObject is object i at resourceVersion rv after its writes-th
// write: the odd writes change the spec (a new generation), the even ones
// the status the controller reports for it. Each object has labels and
// annotations of its own (a chart's: release, instance, tier), one or two
// ownerReferences, a finalizer, a Ready condition, and three managedFields
// entries: the chart's (metadata and spec), the controller's finalizer,
// and the controller's status (subresource status).
func replayObject(i, rv, writes int) map[string]any {
	name := objectName(i)
	app := fmt.Sprintf("app-%02d", i%40)
	created := replayEpoch.Add(time.Duration(i) * time.Second)
	at := func(d time.Duration) string { return created.Add(d).Format(time.RFC3339) }
	generation := 1 + (writes+1)/2
	owners := []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
		"uid": uid(1, i%40), "controller": true, "blockOwnerDeletion": true}}
	ownerFields := map[string]any{".": map[string]any{}, fmt.Sprintf(`k:{"uid":"%s"}`, uid(1, i%40)): map[string]any{}}
	if i%2 == 1 {
		owners = append(owners, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": app + "-config", "uid": uid(2, i%40)})
		ownerFields[fmt.Sprintf(`k:{"uid":"%s"}`, uid(2, i%40))] = map[string]any{}
	}
	labels := map[string]any{"app.kubernetes.io/name": app, "app.kubernetes.io/instance": name,
		"app.kubernetes.io/managed-by": "Helm", "tier": []string{"frontend", "backend", "cache"}[i%3]}
	annotations := map[string]any{"meta.helm.sh/release-name": "release-" + app, "meta.helm.sh/release-namespace": "bench",
		"example.com/revision": strconv.Itoa(generation)}
	fieldsOf := func(m map[string]any) map[string]any {
		f := map[string]any{".": map[string]any{}}
		for k := range m {
			f["f:"+k] = map[string]any{}
		}
		return f
	}
	observed := generation
	if writes%2 == 1 {
		observed-- // the spec just changed: the status is the last generation's
	}
	transition := at(time.Second)
	status := map[string]any{"phase": "Processed", "message": fmt.Sprintf("processed generation %d", observed), "observedGeneration": observed,
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration": observed,
			"message": fmt.Sprintf("generation %d reconciled", observed), "lastTransitionTime": transition}}}
	return map[string]any{
		"apiVersion": "example.com/v1alpha1", "kind": "MyResource",
		"metadata": map[string]any{
			"name": name, "namespace": "bench", "uid": uid(0, i), "resourceVersion": strconv.Itoa(rv), "generation": generation,
			"creationTimestamp": at(0), "labels": labels, "annotations": annotations, "ownerReferences": owners,
			"finalizers": []any{"example.com/cleanup"},
			"managedFields": []any{
				map[string]any{"apiVersion": "example.com/v1alpha1", "fieldsType": "FieldsV1", "manager": "helm", "operation": "Update",
					"time": at(time.Duration(max(writes-1, 0)) * time.Minute),
					"fieldsV1": map[string]any{
						"f:metadata": map[string]any{"f:annotations": fieldsOf(annotations), "f:labels": fieldsOf(labels), "f:ownerReferences": ownerFields},
						"f:spec":     map[string]any{".": map[string]any{}, "f:message": map[string]any{}}}},
				map[string]any{"apiVersion": "example.com/v1alpha1", "fieldsType": "FieldsV1", "manager": "rawwatch", "operation": "Update",
					"time":     at(time.Second),
					"fieldsV1": map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{".": map[string]any{}, `v:"example.com/cleanup"`: map[string]any{}}}}},
				map[string]any{"apiVersion": "example.com/v1alpha1", "fieldsType": "FieldsV1", "manager": "rawwatch", "operation": "Update",
					"subresource": "status", "time": at(time.Duration(writes)*time.Minute + time.Second),
					"fieldsV1": map[string]any{"f:status": map[string]any{".": map[string]any{}, "f:message": map[string]any{},
						"f:observedGeneration": map[string]any{}, "f:phase": map[string]any{},
						"f:conditions": map[string]any{".": map[string]any{}, `k:{"type":"Ready"}`: map[string]any{".": map[string]any{},
							"f:lastTransitionTime": map[string]any{}, "f:message": map[string]any{}, "f:observedGeneration": map[string]any{},
							"f:reason": map[string]any{}, "f:status": map[string]any{}, "f:type": map[string]any{}}}}}},
			},
		},
		"spec":   map[string]any{"message": fmt.Sprintf("%s, revision %d", app, generation)},
		"status": status,
	}
}

// uid is a version-4 UID, the kind-th of object i.
func uid(kind, i int) string { return fmt.Sprintf("6f1e9a1c-%04x-4000-8000-%012x", kind, i) }
