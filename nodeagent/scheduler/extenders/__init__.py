"""Scheduler extenders, both ways (kube-scheduler's ``pkg/scheduler/extender.go``).

* Calling them: the ``extenders:`` of a KubeSchedulerConfiguration (:mod:`.settings`),
  called over HTTP (:mod:`.client`) at their points of every scheduling cycle
  (:mod:`.chain`, hooked into :mod:`nodeagent.scheduler.scheduling`), so ``nodeagent
  schedule`` and the live scheduler both use them.
* Being one: ``nodeagent extender`` (:mod:`.server`) answers a stock kube-scheduler's
  filter and prioritize calls with the NodePressure plugin's verdicts, over a node view
  kept current by a watch (:mod:`.nodeview`).

:mod:`.wire` holds the protocol's messages for both sides.
"""
