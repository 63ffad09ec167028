/**
 * The "Agents" sidebar: every session grouped by status, with its actions.
 * Plain DOM, rebuilt when the model changes (a few dozen rows at most).
 */
import { Time } from '@jupyterlab/coreutils';
import { TranslationBundle } from '@jupyterlab/translation';
import { refreshIcon } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { ISession, Status } from './api';
import { agentsIcon, kindIcon, kindLabel, statusLabel } from './icons';
import { CommandIDs, IAgentSessions } from './tokens';

/** What the panel's buttons do. */
export interface IPanelActions {
  open(session: ISession): void | Promise<void>;
  kill(session: ISession): void | Promise<void>;
  adopt(session: ISession): void | Promise<void>;
  restore(session: ISession): void | Promise<void>;
  restoreAll(): void | Promise<void>;
  create(kind: string): void | Promise<void>;
  refresh(): void | Promise<void>;
}

/** The actions as the extension's commands (`commands.ts`). */
export function commandActions(commands: CommandRegistry): IPanelActions {
  const run = (id: string, args = {}) => commands.execute(id, args);
  return {
    open: s => run(CommandIDs.open, { name: s.name }),
    kill: s => run(CommandIDs.kill, { id: s.id }),
    adopt: s => run(CommandIDs.adopt, { id: s.id }),
    restore: s => run(CommandIDs.restore, { id: s.id }),
    restoreAll: () => run(CommandIDs.restoreAll),
    create: kind => run(CommandIDs.create, { kind }),
    refresh: () => run(CommandIDs.refresh)
  };
}

/** Status groups, in the order shown; ended ones are folded. */
const GROUPS: { status: Status; folded: boolean }[] = [
  { status: 'running', folded: false },
  { status: 'interrupted', folded: false },
  { status: 'orphaned', folded: false },
  { status: 'exited', folded: true },
  { status: 'killed', folded: true }
];

/** The title of each status group. */
function groupTitles(trans: TranslationBundle): Record<Status, string> {
  return {
    running: trans.__('Running'),
    interrupted: trans.__('Interrupted'),
    orphaned: trans.__('Orphaned'),
    exited: trans.__('Exited'),
    killed: trans.__('Killed')
  };
}

type Action = 'open' | 'kill' | 'adopt' | 'restore';

/** The action buttons of a session in each status. */
const ACTIONS: Record<Status, Action[]> = {
  running: ['open', 'kill'],
  orphaned: ['adopt', 'kill'],
  interrupted: ['restore'],
  exited: ['restore'],
  killed: ['restore']
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

/** Relative time with the exact time as a tooltip, each put in a sentence by `say`. */
function timeNode(
  iso: string | null,
  say: (when: string) => string
): HTMLElement {
  const node = el('span', 'jp-AgentsPanel-time');
  if (!iso) {
    return node;
  }
  node.textContent = say(Time.formatHuman(new Date(iso)));
  node.title = say(Time.format(new Date(iso)));
  return node;
}

export class AgentsPanel extends Widget {
  constructor(
    private _model: IAgentSessions,
    private _actions: IPanelActions,
    private _trans: TranslationBundle
  ) {
    super();
    this.id = 'jupyter-agents-panel';
    this.addClass('jp-AgentsPanel');
    this.title.icon = agentsIcon;
    this.title.caption = _trans.__('Agents: terminals and agent sessions');
    this._groupTitles = groupTitles(_trans);
    this._actionLabels = {
      open: _trans.__('Open'),
      kill: _trans.__('Kill'),
      adopt: _trans.__('Adopt'),
      restore: _trans.__('Restore')
    };
    this._model.changed.connect(this.render, this);
    this.render();
    void this._model.kindsReady.then(() => this.render());
  }

  /** Re-render (the model or the kinds changed). */
  render(): void {
    if (this.isDisposed) {
      return;
    }
    const trans = this._trans;
    const root = this.node;
    const open = new Set<string>();
    root
      .querySelectorAll<HTMLDetailsElement>('details[open]')
      .forEach(d => open.add(d.dataset.status ?? ''));
    root.replaceChildren();

    const header = el('div', 'jp-AgentsPanel-header');
    header.append(el('h2', 'jp-AgentsPanel-title', trans.__('Agents')));
    const refresh = el('button', 'jp-AgentsPanel-iconButton jp-mod-styled');
    refresh.title = trans.__('Check the backend now and refresh');
    refresh.dataset.action = 'refresh';
    refreshIcon.element({ container: refresh, tag: 'span' });
    refresh.onclick = () => this._actions.refresh();
    header.append(refresh);
    root.append(header);

    const toolbar = el('div', 'jp-AgentsPanel-toolbar');
    for (const kind of this._model.kinds) {
      const button = el('button', 'jp-AgentsPanel-new jp-mod-styled');
      button.dataset.action = 'new';
      button.dataset.kind = kind;
      kindIcon(kind).element({ container: button, tag: 'span' });
      button.append(el('span', '', trans.__('New %1', kindLabel(kind, trans))));
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
          trans.__('The server is not answering (restarting?); retrying…')
        )
      );
    }
    if (sessions === undefined) {
      root.append(el('div', 'jp-AgentsPanel-empty', trans.__('Loading…')));
      return;
    }
    if (sessions.length === 0) {
      root.append(
        el('div', 'jp-AgentsPanel-empty', trans.__('No sessions yet.'))
      );
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
        el('span', '', this._groupTitles[group.status]),
        el('span', 'jp-AgentsPanel-count', String(rows.length))
      );
      if (group.status === 'interrupted') {
        const all = el(
          'button',
          'jp-AgentsPanel-action jp-mod-styled jp-mod-accept',
          trans.__('Restore all')
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
    const trans = this._trans;
    const kind = kindLabel(s.kind, trans);
    const row = el('li', 'jp-AgentsPanel-row');
    row.dataset.sessionId = s.id;
    row.dataset.name = s.name;
    row.dataset.status = s.status;
    row.dataset.kind = s.kind;

    const line1 = el('div', 'jp-AgentsPanel-line');
    const icon = el('span', 'jp-AgentsPanel-kind');
    icon.title = kind;
    kindIcon(s.kind).element({ container: icon, tag: 'span' });
    line1.append(icon);
    const name = el('span', 'jp-AgentsPanel-name', s.name);
    name.title = trans.__('terminal %1 · session %2 · %3', s.name, s.id, kind);
    line1.append(name, el('span', 'jp-AgentsPanel-kindLabel', kind));
    const badge = el(
      'span',
      `jp-AgentsPanel-badge jp-AgentsPanel-badge-${s.status}`,
      statusLabel(s.status, trans)
    );
    line1.append(badge);
    if (s.exit_code !== null && s.exit_code !== undefined) {
      const code = el(
        'span',
        'jp-AgentsPanel-exit',
        trans.__('exit %1', s.exit_code)
      );
      code.title = trans.__('exit code');
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
      conv.title = s.ambiguous
        ? trans.__(
            'conversation %1 (ambiguous: resumed "the most recent conversation" in this directory)',
            s.conversation_id
          )
        : trans.__('conversation %1', s.conversation_id);
      line2.append(conv);
    }
    row.append(line2);

    const line3 = el('div', 'jp-AgentsPanel-line jp-AgentsPanel-meta');
    line3.append(timeNode(s.created, when => trans.__('started %1', when)));
    line3.append(
      timeNode(s.last_activity, when => trans.__('active %1', when))
    );
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
        this._actionLabels[action]
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

  private _groupTitles: Record<Status, string>;
  private _actionLabels: Record<Action, string>;
}
