/**
 * The restored tab of an interrupted terminal.
 *
 * After a reboot JupyterLab restores each terminal tab from the workspace by name;
 * the name is no longer running, so Lab POSTs it to `/api/terminals`. Two cases:
 * - the server restored the interrupted session in place (`AgentsApp.restore_on_open`,
 *   the default): the tab shows the old tail, the marker line and the shell (or the
 *   resumed agent). `RestoredBanner` says so and offers "Start a fresh shell instead".
 * - it did not (`restore_on_open=false`): the tab shows a fresh, empty shell.
 *   `InterruptedBanner` says why and offers to restore the recorded session in its
 *   place.
 *
 * A tab JupyterLab reopens for an agent that had exited or been killed before gets a
 * new shell under its name (the server starts one for a name that does not run):
 * `EndedBanner` says which agent ended, and how, and offers to resume it in the tab's
 * place. Only tabs the workspace reopened: a new terminal that happens to get a free
 * name is not an agent's tab.
 *
 * A resume can fail at once (the agent's conversation is gone and no copy is left, or
 * the CLI refuses it): the session is interrupted again, its reason saying why
 * (`resumeFailed`). Then a notification (`notifyResumeFailed`) and, on a tab still
 * open, `CannotResumeBanner` say so and offer a fresh session of its kind in the same
 * folder (the old transcript's end shown first) and the old conversation to read.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { ITerminal, ITerminalTracker } from '@jupyterlab/terminal';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Message, MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { IReconcileReport, ISession, reconcileReport } from './api';
import { kindLabel, sessionName } from './icons';
import { CommandIDs, IAgentSessions } from './tokens';

/**
 * The session a new shell named `name` took the name of: the newest other session of
 * that name that started before it (undefined when `name` does not run a shell).
 */
export function previousOf(
  sessions: ISession[],
  name: string
): { fresh: ISession; before: ISession | undefined } | undefined {
  const fresh = sessions.find(s => s.status === 'running' && s.name === name);
  if (!fresh || fresh.kind !== 'shell') {
    return undefined;
  }
  const before = sessions
    .filter(
      s => s.name === name && s.id !== fresh.id && s.created <= fresh.created
    )
    .sort((a, b) => (a.created < b.created ? 1 : -1))[0];
  return { fresh, before };
}

/** The interrupted session that a tab named like `fresh` stands in for, if any. */
export function interruptedFor(
  sessions: ISession[],
  name: string,
  serverStarted: string | undefined
): ISession | undefined {
  const found = previousOf(sessions, name);
  // only a shell started by this server run, after the old one was lost
  if (
    !found ||
    (serverStarted &&
      Date.parse(found.fresh.created) < Date.parse(serverStarted))
  ) {
    return undefined;
  }
  return found.before?.status === 'interrupted' ? found.before : undefined;
}

/**
 * The session that a tab named `name` shows, if the server restored it in place: running
 * under that name, and among `restored` (what this server run restored when a tab
 * opened on a name, and what its start found interrupted: see `restoredInPlace`).
 */
export function restoredFor(
  sessions: ISession[],
  name: string,
  restored: ReadonlySet<string>
): ISession | undefined {
  return sessions.find(
    s => s.status === 'running' && s.name === name && restored.has(s.id)
  );
}

/**
 * The ids of the sessions a tab may show restored in place, from the reconcile report:
 * those this server run restored when a tab opened on their name (whatever interrupted
 * them: a reboot, or a backend lost while an earlier server ran), and those its start
 * found interrupted (restored since by other means, e.g. `jupyter agents restore`).
 */
export function restoredInPlace(report: IReconcileReport): Set<string> {
  return new Set([
    ...(report.restored_on_open ?? []),
    ...(report.boot?.actions ?? [])
      .filter(a => a.kind === 'interrupt')
      .map(a => a.session_id)
  ]);
}

/**
 * The ended agent session whose name a new shell took when JupyterLab reopened its
 * tab from the workspace (the agent had exited or been killed before), if any: the
 * newest other session of that name, when it is an agent's and ended.
 */
