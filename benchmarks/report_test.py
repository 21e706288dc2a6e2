#!/usr/bin/env python3
"""report.py on a recorded run (testdata/cpu_sample.json, from this repo's CPU machine): the rows,
verdicts and section replacement come out of the JSON."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sample = os.path.join(here, "testdata", "cpu_sample.json")
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "b.md")
    with open(out, "w") as f:
        f.write("# Benchmarks\n\nintro\n\n## GPU machine\n\nkeep me\n\n## CPU\n\nold numbers\n")
    subprocess.run([sys.executable, os.path.join(here, "report.py"), "bench", "--json-in", sample,
                    "--section", "CPU", "--out", out], check=True, capture_output=True)
    text = open(out).read()
    assert "keep me" in text, "other sections are kept"
    assert "old numbers" not in text, "the named section is replaced"
    assert text.count("## CPU\n") == 1
    assert "| host, stacks off: added per alloc+free pair | 163.7 | 39.3 | +124.4 ns | <= 50 ns | MISS |" in text, text
    assert "| stacks=sampled 1/64: tracked / stacks off | 175.8 | 163.7 | 1.074 x | <= 1.2 x | PASS |" in text, text
    assert "not run (no CUDA device)" in text
print("report.py: all checks passed")
