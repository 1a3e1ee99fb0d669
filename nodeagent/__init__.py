"""nodeagent: a node pressure and eviction agent for Kubernetes, and a pressure-aware scheduler.

Two programs in one house, as the kubelet and kube-scheduler share client-go and
component-base:

* below both: :mod:`.base` (clock, durations, errors, logging), :mod:`.k8s` (Kubernetes'
  object rules: quantities, pod resources, phases, QoS, the pressure contract),
  :mod:`.kube` (the API client, informers, events) and :mod:`.serving` (HTTP serving,
  TLS, delegated auth, probes);
* the agent: :mod:`.signals` -> :mod:`.model` observations -> :mod:`.eviction` ->
  decisions -> :mod:`.actuators` (and :mod:`.reclaim` through :mod:`.cri`), woken by
  :mod:`.triggers` and run by :mod:`.agent`;
* the scheduler: :mod:`.scheduler` (snapshot -> plugins -> queue -> binder), and
  :mod:`.extender`, which serves its NodePressure verdicts to a stock kube-scheduler;
* on top: :mod:`.commands` and :mod:`.cli`.

Imports only point down (``tests/unit/test_layering.py`` holds the table). See README.md.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
