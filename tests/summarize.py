#!/usr/bin/env python3
"""Adds up the JUnit XML files of every suite tests/run.sh ran and prints the one closing line CI reads:
'N passed, N failed' (', N skipped' when any), after the name of each failed case (CI shows only the tail of the
log). Exits 1 when anything failed or nothing ran."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

passed = failed = skipped = 0
for path in sorted(Path(sys.argv[1]).glob("*.xml")):
    try:
        cases = ET.parse(path).getroot().iter("testcase")
    except ET.ParseError as e:
        print(f"{path.name}: unreadable results ({e})")
        failed += 1
        continue
    for case in cases:
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {path.stem}: {case.get('classname', '')}::{case.get('name', '')}")
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed or passed == 0 else 0)