export function endedAgentFor(
  sessions: ISession[],
  name: string
): ISession | undefined {
  const before = previousOf(sessions, name)?.before;
  if (
    !before ||
    before.kind === 'shell' ||
    (before.status !== 'exited' && before.status !== 'killed')
  ) {
    return undefined;
  }
  return before;
}

/** Describe, in one sentence, an ended agent whose reopened tab now shows a shell. */
export function describeEnded(s: ISession, trans: TranslationBundle): string {
  const how =
    s.status === 'killed'
      ? trans.__('was killed')
      : s.exit_code !== null && s.exit_code !== undefined
        ? trans.__('exited (code %1)', s.exit_code)
        : trans.__('exited');
  const conversation = s.conversation_id
    ? trans.__(' (conversation %1)', s.conversation_id.slice(0, 8))
    : '';
  return trans.__(
    'Terminal %1 ran a %2 session%3 that %4 before this tab was reopened. This tab now shows a new shell.',
    s.name,
    kindLabel(s.kind, trans),
    conversation,
    how
  );
}

/**
 * What held a session's process and ended with it: its tmux server or pty broker (a
 * reboot ends either; a Jupyter server restart alone ends neither).
 */
export function holderOf(
  s: Pick<ISession, 'backend'>,
  trans: TranslationBundle
): string {
  switch (s.backend) {
    case 'tmux':
      return trans.__('its tmux server');
    case 'broker':
      return trans.__('its pty broker');
    default:
      return trans.__('its terminal backend');
  }
}

/** Describe a session restored in place in one sentence. */
export function describeRestored(
  s: ISession,
  trans: TranslationBundle
): string {
  const where = s.cwd ? trans.__(' in %1', s.cwd) : '';
  if (s.kind === 'shell') {
    return trans.__(
      '%1 was interrupted when %2 ended (a reboot ends it too), and is ' +
        'restored: a new shell%3, under its earlier output and a marker line.',
      sessionName(s, trans),
      holderOf(s, trans),
      where
    );
  }
  const conversation = s.conversation_id
    ? trans.__(' (conversation %1)', s.conversation_id.slice(0, 8))
    : '';
  return trans.__(
    '%1 was interrupted when %2 ended (a reboot ends it too), and is ' +
      'restored: %3 resumed%4%5.',
    sessionName(s, trans),
    holderOf(s, trans),
    kindLabel(s.kind, trans),
    conversation,
    where
  );
}

/** Describe an interrupted session in one sentence. */
export function describeInterrupted(
  s: ISession,
  trans: TranslationBundle
): string {
  const what =
    s.kind === 'shell'
      ? trans.__('its shell')
      : s.conversation_id
        ? trans.__(
            'its %1 session (conversation %2)',
            kindLabel(s.kind, trans),
            s.conversation_id.slice(0, 8)
          )
        : trans.__('its %1 session', kindLabel(s.kind, trans));
  const where = s.cwd ? trans.__(' in %1', s.cwd) : '';
  const why = s.reason ? ` (${s.reason})` : '';
  return trans.__(
    '%1 was interrupted: %2%3 ended with %4%5. This tab now shows a new, ' +
      'empty shell.',
    sessionName(s, trans),
    what,
    where,
    holderOf(s, trans),
    why
  );
}

/** Whether a restore left the session interrupted again because its resume failed. */
export function resumeFailed(s: Pick<ISession, 'status' | 'reason'>): boolean {
  return s.status === 'interrupted' && !!s.reason?.startsWith('resume failed');
}

/** Why a resume failed: the session's reason without the command line it ran. */
export function resumeFailure(s: Pick<ISession, 'reason'>): string {
  return (s.reason ?? '').replace(/\s*Launched: [\s\S]*$/, '');
}

/** Describe a session whose resume failed in one sentence. */
export function describeResumeFailed(
  s: ISession,
  trans: TranslationBundle
): string {
  return trans.__(
    '%1 could not be resumed (%2). Its record and conversation id are kept.',
    sessionName(s, trans),
    resumeFailure(s)
  );
}

/**
 * Say that a session could not be resumed, and offer a fresh session in its folder
 * (`jupyter-agents:fresh`) and its conversation to read.
 */
