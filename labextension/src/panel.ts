/**
 * The "Agents" sidebar, a panel to keep open: a transcript search (`search.ts`); one
 * line per session (kind icon, title or name, attention or status badge, folder, relative
 * time, icon buttons; under it a badge per live read-only share, with Revoke) in
 * groups Needs you, Working, Running, Interrupted, Ended (folded); a filter box;
 * keyboard navigation (Up/Down move, Enter opens or replays, Delete kills after a
 * confirmation).
 * Plain DOM; the list is rebuilt when the model changes (a few dozen rows at most),
 * the header, the search, the filter box and the selection survive it.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import {
  editIcon,
  ellipsesIcon,
  historyIcon,
  LabIcon,
  launchIcon,
  listIcon,
  markdownIcon,
  MenuSvg,
  bellIcon,
  refreshIcon,
  shareIcon,
  stopIcon
} from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  displayName,
  ISession,
  IShare,
  IWorktreeReview,
  reviewWorktree,
  SessionMode,
  Status
} from './api';
import {
  attentionLabel,
  attentionSentence,
  Group,
  groupOf,
  GROUPS
} from './attention';
import { requestElement } from './requests';
import { el } from './dom';
import {
  agentsIcon,
  branchIcon,
  kindIcon,
  kindLabel,
  limitIcon,
  replayIcon,
  shownStatus,
  statusLabel
} from './icons';
import { resumeFailed, resumeFailure } from './interrupted';
import { TranscriptSearch } from './search';
import { shareBadge } from './sharing';
import { CommandIDs, IAgentSessions } from './tokens';
import { costText, formatCost, totalOf, usageTitle } from './usage';

/** What the panel's buttons do. */
export interface IPanelActions {
  open(session: Pick<ISession, 'name'>): void | Promise<void>;
  kill(session: ISession): void | Promise<void>;
  adopt(session: ISession): void | Promise<void>;
  restore(session: ISession): void | Promise<void>;
  /** Replay its transcript, paused at `at` seconds when given. */
  replay(session: Pick<ISession, 'id'>, at?: number): void | Promise<void>;
  /** Ask whom to let watch it read-only, and share it. */
  share(session: Pick<ISession, 'id'>): void | Promise<void>;
  revoke(share: Pick<IShare, 'id'>): void | Promise<void>;
  /** Ask for a title, and give the session it. */
  rename(session: Pick<ISession, 'id'>): void | Promise<void>;
  /** Open its conversation as a document. */
  conversation(session: Pick<ISession, 'id'>): void | Promise<void>;
  /** Watch its turns as they happen (beside its terminal when that is open). */
  turns(session: Pick<ISession, 'id'>): void | Promise<void>;
  /** Start a fresh session of its kind in its folder, its old tail shown first. */
  fresh(session: Pick<ISession, 'id'>): void | Promise<void>;
  /** Ask for its own unattended limit, and give it that. */
  limit(session: Pick<ISession, 'id'>): void | Promise<void>;
  /** Open the review of its worktree (files, diffs; merge or discard). */
  review(session: Pick<ISession, 'id'>): void | Promise<void>;
  restoreAll(): void | Promise<void>;
  /**
   * Start a session of `kind`; with `worktree`, in a new git worktree; in `mode`
   * (default: terminal).
   */
  create(
    kind: string,
    worktree?: boolean,
    mode?: SessionMode
  ): void | Promise<void>;
  refresh(): void | Promise<void>;
  /** Which devices are notified of permission requests with JupyterLab closed. */
  notifications(): void | Promise<void>;
}

/** The actions as the extension's commands (`commands.ts`). */
export function commandActions(commands: CommandRegistry): IPanelActions {
  const run = (id: string, args = {}) => commands.execute(id, args);
  return {
    open: s => run(CommandIDs.open, { name: s.name }),
    kill: s => run(CommandIDs.kill, { id: s.id }),
    adopt: s => run(CommandIDs.adopt, { id: s.id }),
    restore: s => run(CommandIDs.restore, { id: s.id }),
    replay: (s, at) =>
      run(
        CommandIDs.replay,
        at === undefined ? { id: s.id } : { id: s.id, at }
      ),
    share: s => run(CommandIDs.share, { id: s.id }),
    revoke: share => run(CommandIDs.revokeShare, { id: share.id }),
    rename: s => run(CommandIDs.rename, { id: s.id }),
    conversation: s => run(CommandIDs.conversation, { id: s.id }),
    turns: s => run(CommandIDs.turns, { id: s.id }),
    fresh: s => run(CommandIDs.fresh, { id: s.id }),
    limit: s => run(CommandIDs.limit, { id: s.id }),
    review: s => run(CommandIDs.review, { id: s.id }),
    restoreAll: () => run(CommandIDs.restoreAll),
    create: (kind, worktree, mode) =>
      run(CommandIDs.create, {
        kind,
        ...(worktree ? { worktree } : {}),
        ...(mode === 'acp' ? { mode } : {})
      }),
    refresh: () => run(CommandIDs.refresh),
    notifications: () => run(CommandIDs.notifications)
  };
}

type Action =
  | 'open'
  | 'share'
  | 'rename'
  | 'kill'
  | 'adopt'
  | 'restore'
  | 'replay'
  | 'conversation'
  | 'turns'
  | 'fresh'
  | 'limit'
  | 'review';

/**
 * The actions of a session in each status, the most likely first: it is the row's
 * labelled button and what Enter and a double click do (an ended session is
 * replayed, never restored by accident); the others are in the row's menu.
 */
const ACTIONS: Record<Status, Action[]> = {
  running: ['open', 'share', 'rename', 'limit', 'kill'],
  orphaned: ['adopt', 'rename', 'limit', 'kill'],
  interrupted: ['restore', 'replay', 'rename'],
  exited: ['replay', 'restore', 'rename'],
  killed: ['replay', 'restore', 'rename']
};

