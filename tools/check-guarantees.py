#!/usr/bin/env python3
"""Checks docs/guarantees.md: every row names at least a unit test and one
other independent suite (scenario, property, invariant checker or runtime
contract), and every check it names exists. Usage: check-guarantees.py ROOT"""
import pathlib
import re
import sys


def main() -> int:
    if len(sys.argv) != 2 or not (pathlib.Path(sys.argv[1]) / "docs" / "guarantees.md").is_file():
        print("usage: check-guarantees.py ROOT (the source tree, holding docs/guarantees.md)", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    table = (root / "docs" / "guarantees.md").read_text(encoding="utf-8")
    sources = {
        "unit": "".join(p.read_text(encoding="utf-8") for d in ("lib/tests", "harness/tests") for p in (root / d).glob("*.cpp")),
        "property": "".join(p.read_text(encoding="utf-8") for p in (root / "property_tests").glob("*.cpp")),
        "invariant": "".join((root / "harness/src" / name).read_text(encoding="utf-8")
                             for name in ("invariant_checker.cpp", "decision_checker.cpp", "explain_checker.cpp",
                                          "verdict_checker.cpp")),
        "contract": (root / "harness/contract/runtime_contract.cpp").read_text(encoding="utf-8"),
    }

    def exists(kind: str, name: str) -> bool:
        if kind == "scenario":
            return (root / "scenarios" / name).is_file()
        if kind in ("unit", "property"):
            suite, _, test = name.partition(".")
            macro = r"(TEST|TEST_F|RC_GTEST_PROP)" if kind == "unit" else r"RC_GTEST_PROP"
            return re.search(macro + r"\(\s*" + re.escape(suite) + r"\s*,\s*" + re.escape(test) + r"\b", sources[kind]) is not None
        if kind == "invariant":
            return f'"{name}"' in sources[kind]
        if kind == "contract":
            return f'check("{name}"' in sources[kind]
        return False

    problems, rows = [], 0
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"[A-Z]\d+[a-z]?", cells[0]):
            continue
        rows += 1
        ident, _, refs = cells
        kinds = set()
        for ref in (r.strip() for r in refs.split(";") if r.strip()):
            kind, _, name = ref.partition(":")
            if not exists(kind, name):
                problems.append(f"{ident}: '{ref}' does not exist")
            kinds.add(kind)
        if "unit" not in kinds or not kinds & {"scenario", "property", "invariant", "contract"}:
            problems.append(f"{ident}: needs a unit test and a scenario, property, invariant or contract check (has {sorted(kinds)})")
    for problem in problems:
        print(problem)
    print(f"guarantees: {rows} rows, {len(problems)} problems")
    return 1 if problems or rows == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
