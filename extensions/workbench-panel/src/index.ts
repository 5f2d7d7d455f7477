/**
 * The Workbench panel: a left-sidebar view of the workbench's local clusters (engines with
 * host, role and device) and of its training runs, live and finished (strategy, topology,
 * step / total, loss, throughput, a loss sparkline, run directory), with buttons to stop a
 * run, open the notebook that started it and open its TensorBoard logs.
 *
 * It reads what runs write to their run directories, through the `workbench.lab` server
 * extension (GET /workbench/api/state, once a second), so it shows runs from any notebook
 * or the CLI, and after the kernel that started them has gone.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

const POLL_MS = 1000;
// how long the answer to a button ("Asked run ... to stop.", an error) stays in view
const MESSAGE_MS = 10000;

const icon = new LabIcon({
  name: 'workbench:panel',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161"><circle cx="5" cy="6" r="2.5"/><circle cx="19" cy="6" r="2.5"/>' +
    '<circle cx="12" cy="18" r="2.5"/><path d="M5 8.5v2l7 5 7-5v-2l-7 5z"/></g></svg>'
});

interface Task {
  role: string;
  index: number;
  engine: number;
  host: string;
  pid: number;
}

interface Run {
  run_id: string;
  run_dir: string;
  status: string;
  strategy: string | null;
  workers: number | null;
  ps: number | null;
  steps: number | null;
  step: number;
  loss: number | null;
  steps_per_s: number | null;
  sparkline: number[];
  error: string | null;
  notebook: string | null;
  tensorboard: boolean;
  tasks: Task[];
}

interface Engine {
  id: number;
  host: string;
  pid: number;
  role: string | null;
  device: string;
}

interface Cluster {
  id: string;
  notebook: string | null;
  engines: Engine[];
}

interface State {
  home: string;
  clusters: Cluster[];
  runs: Run[];
}

async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'workbench', 'api', path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error(body.message || `${response.status} ${response.statusText}`);
  }
  return body as T;
}

function esc(value: unknown): string {
  return String(value ?? '').replace(
    /[&<>"']/g,
    c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string
  );
}

function sparkline(values: number[]): string {
  const finite = values.filter(v => Number.isFinite(v));
  if (finite.length < 2) {
    return '<svg class="wb-spark" width="120" height="24"></svg>';
  }
  const lo = Math.min(...finite);
  const hi = Math.max(...finite);
  const span = hi - lo || 1;
  const points = finite
    .map((v, i) => `${((i / (finite.length - 1)) * 118 + 1).toFixed(1)},${(22 - ((v - lo) / span) * 20).toFixed(1)}`)
    .join(' ');
  return (
    `<svg class="wb-spark" width="120" height="24" viewBox="0 0 120 24">` +
    `<polyline fill="none" stroke="var(--jp-brand-color1)" stroke-width="1.5" points="${points}"/></svg>`
  );
}

function topology(run: Run): string {
  const parts = [`${run.workers ?? 1} worker${run.workers === 1 ? '' : 's'}`];
  if (run.ps) {
    parts.push(`${run.ps} PS`);
  }
  return parts.join(' + ');
}

/** JupyterLab's own styled buttons (its dialogs' look, in the theme's colours): Stop red,
 * the others its accent colour; style/base.css makes them compact for the sidebar. */
function runButtons(run: Run): string {
  const button = (kind: string, action: string, label: string, title = '') =>
    `<button class="wb-btn jp-mod-styled jp-mod-${kind}" data-action="${action}"` +
    `${title ? ` title="${esc(title)}"` : ''}>${label}</button>`;
  return [
    run.status === 'running' ? button('warn', 'stop', 'Stop') : '',
    run.status === 'running'
      ? button('accept', 'stacks', 'Stacks', "every task's state and Python stacks, read now")
      : '',
    run.status === 'running' && run.notebook
      ? button('accept', 'console', 'Console', "a console on the run's kernel, its cells run inside worker:0's engine")
      : '',
    run.notebook ? button('accept', 'notebook', 'Notebook', run.notebook) : '',
    run.tensorboard ? button('accept', 'tensorboard', 'TensorBoard') : ''
  ].join('');
}

function runBody(run: Run): string {
  const total = run.steps ? ` / ${run.steps}` : '';
  const loss = run.loss === null || run.loss === undefined ? '-' : run.loss.toPrecision(4);
  const speed = run.steps_per_s ? `${run.steps_per_s.toFixed(1)} steps/s` : '';
  return `
      <div class="wb-run-head">
        <span class="wb-run-status">${esc(run.status)}</span>
        <span class="wb-run-strategy">${esc(run.strategy)}</span>
        <span class="wb-run-topology">${esc(topology(run))}</span>
      </div>
      <div class="wb-run-figures">
        <span class="wb-run-step">step ${esc(run.step)}${esc(total)}</span>
        <span class="wb-run-loss">loss ${esc(loss)}</span>
        <span class="wb-run-speed">${esc(speed)}</span>
      </div>
      ${sparkline(run.sparkline)}
      ${run.error ? `<div class="wb-run-error">${esc(run.error)}</div>` : ''}
      <div class="wb-run-dir" title="${esc(run.run_dir)}">${esc(run.run_id)} · ${esc(run.run_dir)}</div>`;
}

