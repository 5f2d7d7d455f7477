"""What a run's engines append to its ``metrics/*.jsonl`` files, read back incrementally:
by ``wb.load`` (``RecordedRun``) and by a re-attached live run."""

import json
from pathlib import Path


def read_metrics(run_dir: str | Path, offsets: dict[str, int]) -> dict[str, list]:
    """The rows and events appended to a run's ``metrics/*.jsonl`` since ``offsets`` (a dict
    of per-file read offsets, updated), as a ``Run`` merges them."""
    rows, events = [], []
    for path in sorted((Path(run_dir) / "metrics").glob("*.jsonl")):
        offset = offsets.get(path.name, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            continue
        end = chunk.rfind(b"\n") + 1  # a line being written is read next time
        offsets[path.name] = offset + end
        for line in chunk[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if "step" in row:
                rows.append(row)
            elif "event" in row:
                events.append(row["event"])
    return {"rows": rows, "events": events}
