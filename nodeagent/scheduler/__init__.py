"""A kube-scheduler-compatible scheduler that also reads the agent's pressure reports.

Layout (the pure core first; nothing here touches the clock, files or the network):

* :mod:`.api` - statuses and the scheduler's view of Pods and Nodes;
  :mod:`.objects` turns listed Kubernetes objects into it, over the pod rules it shares
  with the agent (:mod:`nodeagent.k8s`);
* :mod:`.snapshot` - the cluster by column, for vectorized plugins;
* :mod:`.framework` - extension points, cycle state, the plugin runtime;
  :mod:`.registry` - the explicit plugin registry; :mod:`.plugins` - one module each;
* :mod:`.config` - ``KubeSchedulerConfiguration`` parsing, defaulting, validation;
* :mod:`.scheduling` - one scheduling cycle (node selection, scoring, selectHost);
* :mod:`.planner` - the offline planner behind ``nodeagent schedule``;
* :mod:`.extenders` - calling HTTP extenders;
* :mod:`.live` - the live scheduler: informers, cache, queue, binder, leader election
  (these touch the clock and the network, through :mod:`nodeagent.kube`).

May import the shared layers (:mod:`nodeagent.base`, :mod:`nodeagent.k8s`,
:mod:`nodeagent.kube`, :mod:`nodeagent.serving`), nothing of the agent. See
docs/scheduler.md.
"""
