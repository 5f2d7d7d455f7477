"""What many tests check or wait for: the one deadline loop and the one weight comparison."""

import time

import numpy as np


def wait_for(condition, timeout, what, every=0.05):
    """``condition()``'s first true value, polled until ``timeout`` seconds; past it, an
    AssertionError saying what was awaited (``what()``, the state seen)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out after {timeout} s waiting for {what()}"
        time.sleep(every)


def relative_difference(a, b):
    """||a - b|| / ||b|| over all the arrays of two weight lists, in float64."""
    a = np.concatenate([w.ravel() for w in a]).astype("float64")
    b = np.concatenate([w.ravel() for w in b]).astype("float64")
    return np.linalg.norm(a - b) / np.linalg.norm(b)
