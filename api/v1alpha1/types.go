package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phases a MyResource moves through, as written to status.phase.
const (
	// PhasePending: not reconciled yet (the zero value shown before the first status write).
	PhasePending = ""
	// PhaseProcessed: the controller handled the current generation successfully.
	PhaseProcessed = "Processed"
	// PhaseFailed: reconciling the current generation failed; the controller retries with backoff.
	PhaseFailed = "Failed"
)

// ConditionReady is the condition type the controller maintains in status.conditions.
const ConditionReady = "Ready"

// MyResourceSpec is the desired state, written by users.
type MyResourceSpec struct {
	// Message is an arbitrary text the controller echoes into status.
	// The value "fail" makes reconciliation fail on purpose (to show retries).
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message"`
}

// MyResourceStatus is the observed state, written only by the controller through /status.
type MyResourceStatus struct {
	// Phase is Processed or Failed.
	// +optional
	// +kubebuilder:validation:Enum="";Processed;Failed
	Phase string `json:"phase,omitempty"`
	// Message says what the controller did, or why it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions holds the Ready condition.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// MyResource is the custom resource this controller watches.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,path=myresources,singular=myresource,shortName=myr
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MyResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:Required
	Spec   MyResourceSpec   `json:"spec"`
	Status MyResourceStatus `json:"status,omitempty"`
}

// MyResourceList is the response to a LIST of MyResources.
//
// +kubebuilder:object:root=true
type MyResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MyResource `json:"items"`
}
