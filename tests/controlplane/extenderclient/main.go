// Command extenderclient calls a scheduler extender with kube-scheduler's own client, the
// HTTPExtender of k8s.io/kubernetes/pkg/scheduler at the release go.mod pins: the transport
// kube-scheduler builds (utilnet.SetTransportDefaults, one connection kept alive and closed
// after 90 s idle), the JSON it marshals, the decoding of the answer. The wall time a call
// takes here is the wall time kube-scheduler sees, with the cost of the client it has and
// of no other. benchmarks/bench_extender.py drives it; nothing here is shipped.
//
//	extenderclient -url https://127.0.0.1:8443/ -https -payload payload.json
//
// The payload file holds {"pod": Pod, "nodes": [Node, ...]}: the pod being scheduled and
// the nodes whose NodeInfos are passed to Filter and Prioritize (names only are sent when
// -node-cache-capable, as kube-scheduler does). Once it has read them the process writes
// "ready" and waits for one line per call on its standard input: the verbs to call, in
// order ("filter prioritize" is one pod; "baseline" is a Filter to the benchmark's route
// that answers {} without the extender's work). For each line it writes one JSON line, a
// list of {verb, wall, cpu, waited, reused, proto, names, error}: the call's wall time in
// seconds (marshalling the arguments, the HTTP exchange and decoding the answer, as Filter
// and Prioritize do), the CPU time of this process meanwhile (getrusage: it does nothing
// else), the longest any of its threads waited for a core (schedstat), whether the request
// went over a connection already open, the protocol, how many nodes the answer named. It
// is idle between calls, as kube-scheduler's process is between pods.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type payload struct {
	Pod   v1.Pod    `json:"pod"`
	Nodes []v1.Node `json:"nodes"`
}

// answer is what one call cost, as this process saw it.
type answer struct {
	Verb   string  `json:"verb"`
	Wall   float64 `json:"wall"`
	CPU    float64 `json:"cpu"`
	Waited float64 `json:"waited"`
	Reused bool    `json:"reused"`
	Proto  string  `json:"proto"`
	Names  int     `json:"names"`
	Error  string  `json:"error,omitempty"`
}

// traced is kube-scheduler's transport with the connection each request got noted
// (httptrace's GotConn) and the protocol of its answer: HTTPExtender builds its requests
// itself, so the trace is attached on their way through.
type traced struct {
	inner  http.RoundTripper
	reused bool
	proto  string
}

func (t *traced) RoundTrip(request *http.Request) (*http.Response, error) {
	trace := &httptrace.ClientTrace{GotConn: func(got httptrace.GotConnInfo) { t.reused = got.Reused }}
	response, err := t.inner.RoundTrip(request.WithContext(httptrace.WithClientTrace(request.Context(), trace)))
	if response != nil {
		t.proto = response.Proto
	}
	return response, err
}

// clientOf is where an HTTPExtender keeps its http.Client, to itself: kube-scheduler never
// reaches it; the benchmark traces its transport, and shares it with the baseline.
func clientOf(extender fwk.Extender) **http.Client {
	field := reflect.ValueOf(extender).Elem().FieldByName("client")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*http.Client]() {
		log.Fatalf("%T has no client *http.Client field: is go.mod's k8s.io/kubernetes newer than this program?", extender)
	}
	return (**http.Client)(unsafe.Pointer(field.UnsafeAddr()))
}

// cpuSeconds is the CPU time (user and system) this process has spent.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

// threadWaits is how long each of this process's threads has waited for a core, in
// seconds by thread id (/proc/self/task/*/schedstat, second field); empty where the
// kernel does not say.
func threadWaits() map[string]float64 {
	tasks, _ := filepath.Glob("/proc/self/task/*/schedstat")
	waits := make(map[string]float64, len(tasks))
	for _, task := range tasks {
		stats, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		if fields := strings.Fields(string(stats)); len(fields) >= 2 {
			if nanoseconds, err := strconv.ParseFloat(fields[1], 64); err == nil {
				waits[filepath.Base(filepath.Dir(task))] = nanoseconds / 1e9
			}
		}
	}
	return waits
}

// longestWait is the most any one thread waited for a core between two threadWaits. A
// call's goroutines hop between threads, and some threads (the runtime's spinning ones)
// wait off the call's path, so a sum would count waits the call never had.
func longestWait(before, after map[string]float64) float64 {
	longest := 0.0
	for thread, waited := range after {
		longest = max(longest, waited-before[thread])
	}
	return longest
}

