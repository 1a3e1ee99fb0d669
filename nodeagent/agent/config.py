"""Configuration: one YAML file, environment variables and flags, validated once.

Fields are spelled in camelCase in the file (``hostRoot``, ``evictionHard``), like the
kubelet's own configuration, so an operator's knowledge carries over. Each field is also
an environment variable (``NODEAGENT_HOST_ROOT``) and a flag (``--host-root``).
Precedence, highest first: flags, environment, file, defaults.

Loading either yields a frozen :class:`NodeAgentConfiguration` or raises
:class:`~nodeagent.base.errors.ConfigError` naming the field (as the user spells it), the
value and what is allowed; the CLI turns that into exit code 2 before anything is
applied.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from nodeagent.actuators.settings import ActuationSettings
from nodeagent.agent.settings import AgentSettings, ObservabilitySettings
from nodeagent.base.errors import ConfigError
from nodeagent.eviction.settings import EvictionSettings, kubelet_eviction_fields
from nodeagent.reclaim.settings import NodeReclaimSettings
from nodeagent.signals.settings import SignalSourceSettings
from nodeagent.triggers.settings import TriggerSettings

ENV_PREFIX = "NODEAGENT_"


_ACRONYMS = {"client_ca_file": "clientCAFile"}
"""Fields whose camelCase keeps an acronym whole, as Kubernetes spells it (the kubelet's
``clientCAFile``), both ways."""
_ACRONYMS_BACK = {camel: snake for snake, camel in _ACRONYMS.items()}


def camel_to_snake(name: str) -> str:
    if name in _ACRONYMS_BACK:
        return _ACRONYMS_BACK[name]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def snake_to_camel(name: str) -> str:
    if name in _ACRONYMS:
        return _ACRONYMS[name]
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_file_values: ContextVar[Mapping[str, Any] | None] = ContextVar("_file_values", default=None)


class _FileSource(PydanticBaseSettingsSource):
    """Values read from the configuration file, already snake_cased."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return (_file_values.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_file_values.get() or {})


class NodeAgentConfiguration(
    BaseSettings,
    SignalSourceSettings,
    EvictionSettings,
    ActuationSettings,
    AgentSettings,
    TriggerSettings,
    ObservabilitySettings,
    NodeReclaimSettings,
):
    """The agent's whole configuration, one flat document.

    Each area of the agent declares its own fields in a mixin beside its code (for
    example :class:`nodeagent.signals.settings.SignalSourceSettings`); this class only
    combines them and decides where values come from. Every field documents its unit and
    default in its ``description``; the CLI generates a flag for each, with that help.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        validate_default=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init kwargs) beat the environment, which beats the file."""
        return (init_settings, env_settings, _FileSource(settings_cls))


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping.

    Plain YAML keeps the last value silently, so a threshold written twice (once
    commented back in, say) would quietly lose one; the kubelet's own parser refuses
    duplicates in its flag form, and so does ours."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"field {key!r} is given twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_file(path: Path) -> dict[str, Any]:
    """The file's fields, snake_cased; unknown fields are left for validation to name."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.start}): {exc.reason}"
        ) from exc
    try:
        document = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(
            f"config file {path}: expected a mapping of fields, got {type(document).__name__}"
        )
    if document.get("kind") == "KubeletConfiguration":
        # The node's own kubelet config: the agent follows its eviction fields, read as the
        # kubelet reads them, and ignores the rest (see docs/eviction.md).
        document = kubelet_eviction_fields(document)
    document = {k: v for k, v in document.items() if k not in ("apiVersion", "kind")}
    return {camel_to_snake(str(key)): value for key, value in document.items()}


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: field (as the user spells it), value, and what is allowed."""
    lines = []
    for error in exc.errors():
        location = ".".join(
            snake_to_camel(part) if isinstance(part, str) else str(part) for part in error["loc"]
        )
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            allowed = ", ".join(
                sorted(snake_to_camel(name) for name in NodeAgentConfiguration.model_fields)
            )
            message = f"unknown field; allowed fields: {allowed}"
        value = error.get("input")
        lines.append(f"config field {location!r} (value {value!r}): {message}")
    return "\n".join(lines)


def load_config(
    file: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> NodeAgentConfiguration:
    """Merge defaults < file < environment < ``overrides`` (flags, snake_case keys)."""
    file_values = _read_file(file) if file is not None else {}
    flags = {key: value for key, value in (overrides or {}).items() if value is not None}
    token = _file_values.set(file_values)
    saved_environ = None
    if environ is not None:
        saved_environ = dict(os.environ)
        os.environ.clear()
        os.environ.update(environ)
    try:
        return NodeAgentConfiguration(**flags)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc
    finally:
        _file_values.reset(token)
        if saved_environ is not None:
            os.environ.clear()
            os.environ.update(saved_environ)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` and one ``--kebab-case`` flag per configuration field, whose
    help is the first paragraph of the field's description.

    The descriptions are the models' own metadata (``Field(description=...)``), so
    ``--help`` reads no source: it works from bytecode alone, and costs no parsing."""
    parser.add_argument("--config", type=Path, metavar="FILE", help="YAML configuration file")
    group = parser.add_argument_group(
        "configuration fields (each also a camelCase key in --config and a NODEAGENT_* variable)"
    )
    for name, field in NodeAgentConfiguration.model_fields.items():
        summary = (field.description or "").split("\n\n")[0]
        group.add_argument(
            "--" + name.replace("_", "-"),
            dest=f"cfg_{name}",
            metavar="VALUE",
            default=None,
            help=f"[{snake_to_camel(name)}] {summary}".replace("%", "%%"),
        )


def config_from_args(args: argparse.Namespace) -> NodeAgentConfiguration:
    overrides = {
        name: getattr(args, f"cfg_{name}", None) for name in NodeAgentConfiguration.model_fields
    }
    return load_config(getattr(args, "config", None), overrides=overrides)
