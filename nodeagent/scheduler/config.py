"""``KubeSchedulerConfiguration`` (kubescheduler.config.k8s.io/v1), read as kube-scheduler
reads it.

The document is validated into pydantic models (unknown fields are errors, so a typo
never silently falls back to a default), then each profile's plugins are merged with
the default plugin set exactly as kube-scheduler's v1 defaulting does (``getDefaultPlugins``
and ``mergePlugins`` in ``pkg/scheduler/apis/config/v1/default_plugins.go``):

* ``disabled`` removes default plugins at that extension point (``"*"`` removes all);
* an ``enabled`` plugin that is also a default replaces the default *in place*
  (its position is kept, its weight taken); other enabled plugins are appended.

MultiPoint expansion (which needs to know what each plugin implements) happens when the
:class:`~nodeagent.scheduler.framework.Framework` is built. ``pluginConfig`` args are
validated by the plugin's own args model, with kube-scheduler's defaults.

Every problem raises :class:`~nodeagent.base.errors.ConfigError` with the field path as the
user wrote it (``profiles[0].plugins.score.enabled[1].weight``), the value and what is
allowed; the CLI turns that into exit code 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import settings as extender_settings

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"


class PluginArgsSpec(Protocol):
    """What configuration needs to know of a registered plugin: its args model.

    The framework's ``PluginSpec`` satisfies this structurally, so the dependency runs
    one way only: the framework imports the configuration, never the reverse."""

    @property
    def args(self) -> type[BaseModel] | None: ...


Registry = Mapping[str, PluginArgsSpec]
"""Plugin name -> spec; the framework's registry is one."""


class ExtensionPoint(StrEnum):
    """Extension points in the order a pod meets them, spelled as in the config."""

    PRE_ENQUEUE = "preEnqueue"
    QUEUE_SORT = "queueSort"
    PRE_FILTER = "preFilter"
    FILTER = "filter"
    POST_FILTER = "postFilter"
    PRE_SCORE = "preScore"
    SCORE = "score"
    RESERVE = "reserve"
    PERMIT = "permit"
    PRE_BIND = "preBind"
    BIND = "bind"
    POST_BIND = "postBind"