export function notifyResumeFailed(
  commands: CommandRegistry,
  s: ISession,
  trans: TranslationBundle
): void {
  Notification.warning(describeResumeFailed(s, trans), {
    autoClose: false,
    actions: [
      {
        label: trans.__('Start fresh here'),
        callback: () => void commands.execute(CommandIDs.fresh, { id: s.id })
      },
      {
        label: trans.__('Read the conversation'),
        callback: () =>
          void commands.execute(CommandIDs.conversation, { id: s.id })
      }
    ]
  });
}

/**
 * A banner button: `data-action` set, disabled while its (possibly async) action runs.
 */
function bannerButton(
  action: string,
  label: string,
  accept: boolean,
  onClick: () => Promise<void> | void
): HTMLButtonElement {
  const button = document.createElement('button');
  button.className = accept ? 'jp-mod-styled jp-mod-accept' : 'jp-mod-styled';
  button.dataset.action = action;
  button.textContent = label;
  button.onclick = async () => {
    button.disabled = true;
    try {
      await onClick();
    } finally {
      button.disabled = false;
    }
  };
  return button;
}

/** A banner over a terminal tab: the session's id, a sentence, then buttons. */
class Banner extends Widget {
  constructor(
    session: ISession,
    message: string,
    buttons: HTMLButtonElement[]
  ) {
    super();
    this.addClass('jp-AgentsInterrupted');
    this.node.dataset.sessionId = session.id;
    const text = document.createElement('span');
    text.className = 'jp-AgentsInterrupted-text';
    text.textContent = message;
    this.node.append(text, ...buttons);
  }

  protected onAfterAttach(msg: Message): void {
    this._fitText();
  }

  /** The min-height last given to the layout ('' for the stylesheet's). */
  private _fitted = '';

  protected onResize(msg: Widget.ResizeMessage): void {
    this._fitText();
  }

  /**
   * As tall as its words and buttons need at its width: the tab's layout gives a
   * header its minimum height, which is a line or two on a desktop but six on a phone
   * (cut there, its buttons hidden, without this).
   */
  private _fitText(): void {
    // lumino's `contain: strict` sizes the node by its layout alone: what it needs is
    // the span of its children (laid out at its width, wrapped), plus its padding
    const node = this.node;
    const boxes = Array.from(node.children).map(c => c.getBoundingClientRect());
    if (!boxes.length || !node.isConnected) {
      return;
    }
    const style = getComputedStyle(node);
    const needed = Math.ceil(
      Math.max(...boxes.map(b => b.bottom)) -
        Math.min(...boxes.map(b => b.top)) +
        (parseFloat(style.paddingTop) || 0) +
        (parseFloat(style.paddingBottom) || 0) +
        (parseFloat(style.borderBottomWidth) || 0)
    );
    // never below the stylesheet's own minimum (a desktop's one or two lines)
    node.style.minHeight = '';
    const floor = parseFloat(getComputedStyle(node).minHeight) || 0;
    const wanted = needed > floor ? `${needed}px` : '';
    node.style.minHeight = wanted;
    if (wanted !== this._fitted) {
      this._fitted = wanted;
      if (this.parent) {
        MessageLoop.postMessage(this.parent, Widget.Msg.FitRequest);
      }
    }
  }
}

/** The tab's session was interrupted and this tab shows a new shell: restore it? */
export class InterruptedBanner extends Banner {
  constructor(
    session: ISession,
    trans: TranslationBundle,
    onRestore: () => Promise<void>,
    onDismiss: () => void
  ) {
    super(session, describeInterrupted(session, trans), [
      bannerButton(
        'restore',
        session.kind === 'shell'
          ? trans.__('Restore session')
          : trans.__('Resume %1', kindLabel(session.kind, trans)),
        true,
        onRestore
      ),
      bannerButton('dismiss', trans.__('Keep the new shell'), false, onDismiss)
    ]);
  }
}

