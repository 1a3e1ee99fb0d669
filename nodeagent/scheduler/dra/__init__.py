"""Dynamic Resource Allocation with structured parameters (``resource.k8s.io/v1``).

The pure core the DynamicResources plugin runs on: :mod:`.model` reads DeviceClasses,
ResourceSlices, ResourceClaims and ResourceClaimTemplates into frozen values (and writes an
allocation back as the API's JSON), :mod:`.cel` evaluates the device selectors with a real
CEL implementation, and :mod:`.allocator` finds devices for a pod's claims on one node the
way kube-scheduler v1.36's structured allocator does (``k8s.io/dynamic-resource-allocation``
``structured``, the "incubating" variant that the default feature gates select).
Nothing here reads the network or the clock: the plugin feeds it objects and in-use state.
"""
