#!/usr/bin/env python3
"""Medians, ratios and a chart from compare-goplugin.sh's rounds (supervisor-bench --json and the
go-plugin host's JSON): prints the table, writes comparison.json and an SVG bar chart of each ratio
against its target (standard library only)."""
import argparse
import datetime
import json
import platform
import statistics

p = argparse.ArgumentParser()
p.add_argument("--runs", type=int, required=True)
p.add_argument("--dir", required=True)
p.add_argument("--go-plugin-version", default="?")
p.add_argument("--json", required=True)
p.add_argument("--svg", required=True)
a = p.parse_args()

ours_runs, go_runs = [], []
for i in range(1, a.runs + 1):
    ours_runs.append({m["name"]: m["value"] for m in json.load(open(f"{a.dir}/ours-{i}.json"))})
    go_runs.append(json.load(open(f"{a.dir}/go-{i}.json")))


def ours(name):
    return statistics.median(r[name] for r in ours_runs)


def go(key):
    return statistics.median(r[key] for r in go_runs)


CALL = "call p50 (CLI socket → supervisor → worker → back)"
POLLING = ", workers polling 100 µs"
TPUT = "call throughput, 64 in flight"
P2P = "plugin → plugin call p50 (client → A → B → A → client)"
P2PT = "plugin → plugin throughput, 64 in flight"
P2PS = "plugin → plugin call p50, caller in Swift, typed"
P2PST = "plugin → plugin throughput, 64 in flight, caller in Swift, typed"
P2PSI = "plugin → plugin call p50, caller in Swift, typed, inline"
P2PSIT = "plugin → plugin throughput, 64 in flight, caller in Swift, typed, inline"
P2PC = "plugin → plugin call p50, caller in C"
P2PCT = "plugin → plugin throughput, 64 in flight, caller in C"
CPU_SWIFT = "plugin → plugin: the caller's worker CPU per call, 64 in flight, Swift, typed"
CPU_SWIFT_INLINE = "plugin → plugin: the caller's worker CPU per call, 64 in flight, Swift, typed, inline"
CPU_C = "plugin → plugin: the caller's worker CPU per call, 64 in flight, C relay"
START1 = "start → ready, 1 plugin, sandbox on"
START50 = "start → ready, 50 plugins (wide), sandbox on"
START50OFF = "start → ready, 50 plugins (wide), sandbox off"
CRASH = "crash → serving again (first restart), median"
CRASH_KEPT = "crash → serving again (first restart), standbyWorkers always, median"
PSS = "worker PSS with 50 workers, median"
START_CPU = "start CPU per worker to ready, 50 plugins (wide), sandbox on, median"
EMBEDDED = "embedded host call p50 (task → worker → back, one hop)"
EMBEDDEDT = "embedded host call throughput, 64 in flight"
CLIENT = "SupervisorClient call p50 (task → worker over its direct link → back)"
CLIENTT = "SupervisorClient call throughput, 64 in flight"
STREAM = "stream throughput, 64 KiB elements, plugin → SupervisorClient"
STREAM_BYTES = "stream throughput, 64 KiB elements of raw bytes, plugin → SupervisorClient"
BLOB1 = "1 MiB bytes result, call p50 (plugin → SupervisorClient, memfd)"
BLOB256 = "256 MiB bytes result, call time"

# (label, ours, theirs or reference, ratio target as (op, value), lower is better)
rows = [
    ("host call p50 vs go-plugin's one hop", ours(CALL), go("callP50Us"), "µs", ("≤", 0.6)),
    ("64 in flight vs go-plugin", ours(TPUT), go("throughput64"), "/s", ("≥", 3.5)),
]
if all(EMBEDDED in r and EMBEDDEDT in r for r in ours_runs):
    # PluginHost (SPEC §12): the supervisor in the calling program, one hop like go-plugin's.
    rows += [
        ("embedded host (PluginHost) call p50 vs go-plugin's one hop", ours(EMBEDDED), go("callP50Us"), "µs", ("≤", 0.5)),
        ("embedded host (PluginHost) 64 in flight vs go-plugin", ours(EMBEDDEDT), go("throughput64"), "/s", ("≥", 3.5)),
    ]
if all(CLIENT in r and CLIENTT in r for r in ours_runs):
    # SupervisorClient (SPEC §12): a program beside a running supervisor, over its direct link.
    rows += [
        ("SupervisorClient call p50 (direct link) vs go-plugin's one hop", ours(CLIENT), go("callP50Us"), "µs", ("≤", 0.6)),
        ("SupervisorClient 64 in flight (direct link) vs go-plugin", ours(CLIENTT), go("throughput64"), "/s", ("≥", 3.5)),
    ]