/** The tab's agent had ended and this tab shows a new shell: resume the agent? */
export class EndedBanner extends Banner {
  constructor(
    session: ISession,
    trans: TranslationBundle,
    onResume: () => Promise<void>,
    onDismiss: () => void
  ) {
    super(session, describeEnded(session, trans), [
      bannerButton(
        'restore',
        session.conversation_id
          ? trans.__('Resume %1', kindLabel(session.kind, trans))
          : trans.__('Start %1 again', kindLabel(session.kind, trans)),
        true,
        onResume
      ),
      bannerButton('dismiss', trans.__('Keep the shell'), false, onDismiss)
    ]);
    this.addClass('jp-AgentsEnded');
  }
}

/** The tab's interrupted session was restored in place: or a fresh shell instead? */
export class RestoredBanner extends Banner {
  constructor(
    session: ISession,
    trans: TranslationBundle,
    onFresh: () => Promise<void>,
    onDismiss: () => void
  ) {
    // what fits its kind: a shell for a shell, a new conversation for an agent
    const shell = session.kind === 'shell';
    const kind = kindLabel(session.kind, trans);
    const fresh = bannerButton(
      'fresh',
      shell
        ? trans.__('Start a fresh shell instead')
        : trans.__('Start a fresh %1 session instead', kind),
      false,
      onFresh
    );
    fresh.title = shell
      ? trans.__(
          'Open a new, empty shell in a new tab and close this one (the restored session keeps running; kill it from the Agents panel)'
        )
      : trans.__(
          'Start a new %1 conversation in its folder, in a new tab, and close this one (the restored session keeps running; kill it from the Agents panel)',
          kind
        );
    super(session, describeRestored(session, trans), [
      fresh,
      bannerButton('dismiss', trans.__('OK'), true, onDismiss)
    ]);
    this.addClass('jp-AgentsRestored');
  }
}

/** The tab's session could not be resumed: a fresh session here, or read what it was? */
export class CannotResumeBanner extends Banner {
  constructor(
    session: ISession,
    trans: TranslationBundle,
    onFresh: () => Promise<void>,
    onConversation: () => Promise<void>
  ) {
    super(session, describeResumeFailed(session, trans), [
      bannerButton(
        'fresh',
        trans.__(
          'Start a fresh %1 session here',
          kindLabel(session.kind, trans)
        ),
        true,
        onFresh
      ),
      bannerButton(
        'conversation',
        trans.__('Read the conversation'),
        false,
        onConversation
      )
    ]);
    this.addClass('jp-AgentsCannotResume');
  }
}

export type TerminalWidget = MainAreaWidget<ITerminal.ITerminal>;

/**
 * Puts the right banner on each terminal tab as it opens: `RestoredBanner` on the tab
 * of a session the server restored in place when the tab reopened it (unless one of
 * our commands restored it: then the user asked for it), `InterruptedBanner` on a tab
 * that got a fresh shell in place of an interrupted session (gone once that session
 * is restored from elsewhere).
 */
export class InterruptedTabs {
  constructor(private _options: InterruptedTabs.IOptions) {
    const { app, model, terminals } = _options;
    app.commands.commandExecuted.connect((_, { id, args }) => {
      if (id === CommandIDs.restore && args.id) {
        this._ourRestores.add(String(args.id));
      } else if (id === CommandIDs.restoreAll) {
        (model.sessions ?? [])
          .filter(s => s.status === 'interrupted')
          .forEach(s => this._ourRestores.add(s.id));
      }
    });
    // a tab added before the workspace is restored is one JupyterLab reopened
    let restoring = true;
    void app.restored.then(() => (restoring = false));
    terminals.widgetAdded.connect(
      (_, widget) => void this._onTab(widget, restoring)
    );
  }

  /**
   * The ids of the sessions restored in place (`restoredInPlace`), read when a tab
   * opens on a running session's name: the server restores as the tab opens.
   */
  private _restoredInPlace(): Promise<Set<string>> {
    return reconcileReport(this._options.model.serverSettings).then(
      restoredInPlace,
      () => new Set<string>()
    );
  }

