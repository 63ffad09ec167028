/**
 * The "Agents" sidebar: every session grouped by status, with its actions.
 * Plain DOM, rebuilt when the model changes (a few dozen rows at most).
 */
import { Time } from '@jupyterlab/coreutils';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ISession, Status } from './api';
import { agentsIcon, kindIcon, kindLabel } from './icons';
import { SessionsModel } from './model';

/** What the panel's buttons do (wired by the plugin). */
export interface IPanelActions {
  open(session: ISession): void | Promise<void>;
  kill(session: ISession): void | Promise<void>;
  adopt(session: ISession): void | Promise<void>;
  restore(session: ISession): void | Promise<void>;
  restoreAll(): void | Promise<void>;
  create(kind: string): void;
  refresh(): void;
}

/** Status groups, in the order shown; ended ones are folded. */
const GROUPS: { status: Status; label: string; folded: boolean }[] = [
  { status: 'running', label: 'Running', folded: false },
  { status: 'interrupted', label: 'Interrupted', folded: false },
  { status: 'orphaned', label: 'Orphaned', folded: false },
  { status: 'exited', label: 'Exited', folded: true },
  { status: 'killed', label: 'Killed', folded: true }
];

/** The action buttons of a session in each status. */
const ACTIONS: Record<Status, ('open' | 'kill' | 'adopt' | 'restore')[]> = {
  running: ['open', 'kill'],
  orphaned: ['adopt', 'kill'],
  interrupted: ['restore'],
  exited: ['restore'],
  killed: ['restore']
};

const ACTION_LABELS = {
  open: 'Open',
  kill: 'Kill',
  adopt: 'Adopt',
  restore: 'Restore'
};

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Relative time with the exact time as a tooltip. */
function timeNode(label: string, iso: string | null): HTMLElement {
  const node = el('span', 'jp-AgentsPanel-time');
  if (!iso) {
    return node;
  }
  node.textContent = `${label} ${Time.formatHuman(new Date(iso))}`;
  node.title = `${label} ${Time.format(new Date(iso))}`;
  return node;
}

export class AgentsPanel extends Widget {
  constructor(
    private _model: SessionsModel,
    private _actions: IPanelActions,
    kinds: () => string[]
  ) {
    super();
    this._kinds = kinds;
    this.id = 'jupyter-agents-panel';
    this.addClass('jp-AgentsPanel');
    this.title.icon = agentsIcon;
    this.title.caption = 'Agents: terminals and agent sessions';
    this._model.changed.connect(this.render, this);
    this.render();
  }

  /** Re-render, e.g. when the kinds are known. */
  render(): void {
    const root = this.node;
    const open = new Set<string>();
    root
      .querySelectorAll<HTMLDetailsElement>('details[open]')
      .forEach(d => open.add(d.dataset.status ?? ''));
    root.replaceChildren();

    const header = el('div', 'jp-AgentsPanel-header');
    header.append(el('h2', 'jp-AgentsPanel-title', 'Agents'));
    const refresh = el('button', 'jp-AgentsPanel-iconButton jp-mod-styled');
    refresh.title = 'Check the backend now and refresh';
    refresh.dataset.action = 'refresh';
    refreshIcon.element({ container: refresh, tag: 'span' });
    refresh.onclick = () => this._actions.refresh();
    header.append(refresh);
    root.append(header);

    const toolbar = el('div', 'jp-AgentsPanel-toolbar');
    for (const kind of this._kinds()) {
      const button = el('button', 'jp-AgentsPanel-new jp-mod-styled');
      button.dataset.action = 'new';
      button.dataset.kind = kind;
      kindIcon(kind).element({ container: button, tag: 'span' });
      button.append(el('span', '', `New ${kindLabel(kind)}`));
      button.onclick = () => this._actions.create(kind);
      toolbar.append(button);
    }
    root.append(toolbar);

    const sessions = this._model.sessions;
    if (this._model.offline) {
      root.append(
        el(
          'div',
          'jp-AgentsPanel-offline',
          'The server is not answering (restarting?); retrying…'
        )
      );
    }
    if (sessions === undefined) {
      root.append(el('div', 'jp-AgentsPanel-empty', 'Loading…'));
      return;
    }
    if (sessions.length === 0) {
      root.append(el('div', 'jp-AgentsPanel-empty', 'No sessions yet.'));
    }
    for (const group of GROUPS) {
      const rows = sessions
        .filter(s => s.status === group.status)
        .sort((a, b) => (a.created < b.created ? 1 : -1));
      if (rows.length === 0) {
        continue;
      }
      const section = el('details', 'jp-AgentsPanel-group');
      section.dataset.status = group.status;
      section.open = !group.folded || open.has(group.status);
      const summary = el('summary', 'jp-AgentsPanel-groupTitle');
      summary.append(
        el('span', '', group.label),
        el('span', 'jp-AgentsPanel-count', String(rows.length))
      );
      if (group.status === 'interrupted') {
        const all = el(
          'button',
          'jp-AgentsPanel-action jp-mod-styled jp-mod-accept',
          'Restore all'
        );
        all.dataset.action = 'restore-all';
        all.onclick = event => {
          event.preventDefault();
          this._actions.restoreAll();
        };
        summary.append(all);
      }
      section.append(summary);
      const list = el('ul', 'jp-AgentsPanel-list');
      for (const session of rows) {
        list.append(this._row(session));
      }
      section.append(list);
      root.append(section);
    }
  }