if all(STREAM in r for r in ours_runs) and all("streamMBps" in r for r in go_runs):
    # SPEC §13: a stream of 64 KiB elements, against go-plugin's gRPC server stream of 64 KiB messages.
    rows += [
        ("stream of 64 KiB elements, plugin → program, vs go-plugin's gRPC stream", ours(STREAM), go("streamMBps"), "MB/s", ("≥", 2.0)),
    ]
if all(STREAM_BYTES in r for r in ours_runs) and all("streamMBps" in r for r in go_runs):
    # The same with elements of raw bytes (StreamOutput<Bytes>): what gRPC's bytes messages carry.
    rows += [
        ("stream of 64 KiB raw-bytes elements, plugin → program, vs go-plugin's gRPC stream", ours(STREAM_BYTES), go("streamMBps"), "MB/s", ("≥", 2.0)),
    ]
if all(BLOB1 in r for r in ours_runs) and all("blob1MiBP50Us" in r for r in go_runs):
    # SPEC §13: raw bytes as a sealed memfd, against gRPC's bytes message (its limits raised).
    rows += [
        ("1 MiB bytes result p50 vs go-plugin's gRPC unary call", ours(BLOB1), go("blob1MiBP50Us"), "µs", ("≤", 0.5)),
        ("256 MiB bytes result vs go-plugin's gRPC (limits raised)", ours(BLOB256), go("blob256MiBMs"), "ms", None),
    ]
if all(CALL + POLLING in r and TPUT + POLLING in r for r in ours_runs):
    # Not the default (`workerSpinMicroseconds: 100` in the configuration): what polling buys.
    rows += [
        ("host call p50, workers polling (not the default), vs go-plugin", ours(CALL + POLLING), go("callP50Us"), "µs", ("≤", 0.6)),
        ("64 in flight, workers polling (not the default), vs go-plugin", ours(TPUT + POLLING), go("throughput64"), "/s", ("≥", 3.5)),
    ]
rows += [
    ("start → ready, 1 plugin vs go-plugin", ours(START1), go("start1Ms"), "ms", None),
    # The target: half of go-plugin's parallel start.
    ("50 plugins ready vs go-plugin, in parallel", ours(START50), go("start50Ms"), "ms", ("≤", 0.5)),
    ("50 plugins ready vs go-plugin, one after the other", ours(START50), go("start50SequentialMs"), "ms", ("≤", 0.33)),
    ("50 plugins, sandbox off, vs go-plugin in parallel", ours(START50OFF), go("start50Ms"), "ms", None),
    ("plugin→plugin p50, Swift JSONValue relay, vs a host call", ours(P2P), ours(CALL), "µs", ("≤", 2.0)),
    ("plugin→plugin throughput, Swift JSONValue relay, vs host calls", ours(P2PT), ours(TPUT), "/s", ("≥", 0.5)),
]
if all(P2PS in r and P2PST in r for r in ours_runs):
    rows += [
        # Issue 34's targets for the Swift SDK's caller: 1.6× a host call, half its throughput.
        ("plugin→plugin p50, Swift SDK typed, vs a host call", ours(P2PS), ours(CALL), "µs", ("≤", 1.6)),
        ("plugin→plugin throughput, Swift SDK typed, vs host calls", ours(P2PST), ours(TPUT), "/s", ("≥", 0.5)),
    ]
if all(P2PSI in r and P2PSIT in r for r in ours_runs):
    # `execution: .inline`: the SDK's method without thread hops (docs/abi.md).
    rows += [
        ("plugin→plugin p50, Swift SDK typed, inline method, vs a host call", ours(P2PSI), ours(CALL), "µs", ("≤", 1.6)),
        ("plugin→plugin throughput, Swift SDK typed, inline method, vs host calls", ours(P2PSIT), ours(TPUT), "/s", ("≥", 0.5)),
    ]
if all(P2PC in r and P2PCT in r for r in ours_runs):
    rows += [
        ("plugin→plugin p50, caller in C, vs a host call", ours(P2PC), ours(CALL), "µs", ("≤", 2.0)),
        ("plugin→plugin throughput, caller in C, vs host calls", ours(P2PCT), ours(TPUT), "/s", ("≥", 0.5)),
    ]
