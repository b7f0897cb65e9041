// The beginner's first controller that samplectl grew out of, kept as the benchmarks' baseline: every
// second, list every Sample in all namespaces and print index, namespace and name. Nothing more.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the kubeconfig file")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := dynamic.NewForConfigOrDie(config)
	samples := schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "samples"}
	for {
		list, err := client.Resource(samples).Namespace(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		} else {
			for i, item := range list.Items {
				fmt.Printf("%d\t%s\t%s\n", i, item.GetNamespace(), item.GetName())
			}
		}
		time.Sleep(time.Second)
	}
}
