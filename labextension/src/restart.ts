/**
 * After a server restart: a notification that counts the terminals reattached (still
 * running) and the sessions interrupted, and offers to restore the latter. Shown once
 * per server start in each front end (`firstTime`), so a reload or a second tab does
 * not repeat it.
 *
 * While the server runs: running sessions that become interrupted (their tmux server
 * or broker ended: the tabs close) are announced on every open page as the event
 * arrives, naming them and offering to restore them (`followLosses`).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { IStateDB } from '@jupyterlab/statedb';
import { TranslationBundle } from '@jupyterlab/translation';

import { ISession, reconcileReport } from './api';
import { sessionName } from './icons';
import { replaceNotification } from './notify';
import { CommandIDs, IAgentSessions } from './tokens';

/** The `IStateDB` key: `{ started }`, the server start last notified. */
const STATE_KEY = 'jupyter-agents:restart-notification';

/** What changed at a server start, as counted for the notification. */
export interface IRestartCounts {
  /** Terminals this start found running and reattached. */
  reattached: number;
  /** Sessions this start found gone (interrupted now), still interrupted. */
  interrupted: number;
  /** Sessions interrupted before this start, still waiting to be restored. */
  earlier?: number;
}

/**
 * The notification's sentence: what this start did, then, apart, a reminder of
 * sessions interrupted before it; null when there is nothing to say.
 */
export function restartMessage(
  counts: IRestartCounts,
  trans: TranslationBundle
): string | null {
  const { reattached, interrupted } = counts;
  const earlier = counts.earlier ?? 0;
  if (reattached === 0 && interrupted === 0 && earlier === 0) {
    return null;
  }
  const parts = [];
  if (reattached || !interrupted) {
    parts.push(
      trans._n(
        '%1 terminal reattached (still running)',
        '%1 terminals reattached (still running)',
        reattached
      )
    );
  }
  if (interrupted) {
    parts.push(
      trans._n(
        '%1 session interrupted by this restart',
        '%1 sessions interrupted by this restart',
        interrupted
      )
    );
  }
  const said = trans.__('Jupyter server restarted: %1.', parts.join(', '));
  if (!earlier) {
    return said;
  }
  return `${said} ${trans._n(
    '%1 session interrupted earlier can still be restored.',
    '%1 sessions interrupted earlier can still be restored.',
    earlier
  )}`;
}

/**
 * Whether the start `started` still has to be notified by this front end (`app`, e.g.
 * JupyterLab or Notebook 7); remembers it if so. Kept in the workspace (`IStateDB`)
 * and in the browser's storage under the front end's name and the server's address:
 * a front end whose state lives only as long as its page (Notebook 7) or a reset
 * workspace says it once, not on every load.
 */
async function firstTime(
  app: JupyterFrontEnd,
  state: IStateDB | null,
  started: string
): Promise<boolean> {
  const key = `${STATE_KEY}:${app.name}:${PageConfig.getBaseUrl()}`;
  let stored: string | null = null;
  try {
    stored = window.localStorage.getItem(key);
    window.localStorage.setItem(key, started);
  } catch {
    // no storage (a private window may refuse it): the workspace alone decides
  }
  const seen = state
    ? ((await state.fetch(STATE_KEY).catch(() => undefined)) as
        { started?: string } | undefined)
    : undefined;
  if (seen?.started === started || stored === started) {
    return false;
  }
  await state?.save(STATE_KEY, { started }).catch(() => undefined);
  return true;
}

/** Notify the server start `started` unless this workspace already did. */
export async function notifyRestart(options: {
  app: JupyterFrontEnd;
  model: IAgentSessions;
  state: IStateDB | null;
  trans: TranslationBundle;
  started: string;
}): Promise<void> {
  const { app, model, state, trans, started } = options;
  if (!(await firstTime(app, state, started))) {
    return;
  }
  const sessions = model.sessions ?? [];
  // what this start did: from the server's boot report when it keeps one, else the
  // running sessions older than this server process (and no telling when the
  // interrupted ones were interrupted)
  const boot = await reconcileReport(model.serverSettings).then(
    report => report.boot,
    () => undefined
  );
  const since = Date.parse(started);
  const reattached = boot
    ? boot.actions.filter(a => a.kind === 'reattach').length
    : sessions.filter(
        s => s.status === 'running' && Date.parse(s.created) < since
      ).length;
  const byThisStart = new Set(
    boot?.actions.filter(a => a.kind === 'interrupt').map(a => a.session_id) ??
      sessions.filter(s => s.status === 'interrupted').map(s => s.id)
  );
  const count = (all: ISession[]) => {
    const waiting = all.filter(s => s.status === 'interrupted');
    const now = waiting.filter(s => byThisStart.has(s.id)).length;
    return { reattached, interrupted: now, earlier: waiting.length - now };
  };
  const counts = count(sessions);
  const interrupted = counts.interrupted + counts.earlier;
  const message = restartMessage(counts, trans);
  if (message === null || (!reattached && !byThisStart.size)) {
    // a restart that changed nothing is no news; older interruptions are in the panel.
    // Whether it is news is what the start did, not what is left of it by now: tabs
    // restore their sessions in place as the page opens, and the notification then
    // counts what is still interrupted (below), or goes when nothing is
    return;
  }
  const { commands } = app;
  const actions = (count: number) => [
    ...(count
      ? [
          {
            label: trans.__('Restore all'),
            displayType: 'accent' as const,
            callback: () => void commands.execute(CommandIDs.restoreAll)
          }
        ]
      : []),
    ...(commands.hasCommand(CommandIDs.showPanel)
      ? [
          {
            label: trans.__('Show agents'),
            callback: () => void commands.execute(CommandIDs.showPanel)
          }
        ]
      : [])
  ];
  const notify = interrupted ? Notification.warning : Notification.info;
  let id = notify(message, {
    autoClose: interrupted ? false : 8000,
    actions: actions(interrupted)
  });
  if (!interrupted) {
    return;
  }
  // never stale: it counts what is still interrupted (tabs restore sessions in place,
  // a person restores them elsewhere) and goes once nothing is left to restore
  let shown = interrupted;
  const follow = () => {
    const counted = count(model.sessions ?? []);
    const now = counted.interrupted + counted.earlier;
    if (now === shown) {
      return;
    }
    shown = now;
    const text = restartMessage(counted, trans);
    if (now === 0 || text === null) {
      Notification.dismiss(id);
      model.changed.disconnect(follow);
      return;
    }
    id = replaceNotification(id, text, 'warning', {
      autoClose: false,
      actions: actions(now)
    });
  };
  model.changed.connect(follow);
  follow();
}

