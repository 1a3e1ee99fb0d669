"""The plugin registry: an explicit map from plugin name to how to build it.

No import-time registration: a profile can only use what is listed here (or in a
registry the caller passes), and adding a plugin is one line.
"""

from __future__ import annotations

from nodeagent.scheduler.framework import PluginSpec, Registry
from nodeagent.scheduler.plugins import (
    balanced_allocation,
    default_binder,
    default_preemption,
    dynamic_resources,
    image_locality,
    inter_pod_affinity,
    node_affinity,
    node_declared_features,
    node_name,
    node_ports,
    node_pressure,
    node_resources_fit,
    node_unschedulable,
    node_volume_limits,
    pod_topology_spread,
    priority_sort,
    scheduling_gates,
    taint_toleration,
    volume_binding,
    volume_restrictions,
    volume_zone,
)


def in_tree_registry() -> Registry:
    return {
        priority_sort.NAME: PluginSpec(priority_sort.new),
        scheduling_gates.NAME: PluginSpec(scheduling_gates.new),
        node_unschedulable.NAME: PluginSpec(node_unschedulable.new),
        node_name.NAME: PluginSpec(node_name.new),
        node_ports.NAME: PluginSpec(node_ports.new),
        node_resources_fit.NAME: PluginSpec(node_resources_fit.new, node_resources_fit.Args),
        balanced_allocation.NAME: PluginSpec(balanced_allocation.new, balanced_allocation.Args),
        taint_toleration.NAME: PluginSpec(taint_toleration.new),
        node_affinity.NAME: PluginSpec(node_affinity.new, node_affinity.Args),
        pod_topology_spread.NAME: PluginSpec(pod_topology_spread.new, pod_topology_spread.Args),
        inter_pod_affinity.NAME: PluginSpec(inter_pod_affinity.new, inter_pod_affinity.Args),
        default_preemption.NAME: PluginSpec(default_preemption.new, default_preemption.Args),
        image_locality.NAME: PluginSpec(image_locality.new),
        node_pressure.NAME: PluginSpec(node_pressure.new, node_pressure.Args),
        default_binder.NAME: PluginSpec(default_binder.new),
        volume_restrictions.NAME: PluginSpec(volume_restrictions.new),
        node_volume_limits.NAME: PluginSpec(node_volume_limits.new),
        volume_binding.NAME: PluginSpec(volume_binding.new, volume_binding.Args),
        volume_zone.NAME: PluginSpec(volume_zone.new),
        node_declared_features.NAME: PluginSpec(node_declared_features.new),
        dynamic_resources.NAME: PluginSpec(dynamic_resources.new, dynamic_resources.Args),
    }