const ACTION_ICONS: Record<Action, LabIcon> = {
  open: launchIcon,
  share: shareIcon,
  rename: editIcon,
  kill: stopIcon,
  adopt: launchIcon,
  restore: historyIcon,
  replay: replayIcon,
  conversation: markdownIcon,
  turns: listIcon,
  fresh: launchIcon,
  limit: limitIcon,
  review: branchIcon
};

/** The prefix of the row menu's commands (`agents-row:<action>`, args `{id}`). */
export const ROW_COMMAND = 'agents-row:';

/** A row's own buttons: reachable with Tab while it is the selected row. */
const ROW_BUTTONS = ['primary', 'more', 'cost', 'action', 'worktree', 'revoke']
  .map(c => `button.jp-AgentsPanel-${c}`)
  .join(', ');

/**
 * Where the focus is in the rows: a row (`index` -1), or one of its controls, by its
 * `data-action` where it has one, else by its place among the row's controls.
 */
interface IPlace {
  id: string;
  action: string | null;
  index: number;
}

/** The focusable controls of `row`, in document order. */
function focusables(row: HTMLElement): HTMLElement[] {
  return Array.from(
    row.querySelectorAll<HTMLElement>(
      'button, a[href], input, select, textarea'
    )
  );
}

/** The place of `node` in its row, if it is a row or one of a row's controls. */
function placeOf(node: Element | null): IPlace | null {
  const row = node?.closest<HTMLElement>('.jp-AgentsPanel-row');
  const id = row?.dataset.sessionId;
  if (!node || !row || !id) {
    return null;
  }
  if (node === row) {
    return { id, action: null, index: -1 };
  }
  const action = (node as HTMLElement).dataset?.action ?? null;
  const index = focusables(row).indexOf(node as HTMLElement);
  return action !== null || index >= 0 ? { id, action, index } : null;
}

/**
 * A session's actions (its status's, the first being the primary one): its
 * conversation when it has one, and its turns live while it runs; Share only where
 * this server can share (`canShare`); a limit only for an agent that reports what it
 * spends; Review for a session whose worktree is not finished (second: after Open,
 * Adopt or Restore).
 */
export function actionsOf(s: ISession, canShare: boolean): Action[] {
  const actions = (ACTIONS[s.status] ?? []).filter(
    a => (a !== 'share' || canShare) && (a !== 'limit' || !!s.usage)
  );
  if (s.worktree && !s.worktree.ended) {
    actions.splice(Math.min(1, actions.length), 0, 'review');
  }
  if (s.conversation_id) {
    // its turns as they happen while it runs (an ACP session's Open shows them);
    // its conversation as a document always
    const kill = actions.indexOf('kill');
    const more: Action[] =
      s.status === 'running' && s.mode !== 'acp'
        ? ['turns', 'conversation']
        : ['conversation'];
    actions.splice(kill < 0 ? actions.length : kill, 0, ...more);
  }
  return actions;
}

/**
 * When a session started, to tell apart sessions of one name: the time (to the
 * second) today, else the day and time, with the year when it is not this year.
 */
export function startedText(iso: string, now: number): string {
  const date = new Date(iso);
  const today = new Date(now);
  if (Number.isNaN(date.getTime())) {
    return '';
  }
  const pad = (n: number) => String(n).padStart(2, '0');
  const time = [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map(pad)
    .join(':');
  if (date.toDateString() === today.toDateString()) {
    return time;
  }
  const day = date.toLocaleDateString(undefined, {
    month: 'short',
    day: 'numeric',
    ...(date.getFullYear() === today.getFullYear() ? {} : { year: 'numeric' })
  });
  return `${day} ${time}`;
}

/** Groups folded until the user opens them. */
const FOLDED: ReadonlySet<Group> = new Set(['ended']);

/** How often relative times are redrawn while the panel shows (ms). */
const CLOCK = 30000;
/** The longest a press in the list holds a render back (ms): a drag, or a release that
 * never came (the window lost the pointer), then renders anyway */
const PRESS_HOLD = 2000;

/** "now", "42 s ago", "3 min ago", "2 h ago", "5 d ago". */
export function relativeTime(
  iso: string,
  now: number,
  trans: TranslationBundle
): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (!Number.isFinite(seconds)) {
    return '';
  }
  if (seconds < 10) {
    return trans.__('now');
  }
  if (seconds < 60) {
    return trans.__('%1 s ago', seconds);
  }
  if (seconds < 3600) {
    return trans.__('%1 min ago', Math.floor(seconds / 60));
  }
  if (seconds < 86400) {
    return trans.__('%1 h ago', Math.floor(seconds / 3600));
  }
  return trans.__('%1 d ago', Math.floor(seconds / 86400));
}

