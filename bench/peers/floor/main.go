// The burst floor: the least any controller could do for a burst of new Samples, in one compiled
// process that cannot be the bottleneck. It sends the bench's own creates (the same Sample bodies) and,
// for each Sample as soon as its create has answered, the three writes samplectl's contract needs:
// create the ConfigMap, create the Event, apply the status. The Sample's UID comes from the create's
// answer, so it reads and watches nothing. Keep-alive connections (client-go's HTTP/2), no client-side
// rate limit, and enough workers that the API server, not this process, sets the pace. With
// -creates-only it sends the creates alone: the burst a controller under test answers, from a client
// that costs the machine what the floor's own creates cost.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	samples    = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "samples"}
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	events     = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", "", "namespace to create the Samples in")
	count := flag.Int("count", 1000, "Samples to create")
	prefix := flag.String("prefix", "c-", "Sample names are this prefix and a 5-digit index")
	workers := flag.Int("workers", 32, "concurrent workers, each a create followed by the three writes")
	createsOnly := flag.Bool("creates-only", false, "send the creates alone, for a controller to answer")
	flag.Parse()
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "floor: -namespace is required")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	config.QPS, config.Burst = -1, 0 // no client-side rate limit
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}

	ctx := context.Background()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	started := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= *count {
					return
				}
				if err := one(ctx, client, *namespace, fmt.Sprintf("%s%05d", *prefix, i), *createsOnly); err != nil {
					if failed.Add(1) <= 5 {
						fmt.Fprintln(os.Stderr, "floor:", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	what := "Samples and their three writes"
	if *createsOnly {
		what = "Samples"
	}
	fmt.Printf("%d %s in %.3fs, %d failed\n", *count, what, time.Since(started).Seconds(), failed.Load())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}

func one(ctx context.Context, client dynamic.Interface, ns, name string, createsOnly bool) error {
	// The bench's sample_body(name, "value of " + name).
	value := "value of " + name
	sample := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1alpha1", "kind": "Sample",
		"metadata": map[string]any{"name": name}, "testString": value,
	}}
	created, err := client.Resource(samples).Namespace(ns).Create(ctx, sample, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create sample %s: %w", name, err)
	}
	if createsOnly {
		return nil
	}
	uid, generation := created.GetUID(), created.GetGeneration()
	owner := map[string]any{
		"apiVersion": "example.com/v1alpha1", "kind": "Sample", "name": name, "uid": string(uid),
		"controller": true, "blockOwnerDeletion": true,
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "ownerReferences": []any{owner},
			"labels": map[string]any{"app.kubernetes.io/managed-by": "samplectl", "samples.example.com/name": name},
		},
		"data": map[string]any{"testString": value},
	}}
	if _, err := client.Resource(configMaps).Namespace(ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: "floor"}); err != nil {
		return fmt.Errorf("create configmap %s: %w", name, err)
	}
	now := time.Now().UTC()
	event := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event",
		"metadata":  map[string]any{"name": fmt.Sprintf("%s.%016x", name, rand.Uint64()), "namespace": ns},
		"eventTime": now.Format("2006-01-02T15:04:05.000000Z"), "reportingController": "floor",
		"reportingInstance": "bench", "action": "Reconcile", "reason": "ConfigMapCreated",
		"note": fmt.Sprintf("ConfigMap %s created", name), "type": "Normal",
		"regarding": map[string]any{
			"apiVersion": "example.com/v1alpha1", "kind": "Sample", "name": name, "namespace": ns, "uid": string(uid),
		},
	}}
	if _, err := client.Resource(events).Namespace(ns).Create(ctx, event, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create event for %s: %w", name, err)
	}
	status := fmt.Appendf(nil, `{"apiVersion":"example.com/v1alpha1","kind":"Sample","metadata":{"name":%q,"namespace":%q},`+
		`"status":{"observedGeneration":%d,"conditions":[{"type":"Ready","status":"True","reason":"ConfigMapReady",`+
		`"message":"ConfigMap %s/%s holds testString","lastTransitionTime":%q,"observedGeneration":%d}]}}`,
		name, ns, generation, ns, name, now.Format(time.RFC3339), generation)
	force := true
	if _, err := client.Resource(samples).Namespace(ns).Patch(ctx, name, types.ApplyPatchType, status,
		metav1.PatchOptions{FieldManager: "floor", Force: &force}, "status"); err != nil {
		return fmt.Errorf("apply status of %s: %w", name, err)
	}
	return nil
}