func main() {
	url := flag.String("url", "", "the extender's urlPrefix, e.g. https://127.0.0.1:8443/")
	https := flag.Bool("https", false, "enableHTTPS, with tlsConfig.insecure (a self-signed certificate)")
	payloadFile := flag.String("payload", "", "JSON file: {\"pod\": Pod, \"nodes\": [Node, ...]}")
	nodeCacheCapable := flag.Bool("node-cache-capable", true, "nodeCacheCapable: send node names only")
	filterVerb := flag.String("filter-verb", "filter", "filterVerb")
	prioritizeVerb := flag.String("prioritize-verb", "prioritize", "prioritizeVerb")
	fresh := flag.Bool("fresh", false, "close the idle connection after every call: each call dials (and handshakes) anew")
	idleTimeout := flag.Duration("idle-conn-timeout", 0, "the transport's IdleConnTimeout; 0 keeps kube-scheduler's (90s)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the calls to this file")
	flag.Parse()
	if *url == "" || *payloadFile == "" {
		flag.Usage()
		os.Exit(2)
	}

	raw, err := os.ReadFile(*payloadFile)
	if err != nil {
		log.Fatal(err)
	}
	var given payload
	if err := json.Unmarshal(raw, &given); err != nil {
		log.Fatalf("%s: %v", *payloadFile, err)
	}
	nodes := make([]fwk.NodeInfo, len(given.Nodes))
	for i := range given.Nodes {
		info := framework.NewNodeInfo()
		info.SetNode(&given.Nodes[i])
		nodes[i] = info
	}
	raw = nil
	// The heap as a running scheduler's: what decoding the payload left collected now,
	// not in the first call.
	runtime.GC()

	// manifests/extender/kube-scheduler-config.yaml's entry, but for the TLS config: the
	// benchmark's certificate is a throwaway self-signed one.
	config := &schedulerapi.Extender{
		URLPrefix:        *url,
		FilterVerb:       *filterVerb,
		PrioritizeVerb:   *prioritizeVerb,
		Weight:           2,
		NodeCacheCapable: *nodeCacheCapable,
		Ignorable:        true,
		HTTPTimeout:      metav1.Duration{Duration: 2 * time.Second},
		EnableHTTPS:      *https,
	}
	if *https {
		config.TLSConfig = &schedulerapi.ExtenderTLSConfig{Insecure: true}
	}
	extender, err := scheduler.NewHTTPExtender(config)
	if err != nil {
		log.Fatal(err)
	}
	// The benchmark's baseline route reads the body and answers {}: the same exchange,
	// over the same transport, without the extender's work.
	baselineConfig := *config
	baselineConfig.FilterVerb = "baseline"
	baseline, err := scheduler.NewHTTPExtender(&baselineConfig)
	if err != nil {
		log.Fatal(err)
	}
	client := *clientOf(extender)
	*clientOf(baseline) = client
	transport, ok := client.Transport.(*http.Transport)
	if !ok {
		log.Fatalf("kube-scheduler's extender transport is a %T, not an *http.Transport", client.Transport)
	}
	if *idleTimeout > 0 {
		transport.IdleConnTimeout = *idleTimeout
	}
	trace := &traced{inner: transport}
	client.Transport = trace

	calls := map[string]func() (int, error){
		"filter": func() (int, error) {
			kept, _, _, err := extender.Filter(&given.Pod, nodes)
			return len(kept), err
		},
		"baseline": func() (int, error) {
			_, _, _, err := baseline.Filter(&given.Pod, nodes)
			return 0, err
		},
		"prioritize": func() (int, error) {
			scores, _, err := extender.Prioritize(&given.Pod, nodes)
			if scores == nil {
				return 0, err
			}
			return len(*scores), err
		},
	}

	if *cpuProfile != "" {
		profile, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(profile); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		verbs := strings.Fields(lines.Text())
		answers := make([]answer, 0, len(verbs))
		for _, verb := range verbs {
			call, known := calls[verb]
			if !known {
				answers = append(answers, answer{Verb: verb, Error: "unknown verb (filter, prioritize, baseline)"})
				continue
			}
			trace.reused, trace.proto = false, ""
			waits, cpu := threadWaits(), cpuSeconds()
			started := time.Now()
			names, err := call()
			wall := time.Since(started).Seconds()
			cpu = cpuSeconds() - cpu
			waited := longestWait(waits, threadWaits())
			called := answer{
				Verb: verb, Wall: wall, CPU: cpu, Waited: waited,
				Reused: trace.reused, Proto: trace.proto, Names: names,
			}
			if err != nil {
				called.Error = err.Error()
			}
			answers = append(answers, called)
			if *fresh {
				transport.CloseIdleConnections()
			}
		}
		if err := json.NewEncoder(out).Encode(answers); err != nil {
			log.Fatal(err)
		}
		out.Flush()
	}
	if err := lines.Err(); err != nil {
		log.Print(err)
	}
}
