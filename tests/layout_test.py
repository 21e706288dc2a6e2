#!/usr/bin/env python3
"""The layout of src/ (docs/design.md, "Layout"): folders stand on floors, and a folder uses only
folders on lower floors, never one beside or above it. Checked twice: by the files each source
includes, and, given a build folder, by the symbols each compiled object takes from the others
(a call through a public header shows only there). Also: the header-only tier of include/gpuguard
includes nothing of the compiled core's (include/gpuguard/core), the interposer's internal
header is included by the interposer and the ledger alone, and design.md's map names every
folder of src/.

usage: layout_test.py SOURCE_DIR [BUILD_DIR]
"""
import collections
import json
import os
import re
import subprocess
import sys

# Bottom floor first. A folder may use the folders of lower floors only.
FLOORS = [
    ["util"],
    ["options"],
    ["ledger"],
    ["process"],
    ["tracking"],
    ["exit"],
    ["outputs"],
    ["scopes"],
    ["lifecycle"],
    ["preload", "cli"],
]
FLOOR = {folder: level for level, folders in enumerate(FLOORS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)

failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message)


def folder_of(relative):
    return relative.split("/", 1)[0] if "/" in relative else "."


def sources(root):
    for top, _, names in os.walk(os.path.join(root, "src")):
        for name in names:
            if name.endswith((".cpp", ".hpp", ".h")):
                path = os.path.join(top, name)
                yield os.path.relpath(path, os.path.join(root, "src")), path


def check_edge(kind, user, used, example):
    if user == used:
        return
    if user not in FLOOR or used not in FLOOR:
        fail(f"{kind}: src/{user if user not in FLOOR else used}/ stands on no floor (add it to docs/design.md "
             f"and to this test's FLOORS): {example}")
        return
    if FLOOR[used] >= FLOOR[user]:
        where = "beside" if FLOOR[used] == FLOOR[user] else "above"
        fail(f"{kind}: src/{user}/ uses src/{used}/, which stands {where} it: {example}")


def check_includes(root):
    known = dict(sources(root))
    edges = collections.defaultdict(set)
    for relative, path in known.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for target in INCLUDE.findall(text):
            for candidate in (os.path.normpath(os.path.join(os.path.dirname(relative), target)), os.path.normpath(target)):
                if candidate in known:
                    user, used = folder_of(relative), folder_of(candidate)
                    check_edge("include", user, used, f"src/{relative} includes {target}")
                    if user != used:
                        edges[user].add(used)
                    break
    print(f"includes: {sum(len(v) for v in edges.values())} arrows between {len(edges)} folders of src/")


def check_symbols(root, build):
    commands = os.path.join(build, "compile_commands.json")
    if not os.path.exists(commands):
        fail(f"no {commands}: configure with CMAKE_EXPORT_COMPILE_COMMANDS (the project sets it)")
        return
    src = os.path.realpath(os.path.join(root, "src")) + os.sep
    objects = {}
    with open(commands, encoding="utf-8") as f:
        for entry in json.load(f):
            source = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
            words = entry.get("command", "").split() or entry.get("arguments", [])
            if not source.startswith(src) or "-o" not in words:
                continue
            # The project's own libraries and the command-line tool, not test programs built from
            # the same sources.
            output = os.path.join(entry["directory"], words[words.index("-o") + 1])
            if os.path.relpath(output, build).startswith(("tests", "benchmarks", "examples", "adapters")):
                continue
            objects[output] = os.path.relpath(source, src)
    defined, wanted = {}, collections.defaultdict(set)
    for obj, relative in objects.items():
        if not os.path.exists(obj):
            fail(f"{obj} was not built: build the project before this test")
            continue
        names = subprocess.run(["nm", "-C", "-g", "--defined-only", obj], capture_output=True, text=True, check=True).stdout
        for line in names.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "TDBR":
                defined.setdefault(parts[2], relative)
        names = subprocess.run(["nm", "-C", "-u", obj], capture_output=True, text=True, check=True).stdout
        for line in names.splitlines():
            wanted[relative].add(line.strip().split(" ", 1)[-1])
    arrows = 0
    for relative, symbols in wanted.items():
        for symbol in symbols:
            where = defined.get(symbol)
            # The interposer defines dlsym itself; every other use of dlsym is the system's.
            if where is None or where == relative or symbol.startswith("dlsym"):
                continue
            user, used = folder_of(relative), folder_of(where)
            if user != used:
                arrows += 1
            check_edge("symbol", user, used, f"src/{relative} takes {symbol[:80]} from src/{where}")
    print(f"symbols: {len(objects)} objects, {arrows} uses across folders")


def check_headers(root):
    include = os.path.join(root, "include", "gpuguard")
    for top, _, names in os.walk(include):
        for name in names:
            path = os.path.join(top, name)
            relative = os.path.relpath(path, include)
            if relative.startswith("core" + os.sep):
                continue
            with open(path, encoding="utf-8") as f:
                for target in INCLUDE.findall(f.read()):
                    if target.startswith("gpuguard/core/"):
                        fail(f"include/gpuguard/{relative} is header-only but includes the compiled core's {target}")
    allowed = ("src/preload/", "src/ledger/ledger.cpp", "tests/")
    for base in ("src", "tests", "adapters", "benchmarks", "examples", "include"):
        for top, _, names in os.walk(os.path.join(root, base)):
            for name in names:
                if not name.endswith((".cpp", ".hpp", ".cu", ".h")):
                    continue
                path = os.path.join(top, name)
                relative = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    if "ledger/deferred_source.hpp" in f.read() and not relative.startswith(allowed):
                        fail(f"{relative} includes ledger/deferred_source.hpp, the interposer's own header")


def check_design_map(root):
    with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
        design = f.read()
    section = design.split("## Layout", 1)
    if len(section) != 2:
        fail("docs/design.md has no '## Layout' section")
        return
    layout = section[1].split("\n## ", 1)[0]
    folders = sorted(d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d)))
    for folder in folders:
        if f"{folder}/" not in layout:
            fail(f"docs/design.md's Layout does not name src/{folder}/")
        if folder not in FLOOR:
            fail(f"src/{folder}/ stands on no floor of this test")
    for folder in FLOOR:
        if folder not in folders:
            fail(f"this test's FLOORS names src/{folder}/, which does not exist")
    print(f"design.md: the Layout names {len(folders)} folders of src/")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    root = sys.argv[1]
    check_includes(root)
    if len(sys.argv) == 3:
        check_symbols(root, sys.argv[2])
    check_headers(root)
    check_design_map(root)
    if failures:
        print(f"layout: {len(failures)} failure(s)")
        return 1
    print("layout: every folder uses only the floors below it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
