"""CEL selectors against one device, with the semantics of kube-scheduler's environment
(``dynamic-resource-allocation/cel/compile.go`` and the apiserver's CEL libraries): the
map shape of ``device.attributes``/``device.capacity``, the semver and quantity types,
and errors worded as upstream words them."""

from __future__ import annotations

import pytest

from nodeagent.scheduler.dra import model
from nodeagent.scheduler.dra.cel import CelError, DeviceInput, SelectorCompiler

DRIVER = "gpu.example.com"
GPU = model.parse_resource_slice(
    {
        "metadata": {"name": "s"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "model": {"string": "A100"},
                        "index": {"int": 3},
                        "mig": {"bool": True},
                        "driverVersion": {"version": "1.2.3-rc.1"},
                        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
                    },
                    "capacity": {
                        "memory": {"value": "40Gi"},
                        "example.com/slots": {"value": "1500m"},
                    },
                    "allowMultipleAllocations": True,
                }
            ],
        },
    }
).devices[0]

COMPILER = SelectorCompiler()


def matches(expression: str) -> bool:
    return COMPILER.compile(expression).matches(DeviceInput(DRIVER, GPU))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        ('device.driver == "other.example.com"', False),
        (f'device.attributes["{DRIVER}"].model == "A100"', True),
        (f'device.attributes["{DRIVER}"].index > 2', True),
        (f'device.attributes["{DRIVER}"].mig', True),
        (f'device.attributes["{DRIVER}"]["index"] == 3', True),
        # A qualified name is filed under its own domain, an ID under the driver's.
        ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True),
        (f'"pcieRoot" in device.attributes["{DRIVER}"]', False),
        # A domain the device does not have is an empty map (upstream's map default).
        ('"model" in device.attributes["nic.example.com"]', False),
        ('size(device.attributes["nic.example.com"]) == 0', True),
        (f'"model" in device.attributes["{DRIVER}"]', True),
        # Heterogeneous equality is false, not an error.
        (f'device.attributes["{DRIVER}"].model == 1', False),
        (f'device.attributes["{DRIVER}"].index == 3.0', True),
        # semver: typed, ordered by semver.org rules, normalizable.
        (f'device.attributes["{DRIVER}"].driverVersion.isLessThan(semver("1.2.3"))', True),
        (
            f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.2.3-beta.9"))',
            True,
        ),
        (f'device.attributes["{DRIVER}"].driverVersion.compareTo(semver("1.2.3-rc.1")) == 0', True),
        (f'device.attributes["{DRIVER}"].driverVersion == semver("1.2.3-rc.1")', True),
        (f'device.attributes["{DRIVER}"].driverVersion.major() == 1', True),
        (f'device.attributes["{DRIVER}"].driverVersion.minor() == 2', True),
        ('semver("v1.2", true) == semver("1.2.0")', True),
        ('isSemver("1.2")', False),
        ('isSemver("1.2", true)', True),
        # quantity: exact, by value.
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) == 0', True),
        (f'device.capacity["{DRIVER}"].memory == quantity("40960Mi")', True),
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("32G"))', True),
        (f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("32G"))', False),
        ('device.capacity["example.com"].slots.isInteger()', False),
        ('device.capacity["example.com"].slots.asApproximateFloat() == 1.5', True),
        ('quantity("1").add(quantity("500m")) == quantity("1500m")', True),
        ('quantity("2").sub(1).asInteger() == 1', True),
        ('quantity("-1").sign() == -1', True),
        ('isQuantity("1Ki") && !isQuantity("1KB")', True),
        ("device.allowMultipleAllocations", True),
        # Libraries of the Kubernetes base environment that cel-cpp ships.
        (f'device.attributes["{DRIVER}"].model.lowerAscii() == "a100"', True),
        (f'device.attributes["{DRIVER}"].model.startsWith("A1")', True),
        (f'device.attributes["{DRIVER}"].model.matches("^A[0-9]+$")', True),
        (f'cel.bind(a, device.attributes["{DRIVER}"], a.index + 1 == 4)', True),
        ("math.greatest(1, 5) == 5", True),
        (f'sets.contains(["A100", "H100"], [device.attributes["{DRIVER}"].model])', True),
        ("sets.contains([1, 2.0], [2])", True),
        ("sets.contains([1], [true])", False),
        ('sets.intersects(["a"], ["b", "a"]) && sets.equivalent([1, 1, 2], [2, 1])', True),
        (f'device.attributes["{DRIVER}"].model.find("[0-9]+") == "100"', True),
        ('"a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]', True),
        # && and || absorb an error on the side that does not decide.
        ('false && device.attributes["nic.example.com"].missing', False),
        ('true || device.attributes["nic.example.com"].missing', True),
    ],
)
def test_selector(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message", "at_compile"),
    [
        ("noSuchVar", "undeclared reference to 'noSuchVar'", True),
        ("device.driver ==", "compilation failed: ERROR: <input>:1:17: Syntax error", True),
        ("1 + 2", "must evaluate to bool or the unknown type, not int", True),
        (f'device.attributes["{DRIVER}"].missing', "no such key: missing", False),
        (
            f'device.attributes["{DRIVER}"].index',
            "CEL result of type int could not be converted to bool",
            False,
        ),
        ('semver("1.2") == semver("1.2.0")', "'1.2' is not a semantic version", False),
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer", False),
        ('quantity("lots").isInteger()', "invalid quantity 'lots'", False),
    ],
)
def test_errors_say_what_upstream_says(expression: str, message: str, at_compile: bool) -> None:
    with pytest.raises(CelError) as caught:
        matches(expression)
    assert message in str(caught.value)
    assert caught.value.at_compile is at_compile


def test_an_expression_compiles_once_and_a_failure_is_remembered() -> None:
    compiler = SelectorCompiler()
    first = compiler.compile('device.driver == "x"')
    assert compiler.compile('device.driver == "x"') is first
    with pytest.raises(CelError) as one:
        compiler.compile("(")
    with pytest.raises(CelError) as two:
        compiler.compile("(")
    assert one.value is two.value


def test_a_domain_indexed_by_a_later_expression_is_filled_for_devices_seen_before() -> None:
    compiler = SelectorCompiler()
    device = DeviceInput(DRIVER, GPU)
    assert compiler.compile(f'device.driver == "{DRIVER}"').matches(device)
    # The activation prepared for the first expression did not know this domain.
    assert not compiler.compile('"x" in device.attributes["late.example.com"]').matches(device)
