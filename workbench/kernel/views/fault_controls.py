"""The dashboard's fault-injection row, for runs across a test bed's hosts: pick a host,
then take its link down or up, slow it to a rate, or kill its engines.

Each button calls the bed's own method (``Testbed.link_down``, ``link_up``, ``set_link``,
``kill_engines``), which records an ``injected`` event in the run's events with the step
the run had reached; what the workbench then did (a worker lost, a replacement started)
follows in the same events. A fault the bed refuses (a rate it cannot parse, a closed bed)
is shown beside the buttons, not raised into a widget callback nobody sees.
"""

from __future__ import annotations

import html
from typing import Any

from workbench.errors import WorkbenchError
from workbench.common.rates import format_rate


def for_run(run: Any) -> "FaultControls | None":
    """The controls for ``run`` while it trains on an open test bed's hosts, else None."""
    bed = getattr(getattr(run, "links", None), "bed", None)  # a live run's LinkWatch; recorded samples have none
    return None if bed is None or run.done or not bed.is_open else FaultControls(run, bed)


class FaultControls:
    """A row of widgets (``widget``) acting on ``bed`` while ``run`` trains."""

    def __init__(self, run: Any, bed: Any, rate: str = "20mbit") -> None:
        import ipywidgets as W

        self.run = run
        self.bed = bed
        self.host = W.Dropdown(options=list(bed.hosts), description="host",
                               layout=W.Layout(width="140px"), style={"description_width": "35px"})
        self.rate = W.Text(value=rate, layout=W.Layout(width="80px"), placeholder="e.g. 20mbit")
        self.down = W.Button(description="link down", icon="unlink", tooltip="cut the host off the network")
        self.up = W.Button(description="link up", icon="link", tooltip="bring the host's link back")
        self.slow = W.Button(description="slow to", icon="tachometer", tooltip="shape the host's link to the rate")
        self.kill = W.Button(description="kill engines", button_style="danger", icon="times",
                             tooltip="kill every engine on the host (a lost machine)")
        self.result = W.HTML()
        self.result.add_class("wb-injected")
        for button, action in ((self.down, self._down), (self.up, self._up), (self.slow, self._slow),
                               (self.kill, self._kill)):
            button.on_click(lambda _, action=action: self._do(action))
        self.widget = W.HBox([W.HTML("<b>Inject a fault</b>"), self.host, self.down, self.up, self.slow, self.rate,
                              self.kill, self.result], layout=W.Layout(flex_flow="row wrap", align_items="center"))
        self.widget.add_class("wb-faults")

    def _do(self, action):
        if self.run.done:
            self.result.value = "<i>the run is over: nothing injected</i>"
            return
        host = self.host.value
        try:
            done = action(host)
        except WorkbenchError as e:
            self.result.value = f"<span style='color:#b00'>{html.escape(str(e))}</span>"
            return
        self.result.value = html.escape(f"{host}: {done} at step {self.run.step}")

    def _down(self, host):
        self.bed.link_down(host)
        return "link down"

    def _up(self, host):
        self.bed.link_up(host)
        return "link up"

    def _slow(self, host):
        self.bed.set_link(host, self.rate.value.strip())
        return f"link at {format_rate(self.bed.links[host])}"

    def _kill(self, host):
        pids = self.bed.kill_engines(host)
        return f"killed {len(pids)} engine{'s' if len(pids) != 1 else ''}"