  private _row(s: ISession): HTMLElement {
    const row = el('li', 'jp-AgentsPanel-row');
    row.dataset.sessionId = s.id;
    row.dataset.name = s.name;
    row.dataset.status = s.status;
    row.dataset.kind = s.kind;

    const line1 = el('div', 'jp-AgentsPanel-line');
    const icon = el('span', 'jp-AgentsPanel-kind');
    icon.title = kindLabel(s.kind);
    kindIcon(s.kind).element({ container: icon, tag: 'span' });
    line1.append(icon);
    const name = el('span', 'jp-AgentsPanel-name', s.name);
    name.title = `terminal ${s.name} · session ${s.id} · ${kindLabel(s.kind)}`;
    line1.append(
      name,
      el('span', 'jp-AgentsPanel-kindLabel', kindLabel(s.kind))
    );
    const badge = el(
      'span',
      `jp-AgentsPanel-badge jp-AgentsPanel-badge-${s.status}`,
      s.status
    );
    line1.append(badge);
    if (s.exit_code !== null && s.exit_code !== undefined) {
      const code = el('span', 'jp-AgentsPanel-exit', `exit ${s.exit_code}`);
      code.title = 'exit code';
      line1.append(code);
    }
    row.append(line1);

    const line2 = el('div', 'jp-AgentsPanel-line jp-AgentsPanel-meta');
    if (s.cwd) {
      // LRM marks keep the path left-to-right inside the right-aligned (rtl) ellipsis box
      const cwd = el('span', 'jp-AgentsPanel-cwd', `\u200e${s.cwd}\u200e`);
      cwd.title = s.cwd;
      line2.append(cwd);
    }
    if (s.conversation_id) {
      const conv = el(
        'span',
        'jp-AgentsPanel-conversation',
        s.conversation_id.slice(0, 8) + (s.ambiguous ? '?' : '')
      );
      conv.title =
        `conversation ${s.conversation_id}` +
        (s.ambiguous
          ? ' (ambiguous: resumed "the most recent conversation" in this directory)'
          : '');
      line2.append(conv);
    }
    row.append(line2);

    const line3 = el('div', 'jp-AgentsPanel-line jp-AgentsPanel-meta');
    line3.append(timeNode('started', s.created));
    line3.append(timeNode('active', s.last_activity));
    row.append(line3);

    if (s.reason) {
      row.append(el('div', 'jp-AgentsPanel-reason', s.reason));
    }

    const actions = el('div', 'jp-AgentsPanel-actions');
    for (const action of ACTIONS[s.status] ?? []) {
      const button = el(
        'button',
        'jp-AgentsPanel-action jp-mod-styled' +
          (action === 'kill' ? ' jp-mod-warn' : ''),
        ACTION_LABELS[action]
      );
      button.dataset.action = action;
      button.onclick = async () => {
        // one request per click: a second restore of one session is refused anyway
        button.disabled = true;
        try {
          await this._actions[action](s);
        } finally {
          button.disabled = false;
        }
      };
      actions.append(button);
    }
    row.append(actions);
    if (s.status === 'running') {
      row.ondblclick = () => this._actions.open(s);
    }
    return row;
  }

  private _kinds: () => string[];
}
