package myresource

import corev1 "k8s.io/api/core/v1"

// UnreadAnnotations are annotations of a MyResource that Reconciler
// never reads, so the controller's cache need not keep them (see
// store.SetTransform and the --cache-drop-annotations flag).
//
// kubectl's last-applied-configuration is a copy of the whole object as its
// last client-side apply wrote it: for an object a human manages with
// kubectl apply, about as large again as the rest of the object. Like
// managedFields (which the store always drops), it is bookkeeping for the
// client that wrote it. A reconciler that comes to read an annotation must
// not list it here.
var UnreadAnnotations = []string{corev1.LastAppliedConfigAnnotation}