if all(CPU_SWIFT in r and CPU_C in r for r in ours_runs):
    # The Swift caller's worker CPU per call against the C relay's, both with 64 in flight (the target: ≤ 1.5×).
    rows += [
        ("plugin→plugin: the Swift SDK typed caller's worker CPU per call vs the C relay's", ours(CPU_SWIFT), ours(CPU_C), "µs", ("≤", 1.5)),
        ("plugin→plugin: the same, inline method, vs the C relay's", ours(CPU_SWIFT_INLINE), ours(CPU_C), "µs", ("≤", 1.5)),
    ]
absolute = []
for name, unit, target in [(CRASH, "ms", ("≤", 3.0)), (CRASH_KEPT, "ms", ("≤", 3.0)), (PSS, "MiB", ("≤", 2.0)),
                           (START_CPU, "ms", ("≤", 1.5))]:
    values = [r[name] for r in ours_runs if name in r]
    if values:
        absolute.append((name, statistics.median(values), unit, target))

result = {
    "date": datetime.date.today().isoformat(),
    "machine": f"{platform.machine()}, {platform.system()} {platform.release()}",
    "runs": a.runs,
    "goPlugin": a.go_plugin_version,
    "ratios": [],
    "absolute": [],
}
print(f"{'':72} {'ours':>10} {'theirs':>10} {'ratio':>7}  target")
for label, mine, theirs, unit, target in rows:
    ratio = mine / theirs
    met = None if target is None else (ratio <= target[1] if target[0] == "≤" else ratio >= target[1])
    result["ratios"].append({"what": label, "ours": round(mine, 2), "theirs": round(theirs, 2), "unit": unit,
                             "ratio": round(ratio, 3), "target": None if target is None else f"{target[0]} {target[1]}",
                             "met": met})
    t = "" if target is None else f"{target[0]} {target[1]}× {'met' if met else 'NOT met'}"
    print(f"{label:72} {mine:10.1f} {theirs:10.1f} {ratio:6.2f}×  {t}")
for name, value, unit, target in absolute:
    met = value <= target[1]
    result["absolute"].append({"what": name, "value": round(value, 2), "unit": unit, "target": f"{target[0]} {target[1]} {unit}", "met": met})
    print(f"{name:72} {value:10.2f} {unit:>10}          {target[0]} {target[1]} {unit} {'met' if met else 'NOT met'}")
json.dump(result, open(a.json, "w"), indent=1, ensure_ascii=False)

# The chart: one bar per ratio (log scale, 1× marked), the target as a tick; green when met.
width, left, bar_h, gap = 900, 380, 22, 12
top = 50
height = top + len(result["ratios"]) * (bar_h + gap) + 40
import math
lo, hi = 0.05, 20.0


def x(v):
    return left + (math.log10(max(lo, min(hi, v))) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (width - left - 30)


svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
       f'<text x="10" y="20" font-size="14" font-weight="bold">sandboxed plugin runner vs HashiCorp go-plugin {a.go_plugin_version}: ratios ({result["date"]}, median of {a.runs} runs)</text>',
       f'<text x="10" y="38" fill="#555">lower is better for times, higher for throughput; the black tick is the target; log scale</text>']
for v in [0.1, 0.33, 0.5, 1, 2, 5, 10]:
    svg.append(f'<line x1="{x(v):.1f}" y1="{top - 6}" x2="{x(v):.1f}" y2="{height - 30}" stroke="{"#999" if v == 1 else "#e5e5e5"}"/>')
    svg.append(f'<text x="{x(v):.1f}" y="{height - 14}" text-anchor="middle" fill="#555">{v}×</text>')
for i, r in enumerate(result["ratios"]):
    y = top + i * (bar_h + gap)
    color = "#888" if r["met"] is None else ("#2e8b57" if r["met"] else "#cd5c5c")
    svg.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end">{r["what"]}</text>')
    svg.append(f'<rect x="{x(lo):.1f}" y="{y}" width="{x(r["ratio"]) - x(lo):.1f}" height="{bar_h}" fill="{color}"/>')
    svg.append(f'<text x="{x(r["ratio"]) + 4:.1f}" y="{y + bar_h * 0.7:.1f}">{r["ratio"]:.2f}×</text>')
    if r["target"]:
        t = float(r["target"].split()[1])
        svg.append(f'<line x1="{x(t):.1f}" y1="{y - 3}" x2="{x(t):.1f}" y2="{y + bar_h + 3}" stroke="black" stroke-width="2"/>')
svg.append("</svg>")
open(a.svg, "w").write("\n".join(svg) + "\n")
print(f"wrote {a.json} and {a.svg}")
