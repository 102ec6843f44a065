#!/usr/bin/python3
"""Checks scenarios/schema/scenario.schema.json against the loader, which stays
the authority: every shipped scenario must validate, and every broken variant
below must be rejected by both the schema and the loader (residency-replay
exits 2 for a file that does not load). Needs Debian's python3-yaml and
python3-jsonschema. Usage: check-schema.py ROOT REPLAY"""
import pathlib
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import yaml
except ImportError as missing:  # not set up by tools/setup.sh: skip, saying why
    print(f"check-schema: skipped, {missing.name} is missing (apt-get install python3-yaml python3-jsonschema)")
    sys.exit(77)

GOOD = """
name: base
values:
  w: {bytes: 4KiB, adopt_at: pageable-host}
steps:
  - move: {value: w, to: pinned-host}
"""

# Each variant breaks one rule the loader enforces.
BROKEN = {
    "unknown top-level key": "name: x\ncolour: red\nsteps: []\n",
    "missing name": "steps: []\n",
    "steps not a list": "name: x\nsteps: 3\n",
    "unknown step": "name: x\nsteps:\n  - teleport: {}\n",
    "two operations in a step": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host}\nsteps:\n  - {snapshot: {}, verify: {}}\n",
    "value with both adopt_at and source_at": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host, source_at: pinned-host}\nsteps: []\n",
    "value with neither elements nor bytes": "name: x\nvalues:\n  w: {adopt_at: pageable-host}\nsteps: []\n",
    "malformed size": "name: x\nvalues:\n  w: {bytes: 4KB1, adopt_at: pageable-host}\nsteps: []\n",
    "malformed location": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: gpu0}\nsteps: []\n",
    "device index past 127": "name: x\nruntime: {cuda_devices: 128}\nvalues:\n  w: {bytes: 4KiB, adopt_at: cuda:128}\nsteps: []\n",
    "unknown dtype": "name: x\nvalues:\n  w: {bytes: 4KiB, dtype: float8, adopt_at: pageable-host}\nsteps: []\n",
    "unknown mode": "name: x\nvalues:\n  w: {bytes: 4KiB, mode: shared, adopt_at: pageable-host}\nsteps: []\n",
    "unknown value key": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host, colour: red}\nsteps: []\n",
    "unknown expectation": "name: x\nsteps:\n  - snapshot: {}\n    expect: {weather: sunny}\n",
    "unknown error kind": "name: x\nsteps:\n  - snapshot: {}\n    expect: {error: sadness}\n",
    "ensure without at": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host}\nsteps:\n  - ensure: {value: w}\n",
    "unknown action": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host}\nplans:\n  p: {enter: [{teleport: {value: w}}]}\nsteps: []\n",
    "unknown fault operation": "name: x\nfaults:\n  - {name: f, operation: explode}\nsteps: []\n",
    "probability above one": "name: x\nfaults:\n  - {name: f, operation: copy, probability: 1.5}\nsteps: []\n",
    "unknown fault effect": "name: x\nfaults:\n  - {name: f, operation: copy, effect: melt}\nsteps: []\n",
    "acquire without as": "name: x\nvalues:\n  w: {bytes: 4KiB, adopt_at: pageable-host}\nsteps:\n  - acquire: {values: [w], at: pageable-host}\n",
    "reserve without label": "name: x\nsteps:\n  - reserve: {at: pinned-host, bytes: 4KiB, as: r}\n",
    "negative advance": "name: x\nsteps:\n  - advance: {ns: -5}\n",
    "decide without requirements": "name: x\nsteps:\n  - decide: {name: r}\n",
    "unknown payload kind": "name: x\nvalues:\n  w: {bytes: 4KiB, payload: imaginary, adopt_at: pageable-host}\nsteps: []\n",
    "repeat without a variable": "name: x\nsteps:\n  - repeat: {range: 3}\n    steps: [{snapshot: {}}]\n",
    "repeat with in and range": "name: x\nsteps:\n  - repeat: {for: i, range: 3, in: [1]}\n    steps: [{snapshot: {}}]\n",
    "search limit below one": "name: x\ncontroller: {search_state_limit: 0}\nsteps: []\n",
    "unknown runtime kind": "name: x\nruntime: {kind: quantum}\nsteps: []\n",
    "unknown limits key": "name: x\nlimits: {memory: 4GiB}\nsteps: []\n",
}


def main() -> int:
    root, replay = pathlib.Path(sys.argv[1]), sys.argv[2]
    schema = yaml.safe_load((root / "scenarios/schema/scenario.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    problems = 0
    shipped = sorted(p for p in (root / "scenarios").rglob("*.yaml"))
    for path in shipped:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
        for error in errors[:3]:
            where = "/".join(str(part) for part in error.absolute_path)
            print(f"{path.relative_to(root)}: schema rejects /{where}: {error.message[:200]}")
            problems += 1
        first_line = (path.read_text(encoding="utf-8").splitlines() or [""])[0]
        if not first_line.startswith("# yaml-language-server: $schema="):
            print(f"{path.relative_to(root)}: first line must name the schema (# yaml-language-server: $schema=...)")
            problems += 1
    with tempfile.TemporaryDirectory() as work:
        good = pathlib.Path(work) / "good.yaml"
        good.write_text(GOOD, encoding="utf-8")
        if list(validator.iter_errors(yaml.safe_load(GOOD))) or subprocess.run([replay, str(good)], capture_output=True).returncode != 0:
            print("the base scenario of the broken variants must load and pass")
            problems += 1
        for name, text in BROKEN.items():
            path = pathlib.Path(work) / "broken.yaml"
            path.write_text(text, encoding="utf-8")
            schema_rejects = bool(list(validator.iter_errors(yaml.safe_load(text))))
            loader = subprocess.run([replay, str(path)], capture_output=True, text=True)
            loader_rejects = loader.returncode == 2
            if not schema_rejects or not loader_rejects:
                print(f"broken variant '{name}': schema {'rejects' if schema_rejects else 'ACCEPTS'}, "
                      f"loader {'rejects' if loader_rejects else 'ACCEPTS (exit ' + str(loader.returncode) + ')'}")
                problems += 1
    print(f"schema: {len(shipped)} shipped scenarios, {len(BROKEN)} broken variants, {problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
