"""Emulation fidelity of the test bed's links: one message of S bytes over an open TCP
connection, measured time / (alpha + S/rate), with the old bucket and the new one.

    python bench/links.py            # full: 10 KB-10 MB at 20 Mbit, 100 Mbit, 1 Gbit; ~4 minutes (root)
    python bench/links.py --quick    # smoke: 3 sizes, 2 rates, 2 repeats

alpha is the path's median one-way time of a 1-byte message, measured on the same link
with the same shaping just before (``calibrate.transfers``); S/rate uses the set rate, so a
large message reads ~1.046 (TCP/IP and Ethernet headers: 1514-byte frames carry 1448
bytes). "before" applies the old bucket, ``max(128 KiB, 10 ms of traffic)``, here only;
"after" is ``links.shape``. Unshaped veth and loopback rows show their own alpha and
beta (``calibrate.link_parameters``). Results: bench/results/links.json and .md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import workbench as wb
from workbench.kernel.testbed import calibrate, links

OUT = Path(__file__).resolve().parent / "results"
RATES = {"20 Mbit": 20_000_000, "100 Mbit": 100_000_000, "1 Gbit": 1_000_000_000}


def old_shape(bed, host, bits):
    """The shaping before the fix (for this comparison only): a bucket of max(128 KiB, 10 ms)."""
    for prefix, dev in ((["tc"], bed.veth(host)), (["tc", "-n", bed.netns(host)], "eth0")):
        subprocess.run([*prefix, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
                        "burst", str(max(128 * 1024, bits // 800)), "latency", "20ms"], check=True, capture_output=True)


def ratios(bed, bits, sizes, repeats):
    """{S: [time / (alpha + S/rate), ...]} from h1 (shaped) to h2 (unshaped), and alpha."""
    t = calibrate.transfers(bed, "h1", "h2", [1, *sizes], repeats)
    alpha = statistics.median(t[1])
    return {s: [x / (alpha + s * 8 / bits) for x in t[s]] for s in sizes}, alpha


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    rates = {k: v for k, v in RATES.items() if not args.quick or k != "20 Mbit"}
    sizes = (10_000, 100_000, 1_000_000) if args.quick else calibrate.SIZES
    repeats = 2 if args.quick else 3
    t0 = time.time()
    try:
        bed = wb.testbed(hosts=2)
    except wb.TestbedError as e:  # no root / no openssh-server: say so, write no numbers
        print(f"links benchmark skipped: {e}")
        OUT.mkdir(exist_ok=True)
        (OUT / "links.md").write_text(f"Skipped: {e}\n")
        (OUT / "links.json").write_text(json.dumps({"skipped": str(e)}))
        return
    results, alphas = {}, {}
    with bed:
        for name, bits in rates.items():
            # at 20 Mbit 10 MB takes 4 s a transfer: up to 3 MB there
            use = [s for s in sizes if s * 8 / bits <= 2.0]
            for when in ("before", "after"):
                if when == "before":
                    old_shape(bed, "h1", bits)
                else:
                    bed.set_link("h1", bits)
                r, alphas[f"{name} {when}"] = ratios(bed, bits, use, repeats)
                results[f"{name} {when}"] = {str(s): summary(v) for s, v in r.items()}
            bed.set_link("h1", None)
        paths = {"unshaped veth": calibrate.link_parameters(bed, "h1", "h2", repeats),
                 "loopback": calibrate.link_parameters(bed, "h1", "h1", repeats)}
        for name, bits in rates.items():
            bed.set_link("h1", bits)
            paths[name] = calibrate.link_parameters(bed, "h1", "h2", repeats)
        bed.set_link("h1", None)
    meta = {"quick": args.quick, "repeats": repeats, "seconds": round(time.time() - t0, 1), "sizes": list(sizes),
            "slack_s": links.SLACK, "alphas_s": alphas}
    OUT.mkdir(exist_ok=True)
    (OUT / "links.json").write_text(json.dumps({"meta": meta, "results": results, "paths": paths}, indent=1))
    table = _markdown(results, paths, meta)
    (OUT / "links.md").write_text(table)
    print(table)


def _markdown(results, paths, meta):
    sizes = meta["sizes"]
    lines = [f"One message h1 -> h2 over an open TCP connection, 0.1 s idle before each; measured time / "
             f"(alpha + S/rate), median [min-max] of {meta['repeats']}; before: tbf bucket max(128 KiB, 10 ms), "
             f"after: one frame + {meta['slack_s'] * 1e6:.0f} us of traffic", "",
             "| link | alpha | " + " | ".join(f"{s / 1000:g} KB" for s in sizes) + " |",
             "| --- | --- | " + " | ".join("---" for _ in sizes) + " |"]
    for name, row in results.items():
        cells = [f"{row[str(s)]['median']:.2f} [{row[str(s)]['min']:.2f}-{row[str(s)]['max']:.2f}]" if str(s) in row else "-"
                 for s in sizes]
        lines.append(f"| {name} | {meta['alphas_s'][name] * 1e6:.0f} us | " + " | ".join(cells) + " |")
    lines += ["", "| path | alpha | payload bytes/s | / set rate |", "| --- | --- | --- | --- |"]
    for name, p in paths.items():
        eff = "-" if p["efficiency"] is None else f"{p['efficiency']:.3f}"
        lines.append(f"| {name} | {p['alpha_s'] * 1e6:.0f} us | {p['bytes_per_s'] / 1e6:,.1f} MB/s | {eff} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
