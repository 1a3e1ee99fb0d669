"""HTTP serving shared by the agent, the scheduler and the extender: one server, one
certificate story, one gate (kube-scheduler's delegated authentication and
authorization); docs/security.md is the operator's view.

* :mod:`~nodeagent.serving.settings`: listen addresses, ``--metrics-auth`` and the TLS
  options.
* :mod:`~nodeagent.serving.tls`: the serving certificate (given and reloaded, or
  self-signed) and the client CA.
* :mod:`~nodeagent.serving.auth`: who may see which path (TokenReview,
  SubjectAccessReview, client certificates), with the review caches.
* :mod:`~nodeagent.serving.server`: the threaded HTTP(S) server they guard.
* :mod:`~nodeagent.serving.endpoints` and :mod:`~nodeagent.serving.health`:
  ``/metrics``, ``/healthz``, ``/readyz`` and ``/livez`` on that server;
  :mod:`~nodeagent.serving.sdnotify`: the same health for systemd (``Type=notify``).

May import :mod:`nodeagent.base`, :mod:`nodeagent.k8s` and :mod:`nodeagent.kube`.
"""
