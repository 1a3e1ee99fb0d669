"""Tests against a real control plane built from Kubernetes' Go modules (see cluster.py)."""