/** Whether a session matches the filter text (title, name, kind, folder, ids). */
export function matches(
  s: ISession,
  filter: string,
  trans: TranslationBundle
): boolean {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    return true;
  }
  const text = [
    s.title ?? '',
    s.name,
    s.id,
    s.kind,
    kindLabel(s.kind, trans),
    s.cwd ?? '',
    s.conversation_id ?? '',
    s.status,
    s.attention ?? ''
  ]
    .join(' ')
    .toLowerCase();
  return words.every(w => text.includes(w));
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
    const trans = _trans;
    // a named region: a screen reader lists it among the page's landmarks
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('Agents'));
    this._groupTitles = {
      needs: trans.__('Needs you'),
      working: trans.__('Working'),
      running: trans.__('Running'),
      interrupted: trans.__('Interrupted'),
      ended: trans.__('Ended')
    };
    // what each action says: on the row's button and in its menu (words, not icons:
    // a phone has no hover), and at more length in the tooltip
    this._actionLabels = {
      open: trans.__('Open'),
      share: trans.__('Share read-only…'),
      rename: trans.__('Rename…'),
      kill: trans.__('Kill…'),
      adopt: trans.__('Adopt'),
      restore: trans.__('Restore'),
      replay: trans.__('Replay'),
      conversation: trans.__('Conversation'),
      turns: trans.__('Watch turns'),
      fresh: trans.__('Start fresh here'),
      limit: trans.__('Spending limit…'),
      review: trans.__('Review')
    };
    this._actionTitles = {
      open: trans.__('Open its terminal'),
      share: trans.__('Let another hub user watch it, read-only'),
      rename: trans.__('Give it a title of your own'),
      kill: trans.__('End its process (asks first); the transcript is kept'),
      adopt: trans.__('Adopt: make it a terminal and open it'),
      restore: trans.__(
        'Start it again in its folder; an agent resumes its conversation'
      ),
      replay: trans.__('Replay its transcript'),
      conversation: trans.__(
        'Show its conversation (turns, tool calls, times)'
      ),
      turns: trans.__(
        'Its turns as they happen: messages, tool calls folded, its plan'
      ),
      fresh: trans.__(
        'Start a fresh session of this kind in its folder, the end of its transcript shown first'
      ),
      limit: trans.__(
        'What it may spend while nobody watches before it is stopped…'
      ),
      review: trans.__(
        'What it changed in its worktree (files, diffs); merge or discard it'
      )
    };
    this._menuCommands = new CommandRegistry();
    for (const action of Object.keys(this._actionLabels) as Action[]) {
      this._menuCommands.addCommand(ROW_COMMAND + action, {
        label: this._actionLabels[action],
        caption: this._actionTitles[action],
        icon: ACTION_ICONS[action],
        execute: args => {
          const session = this._model.sessions?.find(x => x.id === args.id);
          if (session) {
            void this._run(action, session);
          }
        }
      });
    }

    const header = el('div', 'jp-AgentsPanel-header');
    header.append(el('h2', 'jp-AgentsPanel-title', trans.__('Agents')));
    this._total = el('span', 'jp-AgentsPanel-total');
    header.append(this._total);
    const refresh = el('button', 'jp-AgentsPanel-iconButton');
    refresh.title = trans.__('Check the backend now and refresh');
    refresh.dataset.action = 'refresh';
    refreshIcon.element({ container: refresh, tag: 'span' });
    refresh.onclick = () => this._actions.refresh();
    const bell = el('button', 'jp-AgentsPanel-iconButton');
    bell.title = trans.__('Agent notifications on your devices');
    bell.setAttribute('aria-label', bell.title);
    bell.dataset.action = 'notifications';
    bellIcon.element({ container: bell, tag: 'span' });
    bell.onclick = () => this._actions.notifications();
    header.append(bell, refresh);

    this._toolbar = el('div', 'jp-AgentsPanel-toolbar');

    this._search = new TranscriptSearch({
      model: _model,
      trans,
      open: name => this._actions.open({ name }),
      replay: (id, at) => this._actions.replay({ id }, at)
    });

    this._filter = el('input', 'jp-AgentsPanel-filter jp-mod-styled');
    this._filter.type = 'search';
    this._filter.placeholder = trans.__('Filter sessions');
    this._filter.setAttribute(
      'aria-label',
      trans.__('Filter the sessions listed by title, name, kind, folder or id')
    );
    this._filter.title = trans.__(
      'Show the sessions whose title, name, kind, folder or conversation id contain these words'
    );
    this._filter.oninput = () => this.render();
    this._filter.onkeydown = event => {
      if (event.key === 'Escape' && this._filter.value) {
        this._filter.value = '';
        this.render();
        event.stopPropagation();
      } else if (event.key === 'ArrowDown') {
        event.preventDefault();
        this._move(0, true);
      }
    };

    // plain lists of rows (a group's `ul` named by its title), each row focusable
    // and its buttons reachable with Tab: a listbox may hold only options, and an
    // option's buttons would be out of a screen reader's reach
    this._body = el('div', 'jp-AgentsPanel-body');
    this._body.onkeydown = event => this._onKey(event);
    // a render replaces every row: one between a button's press and its release would
    // lose the click (the release lands on the new button), so renders wait for it
    this._body.addEventListener('pointerdown', () => {
      this._pressed = Date.now();
    });
    document.addEventListener('pointerup', this._released, true);
    document.addEventListener('pointercancel', this._released, true);
    // a focus on a row, or on one of its own buttons, selects it; not one on the
    // answers under a row that asks (always reachable with Tab): selecting that row
    // would take the list's tab stop from the row below, out of Tab's reach
    this._body.addEventListener('focusin', event => {
      const target = event.target as HTMLElement;
      if (!target.matches(`.jp-AgentsPanel-row, ${ROW_BUTTONS}`)) {
        return;
      }
      const id = target.closest<HTMLElement>('.jp-AgentsPanel-row')?.dataset
        .sessionId;
      if (id && id !== this._selected) {
        this._select(id, false);
      }
    });
    // what the keys do, said to a screen reader with each row
    const keys = el(
      'p',
      'jp-AgentsPanel-keys',
      trans.__(
        'Enter opens the session; Shift+F10 or the context menu key lists its other actions; Delete ends it; Up and Down move between sessions.'
      )
    );
    keys.id = `${this.id}-keys`;
    keys.hidden = true;

    this.node.append(
      header,
      this._toolbar,
      this._search.node,
      this._filter,
      this._body,
      keys
    );
    this._renderToolbar();
    this._model.changed.connect(this.render, this);
    this.render();
    void this._model.kindsReady.then(() => this._renderToolbar());
  }

  /** The id of the selected session, if any. */
  get selected(): string | null {
    return this._selected;
  }

  dispose(): void {
    window.clearInterval(this._clock);
    document.removeEventListener('pointerup', this._released, true);
    document.removeEventListener('pointercancel', this._released, true);
    this._search.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    this.render();
    window.clearInterval(this._clock);
    this._clock = window.setInterval(() => this.render(), CLOCK);
  }

  /** Activated (its command, a shortcut): the focus goes into it, to the list. */
  protected onActivateRequest(msg: Message): void {
    if (this.isVisible && !this.node.contains(document.activeElement)) {
      this._keepFocus();
    }
  }

  protected onAfterHide(msg: Message): void {
    window.clearInterval(this._clock);
  }

  /**
   * Re-render the list (the model changed, or the filter, or the clock); while a
   * pointer is pressed in it (at most `PRESS_HOLD` ms), once it is released and its
   * click was dispatched.
   */
  render(): void {
    if (this.isDisposed) {
      return;
    }
    if (this._pressed && Date.now() - this._pressed < PRESS_HOLD) {
      this._stale = true;
      return;
    }
    this._pressed = 0;
    this._stale = false;
    const trans = this._trans;
    const focused = this._body.contains(document.activeElement);
    // what had the focus, to be focused again in the new rows (a key press between two
    // renders must not find the focus moved back to the row)
    const place = focused ? placeOf(document.activeElement) : null;
    this._body.replaceChildren();
    this._renderTotal();

    if (this._model.offline) {
      this._body.append(
        el(
          'div',
          'jp-AgentsPanel-offline',
          trans.__('The server is not answering (restarting?); retrying…')
        )
      );
    }
    const sessions = this._model.sessions;
    if (sessions === undefined) {
      this._body.append(
        el('div', 'jp-AgentsPanel-empty', trans.__('Loading…'))
      );
      return;
    }
    if (sessions.length === 0) {
      this._body.append(
        el('div', 'jp-AgentsPanel-empty', trans.__('No sessions yet.'))
      );
      return;
    }
    const filter = this._filter.value;
    const shown = sessions.filter(s => matches(s, filter, trans));
    if (shown.length === 0) {
      this._body.append(
        el('div', 'jp-AgentsPanel-empty', trans.__('No session matches.'))
      );
    }
    const now = Date.now();
    const seen = new Map<string, number>();
    for (const s of sessions) {
      seen.set(s.name, (seen.get(s.name) ?? 0) + 1);
    }
    for (const group of GROUPS) {
      const rows = shown
        .filter(s => groupOf(s) === group)
        .sort((a, b) =>
          group === 'needs'
            ? (a.attention_since ?? '') < (b.attention_since ?? '')
              ? -1
              : 1
            : a.created < b.created
              ? 1
              : -1
        );
      if (rows.length === 0) {
        continue;
      }
      const section = el('details', 'jp-AgentsPanel-group');
      section.dataset.group = group;
      section.open = this._open.get(group) ?? !FOLDED.has(group);
      section.ontoggle = () => this._open.set(group, section.open);
      const summary = el('summary', 'jp-AgentsPanel-groupTitle');
      summary.append(
        el('span', '', this._groupTitles[group]),
        el('span', 'jp-AgentsPanel-count', String(rows.length))
      );
      if (group === 'interrupted') {
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
      list.setAttribute('aria-label', this._groupTitles[group]);
      for (const session of rows) {
        list.append(this._row(session, now, seen.get(session.name)! > 1));
      }
      section.append(list);
      this._body.append(section);
    }
    const selected = this._rowOf(this._selected);
    if (selected) {
      this._select(this._selected, false);
      if (focused) {
        (this._placed(place) ?? selected).focus();
      }
    } else {
      this._selected = null;
      const first = this._rows()[0];
      if (first) {
        first.tabIndex = 0; // the list is reachable with Tab
      }
    }
    if (focused && !this._body.contains(document.activeElement)) {
      // its row went (ended into a folded group, or filtered out): the next one
      this._keepFocus();
    }
  }

  /** Put the focus on the selected row, else the first one shown, else the filter. */
  private _keepFocus(): void {
    const rows = this._rows();
    const target =
      rows.find(r => r.dataset.sessionId === this._selected) ?? rows[0];
    if (target) {
      this._select(target.dataset.sessionId ?? null, true);
    } else {
      this._filter.focus();
    }
  }

  /** What the sessions listed cost together (estimated), in the header. */
  private _renderTotal(): void {
    const trans = this._trans;
    const total = totalOf(this._model.sessions ?? []);
    this._total.hidden = total.sessions === 0;
    this._total.textContent =
      total.cost === null
        ? ''
        : trans.__('Total %1', formatCost(total.cost, total.unknown));
    this._total.dataset.cost = total.cost === null ? '' : String(total.cost);
    this._total.title = [
      trans.__(
        'Estimated cost of the %1 agent sessions listed (AgentsApp.prices)',
        total.sessions
      ),
      trans.__(
        'of it while nobody watched: %1',
        formatCost(total.unattendedCost)
      ),
      total.unknown
        ? trans.__('+: some tokens are of models without a price')
        : ''
    ]
      .filter(Boolean)
      .join('\n');
  }

  private _renderToolbar(): void {
    const trans = this._trans;
    this._toolbar.replaceChildren();
    // where the next agent starts: in the folder, or in a new git worktree of its
    // repository (a choice kept while the panel lives)
    const place = el('label', 'jp-AgentsPanel-worktreeToggle');
    const box = el('input');
    box.type = 'checkbox';
    box.checked = this._inWorktree;
    box.dataset.action = 'worktree-toggle';
    box.onchange = () => {
      this._inWorktree = box.checked;
    };
    place.title = trans.__(
      'Start each new session in a new git worktree of the folder’s repository, on a branch of its own, to review and merge later'
    );
    branchIcon.element({ container: place, tag: 'span' });
    place.prepend(box);
    place.append(el('span', '', trans.__('In a new worktree')));
    // the kinds that cannot start fold into one disclosure under the others, each
    // with why and how to install it there: a phone has no hover, and six lines of
    // "not installed" would push the sessions down
    const missing = el('details', 'jp-AgentsPanel-missing');
    missing.open = this._missingOpen;
    missing.ontoggle = () => {
      this._missingOpen = missing.open;
    };
    const missingList = el('div', 'jp-AgentsPanel-missingList');
    const missingKinds: string[] = [];
    const missingOne = (button: HTMLButtonElement, why: string) => {
      button.disabled = true;
      button.dataset.unavailable = 'true';
      missingList.append(
        button,
        el(
          'span',
          'jp-AgentsPanel-unavailable',
          trans.__('not installed: %1', why)
        )
      );
    };
    for (const kind of this._model.kinds) {
      const name = kindLabel(kind, trans);
      const button = el('button', 'jp-AgentsPanel-new jp-mod-styled');
      button.dataset.action = 'new';
      button.dataset.kind = kind;
      const why = this._model.unavailable(kind);
      button.title = why
        ? trans.__('%1 cannot start: %2', name, why)
        : trans.__('New %1: a session that survives server restarts', name);
      kindIcon(kind).element({ container: button, tag: 'span' });
      button.append(el('span', '', name));
      // a kind that speaks ACP: beside its button, one that starts it in ACP mode
      let acp: HTMLButtonElement | null = null;
      if (this._model.modes(kind).includes('acp')) {
        acp = el(
          'button',
          'jp-AgentsPanel-new jp-AgentsPanel-newAcp jp-mod-styled'
        );
        acp.dataset.action = 'new-acp';
        acp.dataset.kind = kind;
        const acpWhy = this._model.unavailable(kind, 'acp');
        acp.title = acpWhy
          ? trans.__('%1 in ACP mode cannot start: %2', name, acpWhy)
          : trans.__(
              'New %1 in ACP mode: its turns and a prompt box instead of a terminal',
              name
            );
        if (acpWhy) {
          // its own line in the fold: what to install for it
          kindIcon(kind).element({ container: acp, tag: 'span' });
          acp.append(el('span', '', trans.__('%1 (ACP)', name)));
          if (!why) {
            missingOne(acp, acpWhy);
            missingKinds.push(trans.__('%1 (ACP)', name));
          }
          acp = null;
        } else {
          // its name includes what it shows ("ACP"), as a screen reader's should
          acp.setAttribute(
            'aria-label',
            trans.__('New %1 session in ACP mode', name)
          );
          acp.append(el('span', '', trans.__('ACP')));
          acp.onclick = () =>
            this._actions.create(kind, this._inWorktree, 'acp');
        }
      }
      if (why) {
        missingOne(button, why);
        missingKinds.push(name);
        if (acp) {
          // its ACP agent starts without its CLI: offered on its own
          acp.replaceChildren();
          acp.removeAttribute('aria-label'); // what it shows says it all
          kindIcon(kind).element({ container: acp, tag: 'span' });
          acp.append(el('span', '', trans.__('%1 (ACP)', name)));
          this._toolbar.append(acp);
        }
        continue;
      }
      button.onclick = () => this._actions.create(kind, this._inWorktree);
      if (acp) {
        const pair = el('span', 'jp-AgentsPanel-newPair');
        pair.append(button, acp);
        this._toolbar.append(pair);
      } else {
        this._toolbar.append(button);
      }
    }
    this._toolbar.append(place);
    if (missingKinds.length) {
      const summary = el(
        'summary',
        '',
        trans._n(
          '%1 agent not installed',
          '%1 agents not installed',
          missingKinds.length
        )
      );
      summary.dataset.action = 'show-missing';
      summary.title = missingKinds.join(', ');
      missing.append(summary, missingList);
      this._toolbar.append(missing);
    }
  }

  /** A session's row; `repeated`: another session has its name. */
  private _row(s: ISession, now: number, repeated: boolean): HTMLElement {
    const trans = this._trans;
    const kind = kindLabel(s.kind, trans);
    const row = el('li', 'jp-AgentsPanel-row');
    row.tabIndex = -1;
    row.setAttribute('aria-describedby', `${this.id}-keys`);
    row.dataset.sessionId = s.id;
    row.dataset.name = s.name;
    row.dataset.status = s.status;
    row.dataset.kind = s.kind;
    row.dataset.group = groupOf(s);
    if (s.attention) {
      row.dataset.attention = s.attention;
    }
    row.title = [
      s.title
        ? s.title_source === 'user'
          ? trans.__('%1 (a title given by a person)', s.title)
          : trans.__('%1 (the title its program set)', s.title)
        : '',
      trans.__('terminal %1 · session %2 · %3', s.name, s.id, kind),
      s.cwd ? trans.__('in %1', s.cwd) : '',
      s.conversation_id
        ? s.ambiguous
          ? trans.__(
              'conversation %1 (ambiguous: resumed "the most recent conversation" in this directory)',
              s.conversation_id
            )
          : trans.__('conversation %1', s.conversation_id)
        : '',
      trans.__('started %1', new Date(s.created).toLocaleString()),
      trans.__('last active %1', new Date(s.last_activity).toLocaleString()),
      s.exit_code !== null && s.exit_code !== undefined
        ? trans.__('exit code %1', s.exit_code)
        : '',
      s.reason ?? ''
    ]
      .filter(Boolean)
      .join('\n');

    // a grid: kind icon | heading (name, when it started if the name repeats, state) |
    // the likely action, labelled, and a menu of the others; under them the folder,
    // the cost and the time
    const icon = el('span', 'jp-AgentsPanel-kind');
    kindIcon(s.kind).element({ container: icon, tag: 'span' });
    row.append(icon);
    const head = el('span', 'jp-AgentsPanel-head');
    // headed by its title (a person's, else its program's), the terminal name then
    // starting the line under it; else by its terminal name
    const heading = el('span', 'jp-AgentsPanel-name', displayName(s));
    head.append(heading);
    if (s.title) {
      heading.classList.add('jp-mod-titled');
      heading.dataset.titleSource = s.title_source ?? '';
      row.dataset.title = s.title;
      row.classList.add('jp-mod-titled');
    }
    // the line under the name: its state, when it started (a name that repeats), its
    // terminal (under a title), folder, cost and time, beside the actions
    const facts: HTMLElement[] = [];
    let started: HTMLElement | null = null;
    if (repeated) {
      // `1 killed` and `1 exited` told apart by when they started
      started = el(
        'span',
        'jp-AgentsPanel-started',
        startedText(s.created, now)
      );
      started.title = trans.__(
        'started %1',
        new Date(s.created).toLocaleString()
      );
    }

    const live = s.status === 'running' || s.status === 'orphaned';
    const attention = live && s.attention ? s.attention : null;
    const shown = shownStatus(s);
    const badge = el(
      'span',
      `jp-AgentsPanel-badge jp-AgentsPanel-badge-${attention ?? shown}`,
      attention ? attentionLabel(attention, trans) : statusLabel(shown, trans)
    );
    badge.dataset.status = s.status;
    if (attention) {
      badge.dataset.attention = attention;
      badge.title = attentionSentence(s, trans);
    }
    facts.push(badge);
    if (started) {
      facts.push(started);
    }
    row.append(head);

    const actions = el('span', 'jp-AgentsPanel-actions');
    const [primary, ...others] = actionsOf(
      s,
      this._model.sharingRefused === null
    );
    if (primary) {
      const button = el(
        'button',
        'jp-AgentsPanel-primary',
        this._actionLabels[primary]
      );
      button.dataset.action = primary;
      button.title =
        primary === 'open' && s.mode === 'acp'
          ? trans.__('Open its turns, and prompt the agent under them')
          : this._actionTitles[primary];
      button.tabIndex = -1;
      button.onclick = event => {
        event.stopPropagation();
        void this._run(primary, s, button);
      };
      actions.append(button);
    }
    if (others.length) {
      const more = el('button', 'jp-AgentsPanel-more');
      more.dataset.action = 'menu';
      more.title = trans.__(
        'More: %1',
        others.map(a => this._actionLabels[a]).join(', ')
      );
      more.setAttribute('aria-label', trans.__('More actions'));
      more.setAttribute('aria-haspopup', 'menu');
      more.tabIndex = -1;
      ellipsesIcon.element({ container: more, tag: 'span' });
      more.onclick = event => {
        event.stopPropagation();
        this._select(s.id, false);
        this._openMenu(s, others, more);
      };
      actions.append(more);
    }
    row.append(actions);

    const meta = el('span', 'jp-AgentsPanel-meta');
    meta.append(...facts);
    if (s.title) {
      meta.append(el('span', 'jp-AgentsPanel-terminal', s.name));
    }
    // the folder, its end kept when it must be shortened; whole on hover
    const cwd = el('span', 'jp-AgentsPanel-cwd');
    if (s.cwd) {
      cwd.append(el('bdi', '', s.cwd));
      cwd.title = s.cwd;
    }
    meta.append(cwd);
    if (s.usage) {
      // what it spent; on a live agent a click sets what it may spend unattended
      const cost = el(
        live ? 'button' : 'span',
        'jp-AgentsPanel-cost',
        costText(s.usage)
      );
      cost.dataset.cost = s.usage.cost === null ? '' : String(s.usage.cost);
      cost.title = usageTitle(s.usage, trans);
      if (live && cost instanceof HTMLButtonElement) {
        cost.dataset.action = 'limit';
        cost.title += `\n${this._actionTitles.limit}`;
        cost.tabIndex = -1;
        cost.onclick = event => {
          event.stopPropagation();
          void this._run('limit', s, cost);
        };
      }
      if (s.usage.unattended.tokens.total) {
        cost.classList.add('jp-mod-unattended');
      }
      if (s.usage.limit_reached) {
        cost.classList.add('jp-mod-limited');
      }
      meta.append(cost);
    }

    const when = (attention && s.attention_since) || s.last_activity;
    const time = el(
      'span',
      'jp-AgentsPanel-time',
      when ? relativeTime(when, now, trans) : ''
    );
    if (when) {
      time.title = attention
        ? trans.__('%1 since %2', attentionLabel(attention, trans), when)
        : trans.__('last active %1', when);
    }
    meta.append(time);
    row.append(meta);

    // a resume that failed: why (the CLI's words), and a way on
    if (resumeFailed(s)) {
      const line = el('div', 'jp-AgentsPanel-reason');
      line.title = s.reason ?? '';
      const why = resumeFailure(s);
      const fresh = el(
        'button',
        'jp-AgentsPanel-action jp-mod-styled jp-mod-accept',
        trans.__('Start fresh here')
      );
      fresh.dataset.action = 'fresh';
      fresh.title = this._actionTitles.fresh;
      fresh.tabIndex = -1;
      fresh.onclick = event => {
        event.stopPropagation();
        void this._run('fresh', s, fresh);
      };
      line.append(el('span', 'jp-AgentsPanel-reasonText', why), fresh);
      row.append(line);
      row.classList.add('jp-mod-failed');
    }

    // what it asks permission for, with the answers
    if (live) {
      for (const asked of this._model.requests.filter(
        r => r.session_id === s.id
      )) {
        row.append(
          requestElement(this._model, asked, trans, () => this._refocus(s.id))
        );
        row.classList.add('jp-mod-asking');
      }
    }

    // the branch of its worktree and what it changed, a click away from its review;
    // once finished, how it ended
    if (s.worktree) {
      const open = !s.worktree.ended;
      const line = el(open ? 'button' : 'div', 'jp-AgentsPanel-worktree');
      line.dataset.branch = s.worktree.branch;
      line.title = trans.__(
        'works in the git worktree %1, on branch %2 from %3',
        s.worktree.path,
        s.worktree.branch,
        s.worktree.base
      );
      branchIcon.element({ container: line, tag: 'span' });
      line.append(el('bdi', 'jp-AgentsPanel-branch', s.worktree.branch));
      if (open && line instanceof HTMLButtonElement) {
        line.append(this._reviewSummary(s));
        line.dataset.action = 'review';
        line.title += `\n${this._actionTitles.review}`;
        line.tabIndex = -1;
        line.onclick = event => {
          event.stopPropagation();
          void this._run('review', s, line);
        };
      } else {
        line.append(
          el('span', 'jp-AgentsPanel-worktreeEnded', s.worktree.ended ?? '')
        );
      }
      row.append(line);
    }

    // its live read-only shares, on a line of their own under it
    const shares = this._model.shares.filter(
      share => share.session_id === s.id
    );
    if (shares.length) {
      const line = el('div', 'jp-AgentsPanel-shares');
      line.append(...shares.map(share => this._shareBadge(share)));
      row.append(line);
      row.classList.add('jp-mod-shared');
    }
    row.onclick = () => this._select(s.id, true);
    row.ondblclick = () => this._primary(s);
    row.oncontextmenu = event => {
      const more = row.querySelector<HTMLElement>('.jp-AgentsPanel-more');
      if (more && !event.shiftKey) {
        event.preventDefault();
        event.stopPropagation();
        more.click();
      }
    };
    return row;
  }

  /**
   * "1 ahead · 2 files": what a worktree session changed, as last read. Read again
   * (`GET .../worktree`) when its status or attention changes (an agent's turn ended:
   * it may have edited), never on a timer; the row's span is filled in when it comes.
   */
  private _reviewSummary(s: ISession): HTMLElement {
    const span = el('span', 'jp-AgentsPanel-worktreeSummary');
    const key = `${s.status}/${s.attention ?? ''}`;
    const known = this._reviews.get(s.id);
    if (known?.review) {
      this._showReview(span, known.review);
    }
    if (known?.key !== key) {
      const entry = { key, review: known?.review ?? null };
      this._reviews.set(s.id, entry);
      reviewWorktree(this._model.serverSettings, s.id).then(
        review => {
          entry.review = review;
          // the row may have been drawn again meanwhile: fill in the one shown now
          const shown = this._rowOf(s.id)?.querySelector<HTMLElement>(
            '.jp-AgentsPanel-worktreeSummary'
          );
          if (shown) {
            this._showReview(shown, review);
          }
        },
        () => this._reviews.delete(s.id) // finished or gone: the next event says
      );
    }
    return span;
  }

  private _showReview(span: HTMLElement, review: IWorktreeReview): void {
    const trans = this._trans;
    span.textContent = trans.__(
      '%1 ahead · %2',
      review.ahead,
      trans._n('%1 file', '%1 files', review.files_total)
    );
    span.dataset.ahead = String(review.ahead);
    span.dataset.files = String(review.files_total);
    span.title = trans.__(
      '%1 commits ahead of %2, %3 behind; %4 files changed',
      review.ahead,
      review.base,
      review.behind,
      review.files_total
    );
  }

  /** A live read-only share: who watches now (or "shared"), and its Revoke button. */
  private _shareBadge(share: IShare): HTMLElement {
    const trans = this._trans;
    const { text, title } = shareBadge(share, trans);
    const watchers = share.watchers ?? [];
    const node = el('span', 'jp-AgentsPanel-shared');
    node.classList.toggle('jp-mod-watched', watchers.length > 0);
    node.dataset.shareId = share.id;
    node.dataset.watchers = watchers.join(' ');
    node.title = title;
    const revoke = el('button', 'jp-AgentsPanel-revoke', '×');
    revoke.dataset.action = 'revoke';
    revoke.title = trans.__(
      'Revoke: end this share now, disconnecting its viewers'
    );
    revoke.setAttribute('aria-label', revoke.title);
    revoke.tabIndex = -1;
    revoke.onclick = async event => {
      event.stopPropagation();
      revoke.disabled = true;
      try {
        await this._actions.revoke(share);
      } finally {
        revoke.disabled = false;
      }
    };
    node.append(el('span', 'jp-AgentsPanel-sharedText', text), revoke);
    return node;
  }

  /** Run an action; one request per click (a second restore is refused anyway). */
  private async _run(
    action: Action,
    s: ISession,
    button?: HTMLButtonElement
  ): Promise<void> {
    if (button) {
      button.disabled = true;
    }
    // a dialog it opens returns the focus to what had it, unless the list was drawn
    // again meanwhile: then to the row (an action that moves it on, Open, is left be)
    const hadFocus = this.node.contains(document.activeElement);
    try {
      await this._actions[action](s);
    } finally {
      if (button) {
        button.disabled = false;
      }
      const lost =
        !document.activeElement || document.activeElement === document.body;
      if (hadFocus && lost && this.isVisible) {
        this._refocus(s.id);
      }
    }
  }

  /** The row menu of `s`: its `actions` in words, under the `anchor` button. */
  private _openMenu(s: ISession, actions: Action[], anchor: HTMLElement): void {
    this._menu?.dispose();
    const menu = (this._menu = new MenuSvg({ commands: this._menuCommands }));
    menu.addClass('jp-AgentsPanel-menu');
    for (const action of actions) {
      if (action === 'kill') {
        menu.addItem({ type: 'separator' });
      }
      menu.addItem({ command: ROW_COMMAND + action, args: { id: s.id } });
    }
    menu.aboutToClose.connect(() => {
      if (this._menu === menu) {
        this._menu = null;
      }
      // back to its row (Escape, or an item whose dialog then returns the focus
      // here), not to the page's body; a click elsewhere then takes it on
      this._refocus(s.id);
    });
    const box = anchor.getBoundingClientRect();
    menu.open(box.left, box.bottom, { horizontalAlignment: 'right' });
  }

  /** Enter, double click: open, adopt, restore (interrupted) or replay (ended). */
  private _primary(s: ISession): void {
    const action = actionsOf(s, this._model.sharingRefused === null)[0];
    if (action) {
      void this._run(action, s);
    }
  }

  private _rows(): HTMLElement[] {
    // rows of folded groups are not reachable by the keyboard
    return Array.from(
      this._body.querySelectorAll<HTMLElement>(
        'details[open] > ul > .jp-AgentsPanel-row'
      )
    );
  }

  /** The element at `place` in the rows as they are now, if it is still there. */
  private _placed(place: IPlace | null): HTMLElement | null {
    const row = place ? this._rowOf(place.id) : null;
    if (!place || !row) {
      return null;
    }
    if (place.action === null) {
      return place.index < 0 ? row : (focusables(row)[place.index] ?? null);
    }
    return row.querySelector<HTMLElement>(
      `[data-action="${CSS.escape(place.action)}"]`
    );
  }

  private _rowOf(id: string | null): HTMLElement | null {
    if (id === null) {
      return null;
    }
    return this._body.querySelector<HTMLElement>(
      `.jp-AgentsPanel-row[data-session-id="${CSS.escape(id)}"]`
    );
  }

  /** Focus session `id`'s row (it may have been drawn again), else the next one. */
  private _refocus(id: string): void {
    if (this._rowOf(id)) {
      this._selected = id;
    }
    this._keepFocus();
  }

  /**
   * Select session `id`'s row: the one reachable with Tab, its buttons after it (the
   * other rows' buttons are skipped: one stop per row, not one per button).
   */
  private _select(id: string | null, focus: boolean): void {
    for (const node of Array.from(
      this._body.querySelectorAll<HTMLElement>('.jp-AgentsPanel-row')
    )) {
      const on = node.dataset.sessionId === id;
      node.classList.toggle('jp-mod-selected', on);
      if (on) {
        node.setAttribute('aria-current', 'true');
      } else {
        node.removeAttribute('aria-current');
      }
      node.tabIndex = on ? 0 : -1;
      for (const button of Array.from(
        node.querySelectorAll<HTMLElement>(ROW_BUTTONS)
      )) {
        button.tabIndex = on ? 0 : -1;
      }
    }
    this._selected = id;
    const row = this._rowOf(id);
    if (row && focus) {
      row.focus();
      row.scrollIntoView({ block: 'nearest' });
    }
  }

  /** Select the row `by` away from the selected one (or row `by` from the top). */
  private _move(by: number, absolute = false): void {
    const rows = this._rows();
    if (rows.length === 0) {
      return;
    }
    const at = rows.findIndex(r => r.dataset.sessionId === this._selected);
    const next = absolute ? by : at < 0 ? 0 : at + by;
    const index = Math.min(Math.max(next, 0), rows.length - 1);
    this._select(rows[index].dataset.sessionId ?? null, true);
  }

  private _onKey(event: KeyboardEvent): void {
    const session = this._model.sessions?.find(s => s.id === this._selected);
    const onRow = (event.target as HTMLElement).classList.contains(
      'jp-AgentsPanel-row'
    );
    if (!onRow && !['ArrowDown', 'ArrowUp'].includes(event.key)) {
      return; // a button's own keys (Enter, Space) act on the button
    }
    switch (event.key) {
      case 'ArrowDown':
        this._move(1);
        break;
      case 'ArrowUp':
        if (this._rows()[0]?.dataset.sessionId === this._selected) {
          this._filter.focus();
        } else {
          this._move(-1);
        }
        break;
      case 'Home':
        this._move(0, true);
        break;
      case 'End':
        this._move(this._rows().length - 1, true);
        break;
      case 'Enter':
        if (session) {
          this._primary(session);
        }
        break;
      case 'ContextMenu':
        this._rowOf(this._selected)
          ?.querySelector<HTMLElement>('.jp-AgentsPanel-more')
          ?.click();
        break;
      case 'Delete':
      case 'Backspace':
        if (
          session &&
          (session.status === 'running' || session.status === 'orphaned')
        ) {
          void this._run('kill', session); // the command asks first
        }
        break;
      default:
        return;
    }
    event.preventDefault();
    event.stopPropagation();
  }

  private _toolbar: HTMLDivElement;
  /** whether the disclosure of the kinds that cannot start is open */
  private _missingOpen = false;
  private _total: HTMLSpanElement;
  private _search: TranscriptSearch;
  private _filter: HTMLInputElement;
  private _body: HTMLDivElement;
  /** When a pointer was pressed in the list (0: none is) */
  private _pressed = 0;
  /** A render waits for the press to end */
  private _stale = false;
  /** The press ended: the render it held runs after its click (a later task) */
  private _released = (): void => {
    if (!this._pressed) {
      return;
    }
    this._pressed = 0;
    if (this._stale) {
      window.setTimeout(() => this.render(), 0);
    }
  };
  private _selected: string | null = null;
  private _open = new Map<Group, boolean>();
  private _clock = 0;
  private _groupTitles: Record<Group, string>;
  private _actionLabels: Record<Action, string>;
  private _actionTitles: Record<Action, string>;
  private _menuCommands: CommandRegistry;
  private _menu: MenuSvg | null = null;
  private _inWorktree = false;
  private _reviews = new Map<
    string,
    { key: string; review: IWorktreeReview | null }
  >();
}