class ConfigModel(BaseModel):
    """camelCase in the document, snake_case in Python; unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class PluginRef(ConfigModel):
    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0)
    """Score weight; 0 or unset means 1. Negative weights are rejected."""


class PluginSet(ConfigModel):
    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[PluginRef, ...] = ()


class Plugins(ConfigModel):
    pre_enqueue: PluginSet = PluginSet()
    queue_sort: PluginSet = PluginSet()
    pre_filter: PluginSet = PluginSet()
    filter: PluginSet = PluginSet()
    post_filter: PluginSet = PluginSet()
    pre_score: PluginSet = PluginSet()
    score: PluginSet = PluginSet()
    reserve: PluginSet = PluginSet()
    permit: PluginSet = PluginSet()
    pre_bind: PluginSet = PluginSet()
    bind: PluginSet = PluginSet()
    post_bind: PluginSet = PluginSet()
    multi_point: PluginSet = PluginSet()

    def for_point(self, point: ExtensionPoint) -> PluginSet:
        result: PluginSet = getattr(self, _snake(point.value))
        return result


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


class PluginConfigEntry(ConfigModel):
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None


class ProfileDocument(ConfigModel):
    scheduler_name: str | None = None
    """Defaults to ``default-scheduler`` only when there is a single profile."""
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins | None = None
    plugin_config: tuple[PluginConfigEntry, ...] = ()


class ConfigurationDocument(ConfigModel):
    """The whole file. Fields that only matter to a live scheduler process (leader
    election, client connection, backoff...) are accepted and not used by the planner."""

    api_version: str = API_VERSION
    kind: str = KIND
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    profiles: tuple[ProfileDocument, ...] | None = None
    extenders: tuple[extender_settings.ExtenderConfig, ...] = ()
    parallelism: int = Field(default=16, gt=0)
    pod_initial_backoff_seconds: int = Field(default=1, gt=0)
    pod_max_backoff_seconds: int = Field(default=10, gt=0)
    leader_election: dict[str, Any] | None = None
    client_connection: dict[str, Any] | None = None
    health_bind_address: str | None = Field(default=None, alias="healthzBindAddress")
    metrics_bind_address: str | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    delay_cache_until_active: bool | None = None

    @model_validator(mode="after")
    def _check(self) -> ConfigurationDocument:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError(
                f"podMaxBackoffSeconds {self.pod_max_backoff_seconds}: must be greater than or"
                f" equal to podInitialBackoffSeconds ({self.pod_initial_backoff_seconds})"
            )
        return self


DEFAULT_MULTI_POINT: tuple[PluginRef, ...] = (
    PluginRef(name="SchedulingGates"),
    PluginRef(name="PrioritySort"),
    PluginRef(name="NodeUnschedulable"),
    PluginRef(name="NodeName"),
    PluginRef(name="NodePressure", weight=2),
    PluginRef(name="TaintToleration", weight=3),
    PluginRef(name="NodeAffinity", weight=2),
    PluginRef(name="NodePorts"),
    PluginRef(name="NodeResourcesFit", weight=1),
    PluginRef(name="VolumeRestrictions"),
    PluginRef(name="NodeVolumeLimits"),
    PluginRef(name="VolumeBinding"),
    PluginRef(name="VolumeZone"),
    PluginRef(name="PodTopologySpread", weight=2),
    PluginRef(name="InterPodAffinity", weight=2),
    PluginRef(name="DynamicResources", weight=2),
    PluginRef(name="DefaultPreemption"),
    PluginRef(name="NodeResourcesBalancedAllocation", weight=1),
    PluginRef(name="ImageLocality", weight=1),
    PluginRef(name="DefaultBinder"),
    PluginRef(name="NodeDeclaredFeatures"),
)
"""kube-scheduler v1.36's default plugins and weights (``getDefaultPlugins``; what
``kube-scheduler --write-config-to`` prints), in its order (DynamicResources before
DefaultPreemption, as ``applyDynamicResources`` puts it), plus NodePressure
(before TaintToleration, so a node under pressure is reported as such). Disable
NodePressure for stock behaviour."""

UPSTREAM_NOT_IMPLEMENTED = frozenset(
    {
        "EBSLimits",
        "GCEPDLimits",
        "AzureDiskLimits",
        "CinderLimits",
    }
)
"""kube-scheduler plugins this module does not have yet. Disabling them is accepted (a
no-op) so stock configurations load; enabling one is an error, never silently ignored."""


def unknown_plugin_message(name: str, registry: Registry) -> str:
    if name in UPSTREAM_NOT_IMPLEMENTED:
        return (
            f"plugin {name!r} is a kube-scheduler plugin that nodeagent does not implement"
            " yet; remove it from the enabled lists"
        )
    return f"plugin {name!r} is not registered; registered plugins: {', '.join(sorted(registry))}"


class FeatureGate(StrEnum):
    """kube-scheduler feature gates nodeagent honours (``--feature-gates``)."""

    TAINT_TOLERATION_COMPARISON_OPERATORS = "TaintTolerationComparisonOperators"
    """Tolerations with operators ``Gt``/``Lt`` (alpha in 1.35, off by default)."""
    STORAGE_CAPACITY_SCORING = "StorageCapacityScoring"
    """VolumeBinding scores nodes by storage utilization (alpha in 1.33, off by default)."""


@dataclass(frozen=True, slots=True)
class FeatureGates:
    enabled: frozenset[FeatureGate] = frozenset()

    @property
    def taint_toleration_comparison_operators(self) -> bool:
        return FeatureGate.TAINT_TOLERATION_COMPARISON_OPERATORS in self.enabled

    @property
    def storage_capacity_scoring(self) -> bool:
        return FeatureGate.STORAGE_CAPACITY_SCORING in self.enabled


def parse_feature_gates(text: str) -> FeatureGates:
    """kube-scheduler's flag form: ``Name=true,Other=false``."""
    enabled: set[FeatureGate] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or value.strip().lower() not in ("true", "false"):
            raise ConfigError(
                f"--feature-gates: {item!r}: expected Name=true or Name=false",
                field="--feature-gates",
            )
        try:
            gate = FeatureGate(name.strip())
        except ValueError:
            known = ", ".join(FeatureGate)
            raise ConfigError(
                f"--feature-gates: unrecognized feature gate {name.strip()!r}; known: {known}",
                field="--feature-gates",
            ) from None
        if value.strip().lower() == "true":
            enabled.add(gate)
        else:
            enabled.discard(gate)
    return FeatureGates(frozenset(enabled))