  private async _onTab(
    widget: TerminalWidget,
    fromWorkspace: boolean
  ): Promise<void> {
    const { model } = this._options;
    const name = widget.content.session.name;
    await model.ready;
    const known = (model.sessions ?? []).some(
      s => s.name === name && s.status === 'running'
    );
    if (!known) {
      // a terminal made (or restored) for this tab after our snapshot
      await model.refresh();
    }
    const sessions = model.sessions ?? [];
    const restored = restoredFor(sessions, name, await this._restoredInPlace());
    if (restored && !this._ourRestores.has(restored.id)) {
      if (!widget.isDisposed) {
        this._offerFresh(widget, restored);
      }
      return;
    }
    const lost = interruptedFor(sessions, name, model.started);
    if (lost && !widget.isDisposed) {
      this._offerRestore(widget, lost);
      return;
    }
    const ended = fromWorkspace ? endedAgentFor(sessions, name) : undefined;
    if (ended && !widget.isDisposed) {
      this._offerRestore(widget, ended);
    }
  }

  /** The session was restored in place: say so, offer a fresh shell instead. */
  private _offerFresh(widget: TerminalWidget, restored: ISession): void {
    const { app, model, trans } = this._options;
    const banner: RestoredBanner = new RestoredBanner(
      restored,
      trans,
      async () => {
        // a new plain shell where the restored one runs; this tab goes (the
        // restored session keeps running, listed in the Agents panel)
        await app.commands.execute(CommandIDs.create, {
          kind: restored.kind,
          cwd: restored.cwd ?? ''
        });
        widget.dispose();
      },
      () => banner.dispose()
    );
    widget.contentHeader.addWidget(banner);
    // its resume may fail at once: then say so (here while the tab lives) and offer
    // a fresh session of its kind instead
    const follow = () => {
      const now = model.sessions?.find(s => s.id === restored.id);
      if (!now || now.status === 'running') {
        return;
      }
      model.changed.disconnect(follow);
      banner.dispose();
      if (resumeFailed(now)) {
        notifyResumeFailed(app.commands, now, trans);
        if (!widget.isDisposed) {
          this._offerFreshSession(widget, now);
        }
      }
    };
    model.changed.connect(follow);
    widget.disposed.connect(() => model.changed.disconnect(follow));
  }

  /** The tab's session could not be resumed: a fresh one of its kind here? */
  private _offerFreshSession(widget: TerminalWidget, failed: ISession): void {
    const { app, trans } = this._options;
    const banner = new CannotResumeBanner(
      failed,
      trans,
      async () => {
        await app.commands.execute(CommandIDs.fresh, { id: failed.id });
        widget.dispose();
      },
      async () => {
        await app.commands.execute(CommandIDs.conversation, { id: failed.id });
      }
    );
    widget.contentHeader.addWidget(banner);
  }

  /**
   * The tab shows a fresh shell in place of an interrupted session, or of an agent
   * that had ended before JupyterLab reopened the tab: restore it?
   */
  private _offerRestore(widget: TerminalWidget, lost: ISession): void {
    const { app, model, trans } = this._options;
    const name = widget.content.session.name;
    const banner = new (
      lost.status === 'interrupted' ? InterruptedBanner : EndedBanner
    )(
      lost,
      trans,
      async () => {
        // the fresh shell made in its place goes; the session takes its name back
        widget.dispose();
        await app.serviceManager.terminals
          .shutdown(name)
          .catch(() => undefined);
        await app.commands.execute(CommandIDs.restore, { id: lost.id });
      },
      () => banner.dispose()
    );
    // gone once the session runs again (restored from elsewhere)
    const follow = () => {
      const now = model.sessions?.find(s => s.id === lost.id);
      if (now && now.status === 'running') {
        banner.dispose();
      }
    };
    model.changed.connect(follow);
    banner.disposed.connect(() => model.changed.disconnect(follow));
    widget.contentHeader.addWidget(banner);
  }

  /** Sessions restored by a command of ours (panel, banner, notification). */
  private _ourRestores = new Set<string>();
}

export namespace InterruptedTabs {
  export interface IOptions {
    app: JupyterFrontEnd;
    model: IAgentSessions;
    terminals: ITerminalTracker;
    trans: TranslationBundle;
  }
}
