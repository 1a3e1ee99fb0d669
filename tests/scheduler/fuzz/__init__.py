"""Differential fuzzing of the scheduler (issue 19): generators of valid and invalid
Kubernetes objects, a plain-loop oracle, and the checks that tie them to the product."""
