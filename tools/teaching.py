"""``docs/teaching.md``: each claim of the teaching references (``TEACHING.md``'s 13) beside
the lines the walkthroughs' saved outputs print for it, quoted as printed, or why no
walkthrough measures it here. Written from the saved notebooks, never typed: a notebook
executed again changes the document (``python tools/teaching.py``; ``make_notebooks.py``
rewrites it after executing; ``tests/test_readme.py`` checks it is current).

    python tools/teaching.py           # write docs/teaching.md
    python tools/teaching.py --check   # exit 1 if docs/teaching.md is not what the notebooks print
"""

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "teaching.md"

# (number, the claim as the references teach it, [(notebook, [regular expressions of the lines
# quoted: each must find at least one])], what is not measured here and why)
CLAIMS = [
    (1, "Ring all-reduce: each rank sends 2(n-1)/n x S; time ~ 2(n-1) alpha + 2(n-1)/n x S/B, "
        "barely growing with n (NCCL's busbw; d2l; CS336)",
     [("03_all_reduce", [r"^bytes per step within 10% of 2 \(n-1\)/n"]),
      ("09_network_bottleneck", [r"^each host sends 2\(n-1\)/n x S",
                                 r"^steps/s measured / predicted within 0\.65-1\.25 at n",
                                 r"^at 100 Mbit the ring's bus bandwidth", r"^4 workers' steps/s over 2 workers'",
                                 r"^the all-1 Gbit ring's steps/s, measured / predicted with the measured latency"])],
     "steps/s fall with n here because the 4 engines share 2 cores, which the model counts (09)"),
    (2, "A naive ring forwarding whole tensors costs (n-1) x S/B, n/2 times the ring (CS336)", [],
     "not measured: TF's collectives never forward whole tensors; tests/test_costmodel.py checks the formula"),
    (3, "One PS: its link moves n x M each way per round; k PS tasks: max(M/B, n x M/(k x B)) (d2l; BytePS)",
     [("09_network_bottleneck", [r"^the PS link carries S each way", r"^two workers make more steps/s than one",
                                 r"^the third adds little", r"^2 PS, sharded", r"^sharded over 2 PS hosts",
                                 r"^steps/s measured / predicted \(run\.explain\(\)\) within 0\.75"])],
     "a worker pulls, then pushes (two transfers a step, not one at once as the formula takes it): 09 says why"),
    (4, "At equal links a ring beats one PS by n^2 / (2(n-1)): x2.7 at n = 4",
     [("09_network_bottleneck", [r"^at equal links the ring beats one PS", r"^the ring's gain over one PS"])],
     "measured at n = 3 (x2.25 by the formula), on 10 Mbit links: the formula takes the PS link as full both "
     "ways at once, which a worker's pull then push does not make it (09)"),
    (5, "Data parallelism stays compute-bound while the batch per worker exceeds compute per example x B / "
        "bytes per step (the scaling book; CS336)",
     [("12_scaling_efficiency", [r"^from 16 to 256 examples per worker", r"^so a worker's share of its step spent computing"])],
     "the batch that gives 40x on 50 workers is predicted only (12: 2 cores cannot run 50 workers)"),
    (6, "Scaling efficiency = T_compute / (T_compute + T_comm not overlapped) (ML Systems book)",
     [("09_network_bottleneck", [r"^steps/s measured / predicted within 0\.65-1\.25 at n"])],
     "the model's step (compute plus the communication not overlapped) against rings on shaped links; "
     "70-80% at hundreds of devices is not predicted (12 stops at 64 workers)"),
    (7, "Overlap gives max(T_compute, T_comm); packing removes (packs - 1) x 2(n-1) x alpha "
        "(Ultra-Scale Playbook; PyTorch DDP buckets; TF's bytes_per_pack)",
     [("12_scaling_efficiency", [r"^the model counts 1, 16 and 4 packs", r"^a pack per tensor costs more",
                                 r"^4 packs cost between 1 and 16"]),
      ("10_inside_a_step", [r"^the prefetched step lies between", r"^prefetch hides"])],
     "overlap is measured on the input pipeline (10: a prefetched batch against the step's compute); TF's "
     "collectives here start after the whole backward pass, so no all-reduce overlaps anything to measure"),
    (8, "16-bit messages halve and 8-bit quarter the bytes; the speed-up nears that only while "
        "communication-bound (Zhang et al. 2020; Horovod)",
     [("09_network_bottleneck", [r"^fp16 sends", r"^fp16 makes", r"^int8 sends", r"^int8 makes"]),
      ("10_inside_a_step", [r"^fp16 sends exactly half", r"^int8 sends a quarter"])],
     "Horovod's +10-17% on fast networks: not measured (no fast network here)"),
    (9, "Memory per parameter: SGD 8 bytes, momentum 12, Adam 16; 1/k over k PS tasks (Ultra-Scale Playbook)",
     [("02_parameter_server", [r"^plain SGD\s+\d\.\d{4}$", r"^SGD, momentum 0\.9\s+\d\.\d{4}$",
                               r"^Adam\s+\d\.\d{4}$"])],
     "the lines are measured / predicted bytes per parameter held on the PS tasks (the gradient's 4 are "
     "transient)"),
    (10, "Linear scaling rule with warm-up: no loss of accuracy up to large batches (Goyal et al. 2017)",
     [("06_large_batch", [r"^linear rule within", r"^the rule breaks", r"^the linear rule's rate is under 2/λ",
                          r"^at twice 2/λ", r"^the gap does not widen", r"^warm-up raises"])],
     "ImageNet's 8k batch and 256 GPUs: not measured (the digits' 1,438 examples, one CPU)"),
    (11, "Async PS: with n equal workers a gradient is about n-1 updates stale (ML Systems book)",
     [("02_parameter_server", [r"^two workers, most steps fresh"]),
      ("09_network_bottleneck", [r"^staleness, other updates applied"]),
      ("05_sync_vs_async", [r"^delays 1 and 3 learn as delay 0", r"^delay 15 does not learn",
                            r"^each delay's largest learning rate within", r"^from delay 0 to delay 15"])],
     "TF's PS runtime here mostly serves one call's PS work at a time: staleness stays near 0, not n-1; 05 "
     "emulates a staleness of n-1 (train(gradient_delay=n-1)) and measures what it costs against the delay's "
     "stability bound"),
    (12, "Checkpoint interval ~ sqrt(2 x write time x MTBF) (Young 1974, Daly 2006)",
     [("07_fault_tolerance", [r"^the replacement's first step within",
                              r"^a checkpoint to continue from \(a multiple", r"^the steps done twice",
                              r"^redoing them took", r"^the failure's cost", r"^Young's interval"])],
     "the interval is computed from the write time measured in 07 for an assumed MTBF of a day (no failure "
     "rate can be measured on one machine); what a failure costs, the work since the checkpoint redone at the "
     "run's pace, is measured against its prediction"),
    (13, "The seeds: Inception 40x on 50 GPUs; dense models 10-40x with 50 replicas",
     [("09_network_bottleneck", [r"^steps/s measured / wb\.predict-ed from the 2-worker run"])],
     "predicted only at 50: 12 extrapolates a 2-worker calibration to 50 workers (wb.predict); the "
     "extrapolation itself is measured from 2 to 3 and 4 workers on the bed (09; bench/predict.py over the grid)"),
]


