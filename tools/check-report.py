#!/usr/bin/env python3
"""Checks residency-replay's timeline and HTML report.

    check-report.py REPLAY SCENARIOS OUT_DIR [--browser]

Replays SCENARIOS with --timeline and --html into OUT_DIR, then:
  * validates the timeline against the Trace Event Format rules Perfetto and
    chrome://tracing rely on (phases and their fields, complete slices that
    nest per track, matched async begin/end pairs, named tracks, finite
    non-negative times), after first proving the validator rejects traces
    broken in each of those ways;
  * with --browser, renders the HTML page in headless Chromium, requires the
    page's own "rendered" console line and no other console output (script
    errors, blocked fetches), and writes OUT_DIR/report.png.
Exit status 0 on success, 1 on a problem, 77 (skipped) with --browser when
Chromium is not installed.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

PHASES = {"X", "C", "i", "b", "e", "M"}
METADATA = {"process_name", "thread_name", "thread_sort_index", "process_sort_index"}


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate(trace):
    """Problems with `trace` as a Trace Event Format document (empty when valid)."""
    problems = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the document is not an object with a traceEvents list"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append("displayTimeUnit must be ms or ns")
    named_tracks = set()
    slices = {}
    async_open = {}
    for index, event in enumerate(trace["traceEvents"]):
        where = f"event {index}"
        if not isinstance(event, dict):
            problems.append(f"{where}: not an object")
            continue
        ph = event.get("ph")
        if ph not in PHASES:
            problems.append(f"{where}: unknown phase {ph!r}")
            continue
        if not isinstance(event.get("pid"), int) or not isinstance(event.get("name"), str):
            problems.append(f"{where}: needs an integer pid and a string name")
            continue
        if ph == "M":
            if event["name"] not in METADATA or not isinstance(event.get("args"), dict):
                problems.append(f"{where}: metadata {event['name']!r} needs a known name and args")
            elif event["name"] == "thread_name":
                named_tracks.add((event["pid"], event.get("tid")))
            continue
        ts = event.get("ts")
        if not number(ts) or ts < 0:
            problems.append(f"{where} ({event['name']}): ts must be a finite non-negative number")
            continue
        if ph == "X":
            dur = event.get("dur")
            if not number(dur) or dur < 0 or not isinstance(event.get("tid"), int):
                problems.append(f"{where} ({event['name']}): a complete slice needs dur >= 0 and a tid")
                continue
            slices.setdefault((event["pid"], event["tid"]), []).append((ts, dur, event["name"]))
        elif ph == "C":
            args = event.get("args")
            if not isinstance(args, dict) or not args or not all(number(v) for v in args.values()):
                problems.append(f"{where} ({event['name']}): counter args must be numbers")
        elif ph == "i":
            if event.get("s", "t") not in ("g", "p", "t"):
                problems.append(f"{where} ({event['name']}): instant scope must be g, p or t")
            if event.get("s", "t") == "t" and not isinstance(event.get("tid"), int):
                problems.append(f"{where} ({event['name']}): a thread instant needs a tid")
        else:  # b, e
            key = (event["pid"], event.get("cat"), event.get("id"))
            if not isinstance(event.get("cat"), str) or event.get("id") is None:
                problems.append(f"{where} ({event['name']}): async events need cat and id")
            elif ph == "b":
                if key in async_open:
                    problems.append(f"{where} ({event['name']}): async id {key[2]} begun twice")
                async_open[key] = ts
            elif key not in async_open:
                problems.append(f"{where} ({event['name']}): async end without a begin")
            elif ts < async_open.pop(key):
                problems.append(f"{where} ({event['name']}): async span ends before it begins")
        if "tid" in event and ph in ("X", "i") and (event["pid"], event["tid"]) not in named_tracks:
            problems.append(f"{where} ({event['name']}): track {event['tid']} has no thread_name")
    for key in async_open:
        problems.append(f"async span {key[2]} in process {key[0]} never ends")
    epsilon = 1e-6
    for (pid, tid), items in slices.items():
        stack = []
        for ts, dur, name in sorted(items, key=lambda item: (item[0], -item[1])):
            while stack and ts >= stack[-1][0] + stack[-1][1] - epsilon and not (dur == 0 and ts == stack[-1][0]):
                stack.pop()
            if stack and ts + dur > stack[-1][0] + stack[-1][1] + epsilon:
                problems.append(f"process {pid} track {tid}: slice {name!r} overlaps {stack[-1][2]!r} without nesting")
            stack.append((ts, dur, name))
    return problems


def self_test():
    """The validator must reject each kind of breakage."""
    base = [
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": "t"}},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "outer"},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 2, "dur": 3, "name": "inner"},
        {"ph": "b", "pid": 1, "cat": "c", "id": 1, "ts": 1, "name": "span"},
        {"ph": "e", "pid": 1, "cat": "c", "id": 1, "ts": 4, "name": "span"},
        {"ph": "C", "pid": 1, "ts": 3, "name": "bytes", "args": {"used": 5}},
    ]
    assert validate({"traceEvents": base}) == [], validate({"traceEvents": base})
    broken = {
        "overlap": base + [{"ph": "X", "pid": 1, "tid": 1, "ts": 8, "dur": 5, "name": "late"}],
        "unmatched begin": base + [{"ph": "b", "pid": 1, "cat": "c", "id": 2, "ts": 1, "name": "open"}],
        "end before begin": base[:3] + [{"ph": "b", "pid": 1, "cat": "c", "id": 1, "ts": 5, "name": "s"},
                                        {"ph": "e", "pid": 1, "cat": "c", "id": 1, "ts": 4, "name": "s"}],
        "negative ts": base + [{"ph": "X", "pid": 1, "tid": 1, "ts": -1, "dur": 0, "name": "early"}],
        "unnamed track": base + [{"ph": "X", "pid": 1, "tid": 9, "ts": 0, "dur": 1, "name": "lost"}],
        "text counter": base + [{"ph": "C", "pid": 1, "ts": 0, "name": "c", "args": {"used": "5"}}],
        "unknown phase": base + [{"ph": "Q", "pid": 1, "ts": 0, "name": "q"}],
        "no dur": base + [{"ph": "X", "pid": 1, "tid": 1, "ts": 20, "name": "open-ended"}],
    }
    for what, events in broken.items():
        if not validate({"traceEvents": events}):
            raise AssertionError(f"the validator accepted a trace with {what}")


def render(html, out_dir, scenarios):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("check-report: chromium is not installed; skipping the browser check")
        return 77
    screenshot = os.path.join(out_dir, "report.png")
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
             "--enable-logging=stderr", "--v=0", "--window-size=1200,1600", f"--screenshot={screenshot}",
             "file://" + os.path.abspath(html)],
            capture_output=True, text=True, timeout=120)
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    expected = f"residency report rendered: {scenarios} scenarios"
    rendered = [line for line in console if expected in line]
    others = [line for line in console if expected not in line]
    problems = []
    if run.returncode != 0:
        problems.append(f"chromium exited with {run.returncode}")
    if not rendered:
        problems.append(f"the page never logged '{expected}'")
    problems += [f"console: {line}" for line in others]
    if not os.path.isfile(screenshot):
        problems.append("no screenshot was written")
    else:
        with open(screenshot, "rb") as image:
            header = image.read(8)
        if header != b"\x89PNG\r\n\x1a\n" or os.path.getsize(screenshot) < 10_000:
            problems.append("the screenshot is not a picture of a page")
    for problem in problems:
        print("check-report:", problem)
    if not problems:
        print(f"check-report: chromium rendered {scenarios} scenarios without console errors; screenshot {screenshot}")
    return 1 if problems else 0


def main():
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    if len(args) != 3:
        print(__doc__)
        return 2
    replay, scenarios, out_dir = args
    os.makedirs(out_dir, exist_ok=True)
    self_test()
    timeline_path = os.path.join(out_dir, "timeline.json")
    html_path = os.path.join(out_dir, "report.html")
    run = subprocess.run([replay, scenarios, "--timeline", timeline_path, "--html", html_path],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        print(run.stdout[-4000:], run.stderr[-4000:])
        print(f"check-report: residency-replay exited with {run.returncode}")
        return 1
    with open(timeline_path, encoding="utf-8") as handle:
        trace = json.load(handle)
    problems = validate(trace)
    for problem in problems[:50]:
        print("check-report: timeline:", problem)
    if problems:
        return 1
    processes = sum(1 for event in trace["traceEvents"] if event["ph"] == "M" and event["name"] == "process_name")
    print(f"check-report: timeline of {processes} scenarios, {len(trace['traceEvents'])} events, valid")
    if "--browser" in sys.argv[1:]:
        return render(html_path, out_dir, processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
