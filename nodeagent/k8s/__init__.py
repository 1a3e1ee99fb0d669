"""Kubernetes' object rules, pure: what the kubelet and kube-scheduler agree a pod means.

* :mod:`.quantities`: ``resource.Quantity`` parsing and printing, kubelet percentages;
* :mod:`.resources`: the one pod-resources rule (``PodRequests``/``PodLimits``, with
  kube-scheduler's non-zero defaults as an option) over a pod spec read once;
* :mod:`.pods`: phases, the QoS class, criticality (static, mirror, system priority);
* :mod:`.pressure`: the contract between the agent and the scheduler, the condition
  types, taint keys and annotation the agent publishes on its Node.

The agent's pod view (:mod:`nodeagent.agent.podinfo`) and the scheduler's
(:mod:`nodeagent.scheduler.objects`) are thin views over these. May import
:mod:`nodeagent.base` only.
"""