def output_lines(name):
    """[(cell index, line)] of every text a notebook's saved outputs print."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    out = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain", "")
            out += [(i, line.rstrip()) for line in ("".join(text) if isinstance(text, list) else text).splitlines()]
    return out


def render():
    lines = ["# The teaching references' claims, measured", "",
             "Each claim of `TEACHING.md` (the formulas and worked numbers the best references teach) beside "
             "what the walkthroughs print for it, quoted from their saved outputs (`tools/teaching.py` writes "
             "this file from them: no measured value here is typed). A line's bands are checked by nbval on every "
             "execution; its measured value is the saved execution's.", ""]
    for number, claim, sources, note in CLAIMS:
        lines += [f"## {number}. {claim}", ""]
        for name, patterns in sources:
            printed = output_lines(name)
            for pattern in patterns:
                found = [(i, line) for i, line in printed if re.search(pattern, line.strip())]
                if not found:
                    raise SystemExit(f"claim {number}: no line of {name}'s outputs matches {pattern!r}")
                for i, line in found:
                    lines.append(f"- `{' '.join(line.split())}` ({name}, cell {i})")
        lines += ([""] if sources else []) + [f"*{note[0].upper() + note[1:]}.*", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_text() != text:
            raise SystemExit(f"{OUT} is not what the notebooks print: run python tools/teaching.py")
    else:
        OUT.write_text(text)
        print("wrote", OUT)