/** Update the run's element in place: its figures every poll, its buttons only when they
 * change, so that a click is never lost to a re-render under the pointer. */
function updateRun(element: HTMLElement, run: Run): void {
  element.className = `wb-run wb-status-${run.status}`;
  element.dataset.runId = run.run_id;
  element.dataset.notebook = run.notebook ?? '';
  const body = element.querySelector('.wb-run-body') as HTMLElement;
  const html = runBody(run);
  if (body.dataset.html !== html) {
    body.innerHTML = html;
    body.dataset.html = html;
  }
  const buttons = element.querySelector('.wb-run-buttons') as HTMLElement;
  const wanted = runButtons(run);
  if (buttons.dataset.html !== wanted) {
    buttons.innerHTML = wanted;
    buttons.dataset.html = wanted;
  }
}

interface TaskStacks {
  task: string;
  engine: number;
  host: string;
  pid: number | null;
  state: string;
  where: string;
  read_by: string;
  text: string;
}

/** The answer to Stacks: a line per task saying where it is, each task's stacks folded
 * under it (its innermost frames; run.stacks() in the notebook gives them all). */
function renderStacks(answer: { time: number; tasks: TaskStacks[] }): string {
  const at = new Date(answer.time * 1000).toLocaleTimeString();
  const tasks = answer.tasks
    .map(
      t => `<details class="wb-stacks-task"><summary><b>${esc(t.task)}</b> ` +
        `<span class="wb-stacks-state">${esc(t.state)}</span> ${esc(t.where)}</summary>` +
        `<pre>${esc(t.text)}</pre></details>`
    )
    .join('');
  return `<div class="wb-stacks-head">Stacks at ${esc(at)} ` +
    `<button class="wb-stacks-close" data-action="close-stacks" title="close">×</button></div>${tasks}`;
}

function renderCluster(cluster: Cluster): string {
  const rows = cluster.engines
    .map(
      e => `<tr title="engine ${esc(e.id)} on ${esc(e.host)}, pid ${esc(e.pid)}"><td>${esc(e.id)}</td>` +
        `<td>${esc(e.role ?? 'idle')}</td><td>${esc(e.device)}</td><td>${esc(e.host)}</td></tr>`
    )
    .join('');
  return `
    <div class="wb-cluster" data-cluster-id="${esc(cluster.id)}">
      <div class="wb-cluster-head">${esc(cluster.id)} · ${cluster.engines.length} engines
        ${cluster.notebook ? `<span class="wb-cluster-notebook">${esc(cluster.notebook)}</span>` : ''}</div>
      <table class="wb-engines"><thead><tr><th>engine</th><th>role</th><th>device</th><th>host</th></tr></thead>
      <tbody>${rows}</tbody></table>
    </div>`;
}

class WorkbenchPanel extends Widget {
  private timer = 0;
  private message = '';
  private messageUntil = 0;

  constructor(private app: JupyterFrontEnd) {
    super();
    this.id = 'workbench-panel';
    this.title.icon = icon;
    this.title.caption = 'Workbench: clusters and training runs';
    this.addClass('wb-panel');
    this.node.innerHTML = '<div class="wb-panel-body">Loading…</div>';
    this.node.addEventListener('click', event => void this.onClick(event));
  }

