"""The Kubernetes client layer both programs and the extender share.

* :mod:`.client`: the narrow :class:`~nodeagent.kube.client.KubeClient` interface; its
  real implementation is :mod:`.http` (pooled HTTP/1.1, the API's errors in
  :mod:`.errors`, retries in :mod:`.retry`, client-side rate limits in
  :mod:`.ratelimit`); the in-memory fake beside it lives in ``tests/doubles``;
* :mod:`.informer`: list and watch, one loop for every kind either program follows;
* :mod:`.pipeline`: pipelined requests for the scheduler's binding process;
* :mod:`.events`: Events, aggregated as client-go's recorder aggregates them;
* :mod:`.selectors`, :mod:`.address`, :mod:`.writes`: label selectors, API server
  addresses, write outcomes.

May import :mod:`nodeagent.base` and :mod:`nodeagent.k8s`.
"""
