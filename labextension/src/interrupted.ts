/**
 * The restored tab of an interrupted terminal.
 *
 * After a reboot JupyterLab restores each terminal tab from the workspace by name;
 * the name is no longer running, so Lab asks the server for a fresh shell with that
 * name. Without help the user sees an empty shell and no sign that their session
 * (maybe an agent with a conversation) was lost. This banner says why and offers to
 * restore the recorded session in place of the fresh shell.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { ITerminal } from '@jupyterlab/terminal';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { ISession } from './api';
import { kindLabel } from './icons';

/** The interrupted session that a tab named like `fresh` stands in for, if any. */
export function interruptedFor(
  sessions: ISession[],
  name: string,
  serverStarted: string | undefined
): ISession | undefined {
  const fresh = sessions.find(s => s.status === 'running' && s.name === name);
  if (!fresh || fresh.kind !== 'shell') {
    return undefined;
  }
  // only a shell started by this server run, after the old one was lost
  if (serverStarted && Date.parse(fresh.created) < Date.parse(serverStarted)) {
    return undefined;
  }
  return sessions
    .filter(s => s.status === 'interrupted' && s.name === name)
    .sort((a, b) => (a.created < b.created ? 1 : -1))[0];
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
    'Terminal %1 was interrupted: %2%3 ended when the server or the machine ' +
      'restarted%4. This tab now shows a new, empty shell.',
    s.name,
    what,
    where,
    why
  );
}

export class InterruptedBanner extends Widget {
  constructor(
    session: ISession,
    trans: TranslationBundle,
    onRestore: () => Promise<void>,
    onDismiss: () => void
  ) {
    super();
    this.addClass('jp-AgentsInterrupted');
    this.node.dataset.sessionId = session.id;
    const text = document.createElement('span');
    text.className = 'jp-AgentsInterrupted-text';
    text.textContent = describeInterrupted(session, trans);
    const restore = document.createElement('button');
    restore.className = 'jp-mod-styled jp-mod-accept';
    restore.dataset.action = 'restore';
    restore.textContent =
      session.kind === 'shell'
        ? trans.__('Restore session')
        : trans.__('Resume %1', kindLabel(session.kind, trans));
    restore.onclick = async () => {
      restore.disabled = true;
      try {
        await onRestore();
      } finally {
        restore.disabled = false;
      }
    };
    const dismiss = document.createElement('button');
    dismiss.className = 'jp-mod-styled';
    dismiss.dataset.action = 'dismiss';
    dismiss.textContent = trans.__('Keep the new shell');
    dismiss.onclick = onDismiss;
    this.node.append(text, restore, dismiss);
  }
}

export type TerminalWidget = MainAreaWidget<ITerminal.ITerminal>;