@dataclass(frozen=True, slots=True)
class Profile:
    """One profile after defaulting: merged plugin sets and validated args."""

    index: int
    scheduler_name: str
    percentage_of_nodes_to_score: int | None
    plugins: Plugins
    plugin_args: Mapping[str, Any] = field(default_factory=dict)

    def needed_plugins(self) -> list[str]:
        names: dict[str, None] = {}
        for point in (*ExtensionPoint, None):
            plugin_set = (
                self.plugins.multi_point if point is None else self.plugins.for_point(point)
            )
            for ref in plugin_set.enabled:
                names.setdefault(ref.name)
        return list(names)


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    profiles: tuple[Profile, ...]
    percentage_of_nodes_to_score: int = 0
    """Global setting; 0 means adaptive (``numFeasibleNodesToFind``)."""
    extenders: tuple[extender_settings.ExtenderConfig, ...] = ()
    """HTTP extenders, called in this order (:mod:`nodeagent.scheduler.extenders`)."""


def merge_plugin_set(defaults: PluginSet, custom: PluginSet) -> PluginSet:
    """kube-scheduler's ``mergePluginSet``: see the module docstring."""
    disabled = {ref.name for ref in custom.disabled} | {ref.name for ref in defaults.disabled}
    custom_index = {ref.name: i for i, ref in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled:
        for ref in defaults.enabled:
            if ref.name in disabled:
                continue
            position = custom_index.get(ref.name)
            if position is not None:
                replaced.add(position)
            enabled.append(ref if position is None else custom.enabled[position])
    enabled.extend(ref for i, ref in enumerate(custom.enabled) if i not in replaced)
    return PluginSet(enabled=tuple(enabled), disabled=(*custom.disabled, *defaults.disabled))


def merge_plugins(custom: Plugins | None) -> Plugins:
    defaults = Plugins(multi_point=PluginSet(enabled=DEFAULT_MULTI_POINT))
    if custom is None:
        return defaults
    merged = {
        name: merge_plugin_set(getattr(defaults, name), getattr(custom, name))
        for name in Plugins.model_fields
    }
    return Plugins(**merged)


def describe_errors(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem: the field path as written, the value, what is allowed."""
    lines = []
    for error in exc.errors():
        path = prefix
        for part in error["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if error["type"] == "value_error":
            # A model's own cross-field check: its message starts with the path of the
            # offending field relative to the model and names the value itself.
            detail = str(error.get("ctx", {}).get("error", error["msg"]))
            lines.append(f"{path}.{detail}" if path else detail)
            continue
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"{path or '(document)'} (value {error.get('input')!r}): {message}")
    return "\n".join(lines)


def _validate_args(
    name: str, raw: Mapping[str, Any] | None, registry: Registry, *, source: str, where: str
) -> Any:
    spec = registry.get(name)
    if spec is None or spec.args is None:
        return raw  # kept for plugins nodeagent lacks; an enabled one fails at build time
    body = {k: v for k, v in (raw or {}).items() if k not in ("apiVersion", "kind")}
    try:
        return spec.args.model_validate(body)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe_errors(exc, where)}", field=where) from exc


def parse_configuration(
    document: Mapping[str, Any] | None, registry: Registry, source: str = "config"
) -> SchedulerConfiguration:
    """Validate and default a decoded configuration document."""
    try:
        doc = ConfigurationDocument.model_validate(document or {})
    except ValidationError as exc:
        raise ConfigError(f"{source}:\n{describe_errors(exc)}") from exc
    if doc.api_version != API_VERSION:
        raise ConfigError(
            f"{source}: apiVersion {doc.api_version!r} is not supported; use {API_VERSION}",
            field="apiVersion",
        )
    if doc.kind != KIND:
        raise ConfigError(f"{source}: kind {doc.kind!r}: expected {KIND}", field="kind")
    extender_settings.validate_extenders(doc.extenders, source)
    documents = doc.profiles or (ProfileDocument(),)
    profiles = []
    seen: set[str] = set()
    for index, profile in enumerate(documents):
        where = f"profiles[{index}]"
        scheduler_name = profile.scheduler_name
        if scheduler_name is None and len(documents) == 1:
            scheduler_name = api.DEFAULT_SCHEDULER_NAME
        if not scheduler_name:
            raise ConfigError(
                f"{source}: {where}.schedulerName: required (and not empty) when there are"
                " several profiles"
            )
        if scheduler_name in seen:
            raise ConfigError(
                f"{source}: {where}.schedulerName {scheduler_name!r}: duplicate;"
                " every profile needs its own scheduler name"
            )
        seen.add(scheduler_name)
        args: dict[str, Any] = {}
        for i, entry in enumerate(profile.plugin_config):
            entry_where = f"{where}.pluginConfig[{i}]"
            if entry.name in args:
                raise ConfigError(
                    f"{source}: {entry_where}.name {entry.name!r}: duplicate plugin config"
                )
            args[entry.name] = _validate_args(
                entry.name, entry.args, registry, source=source, where=f"{entry_where}.args"
            )
        _ignore_extender_resources(args, doc.extenders, registry, source, where)
        profiles.append(
            Profile(
                index=index,
                scheduler_name=scheduler_name,
                percentage_of_nodes_to_score=profile.percentage_of_nodes_to_score,
                plugins=merge_plugins(profile.plugins),
                plugin_args=args,
            )
        )
    return SchedulerConfiguration(
        tuple(profiles), doc.percentage_of_nodes_to_score or 0, doc.extenders
    )


FIT_PLUGIN = "NodeResourcesFit"


def _ignore_extender_resources(
    args: dict[str, Any],
    extenders: tuple[extender_settings.ExtenderConfig, ...],
    registry: Registry,
    source: str,
    where: str,
) -> None:
    """kube-scheduler adds the extenders' ``ignoredByScheduler`` resources to every
    profile's NodeResourcesFit ``ignoredResources``: the extender judges them."""
    ignored = extender_settings.ignored_resources(extenders)
    spec = registry.get(FIT_PLUGIN)
    if not ignored or spec is None or spec.args is None:
        return
    current: BaseModel = args.get(FIT_PLUGIN) or spec.args()
    body = current.model_dump(by_alias=True)
    args[FIT_PLUGIN] = _validate_args(
        FIT_PLUGIN,
        {**body, "ignoredResources": [*body.get("ignoredResources", ()), *ignored]},
        registry,
        source=source,
        where=f"{where}.pluginConfig[{FIT_PLUGIN}].args",
    )


def read_document(path: Path) -> Mapping[str, Any] | None:
    """The decoded configuration file (None when empty); errors name the file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read scheduler config {path}: {exc.strerror}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if document is not None and not isinstance(document, Mapping):
        raise ConfigError(f"{path}: expected a KubeSchedulerConfiguration mapping")
    return document


NODEAGENT_PROFILE = "nodeagent-scheduler"
"""The profile ``nodeagent schedule`` and ``nodeagent scheduler`` use without a
configuration file: the same in both, so a plan covers the pods the live scheduler
serves. Never ``default-scheduler``: the live scheduler must not take the cluster's own
scheduler's pods."""


def default_document() -> dict[str, Any]:
    """The configuration both programs use without ``--config``: kube-scheduler's
    defaults with one profile, :data:`NODEAGENT_PROFILE`."""
    return {"profiles": [{"schedulerName": NODEAGENT_PROFILE}]}


def load_configuration(path: Path | None, registry: Registry) -> SchedulerConfiguration:
    """Read a configuration file (``None``: :func:`default_document`)."""
    if path is None:
        return parse_configuration(default_document(), registry, "defaults")
    return parse_configuration(read_document(path), registry, str(path))
