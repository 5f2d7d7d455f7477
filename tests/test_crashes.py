"""How a lost engine's crash is named, from what its process wrote as it died."""

from pathlib import Path

from workbench.kernel.engines.health import crashed_in_profiler, log_tail

# what a worker engine's log held after TF 2.21's profiler crashed it as a trace stopped
# (faulthandler's report, as Cluster.engine_output returns it; other threads' stacks cut)
PROFILER_CRASH = (Path(__file__).parent / "data" / "profiler_crash.txt").read_text()


def test_a_crash_inside_tfs_profiler_is_told_apart_from_other_deaths():
    assert crashed_in_profiler(PROFILER_CRASH)
    # the profiler only in another thread's stack, or no fatal signal at all: not this crash
    other = PROFILER_CRASH.replace("Current thread", "Thread").replace("Thread 0x00007fb6d2afd6c0", "Current thread 0x1")
    assert not crashed_in_profiler(other)
    assert not crashed_in_profiler(PROFILER_CRASH.replace("Fatal Python error", "Warning"))
    assert not crashed_in_profiler("2026-11-24 00:24:44.032 [IPEngine.1] Completed registration with id 1")


# CI's run of stop 49: TF's profiler aborted from one of its own threads, which has no Python
# state, so faulthandler named no "Current thread"; the main thread waited in the profiler's stop
NO_PYTHON = PROFILER_CRASH.replace("Current thread", "Thread")


def test_a_crash_from_a_thread_without_python_is_read_from_the_thread_inside_the_profiler():
    assert crashed_in_profiler(NO_PYTHON)
    assert not crashed_in_profiler(NO_PYTHON.replace("tensorflow/python/profiler/", "tensorflow/python/eager/"))
    log = "2026-11-24 00:24:44.032 [IPEngine.1] Completed registration with id 1\n" + NO_PYTHON
    tail = log_tail(log, lines=4).splitlines()
    # the main thread (faulthandler lists it last) first, each thread's header and innermost frame
    assert tail[0] == "Fatal Python error: Aborted" and len(tail) == 5, tail
    assert tail[1].startswith("Thread 0x00007fb71ce83b80") and "profiler_v2.py" in tail[2], tail
    assert tail[3].startswith("Thread 0x00007fb6d2afd6c0") and "monitoredqueuedevice.py" in tail[4], tail
    assert crashed_in_profiler("\n".join(tail))


def test_a_crashed_engines_log_ends_with_the_signal_and_the_crashing_threads_frames():
    log = ("2026-11-24 00:24:44.032 [IPEngine.1] Completed registration with id 1\n"
           + "2026-11-24 00:24:45.000 [IPEngine.1] Handling apply_request: abc\n" * 5 + PROFILER_CRASH)
    tail = log_tail(log, lines=3).splitlines()
    assert tail[0] == "Fatal Python error: Aborted" and tail[1].startswith("Current thread")
    assert len(tail) == 5 and "profiler_v2.py" in tail[2] and crashed_in_profiler("\n".join(tail))
    alive = log_tail(log.split("Fatal")[0], lines=3)
    assert alive == "2026-11-24 00:24:44.032 [IPEngine.1] Completed registration with id 1"
