"""Calling scheduler extenders, as kube-scheduler's ``HTTPExtender``
(``pkg/scheduler/extender.go``) does.

* The ``extenders:`` of a KubeSchedulerConfiguration (:mod:`.settings`), called over
  HTTP (:mod:`.client`) at their points of every scheduling cycle (:mod:`.chain`, hooked
  into :mod:`nodeagent.scheduler.scheduling`; :mod:`.preempting` for preemption), so
  ``nodeagent schedule`` and the live scheduler both use them.
* :mod:`.wire` holds the protocol's messages for both sides: the extender server
  (:mod:`nodeagent.extender`) answers with the same types.
"""
