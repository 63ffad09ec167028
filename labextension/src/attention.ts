/**
 * Attention: which agent sessions need their user, everywhere the user looks.
 *
 * The server tells us each agent session's `attention` (exact, from the CLI's hooks):
 * `ready` (started or resumed, asked nothing yet), `working`, `waiting` (turn finished), `permission` (approval asked), `error` (with
 * a reason), `unknown`. "Needs you" = waiting, permission, error. Pure helpers first
 * (labels, groups, what changed), then `AttentionWatcher`, which turns changes into a
 * JupyterLab notification (with "Open"), an optional browser notification while the
 * page is hidden, and a marker on the session's terminal tab.
 */
import { Notification } from '@jupyterlab/apputils';
import { nullTranslator, TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { Attention, ISession } from './api';
import { openCaption, sessionName } from './icons';
import { replaceNotification } from './notify';
import { requestActions, requestSentence } from './requests';
import { DOMAIN, IAgentSessions } from './tokens';

/** The attention states in which a session needs its user. */
export const NEEDS_YOU: ReadonlySet<string> = new Set([
  'waiting',
  'permission',
  'error'
]);

/** A running session whose agent waits for input, asks permission or failed. */
export function needsYou(s: ISession): boolean {
  return s.status === 'running' && NEEDS_YOU.has(s.attention ?? '');
}

/** The panel's groups, in the order shown. */
export type Group = 'needs' | 'working' | 'running' | 'interrupted' | 'ended';

export const GROUPS: Group[] = [
  'needs',
  'working',
  'running',
  'interrupted',
  'ended'
];

/** The group a session is listed in (orphans are live: with the running ones). */
export function groupOf(s: ISession): Group {
  switch (s.status) {
    case 'running':
      return needsYou(s)
        ? 'needs'
        : s.attention === 'working'
          ? 'working'
          : 'running';
    case 'orphaned':
      return 'running';
    case 'interrupted':
      return 'interrupted';
    default:
      return 'ended';
  }
}

/** A short word for an attention state (the badge). */
export function attentionLabel(
  attention: Attention,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  switch (attention) {
    case 'ready':
      return trans.__('ready');
    case 'working':
      return trans.__('working');
    case 'waiting':
      return trans.__('waiting');
    case 'permission':
      return trans.__('permission');
    case 'error':
      return trans.__('error');
    case 'unknown':
      return trans.__('unknown');
    default:
      return attention;
  }
}

/** A sentence for the tooltip of a badge and for notifications. */
export function attentionSentence(
  s: ISession,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  const who = sessionName(s, trans);
  switch (s.attention) {
    case 'ready':
      return trans.__('%1 is ready: nothing asked yet', who);
    case 'working':
      return trans.__('%1 is working', who);
    case 'waiting':
      return trans.__('%1 is waiting for your input', who);
    case 'permission':
      return trans.__('%1 asks for your permission', who);
    case 'error':
      return s.attention_reason
        ? trans.__('%1 stopped on an error: %2', who, s.attention_reason)
        : trans.__('%1 stopped on an error', who);
    case 'unknown':
      return trans.__('%1: state unknown (its CLI ended the session)', who);
    default:
      return who;
  }
}

/** A session that started needing its user between two looks. */
export interface INewlyNeeding {
  session: ISession;
  /** What it was before (`null`: no state reported yet). */
  previous: Attention | null;
}

/**
 * The sessions that started needing their user since the last look. `seen` maps each
 * running session's id to its `attention` and `attention_since` at the last look, and
 * is updated.
 *
 * What counts: a change into waiting, permission or error from `working` or from
 * another of those states (a CLI whose hooks report each turn); from no state at
 * all only where the CLI reports nothing but turn ends (`attention_source` `notify`):
 * for a CLI with hooks that is its session start, a new session at its prompt, which
 * is no news. Nothing on the first look (`first`): opening Lab replays nothing (the
 * status bar counts what needs the user).
 */
export function newlyNeeding(
  sessions: ISession[],
  seen: Map<string, string>,
  first: boolean
): INewlyNeeding[] {
  const found: INewlyNeeding[] = [];
  const live = new Set<string>();
  for (const s of sessions) {
    if (s.status !== 'running') {
      continue;
    }
    live.add(s.id);
    const attention = s.attention ?? null;
    const key = `${attention ?? ''}|${s.attention_since ?? ''}`;
    const before = seen.get(s.id);
    seen.set(s.id, key);
    if (first || before === key || !needsYou(s)) {
      continue;
    }
    const previous = (before?.split('|')[0] || null) as Attention | null;
    if (
      previous === 'working' ||
      NEEDS_YOU.has(previous ?? '') ||
      (before !== undefined && s.attention_source === 'notify')
    ) {
      found.push({ session: s, previous });
    }
  }
  for (const id of Array.from(seen.keys())) {
    if (!live.has(id)) {
      seen.delete(id);
    }
  }
  return found;
}

/** The class a terminal tab gets while its session needs the user. */
export const TAB_CLASS = 'jp-AgentsAttention-tab';

/** A terminal tab as far as we need it: its terminal's session name and its title. */
export interface ITerminalTab {
  readonly title: Widget['title'];
  readonly isDisposed: boolean;
  readonly content: { session: { name: string } };
}

/**
 * Mark (or unmark) the tabs of terminals whose session needs the user: a class on the
 * title (a dot drawn by CSS before the label) and a sentence in its caption.
 */
export function markTabs(
  tabs: Iterable<ITerminalTab>,
  sessions: ISession[],
  trans: TranslationBundle
): void {
  const byName = new Map<string, ISession>();
  for (const s of sessions) {
    if (s.status === 'running') {
      byName.set(s.name, s);
    }
  }
  for (const tab of tabs) {
    if (tab.isDisposed) {
      continue;
    }
    const s = byName.get(tab.content.session.name);
    const title = tab.title;
    const classes = new Set(title.className.split(/\s+/).filter(Boolean));
    const had = classes.has(TAB_CLASS);
    const wants = s !== undefined && needsYou(s);
    for (const c of Array.from(classes)) {
      if (c.startsWith(`${TAB_CLASS}-`)) {
        classes.delete(c);
      }
    }
    classes.delete(TAB_CLASS);
    if (wants) {
      classes.add(TAB_CLASS);
      classes.add(`${TAB_CLASS}-${s.attention}`);
    }
    const className = Array.from(classes).join(' ');
    if (className !== title.className) {
      title.className = className;
    }
    const marked = title.dataset['agentsAttention'];
    if (wants) {
      const caption = attentionSentence(s, trans);
      if (!had || marked !== caption) {
        title.dataset = { ...title.dataset, agentsAttention: caption };
        title.caption = caption;
      }
    } else if (had || marked) {
      const { agentsAttention, ...rest } = title.dataset;
      void agentsAttention;
      title.dataset = rest;
      if (title.caption === marked) {
        title.caption = '';
      }
    }
  }
}

export namespace AttentionWatcher {
  export interface IOptions {
    model: IAgentSessions;
    trans: TranslationBundle;
    /** Open a session's terminal (the `open` command). */
    open: (session: ISession) => void | Promise<void>;
    /** The terminal tabs now open (empty without a terminal tracker). */
    tabs: () => Iterable<ITerminalTab>;
    /**
     * Whether a tab other than a terminal that shows what the session needs is on
     * screen (an ACP session's turns, where its requests are answered).
     */
    viewed?: (session: ISession) => boolean;
  }
}

/**
 * Follows the model: a JupyterLab notification (and, while the page is hidden and the
 * user allowed it, a browser notification) when a session starts needing its user;
 * its terminal tab marked while it does.
 */
export class AttentionWatcher {
  constructor(private _options: AttentionWatcher.IOptions) {
    // where a screen reader hears that a session needs its user, with notifications
    // on or off: a polite live region, out of sight
    this._live = document.createElement('div');
    this._live.className = 'jp-AgentsAttention-live';
    this._live.setAttribute('role', 'status');
    this._live.setAttribute('aria-live', 'polite');
    document.body.append(this._live);
    _options.model.changed.connect(this.update, this);
    void _options.model.ready.then(() => this.update());
  }

  /** Show JupyterLab notifications (the `notifications` setting). */
  notifications = true;

  /** Also notify through the browser while the page is hidden (`browserNotifications`). */
  get browserNotifications(): boolean {
    return this._browser;
  }

  set browserNotifications(on: boolean) {
    this._browser = on;
    if (
      on &&
      typeof window.Notification !== 'undefined' &&
      window.Notification.permission === 'default'
    ) {
      void window.Notification.requestPermission().catch(() => undefined);
    }
  }

  /** Look at the model again (also after new tabs opened). */
  update(): void {
    const { model, trans } = this._options;
    const sessions = model.sessions;
    if (sessions === undefined) {
      return;
    }
    markTabs(this._options.tabs(), sessions, trans);
    const first = this._first;
    const fresh = newlyNeeding(sessions, this._seen, first);
    this._first = false;
    this._announce(sessions, first);
    // a notification whose session no longer needs the user goes, as does one whose
    // session's tab is on screen now (the tab says it); one offering a pending request
    // stays until the request ends (its request may be listed before its session's
    // attention says so: the hook writes the request, then spools the event)
    const needing = new Set(
      sessions.filter(s => needsYou(s) && !this._watched(s)).map(s => s.id)
    );
    for (const [id, notification] of Array.from(this._shown)) {
      if (!needing.has(id) && !this._offersPending(notification)) {
        Notification.dismiss(notification);
        this._shown.delete(id);
      }
    }
    for (const { session } of fresh) {
      this._notify(session);
    }

    this._offerAnswers(sessions);
  }

  /**
   * Say in the live region each session that began needing its user (permission,
   * waiting, error) since the last look, notifications on or off; nothing on the first
   * look (opening Lab replays nothing).
   */
  private _announce(sessions: ISession[], first: boolean): void {
    const heard = new Set<string>();
    const said: string[] = [];
    for (const s of sessions) {
      if (s.status !== 'running' || !needsYou(s)) {
        continue;
      }
      const key = `${s.id}|${s.attention}|${s.attention_since ?? ''}`;
      heard.add(key);
      if (!first && !this._heard.has(key)) {
        said.push(attentionSentence(s, this._options.trans));
      }
    }
    this._heard = heard;
    if (said.length) {
      this._live.textContent = said.join('. ');
    }
  }

  /**
   * A session's notification of a new permission request says what it asks and
   * offers Allow and Deny (made, or the attention one turned into it).
   */
  private _offerAnswers(sessions: ISession[]): void {
    const { model, trans } = this._options;
    const pending = new Set(model.requests.map(r => r.id));
    // an ended request's notification goes (answered here, in its terminal, or moot),
    // whatever its session's attention says next
    // (one notification offers a session's newest request: it stays while another
    // request it offered is pending)
    for (const [id, offered] of Array.from(this._asked)) {
      if (pending.has(id)) {
        continue;
      }
      this._asked.delete(id);
      const stillOffers = Array.from(this._asked).some(
        ([other, by]) => by === offered && pending.has(other)
      );
      if (offered === null || stillOffers) {
        continue;
      }
      Notification.dismiss(offered);
      for (const [session, shown] of Array.from(this._shown)) {
        if (shown === offered) {
          this._shown.delete(session);
        }
      }
    }
    for (const r of model.requests) {
      if (this._asked.has(r.id)) {
        continue;
      }
      this._asked.set(r.id, null);
      const session = sessions.find(s => s.id === r.session_id);
      if (!session || !this.notifications || this._watched(session)) {
        continue;
      }
      const message = requestSentence(r, trans);
      const actions = [
        ...requestActions(model, r, trans),
        {
          label: trans.__('Open'),
          caption: openCaption(session, trans),
          callback: () => void this._options.open(session)
        }
      ];
      const shown = this._shown.get(session.id);
      if (shown && Notification.manager.has(shown)) {
        const id = replaceNotification(shown, message, 'warning', {
          autoClose: false,
          actions
        });
        // what the old notification offered, this one offers
        for (const [other, by] of Array.from(this._asked)) {
          if (by === shown) {
            this._asked.set(other, id);
          }
        }
        this._shown.set(session.id, id);
        this._asked.set(r.id, id);
      } else {
        const id = Notification.emit(message, 'warning', {
          autoClose: false,
          actions
        });
        this._shown.set(session.id, id);
        this._asked.set(r.id, id);
      }
    }
  }

  dispose(): void {
    this._options.model.changed.disconnect(this.update, this);
  }

  /**
   * Whether `session`'s tab is on screen, on a visible page, wherever the focus is:
   * the tab already shows what a notification would say.
   */
  private _watched(session: ISession): boolean {
    if (document.visibilityState !== 'visible') {
      return false;
    }
    if (this._options.viewed?.(session)) {
      return true;
    }
    for (const tab of this._options.tabs()) {
      const node = (tab as unknown as { node?: HTMLElement }).node;
      if (
        !tab.isDisposed &&
        tab.content.session.name === session.name &&
        node?.offsetParent
      ) {
        return true;
      }
    }
    return false;
  }

  /** Whether notification `id` offers a request that is still pending. */
  private _offersPending(id: string): boolean {
    const pending = new Set(this._options.model.requests.map(r => r.id));
    return Array.from(this._asked).some(
      ([request, by]) => by === id && pending.has(request)
    );
  }

  private _notify(session: ISession): void {
    const { trans, open } = this._options;
    const message = attentionSentence(session, trans);
    if (this._watched(session)) {
      return; // the person is looking at it: the tab and the row say it already
    }
    const previous = this._shown.get(session.id);
    if (
      previous &&
      this._offersPending(previous) &&
      Notification.manager.has(previous)
    ) {
      // its notification offers a pending request: that says more (what it asks, and
      // Allow and Deny) than the attention that followed it
    } else if (this.notifications) {
      if (previous) {
        Notification.dismiss(previous);
      }
      const id = Notification.emit(
        message,
        session.attention === 'error' ? 'error' : 'warning',
        {
          autoClose: session.attention === 'waiting' ? 10000 : false,
          actions: [
            {
              label: trans.__('Open'),
              caption: openCaption(session, trans),
              callback: () => void open(session)
            }
          ]
        }
      );
      this._shown.set(session.id, id);
    }
    if (
      this._browser &&
      document.visibilityState === 'hidden' &&
      typeof window.Notification !== 'undefined' &&
      window.Notification.permission === 'granted'
    ) {
      try {
        const note = new window.Notification(trans.__('Jupyter agents'), {
          body: message,
          tag: `jupyter-agents-${session.id}`
        });
        note.onclick = () => {
          window.focus();
          void open(session);
          note.close();
        };
      } catch {
        // some browsers only notify from a service worker: the Lab notification stays
      }
    }
  }

  private _live: HTMLDivElement;
  /** The needs already said in the live region: session, attention, since. */
  private _heard = new Set<string>();
  private _seen = new Map<string, string>();
  private _shown = new Map<string, string>();
  /** The requests already seen: the notification offering each (null: none, the
   * session was watched or notifications are off). */
  private _asked = new Map<string, string | null>();
  private _first = true;
  private _browser = false;
}
