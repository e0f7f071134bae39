"""Pure CPU-list and mask parsers against the kernel's own forms (kernel-parameters.txt "cpu lists")."""

import pytest

from edge_runtime.system.cpulist import format_cpu_list, format_cpu_mask, parse_cpu_list, parse_cpu_mask, parse_isolcpus


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0", [0]),
        ("0-3", [0, 1, 2, 3]),
        ("0-1,5-6", [0, 1, 5, 6]),
        ("1,3-5,9", [1, 3, 4, 5, 9]),  # sys/devices/system/cpu/isolated in the node_exporter fixture
        ("0-7:2", [0, 2, 4, 6]),
        ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),
        ("", []),
        ("\n", []),
        ("3,1,1", [1, 3]),
    ],
)
def test_parse_cpu_list(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("bad", ["a", "3-1", "1-", "-1", "0-3:0", "0-100000000", "9000", "0-99999:1/4"])
def test_parse_cpu_list_rejects_garbage(bad):
    with pytest.raises(ValueError):
        parse_cpu_list(bad)


@pytest.mark.parametrize(
    ("cpus", "text"), [([0, 1, 2, 5], "0-2,5"), ([], ""), ([7], "7"), ([1, 3, 4, 5, 9], "1,3-5,9")]
)
def test_format_cpu_list_round_trips(cpus, text):
    assert format_cpu_list(cpus) == text
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    ("mask", "cpus"),
    [("f", [0, 1, 2, 3]), ("00000000,0000000f", [0, 1, 2, 3]), ("1,00000000", [32]), ("0", []), ("c", [2, 3])],
)
def test_cpu_masks(mask, cpus):
    assert parse_cpu_mask(mask) == cpus
    assert parse_cpu_mask(format_cpu_mask(cpus)) == cpus


def test_isolcpus_flags_are_split_from_the_list():
    assert parse_isolcpus("managed_irq,domain,2-3") == ([2, 3], ["managed_irq", "domain"])
    assert parse_isolcpus("1,3") == ([1, 3], [])
