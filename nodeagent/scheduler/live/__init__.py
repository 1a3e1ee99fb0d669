"""The scheduler running against a cluster: ``nodeagent scheduler``.

Data flow, one module each: informers (:mod:`nodeagent.kube.informer`) feed the
:mod:`~.cache` (nodes, bound and assumed pods, the incrementally updated snapshot) and
the :mod:`~.queue` (kube-scheduler's activeQ, backoffQ and unschedulablePods, requeued
by :mod:`~.events`); the scheduling loop (:mod:`~.scheduler`) pops a pod, runs the
framework on the snapshot, assumes the result and hands it to the :mod:`~.binder`
(binding cycles on a worker pool); failures are reported by :mod:`~.reporter`
(PodScheduled condition, aggregated events); :mod:`~.leader` keeps one active replica.
"""
