"""Whether a process of this machine is alive: what run and cluster records are checked
against (the kernel that wrote them, a cluster's controller). Pure os calls."""

import os


def alive(pid: int) -> bool:
    """Is ``pid`` a running process of this machine (a zombie counts as gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
