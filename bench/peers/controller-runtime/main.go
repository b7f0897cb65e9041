// samplectl's reconcile contract (a ConfigMap per Sample, a Ready condition, events) written the way most
// operator authors would: controller-runtime over unstructured Samples, with its default settings. It is
// the benchmarks' peer, so it is written to be competent, not to lose: it reads from the informer cache,
// writes only what differs, and uses server-side apply like samplectl.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	fieldManager   = "samplectl-peer"
	managedByLabel = "app.kubernetes.io/managed-by"
	sampleLabel    = "samples.example.com/name"
	dataKey        = "testString"
	// The same label value as samplectl's: the peer implements the same contract, so either can take
	// over a namespace the other converged without rewriting anything.
	managedBy = "samplectl"
)

var sampleGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1alpha1", Kind: "Sample"}

type reconciler struct {
	client client.Client
	// The API server itself: the ConfigMap cache holds only labelled ConfigMaps, and a ConfigMap of that
	// name without the label must be found and left alone, as samplectl does.
	reader   client.Reader
	recorder record.EventRecorder
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sample := &unstructured.Unstructured{}
	sample.SetGroupVersionKind(sampleGVK)
	if err := r.client.Get(ctx, req.NamespacedName, sample); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sample.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	cmName := req.Namespace + "/" + req.Name
	ready, reason, message := true, "ConfigMapReady", fmt.Sprintf("ConfigMap %s holds testString", cmName)
	value, ok := "", true
	if raw, found := sample.Object[dataKey]; found && raw != nil {
		value, ok = raw.(string)
	}
	var applyErr error
	if !ok {
		ready, reason, message = false, "InvalidTestString", "testString must be a string"
	} else {
		existing, err := r.configMap(ctx, req)
		if err != nil {
			return ctrl.Result{}, err
		}
		switch {
		case existing != nil && !metav1.IsControlledBy(existing, sample):
			ready, reason = false, "ConfigMapConflict"
			message = fmt.Sprintf("ConfigMap %s exists and is not controlled by this Sample; samplectl leaves it alone", cmName)
		case existing == nil || !upToDate(existing, sample, value):
			if applyErr = r.client.Patch(ctx, desiredConfigMap(sample, value), client.Apply,
				client.FieldOwner(fieldManager), client.ForceOwnership); applyErr != nil {
				ready, reason, message = false, "ApplyFailed", fmt.Sprintf("cannot apply ConfigMap %s: %v", cmName, applyErr)
			} else if existing == nil {
				r.recorder.Eventf(sample, corev1.EventTypeNormal, "ConfigMapCreated", "ConfigMap %s created", req.Name)
			} else {
				r.recorder.Eventf(sample, corev1.EventTypeNormal, "ConfigMapUpdated", "ConfigMap %s updated", req.Name)
			}
		}
	}
	if err := r.writeStatus(ctx, sample, ready, reason, message); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, applyErr
}

func (r *reconciler) configMap(ctx context.Context, req ctrl.Request) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := r.client.Get(ctx, req.NamespacedName, cm)
	if apierrors.IsNotFound(err) {
		err = r.reader.Get(ctx, req.NamespacedName, cm)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cm, err
}

func desiredConfigMap(sample *unstructured.Unstructured, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      sample.GetName(),
			"namespace": sample.GetNamespace(),
			"labels":    map[string]any{managedByLabel: managedBy, sampleLabel: sample.GetName()},
			"ownerReferences": []any{map[string]any{
				"apiVersion":         sample.GetAPIVersion(),
				"kind":               sample.GetKind(),
				"name":               sample.GetName(),
				"uid":                string(sample.GetUID()),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"data": map[string]any{dataKey: value},
	}}
}

func upToDate(cm *corev1.ConfigMap, sample *unstructured.Unstructured, value string) bool {
	got, found := cm.Data[dataKey]
	return found && got == value && cm.Labels[sampleLabel] == sample.GetName() &&
		cm.Labels[managedByLabel] == managedBy
}

// writeStatus applies the Ready condition only when it differs from what the Sample already says, and
// keeps lastTransitionTime unless the condition's status flips.
func (r *reconciler) writeStatus(ctx context.Context, sample *unstructured.Unstructured, ready bool, reason, message string) error {
	status := "False"
	if ready {
		status = "True"
	}
	generation := sample.GetGeneration()
	transition := metav1.Now().UTC().Format(time.RFC3339)
	conditions, _, _ := unstructured.NestedSlice(sample.Object, "status", "conditions")
	observed, _, _ := unstructured.NestedInt64(sample.Object, "status", "observedGeneration")
	for _, c := range conditions {
		current, _ := c.(map[string]any)
		if current["type"] != "Ready" {
			continue
		}
		if current["status"] == status {
			if t, ok := current["lastTransitionTime"].(string); ok {
				transition = t
			}
			wanted := map[string]any{"status": status, "reason": reason, "message": message, "observedGeneration": generation}
			have := map[string]any{"status": current["status"], "reason": current["reason"], "message": current["message"],
				"observedGeneration": current["observedGeneration"]}
			if observed == generation && reflect.DeepEqual(wanted, have) {
				return nil
			}
		}
	}
	body := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sample.GetAPIVersion(),
		"kind":       sample.GetKind(),
		"metadata":   map[string]any{"name": sample.GetName(), "namespace": sample.GetNamespace()},
		"status": map[string]any{
			"observedGeneration": generation,
			"conditions": []any{map[string]any{
				"type": "Ready", "status": status, "reason": reason, "message": message,
				"lastTransitionTime": transition, "observedGeneration": generation,
			}},
		},
	}}
	if err := r.client.Status().Patch(ctx, body, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return err
	}
	if !ready {
		r.recorder.Event(sample, corev1.EventTypeWarning, reason, message)
	}
	return nil
}

func main() {
	namespace := flag.String("namespace", "", "reconcile Samples in this namespace only (default: all)")
	workers := flag.Int("workers", 0, "MaxConcurrentReconciles (0: controller-runtime's default, 1)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("peer")

	config := ctrl.GetConfigOrDie()
	cacheOptions := cache.Options{
		// Only the ConfigMaps this controller manages, as samplectl's watch does: caching every ConfigMap
		// in the cluster would charge the peer for objects it never reconciles.
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy})},
		},
	}
	if *namespace != "" {
		cacheOptions.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Cache: cacheOptions,
		// Off so that several peers and samplectl can run side by side; the benchmarks read the API
		// server's metrics, not the controller's.
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		log.Error(err, "cannot create the manager")
		os.Exit(1)
	}
	log.Info("client settings", "qps", config.QPS, "burst", config.Burst, "workers", *workers)

	sample := &unstructured.Unstructured{}
	sample.SetGroupVersionKind(sampleGVK)
	builder := ctrl.NewControllerManagedBy(mgr).For(sample).Owns(&corev1.ConfigMap{})
	if *workers > 0 {
		builder = builder.WithOptions(controller.Options{MaxConcurrentReconciles: *workers})
	}
	r := &reconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorderFor(fieldManager)}
	if err := builder.Complete(r); err != nil {
		log.Error(err, "cannot create the controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
