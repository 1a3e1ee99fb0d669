// Command bindclient makes the per-pod writes of a scheduler and nothing else, with
// kube-scheduler's own client: client-go at the release go.mod pins, protobuf request
// bodies (kube-scheduler's clientConnection.contentType default) multiplexed over HTTP/2,
// a goroutine per pod (kube-scheduler binds each pod in a goroutine of its own), and the
// Scheduled event as kube-scheduler writes it (events.k8s.io/v1). For every pod read from
// standard input it POSTs the Binding and then the event; it prints the wall time from
// the first request to the last answer. benchmarks/bench_vs_kube_scheduler.py
// (--ceiling) drives it to measure the API server's ceiling for these writes; nothing
// here is shipped.
//
//	bindclient -kubeconfig FILE -namespace NS -nodes N [-qps 5000] <pods
//
// Each line of standard input is "NAME UID"; pod i is bound to node-(i mod N). A write
// that gets no answer (a connection reset under load) or a 429/5xx is tried again, up to
// 5 times, as a scheduler would retry it; a Binding answered 409, or an event answered
// AlreadyExists, on a second try was written by the first. It prints one JSON line:
// {"seconds": ..., "pods": ..., "failures": ..., "retries": ..., "error": "the first"}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig file")
	namespace := flag.String("namespace", "", "the pods' namespace")
	nodes := flag.Int("nodes", 1, "pod i is bound to node-(i mod nodes)")
	qps := flag.Float64("qps", 5000, "client-side QPS and burst")
	component := flag.String("component", "bench-ceiling", "the events' reportingController")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	config.QPS = float32(*qps)
	config.Burst = int(*qps)
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.UserAgent = "bindclient"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	var pods [][2]string
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		if fields := strings.Fields(scanner.Text()); len(fields) == 2 {
			pods = append(pods, [2]string{fields[0], fields[1]})
		}
	}
	ctx := context.Background()
	ns := *namespace
	// the connection is open before the clock starts, as a running scheduler's is
	if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		fail(err)
	}
	var (
		group    sync.WaitGroup
		lock     sync.Mutex
		failures int
		first    string
		retries  atomic.Int64
	)
	// write tries again what got no answer or a 429/5xx; done says an error on a later
	// try means the first went through
	write := func(call func() error, done func(error) bool) error {
		var err error
		for attempt := 1; attempt <= 5; attempt++ {
			if err = call(); err == nil || (attempt > 1 && done(err)) {
				return nil
			}
			status, ok := err.(apierrors.APIStatus)
			if ok && status.Status().Code != 429 && status.Status().Code < 500 {
				return err
			}
			retries.Add(1)
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		return err
	}
	start := time.Now()
	for i, pod := range pods {
		group.Add(1)
		go func(i int, name, uid string) {
			defer group.Done()
			node := fmt.Sprintf("node-%d", i%*nodes)
			binding := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid)},
				Target:     corev1.ObjectReference{Kind: "Node", Name: node},
			}
			err := write(func() error {
				return client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{})
			}, apierrors.IsConflict)
			if err == nil {
				now := metav1.NowMicro()
				event := &eventsv1.Event{
					ObjectMeta: metav1.ObjectMeta{
						Name:      fmt.Sprintf("%s.%x", name, now.UnixNano()),
						Namespace: ns,
					},
					EventTime:           now,
					ReportingController: *component,
					ReportingInstance:   *component + "-bindclient",
					Action:              "Binding",
					Reason:              "Scheduled",
					Regarding: corev1.ObjectReference{
						Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(uid),
					},
					Note: fmt.Sprintf("Successfully assigned %s/%s to %s", ns, name, node),
					Type: corev1.EventTypeNormal,
				}
				err = write(func() error {
					_, err := client.EventsV1().Events(ns).Create(ctx, event, metav1.CreateOptions{})
					return err
				}, apierrors.IsAlreadyExists)
			}
			if err != nil {
				lock.Lock()
				failures++
				if first == "" {
					first = err.Error()
				}
				lock.Unlock()
			}
		}(i, pod[0], pod[1])
	}
	group.Wait()
	elapsed := time.Since(start).Seconds()
	out := map[string]any{
		"seconds": elapsed, "pods": len(pods), "failures": failures,
		"retries": retries.Load(), "error": first,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bindclient:", err)
	os.Exit(1)
}
