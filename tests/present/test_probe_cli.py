"""``bmoe-top probe`` as a user runs it (through the CLI's ``main``): its ``--json`` document (a
golden of its structure: the machine's numbers are masked), the text table, ``--remember`` into
the settings file's ``[probe]`` section, and one line with the documented exit status for bad input."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from helpers.documents import masked
from helpers.golden import check_golden
from helpers.typed_json import check_typed

from bmoe_top.tui.cli import main
from bmoe_top.tui.present.probe import ProbeDocument
from bmoe_top.tui.settings import SettingsStore

GOLDEN = Path(__file__).resolve().parent / "golden"
MEASURED = [f"{mode}.*.{k}" for mode in ("direct", "buffered", "best") for k in ("mb_s", "iops", "reads", "bytes",
                                                                                    "seconds")] + ["best.*.depth"] + \
    [f"faults.{k}" for k in ("mb_s", "faults", "bytes", "seconds", "readahead")]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("probe") / "model.bin"
    p.write_bytes(os.urandom(4 << 20))
    with open(p, "rb") as fh:
        os.fsync(fh.fileno())  # written back, so the probe's drops leave it cold
    return p


def test_the_json_document_has_every_depth_of_both_modes(capsys, data):
    code, out, err = cli(capsys, "probe", str(data), "--json", "--slice-bytes", "65536", "--qd-max", "2",
                         "--seconds", "0.05")
    assert code == 0 and err == ""
    doc = orjson.loads(out)
    check_typed(doc, ProbeDocument)
    for row in doc["direct"] + doc["buffered"]:
        assert row["mb_s"] > 0 and row["bytes"] == row["reads"] * 65536
    assert doc["best"]["direct"] in doc["direct"]
    check_golden(GOLDEN / "probe_cli.json", masked(doc, {str(data): "DATA"}, MEASURED))


def test_the_text_table_has_a_row_per_depth(capsys, data):
    code, out, _ = cli(capsys, "probe", str(data), "--slice-bytes", "65536", "--qd-max", "3", "--seconds", "0.05")
    lines = out.splitlines()
    assert code == 0 and lines[1].split()[:2] == ["depth", "O_DIRECT"]
    assert [ln.split()[0] for ln in lines[2:5]] == ["1", "2", "3"]
    assert lines[5].startswith("best O_DIRECT: ") and lines[6].startswith("best buffered: ")
    assert lines[7].startswith("mmap faults (advised sequential, readahead ")


def test_remember_keeps_the_rates_in_the_settings_file(capsys, data, tmp_path):
    config = tmp_path / "settings.toml"
    code, out, err = cli(capsys, "probe", str(data), "--json", "--slice-bytes", "65536", "--qd-max", "2",
                         "--seconds", "0.05", "--remember", "--config", str(config))
    assert code == 0 and f"remembered in {config}" in err
    doc = orjson.loads(out)
    kept = SettingsStore.open(config)
    assert kept.problems == []
    p = kept.settings.probe
    assert p.file == str(data) and p.slice_bytes == 65536
    assert p.direct_mb_s == pytest.approx([r["mb_s"] for r in doc["direct"]])
    assert p.buffered_mb_s == pytest.approx([r["mb_s"] for r in doc["buffered"]])
    assert p.mmap_mb_s == pytest.approx(doc["faults"]["mb_s"]) and p.mmap_mb_s > 0
    assert p.mmap_readahead_kb == doc["faults"]["readahead"] / 1024


@pytest.mark.parametrize(("argv", "status", "says"), [
    (["/nonexistent/model.gguf"], 1, "/nonexistent/model.gguf: no such file"),
    (["{tmp}"], 1, "a directory, not a file"),
    (["{tmp}/empty"], 1, "the file is empty"),
    (["{tmp}/empty", "--qd-max", "0"], 2, "--qd-max 0: must be 1 to 64"),
    (["{tmp}/empty", "--seconds", "0"], 2, "--seconds 0: must be 0.05 to 600"),
    (["{tmp}/empty", "--slice-bytes", "0"], 2, "--slice-bytes 0: must be 1 to 268435456"),
    # above the largest slice: it was found out by the probe, a failure (1) of the file
    (["{tmp}/empty", "--slice-bytes", "268435457"], 2, "--slice-bytes 268435457: must be 1 to 268435456"),
    (["{tmp}/empty", "--remember", "--no-config"], 2, "--remember and --no-config exclude each other"),
])
def test_bad_input_is_one_line_and_its_exit_status(capsys, tmp_path, argv, status, says):
    (tmp_path / "empty").write_bytes(b"")
    code, out, err = cli(capsys, "probe", *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert (code, out) == (status, "")
    assert err.count("\n") == 1 and says in err and err.startswith("bmoe-top: probe: ")
