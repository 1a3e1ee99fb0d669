"""ImageLocality (Score): prefer nodes that already hold the pod's images.

Each image present on the node adds its size scaled by how widely it has spread
(``size * nodes_with_image / all_nodes``, so ubiquitous images don't make one node
"hot"); the sum is clamped to ``[23 MiB, 1000 MiB * containers]`` and mapped linearly
onto 0..100. No normalization. Images are those of init containers and containers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import helpers
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, NodeIndices

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def scaled_image_score(size: int, holders: int, total_nodes: int) -> int:
    spread = float(holders) / float(total_nodes)
    return int(float(size) * spread)


def calculate_priority(sum_scores: int, containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return helpers.go_trunc_div(
        api.MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD
    )


def image_sums(pod: api.Pod, snapshot: ClusterSnapshot) -> Int64s:
    """Per node (all of them): the sum of scaled scores of the pod's images it holds."""
    sums = np.zeros(snapshot.size, dtype=np.int64)
    for image in pod.images:
        state = snapshot.images.get(image)
        if state is not None:
            sums[state.nodes] += scaled_image_score(state.size, len(state.nodes), snapshot.size)
    return sums


def priority_vector(sums: Int64s, containers: int) -> Int64s:
    max_threshold = MAX_CONTAINER_THRESHOLD * containers
    clamped = np.where(sums < MIN_THRESHOLD, MIN_THRESHOLD, np.minimum(sums, max_threshold))
    return helpers.trunc_div(
        api.MAX_NODE_SCORE * (clamped - MIN_THRESHOLD), np.int64(max_threshold - MIN_THRESHOLD)
    )


class ImageLocality:
    name = NAME

    def __init__(self) -> None:
        self._scores = helpers.StaticNodeCache[Int64s]()

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        def all_nodes() -> Int64s:
            return priority_vector(image_sums(pod, snapshot), pod.container_count)

        scores = self._scores.get(snapshot, (pod.images, pod.container_count), all_nodes)
        result: Int64s = scores.take(nodes)
        return result

    def score_node(self, pod: api.Pod, snapshot: ClusterSnapshot, node: int) -> int:
        held = {name for image in snapshot.nodes[node].images for name in image.names}
        total = sum(
            scaled_image_score(
                snapshot.images[name].size, len(snapshot.images[name].nodes), snapshot.size
            )
            for name in pod.images
            if name in held
        )
        return calculate_priority(total, pod.container_count)


def new(args: Any, handle: Handle) -> ImageLocality:
    return ImageLocality()
