"""The dashboard's stacks button: every task's stacks read on demand (``run.stacks()``),
shown as a table of where each task is (in the user's code, inside TensorFlow and the op
it executes, stopped, unreachable) with each task's stacks folded under it. Once the run
has ended, the stacks its error carries (a lost or hung task's run reads them as it fails).

A click is handled in the kernel's main thread: reading takes at most the debug threads'
timeout (2 s), and the tasks go on training meanwhile.
"""

from __future__ import annotations

import html
from typing import Any


class StacksView:
    """A button and what it shows (``widget``), for ``run``."""

    def __init__(self, run: Any) -> None:
        import ipywidgets as W

        self.run = run
        self.button = W.Button(description="Stacks", icon="list",
                               tooltip="every task's stacks, read now while it trains (run.stacks())")
        self.button.add_class("wb-stacks-button")
        self.button.on_click(lambda _: self.show())
        self.output = W.HTML()
        self.output.add_class("wb-stacks")
        self.widget = W.VBox([self.button, self.output])

    def show(self) -> None:
        """Read the stacks now (or, once the run has ended, those its error carries) and show them."""
        run = self.run
        if run.done:
            kept = getattr(run.failure, "stacks", None) or {}
            self.output.value = ("<i>the run has ended: its tasks' stacks are read while it trains</i>" if not kept else
                                 "<b>the stacks as the run failed</b>" + "".join(
                                     f"<details><summary>{html.escape(k)}</summary><pre>{html.escape(v)}</pre>"
                                     "</details>" for k, v in kept.items()))
            return
        try:
            self.output.value = run.stacks()._repr_html_()
        except Exception as e:  # noqa: BLE001 - shown beside the button, not raised into a widget callback
            self.output.value = f"<span style='color:#b00'>{html.escape(f'{type(e).__name__}: {e}')}</span>"
