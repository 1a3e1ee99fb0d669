"""CEL device selectors, evaluated as kube-scheduler does (``dynamic-resource-allocation/cel``).

The library: ``cel-expr-python``, Google's Python binding of cel-cpp, the C++ reference
implementation of CEL maintained by the CEL team. Chosen over the alternatives because
selectors run once per device and request in a Filter call over thousands of nodes:

- correctness: it type-checks at compile time and implements the CEL specification as
  cel-go (kube-scheduler's) does: heterogeneous equality, the error absorption of
  ``&&``/``||``, overflow and missing-key errors; its ``strings``, ``math``,
  ``optional`` and ``bindings`` extensions are the ones the Kubernetes base environment
  enables. tests/scheduler/dra/test_differential.py holds it to kube-scheduler's own
  allocator on generated selectors, runtime errors included;
- speed: about 4 µs to evaluate a typical selector against a prepared activation, where
  ``cel-python`` (pure Python, dynamic, no type checker) took 740 µs on this machine for
  the same expression; ``common-expression-language`` (Rust) has no custom types, which
  Kubernetes' ``semver`` and ``quantity`` values need;
- packaging: manylinux wheels for CPython 3.11, no system package.

Kubernetes' two custom types are protobuf messages here (``kubernetes.Semver``,
``kubernetes.Quantity``, built at import into a private descriptor pool) because the
binding passes messages but not arbitrary Python objects; their functions
(``semver()``, ``isSemver()``, ``quantity()``, ``isQuantity()``, ``isGreaterThan``,
``isLessThan``, ``compareTo``, ``major``/``minor``/``patch``, ``sign``, ``add``, ``sub``,
``asInteger``, ``asApproximateFloat``, ``isInteger``) are Python callables with the
semantics of ``k8s.io/apiserver/pkg/cel/library`` (``semverlib.go``, ``quantity.go``).

The ``device`` variable has upstream's shape (``cel.Device`` in ``compile.go``):
``driver``, ``allowMultipleAllocations``, and ``attributes``/``capacity`` as maps from
domain to maps from ID to value, an unqualified name filed under the driver's domain.
Upstream's maps answer a missing *domain* with an empty map (so
``"model" in device.attributes["other.example.com"]`` is false, not an error); here every
domain an expression indexes literally, and every domain the device has, is present.

cel-go's ``sets`` extension and the Kubernetes ``regex`` library (``find``,
``findAll``; Python's ``re`` standing in for RE2, which agree on the patterns selectors
use) are Python callables too. Not provided (a selector using them fails to compile,
which fails allocation with the compile error, as upstream does for an expression its
version does not know): the Kubernetes ``lists``, ``url``, ``ip``/``cidr`` and ``format``
libraries and cel-go's ``lists``/two-variable comprehension extensions: none reads a
device's scalar attributes. Cost limits are not enforced: the apiserver's admission
already rejected selectors whose estimated cost exceeds the limit.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from nodeagent.k8s import quantities
from nodeagent.scheduler.dra.model import AttributeValue, Device, SemVer

if TYPE_CHECKING:
    from cel_expr_python import cel  # type: ignore[import-untyped]  # stubs, no py.typed
    from google.protobuf import descriptor_pool, message

__all__ = [
    "CelError",
    "CompiledSelector",
    "DeviceInput",
    "SelectorCompiler",
    "shared_compiler",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class CelError(Exception):
    """A selector that does not compile (``at_compile``), or fails while evaluated. The
    message is the library's, prefixed as upstream prefixes it (``compilation failed: ...``)."""

    def __init__(self, message: str, *, at_compile: bool = False) -> None:
        super().__init__(message)
        self.at_compile = at_compile


# --- the Kubernetes types as protobuf messages ---------------------------------------


@functools.cache
def _library() -> Any:
    """cel-expr-python, imported on first use: with protobuf's descriptors it is a tenth
    of the scheduler's imports, and a cluster without device selectors never needs it."""
    from cel_expr_python import cel  # noqa: PLC0415  # type: ignore[import-untyped]

    return cel


