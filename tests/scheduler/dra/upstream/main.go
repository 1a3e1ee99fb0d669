// Command upstream-allocator runs kube-scheduler v1.36's structured allocator
// (k8s.io/dynamic-resource-allocation/structured, built from the Go module proxy at the
// pinned release) on cases read from stdin, one JSON object per line, and writes one JSON
// answer per line. The differential test in test_differential.py feeds the same cases to
// nodeagent's allocator and requires the same devices, or the same failure.
//
// A case: {"node": {"name", "labels"}, "classes": [...], "slices": [...], "claims": [...],
// "allocated": [[driver, pool, device]...], "shared": [[driver, pool, device, shareID]...],
// "capacity": [{"device": [driver, pool, device], "consumed": {name: quantity}}]} with the
// resource.k8s.io/v1 objects as the apiserver serves them. An answer: {"verdict":
// "Allocated"|"Unschedulable"|"Error", "reason": string, "allocations": [AllocationResult]}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type inputCase struct {
	Node struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"node"`
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Allocated [][3]string                  `json:"allocated"`
	Shared    [][4]string                  `json:"shared"`
	Capacity  []struct {
		Device   [3]string                                       `json:"device"`
		Consumed map[resourceapi.QualifiedName]resource.Quantity `json:"consumed"`
	} `json:"capacity"`
}

type answer struct {
	Verdict     string                         `json:"verdict"`
	Reason      string                         `json:"reason,omitempty"`
	Allocations []resourceapi.AllocationResult `json:"allocations"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// The features kube-scheduler v1.36 runs with its default gates (AllocatorFeatures in
// pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go).
var features = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	PartitionableDevices:   true,
	DeviceTaints:           true,
	DeviceBindingAndStatus: true,
	ConsumableCapacity:     true,
}

func run(c *inputCase) answer {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, d := range c.Allocated {
		state.AllocatedDevices.Insert(structured.MakeDeviceID(d[0], d[1], d[2]))
	}
	for _, d := range c.Shared {
		share := types.UID(d[3])
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(structured.MakeDeviceID(d[0], d[1], d[2]), &share))
	}
	for _, entry := range c.Capacity {
		id := structured.MakeDeviceID(entry.Device[0], entry.Device[1], entry.Device[2])
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, entry.Consumed))
	}
	classes := classLister{}
	for _, class := range c.Classes {
		classes[class.Name] = class
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Node.Name, Labels: c.Node.Labels}}
	cache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: true})
	allocator, err := structured.NewAllocator(context.Background(), features, state, classes, c.Slices, cache)
	if err != nil {
		return answer{Verdict: "Error", Reason: err.Error()}
	}
	results, err := allocator.Allocate(context.Background(), node, c.Claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return answer{Verdict: "Unschedulable", Reason: err.Error()}
	case err != nil:
		return answer{Verdict: "Error", Reason: err.Error()}
	case len(results) != len(c.Claims):
		return answer{Verdict: "Unschedulable", Reason: "cannot allocate all claims"}
	}
	for i := range results {
		for j := range results[i].Devices.Results {
			if results[i].Devices.Results[j].ShareID != nil {
				share := types.UID("share")
				results[i].Devices.Results[j].ShareID = &share
			}
		}
	}
	return answer{Verdict: "Allocated", Allocations: results}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c inputCase
		var a answer
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			a = answer{Verdict: "Error", Reason: fmt.Sprintf("decode case: %v", err)}
		} else {
			a = run(&c)
		}
		if err := out.Encode(a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