/**
 * Notify each server start the model sees, once: the current one and every later
 * one, each after `ready` (the settings loaded) and only while `enabled()`.
 */
export function followRestarts(options: {
  app: JupyterFrontEnd;
  model: IAgentSessions;
  state: IStateDB | null;
  trans: TranslationBundle;
  ready: Promise<void>;
  enabled: () => boolean;
}): void {
  const { model, ready, enabled } = options;
  let handled: string | undefined;
  const onStart = async (started: string) => {
    if (started === handled) {
      return;
    }
    handled = started;
    await ready;
    if (enabled()) {
      await notifyRestart({ ...options, started });
    }
  };
  model.serverStarted.connect((_, started) => void onStart(started));
  if (model.started) {
    void onStart(model.started);
  }
}

/** The sentence announcing running sessions that became interrupted meanwhile. */
export function lossMessage(
  names: string[],
  backends: string[],
  trans: TranslationBundle
): string {
  const quoted = names.map(n => `“${n}”`);
  const which =
    quoted.length > 1
      ? trans.__(
          '%1 and %2',
          quoted.slice(0, -1).join(', '),
          quoted[quoted.length - 1]
        )
      : quoted.join('');
  const what = backends.length === 1 ? backends[0] : backends.join(' and ');
  return trans._n(
    '%2 was interrupted: its %3 server ended. Its output is kept; Restore starts it again.',
    '%2 were interrupted: their %3 server ended. Their output is kept; Restore starts them again.',
    names.length,
    which,
    what === 'broker' ? trans.__('pty broker') : what
  );
}

/**
 * The sessions this page saw interrupted while it watched (their tabs closed), until a
 * restore here opened them again: Restore all opens their tabs, as the loss notice's
 * Restore does.
 */
export const lostHere = new Set<string>();

/**
 * Announce running sessions that become interrupted while this page watches the same
 * server (a server restart is `notifyRestart`'s), within the event's delivery: which
 * ones, what happened, and Restore. The notice describes the present: it names only
 * those still interrupted, whatever restored the others (its Restore, the panel's
 * Restore all, a tab, the CLI), and goes once none is.
 */
export function followLosses(options: {
  app: JupyterFrontEnd;
  model: IAgentSessions;
  trans: TranslationBundle;
  enabled: () => boolean;
}): void {
  const { app, model, trans, enabled } = options;
  let seen = new Map<string, string>();
  let started = model.started;
  let id: string | undefined;
  /** The sessions the notice names, by id, as last seen. */
  let named = new Map<string, ISession>();
  let said = '';
  model.changed.connect(() => {
    const sessions = model.sessions;
    if (sessions === undefined) {
      return;
    }
    const now = new Map(sessions.map(s => [s.id, s.status]));
    const sameServer = started !== undefined && started === model.started;
    const lost = sameServer
      ? sessions.filter(
          s => s.status === 'interrupted' && seen.get(s.id) === 'running'
        )
      : [];
    seen = now;
    started = model.started;
    for (const s of lost) {
      lostHere.add(s.id);
    }
    const still = sessions.filter(
      s => s.status === 'interrupted' && (named.has(s.id) || lost.includes(s))
    );
    named = new Map(still.map(s => [s.id, s]));
    if (!still.length || (!enabled() && id === undefined)) {
      if (id !== undefined) {
        Notification.dismiss(id);
        id = undefined;
        said = '';
      }
      return;
    }
    const names = still.map(s => sessionName(s, trans));
    const backends = Array.from(new Set(still.map(s => s.backend)));
    const message = lossMessage(names, backends, trans);
    if (message === said) {
      return;
    }
    said = message;
    const options = {
      autoClose: false as const,
      actions: [
        {
          label: trans.__('Restore'),
          displayType: 'accent' as const,
          callback: () =>
            void Promise.all(
              Array.from(named.keys()).map(sid =>
                app.commands.execute(CommandIDs.restore, { id: sid })
              )
            )
        }
      ]
    };
    id =
      id === undefined
        ? Notification.warning(message, options)
        : replaceNotification(id, message, 'warning', options);
  });
}
