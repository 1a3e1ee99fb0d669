"""``nodeagent extender``: a scheduler extender that lends a stock kube-scheduler the
agent's pressure, as kube-scheduler's ``HTTPExtender`` (``pkg/scheduler/extender.go``)
calls it.

* :mod:`.server`: ``POST /filter`` and ``POST /prioritize`` answered with the
  NodePressure plugin's verdicts, on the shared secure server;
* :mod:`.nodeview`: the nodes' pressure, kept current by a watch, laid out for
  lookups by name.

A program of its own beside the agent and the scheduler: it imports the scheduler's
NodePressure plugin and the extender wire format (:mod:`nodeagent.scheduler.extenders.wire`),
and the shared layers; nothing of the agent.
"""
