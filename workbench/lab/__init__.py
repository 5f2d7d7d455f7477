"""The Jupyter server side of the Workbench panel (``extensions/workbench-panel``).

It serves what runs and clusters record under ``$WORKBENCH_HOME`` (``workbench.store``)
to the panel, stops a run by writing its run directory's ``STOP`` file (what the engines
poll, as the notebook dashboard's Stop does), and starts TensorBoard on a run's logs.
Enabled by ``etc/jupyter/jupyter_server_config.d/workbench.json``, which installing the
package puts in place.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "workbench.lab"}]


def _load_jupyter_server_extension(serverapp: "ServerApp") -> None:
    from workbench.lab.handlers import setup

    setup(serverapp)