  protected onAfterAttach(): void {
    void this.refresh();
    this.timer = window.setInterval(() => void this.refresh(), POLL_MS);
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this.timer);
  }

  async refresh(): Promise<void> {
    const body = this.node.querySelector('.wb-panel-body') as HTMLElement;
    if (!body.querySelector('.wb-runs')) {
      body.innerHTML =
        '<div class="wb-message"></div><div class="wb-error"></div><h3>Clusters</h3><div class="wb-clusters"></div>' +
        '<h3>Runs</h3><div class="wb-runs"></div><div class="wb-home"></div>';
    }
    const message = body.querySelector('.wb-message') as HTMLElement;
    const error = body.querySelector('.wb-error') as HTMLElement;
    message.textContent = Date.now() < this.messageUntil ? this.message : '';
    let state: State;
    try {
      state = await api<State>('state');
      error.textContent = '';
    } catch (err) {
      error.textContent = `The workbench server extension did not answer: ${(err as Error).message}`;
      return;
    }
    const clusters = body.querySelector('.wb-clusters') as HTMLElement;
    const html = state.clusters.length
      ? state.clusters.map(renderCluster).join('')
      : '<div class="wb-empty">No cluster running.</div>';
    if (clusters.dataset.html !== html) {
      clusters.innerHTML = html;
      clusters.dataset.html = html;
    }
    const runs = body.querySelector('.wb-runs') as HTMLElement;
    const existing = new Map<string, HTMLElement>();
    runs.querySelectorAll<HTMLElement>(':scope > .wb-run').forEach(e => existing.set(e.dataset.runId as string, e));
    runs.querySelector(':scope > .wb-empty')?.remove();
    let previous: Element | null = null;
    for (const run of state.runs) {
      let element = existing.get(run.run_id);
      existing.delete(run.run_id);
      if (!element) {
        element = document.createElement('div');
        element.innerHTML =
          '<div class="wb-run-body"></div><div class="wb-run-buttons"></div><div class="wb-run-stacks"></div>';
      }
      updateRun(element, run);
      const at: Element | null = previous ? previous.nextElementSibling : runs.firstElementChild;
      if (at !== element) {
        runs.insertBefore(element, at);
      }
      previous = element;
    }
    existing.forEach(e => e.remove());
    if (!state.runs.length) {
      runs.innerHTML = '<div class="wb-empty">No runs yet.</div>';
    }
    (body.querySelector('.wb-home') as HTMLElement).textContent = `records in ${state.home}`;
  }

  /** A JupyterLab console on the kernel of the notebook that started the run, its prompt
   * holding `%%wb on worker:0 RUN`: what the user types under it runs inside that task's
   * engine while it trains (run.console). Its cells wait while the notebook runs a cell. */
  private async openConsole(notebook: string, runId: string): Promise<void> {
    const sessions = this.app.serviceManager.sessions;
    await sessions.refreshRunning();
    const session = Array.from(sessions.running()).find(s => s.path === notebook && s.kernel);
    if (!session || !session.kernel) {
      throw new Error(`no kernel runs ${notebook}: the run's console is its notebook's kernel`);
    }
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const panel: any = await this.app.commands.execute('console:create', {
      kernelPreference: { id: session.kernel.id },
      insertMode: 'split-bottom',
      name: `${runId} worker:0`
    });
    await panel.sessionContext.ready;
    await panel.console.inject('%load_ext workbench'); // its %%wb magic (idempotent)
    panel.console.promptCell.model.sharedModel.setSource(`%%wb on worker:0 ${runId}\n`);
    this.say(`A console on ${notebook}'s kernel: its cells run inside worker:0 of run ${runId}.`);
  }

  private say(text: string): void {
    this.message = text;
    this.messageUntil = Date.now() + MESSAGE_MS;
  }

  private async onClick(event: Event): Promise<void> {
    const button = (event.target as HTMLElement).closest('button[data-action]') as HTMLButtonElement | null;
    const row = button?.closest('.wb-run') as HTMLElement | null;
    if (!button || !row) {
      return;
    }
    const runId = row.dataset.runId as string;
    try {
      switch (button.dataset.action) {
        case 'stop':
          button.disabled = true;
          await api(`runs/${encodeURIComponent(runId)}/stop`, { method: 'POST' });
          this.say(`Asked run ${runId} to stop.`);
          break;
        case 'stacks': {
          const where = row.querySelector('.wb-run-stacks') as HTMLElement;
          button.disabled = true;
          this.say(`Reading the stacks of run ${runId}...`);
          try {
            const reply = await api<{ time: number; tasks: TaskStacks[] }>(
              `runs/${encodeURIComponent(runId)}/stacks`,
              { method: 'POST' }
            );
            where.innerHTML = renderStacks(reply);
            this.say('');
          } finally {
            button.disabled = false;
          }
          break;
        }
        case 'console':
          await this.openConsole(row.dataset.notebook as string, runId);
          break;
        case 'close-stacks':
          (row.querySelector('.wb-run-stacks') as HTMLElement).innerHTML = '';
          break;
        case 'notebook':
          await this.app.commands.execute('docmanager:open', { path: row.dataset.notebook });
          break;
        case 'tensorboard': {
          const tab = window.open('', '_blank');
          const reply = await api<{ url: string }>(`runs/${encodeURIComponent(runId)}/tensorboard`, { method: 'POST' });
          if (tab) {
            tab.location.href = reply.url;
          }
          this.say(`TensorBoard for ${runId}: ${reply.url}`);
          break;
        }
      }
    } catch (err) {
      this.say(`${button.dataset.action} failed: ${(err as Error).message}`);
    }
    await this.refresh();
  }
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'workbench-panel:plugin',
  description: 'Workbench side panel: clusters and training runs',
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    const panel = new WorkbenchPanel(app);
    app.shell.add(panel, 'left', { rank: 900 });
  }
};

export default plugin;