@functools.cache
def _types() -> tuple[descriptor_pool.DescriptorPool, type[message.Message], type[message.Message]]:
    """The private descriptor pool and its ``Semver`` message (the parsed version, build
    metadata dropped, so equality is semver's) and ``Quantity`` message (the exact value
    as a normalized decimal string, so ``==`` is by value, ``1Gi == 1024Mi``, as
    ``resource.Quantity.Equal``), built on first use."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: PLC0415

    pool = descriptor_pool.DescriptorPool()
    proto = descriptor_pb2.FileDescriptorProto(
        name="nodeagent/dra/cel_types.proto", package="kubernetes", syntax="proto3"
    )
    int64, string = (
        descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
        descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    )
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    semver = proto.message_type.add(name="Semver")
    for number, (name, kind) in enumerate(
        [("major", int64), ("minor", int64), ("patch", int64), ("pre", string)], 1
    ):
        semver.field.add(name=name, number=number, type=kind, label=optional)
    quantity = proto.message_type.add(name="Quantity")
    quantity.field.add(name="value", number=1, type=string, label=optional)
    pool.Add(proto)
    return (
        pool,
        message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity")),
    )


def semver_message(version: SemVer) -> message.Message:
    pre = ".".join(str(p) for p in version.pre)
    semver = _types()[1]
    return semver(major=version.major, minor=version.minor, patch=version.patch, pre=pre)


def _semver_of(msg: Any) -> SemVer:
    pre = tuple(int(p) if p.isdigit() else p for p in msg.pre.split(".") if p)
    return SemVer(msg.major, msg.minor, msg.patch, pre)


def _canonical(value: Decimal) -> str:
    if value == 0:
        return "0"
    return format(value.normalize(), "f")


def quantity_message(value: Decimal) -> message.Message:
    return _types()[2](value=_canonical(value))


def _decimal(msg: Any) -> Decimal:
    return Decimal(msg.value)


# --- the libraries' functions ---------------------------------------------------------


def _normalize_semver(text: str) -> str:
    """``normalizeAndParse`` (``semverlib.go``): no ``v``, no leading zeros, ``1.2`` = ``1.2.0``."""
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or not trimmed[0].isdigit():
                trimmed = "0" + trimmed
            parts[i] = trimmed
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _parse_semver(text: str, normalize: bool) -> SemVer:
    return SemVer.parse(_normalize_semver(text) if normalize else text)


def _to_semver(text: str, normalize: bool = False) -> message.Message:
    return semver_message(_parse_semver(text, normalize))


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _parse_semver(text, normalize)
    except ValueError:
        return False
    return True


def _to_quantity(text: str) -> message.Message:
    try:
        return quantity_message(quantities.parse_exact_quantity(text)[0])
    except quantities.UnitError as exc:
        raise ValueError(str(exc)) from None


def _is_quantity(text: str) -> bool:
    try:
        quantities.parse_exact_quantity(text)
    except quantities.UnitError:
        return False
    return True


def _cmp(a: Decimal, b: Decimal) -> int:
    return (a > b) - (a < b)


def _as_integer(msg: Any) -> int:
    value = _decimal(msg)
    if value != value.to_integral_value() or not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _is_integer(msg: Any) -> bool:
    value = _decimal(msg)
    return value == value.to_integral_value() and INT64_MIN <= value <= INT64_MAX


def _compare(a: Any, b: Any) -> int:
    """Semver or quantity, whichever both are (the type checker made sure they agree)."""
    if a.DESCRIPTOR.name == "Semver":
        return _semver_of(a).compare(_semver_of(b))
    return _cmp(_decimal(a), _decimal(b))


def _ordered(name: str, suffix: str, ret: Any, outcome: Callable[[int], Any]) -> cel.FunctionDecl:
    """A comparison both types have. cel-cpp's runtime keys overloads by argument *kind*
    (both are messages), so one implementation serves both declared overloads."""
    lib = _library()
    sem, qty = lib.Type("kubernetes.Semver"), lib.Type("kubernetes.Quantity")
    return lib.FunctionDecl(
        name,
        [
            lib.Overload(
                f"semver_{suffix}",
                ret,
                [sem, sem],
                is_member=True,
                impl=lambda a, b: outcome(_compare(a, b)),
            ),
            lib.Overload(f"quantity_{suffix}", ret, [qty, qty], is_member=True),
        ],
    )


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL's equality of two list elements: numbers across int/uint/double by value, a bool
    only to a bool, anything else within its own type."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _sets_contains(items: list[Any], wanted: list[Any]) -> bool:
    return all(any(_cel_equal(x, w) for x in items) for w in wanted)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(_cel_equal(x, y) for x in a for y in b)


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex: {exc}") from None


def _find(text: str, pattern: str) -> str:
    found = _regex(pattern).search(text)
    return found.group(0) if found else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _functions() -> list[cel.FunctionDecl]:
    lib = _library()
    t = lib.Type
    sem, qty = t("kubernetes.Semver"), t("kubernetes.Quantity")

    def member(
        name: str, params: list[cel.Type], ret: cel.Type, impl: Callable[..., Any]
    ) -> cel.Overload:
        return lib.Overload(name, ret, params, is_member=True, impl=impl)

    def glob(
        name: str, params: list[cel.Type], ret: cel.Type, impl: Callable[..., Any]
    ) -> cel.Overload:
        return lib.Overload(name, ret, params, impl=impl)

    qty_pair = [qty, qty]
    return [
        lib.FunctionDecl(
            "semver",
            [
                glob("string_to_semver", [t.STRING], sem, _to_semver),
                glob("string_bool_to_semver", [t.STRING, t.BOOL], sem, _to_semver),
            ],
        ),
        lib.FunctionDecl(
            "isSemver",
            [
                glob("is_semver_string", [t.STRING], t.BOOL, _is_semver),
                glob("is_semver_string_bool", [t.STRING, t.BOOL], t.BOOL, _is_semver),
            ],
        ),
        lib.FunctionDecl("quantity", [glob("string_to_quantity", [t.STRING], qty, _to_quantity)]),
        lib.FunctionDecl(
            "isQuantity", [glob("is_quantity_string", [t.STRING], t.BOOL, _is_quantity)]
        ),
        _ordered("isGreaterThan", "is_greater_than", t.BOOL, lambda c: c > 0),
        _ordered("isLessThan", "is_less_than", t.BOOL, lambda c: c < 0),
        _ordered("compareTo", "compare_to", t.INT, lambda c: c),
        # ext.Sets (cel-go) and the Kubernetes regex library (``regex.go``: find, findAll).
        lib.FunctionDecl(
            "sets.contains",
            [glob("list_sets_contains_list", [t.List(t.DYN)] * 2, t.BOOL, _sets_contains)],
        ),
        lib.FunctionDecl(
            "sets.equivalent",
            [
                glob(
                    "list_sets_equivalent_list",
                    [t.List(t.DYN)] * 2,
                    t.BOOL,
                    lambda a, b: _sets_contains(a, b) and _sets_contains(b, a),
                )
            ],
        ),
        lib.FunctionDecl(
            "sets.intersects",
            [glob("list_sets_intersects_list", [t.List(t.DYN)] * 2, t.BOOL, _sets_intersects)],
        ),
        lib.FunctionDecl("find", [member("string_find_n", [t.STRING, t.STRING], t.STRING, _find)]),
        lib.FunctionDecl(
            "findAll",
            [
                member("string_find_all", [t.STRING, t.STRING], t.List(t.STRING), _find_all),
                member(
                    "string_find_all_n", [t.STRING, t.STRING, t.INT], t.List(t.STRING), _find_all
                ),
            ],
        ),
        lib.FunctionDecl("major", [member("semver_major", [sem], t.INT, lambda a: a.major)]),
        lib.FunctionDecl("minor", [member("semver_minor", [sem], t.INT, lambda a: a.minor)]),
        lib.FunctionDecl("patch", [member("semver_patch", [sem], t.INT, lambda a: a.patch)]),
        lib.FunctionDecl(
            "sign", [member("quantity_sign", [qty], t.INT, lambda a: _cmp(_decimal(a), Decimal(0)))]
        ),
        lib.FunctionDecl(
            "asApproximateFloat",
            [member("quantity_get_float", [qty], t.DOUBLE, lambda a: float(_decimal(a)))],
        ),
        lib.FunctionDecl("asInteger", [member("quantity_get_int", [qty], t.INT, _as_integer)]),
        lib.FunctionDecl("isInteger", [member("quantity_is_integer", [qty], t.BOOL, _is_integer)]),
        lib.FunctionDecl(
            "add",
            [
                member(
                    "quantity_add",
                    qty_pair,
                    qty,
                    lambda a, b: quantity_message(_decimal(a) + _decimal(b)),
                ),
                member(
                    "quantity_add_int",
                    [qty, t.INT],
                    qty,
                    lambda a, b: quantity_message(_decimal(a) + b),
                ),
            ],
        ),
        lib.FunctionDecl(
            "sub",
            [
                member(
                    "quantity_sub",
                    qty_pair,
                    qty,
                    lambda a, b: quantity_message(_decimal(a) - _decimal(b)),
                ),
                member(
                    "quantity_sub_int",
                    [qty, t.INT],
                    qty,
                    lambda a, b: quantity_message(_decimal(a) - b),
                ),
            ],
        ),
    ]


# --- compiling and evaluating ---------------------------------------------------------

_INDEXED_DOMAIN = re.compile(
    r"""\b(?:attributes|capacity)\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]"""
)
"""A literal domain index (``device.attributes["gpu.example.com"]``): such a domain is
filled with an empty map in every device's activation, as upstream's map default does."""


@dataclass(frozen=True, slots=True)
class DeviceInput:
    """What a selector sees of a device (``cel.Device``): its driver decides the domain of
    unqualified attribute and capacity names."""

    driver: str
    device: Device


class CompiledSelector:
    """One compiled expression. :meth:`matches` raises :class:`CelError` for a runtime
    error or a non-bool result, as ``CompilationResult.DeviceMatches`` returns an error."""

    __slots__ = ("_compiler", "_program", "expression")

    def __init__(
        self, compiler: SelectorCompiler, expression: str, program: cel.Expression
    ) -> None:
        self._compiler = compiler
        self._program = program
        self.expression = expression

    def matches(self, device: DeviceInput) -> bool:
        result = self._program.eval(self._compiler.activation(device))
        value = result.value()
        if isinstance(value, bool):
            return value
        if result.type() == _library().Type.ERROR:
            raise CelError(_error_text(str(value)))
        raise CelError(
            f"CEL result of type {result.type().name().lower()} could not be converted to bool"
        )


_STATUS_CODE = re.compile(r"[A-Z][A-Z_]*: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z][A-Z_]*\]$")
_NO_SUCH_KEY = re.compile(r'Key not found in map : "(.*)"')


def _error_text(text: str) -> str:
    """cel-cpp's status text without its status code (``NOT_FOUND: ... [NOT_FOUND]``), a
    missing key worded as cel-go words it (``no such key: x``)."""
    match = _STATUS_CODE.match(text)
    text = _STATUS_SUFFIX.sub("", text[match.end() :] if match else text)
    return _NO_SUCH_KEY.sub(r"no such key: \1", text)


ACTIVATIONS_KEPT = 1024


class SelectorCompiler:
    """Compiles selectors once (``cel.Cache``), prepares each device's activation once,
    and remembers each selector's verdict on each device (a verdict depends on nothing
    else, so it stays true for as long as the parsed device lives).

    Thread-safe: the caches are guarded by a lock; evaluation itself needs none.
    Devices are keyed by identity (a parsed :class:`Device` is immutable, and a new
    slice version brings new objects), and every entry holds a reference to its device,
    so an identity is never reused while its entry lives. :meth:`retain` drops the
    entries of devices no longer published."""

    def __init__(self) -> None:
        self._built: Any = None
        self._lock = threading.Lock()
        self._compiled: dict[str, CompiledSelector | CelError] = {}
        self._domains: frozenset[str] = frozenset()
        self._activations: OrderedDict[int, tuple[Device, frozenset[str], cel.Activation]] = (
            OrderedDict()
        )
        self._verdicts: dict[tuple[str, int], tuple[Device, bool | CelError]] = {}

    @property
    def _env(self) -> Any:
        """The CEL environment, built at the first selector (the library imported then)."""
        if self._built is None:
            from cel_expr_python.ext import (  # type: ignore[import-untyped]  # noqa: PLC0415
                ext_bindings,
                ext_math,
                ext_optional,
                ext_strings,
            )

            lib = _library()
            env = lib.NewEnv(
                descriptor_pool=_types()[0],
                variables={"device": lib.Type.Map(lib.Type.STRING, lib.Type.DYN)},
                extensions=[
                    ext_bindings.ExtBindings(),
                    ext_strings.ExtStrings(),
                    ext_math.ExtMath(),
                    ext_optional.ExtOptional(),
                ],
                functions=_functions(),
            )
            with self._lock:
                if self._built is None:
                    self._built = env
        return self._built

    def matches(self, expression: str, device: DeviceInput) -> bool:
        """Whether ``device`` matches ``expression``, evaluated once per device; raises
        :class:`CelError` (also remembered) if it does not compile or fails."""
        key = (expression, id(device.device))
        entry = self._verdicts.get(key)
        if entry is None or entry[0] is not device.device:
            try:
                verdict: bool | CelError = self.compile(expression).matches(device)
            except CelError as exc:
                verdict = exc
            entry = (device.device, verdict)
            with self._lock:
                self._verdicts[key] = entry
        if isinstance(entry[1], CelError):
            raise entry[1]
        return entry[1]

    @property
    def remembered(self) -> int:
        """How many verdicts the cache holds."""
        return len(self._verdicts)

    def retain(self, devices: Iterable[Device]) -> None:
        """Keep the cached activations and verdicts of ``devices`` only."""
        alive = {id(d): d for d in devices}
        with self._lock:
            self._activations = OrderedDict(
                (k, v) for k, v in self._activations.items() if alive.get(k) is v[0]
            )
            self._verdicts = {k: v for k, v in self._verdicts.items() if alive.get(k[1]) is v[0]}

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled selector; raises :class:`CelError` (cached too) if it does not compile."""
        cached = self._compiled.get(expression)
        if cached is None:
            cached = self._compile(expression)
            with self._lock:
                self._compiled[expression] = cached
                if isinstance(cached, CompiledSelector):
                    found = {a or b for a, b in _INDEXED_DOMAIN.findall(expression)}
                    if not found <= self._domains:
                        self._domains = self._domains | found
        if isinstance(cached, CelError):
            raise cached
        return cached

    def _compile(self, expression: str) -> CompiledSelector | CelError:
        try:
            program = self._env.compile(expression)
        except RuntimeError as exc:
            return CelError(f"compilation failed: {_error_text(str(exc))}", at_compile=True)
        output = program.return_type()
        lib = _library()
        if output not in (lib.Type.BOOL, lib.Type.DYN):
            return CelError(
                f"must evaluate to bool or the unknown type, not {output.name().lower()}",
                at_compile=True,
            )
        return CompiledSelector(self, expression, program)

    def activation(self, device: DeviceInput) -> cel.Activation:
        """The device's activation. The last :data:`ACTIVATIONS_KEPT` are kept: a device
        is usually judged by a class's and a request's selectors back to back, and each
        verdict is remembered anyway, while an activation costs about 6 KiB (50,000
        devices would hold 300 MiB)."""
        domains = self._domains
        key = id(device.device)
        with self._lock:
            entry = self._activations.get(key)
            if entry is not None and entry[0] is device.device and entry[1] is domains:
                self._activations.move_to_end(key)
                return entry[2]
        built = self._env.Activation(data={"device": device_value(device, domains)})
        with self._lock:
            self._activations[key] = (device.device, domains, built)
            self._activations.move_to_end(key)
            while len(self._activations) > ACTIVATIONS_KEPT:
                self._activations.popitem(last=False)
        return built


