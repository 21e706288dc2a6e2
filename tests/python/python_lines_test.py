#!/usr/bin/env python3
"""The raw frame walk's location-table decoder (src/ledger/python_raw.cpp) against CPython's own:
for every code object of a few hundred standard-library modules, compiled here, the line the
decoder gives each code unit equals the one code.co_lines() gives (None: -1), and a negative
index gives co_firstlineno, as PyCode_Addr2Line does. Skips (77) before Python 3.11 (another table
format, and no raw walk).

usage: python_lines_test.py HOOKS_LIBRARY
"""
import ctypes
import glob
import os
import sys
import sysconfig
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import check, finish  # noqa: E402  (tests/support)

if sys.version_info < (3, 11):
    print("SKIP: the location table format is 3.11's", flush=True)
    sys.exit(77)

hooks = ctypes.CDLL(sys.argv[1])
line = hooks.gpuguard_test_python_line
line.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_long]
line.restype = ctypes.c_int


def code_objects(code):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from code_objects(constant)


files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:300]
codes = units = 0
wrong = []
for path in files:
    try:
        with open(path, "rb") as f:
            module = compile(f.read(), path, "exec")
    except (SyntaxError, ValueError, OSError):
        continue
    for code in code_objects(module):
        codes += 1
        table = code.co_linetable
        expected = {}
        for start, end, number in code.co_lines():
            for unit in range(start // 2, end // 2):
                expected[unit] = -1 if number is None else number
        for unit in range(len(code.co_code) // 2):
            units += 1
            got = line(table, len(table), code.co_firstlineno, unit)
            if got != expected.get(unit, -1) and len(wrong) < 10:
                wrong.append((path, code.co_qualname, unit, got, expected.get(unit)))
        if line(table, len(table), code.co_firstlineno, -1) != code.co_firstlineno and len(wrong) < 10:
            wrong.append((path, code.co_qualname, -1, "not co_firstlineno"))

check(len(files) >= 100 and codes > 1000, f"the standard library gave {len(files)} modules, {codes} code objects")
check(not wrong, f"the decoder agrees with co_lines() on {units} code units of {codes} code objects", wrong)
finish("python.lines")
