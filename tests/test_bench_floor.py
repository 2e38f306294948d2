"""bench/floor.py: the streamed floor does the whole floor's work, block by block.

The floor is what dtrace's big-job ratio is measured against: a floor that skipped events would
flatter dtrace. Gunzipped and scanned in blocks far smaller than the file (each block's complete
events, the rest carried over), a trace gives the record count and the byte count the scanner
finds in one call over the whole file, gzip or plain JSON.
"""

import gzip
import os
import shutil
import sys

import pytest

from dtrace.readers import _scanned

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

floor = pytest.importorskip("floor")
EXAMPLE = os.path.join(ROOT, "examples", "traces", "sampled_rank-0.json.gz")
# CI sets DTRACE_REQUIRE_SCANNER: there the scanner's absence fails, as in test_scan_object
REQUIRED = os.environ.get("DTRACE_REQUIRE_SCANNER", "") not in ("", "0")
pytestmark = pytest.mark.skipif(
    _scanned.new_scanner() is None and not REQUIRED, reason="the compiled scanner is not built"
)


@pytest.mark.parametrize("compressed", [True, False])
def test_the_streamed_floor_scans_every_event_of_the_whole_file(tmp_path, compressed):
    path = str(tmp_path / "rank-0.json")
    if compressed:
        path += ".gz"
        shutil.copy(EXAMPLE, path)
    else:
        with gzip.open(EXAMPLE, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    whole = floor.gunzip_scan(path)
    assert whole["records"] > 1000
    for block in (4096, 65_536, 0):  # blocks of a few events each, a few hundred, the reader's 4 MB
        streamed = floor.gunzip_scan_streamed(path, block=block)
        assert (streamed["records"], streamed["json_bytes"]) == (whole["records"], whole["json_bytes"])