@functools.cache
def shared_compiler() -> SelectorCompiler:
    """The process's compiler: every inventory built without one shares its caches, so a
    new inventory over the same parsed slices evaluates nothing again."""
    return SelectorCompiler()


def _split(name: str, driver: str) -> tuple[str, str]:
    """``parseQualifiedName``: ``domain/id``, or an ID in the driver's domain."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _cel_value(value: AttributeValue) -> Any:
    if isinstance(value, SemVer):
        return semver_message(value)
    return value


def device_value(device: DeviceInput, domains: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The ``device`` variable for ``device``, every domain in ``domains`` present."""
    attributes: dict[str, dict[str, Any]] = {d: {} for d in domains}
    capacity: dict[str, dict[str, Any]] = {d: {} for d in domains}
    attributes.setdefault(device.driver, {})
    capacity.setdefault(device.driver, {})
    for name, value in device.device.attributes.items():
        domain, ident = _split(name, device.driver)
        attributes.setdefault(domain, {})[ident] = _cel_value(value)
    for name, cap in device.device.capacity.items():
        domain, ident = _split(name, device.driver)
        capacity.setdefault(domain, {})[ident] = quantity_message(cap.value.value)
    return {
        "driver": device.driver,
        "allowMultipleAllocations": device.device.allow_multiple_allocations,
        "attributes": attributes,
        "capacity": capacity,
    }
