/**
 * The commands every front end of the extension goes through (panel buttons, the
 * Running sidebar, the banner, the notification, the palette and the launcher):
 * one place for each action, its confirmation and its error message.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  Dialog,
  InputDialog,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import {
  adoptSession,
  createSession,
  ISession,
  killSession,
  reconcile,
  renameSession,
  restoreAll,
  restoreSession,
  SessionMode,
  setUnattendedLimit
} from './api';
import { kindIcon, kindLabel, sessionName } from './icons';
import { notifyResumeFailed, resumeFailed } from './interrupted';
import { lostHere } from './restart';
import { CommandIDs, IAgentSessions } from './tokens';
import { askLimit, describeLimit } from './usage';

/** Tell the user that `what` failed, with the server's message. */
export function fail(what: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  Notification.error(`${what}: ${message}`, { autoClose: 10000 });
}

/**
 * Show the main-area tab `id`: the open one, brought forward (and `refresh`ed, when
 * given), else the one `make` builds, added; on a phone, alone. Resolves once the tab
 * is ready.
 */
export async function showDocument<T extends Widget>(
  app: JupyterFrontEnd,
  id: string,
  make: () => T & { ready: Promise<void> },
  refresh?: (open: T) => Promise<void>
): Promise<void> {
  // on a phone, single-document mode first: switching shows the shell's current
  // widget, which is still the one before until the new tab takes the focus
  phoneLayout(app);
  const open = Array.from(app.shell.widgets('main')).find(w => w.id === id);
  if (open) {
    app.shell.activateById(id);
    await refresh?.(open as T);
    return;
  }
  const doc = make();
  app.shell.add(doc, 'main');
  app.shell.activateById(doc.id);
  await doc.ready;
}

/**
 * The session of a command's `{id}` (or `{name}`: the running session of that
 * terminal), after a snapshot if it is not known yet.
 */
export async function sessionOf(
  model: IAgentSessions,
  args: ReadonlyPartialJSONObject
): Promise<ISession | undefined> {
  const id = String(args.id ?? '');
  const name = String(args.name ?? '');
  const find = () =>
    model.sessions?.find(s =>
      id ? s.id === id : s.name === name && s.status === 'running'
    );
  if (!find()) {
    await model.refresh();
  }
  return find();
}

/** Below this width (CSS px) a page is laid out for a phone. */
export const PHONE_WIDTH = 600;

/**
 * On a phone-sized page, show the opened terminal alone: the sidebar folds away (it
 * would leave the terminal 77 px, the columns of which would then size the session)
 * and Lab shows one document at a time.
 */
export function phoneLayout(app: JupyterFrontEnd): void {
  if (window.innerWidth >= PHONE_WIDTH) {
    return;
  }
  const shell = app.shell as JupyterFrontEnd.IShell & {
    collapseLeft?: () => void;
    mode?: string;
  };
  shell.collapseLeft?.();
  if (shell.mode !== undefined) {
    shell.mode = 'single-document';
  }
}

export namespace Commands {
  export interface IOptions {
    app: JupyterFrontEnd;
    model: IAgentSessions;
    trans: TranslationBundle;
    /** Where new sessions start when no `cwd` is given (the file browser's path). */
    cwd?: () => string | undefined;
  }
}

/**
 * Register the commands; the session ones take `{id}` (or `{name}` for open and
 * rename).
 */
export function addCommands(options: Commands.IOptions): void {
  const { app, model, trans } = options;
  const { commands } = app;
  const settings = model.serverSettings;
  const terminals = app.serviceManager.terminals;
  const label = (kind: string) => kindLabel(kind, trans);

  /**
   * Open a running session: its terminal; an ACP session has none to type into, and
   * opens as its turns with the box that prompts it.
   */
  const open = async (name: string): Promise<void> => {
    const acp = (model.sessions ?? []).find(
      s => s.name === name && s.status === 'running' && s.mode === 'acp'
    );
    if (acp) {
      await commands.execute(CommandIDs.turns, { id: acp.id });
      return;
    }
    try {
      // JupyterLab starts a new shell for a name that does not run: never that here
      if (terminals.isAvailable()) {
        await terminals.refreshRunning();
        if (!Array.from(terminals.running()).some(t => t.name === name)) {
          await model.refresh();
          const ended = (model.sessions ?? [])
            .filter(s => s.name === name)
            .sort((a, b) => (a.created < b.created ? 1 : -1))[0];
          const why = ended
            ? ended.reason ||
              trans.__(
                '%1 (exit code %2)',
                ended.status,
                ended.exit_code ?? '?'
              )
            : trans.__('no such session');
          Notification.warning(
            trans.__('Terminal %1 is not running: %2', name, why),
            { autoClose: false }
          );
          return;
        }
      }
      phoneLayout(app); // first: see showDocument
      await commands.execute('terminal:open', { name });
    } catch (error) {
      fail(trans.__('Could not open terminal %1', name), error);
    }
  };

  /**
   * A running session is a terminal: end it through JupyterLab's terminal manager,
   * which also closes its tabs. An orphan has no terminal yet: end its record.
   */
  const kill = async (session: ISession): Promise<void> => {
    if (session.status === 'running' && terminals.isAvailable()) {
      await terminals.refreshRunning();
      const listed = Array.from(terminals.running()).some(
        t => t.name === session.name
      );
      if (listed) {
        await terminals.shutdown(session.name);
        return;
      }
    }
    await killSession(settings, session.id);
  };

  commands.addCommand(CommandIDs.open, {
    label: trans.__('Open Agent Session'),
    execute: args => open(String(args.name))
  });

  /** A create command's mode: `acp` when asked for, else terminal. */
  const modeOf = (args: ReadonlyPartialJSONObject): SessionMode =>
    args.mode === 'acp' ? 'acp' : 'terminal';

  /** Why `kind` cannot start in `mode`, or undefined when it can. */
  const cannotStart = (kind: string, mode: SessionMode): string | undefined =>
    mode === 'acp' && !model.modes(kind).includes('acp')
      ? trans.__('%1 has no ACP mode', label(kind))
      : model.unavailable(kind, mode);

  commands.addCommand(CommandIDs.create, {
    label: args => {
      const kind = String(args.kind ?? 'shell');
      if (modeOf(args) === 'acp') {
        return args.isLauncher
          ? trans.__('%1 (ACP)', label(kind))
          : trans.__('New %1 Session in ACP Mode', label(kind));
      }
      return args.isLauncher
        ? label(kind)
        : trans.__('New %1 Session', label(kind));
    },
    caption: args => {
      const kind = String(args.kind ?? 'shell');
      const mode = modeOf(args);
      const missing = cannotStart(kind, mode);
      if (missing) {
        return mode === 'acp'
          ? trans.__('%1 in ACP mode cannot start: %2', label(kind), missing)
          : trans.__('%1 cannot start: %2', label(kind), missing);
      }
      return mode === 'acp'
        ? trans.__(
            'Start a %1 session in ACP mode: its turns and a prompt box, no terminal; it survives server restarts',
            label(kind)
          )
        : trans.__(
            'Start a %1 session that survives server restarts',
            label(kind)
          );
    },
    isEnabled: args => !cannotStart(String(args.kind ?? 'shell'), modeOf(args)),
    icon: args => kindIcon(String(args.kind ?? 'shell')),
    execute: async args => {
      const kind = String(args.kind ?? 'shell');
      const mode = modeOf(args);
      const cwd = args.cwd ? String(args.cwd) : options.cwd?.();
      try {
        const session = await createSession(
          settings,
          kind,
          cwd || undefined,
          args.worktree === true,
          mode
        );
        await model.refresh();
        if (session.mode === 'acp') {
          // no terminal to type into: its turns, with the box that prompts it
          await commands.execute(CommandIDs.turns, { id: session.id });
        } else {
          await open(session.name);
        }
      } catch (error) {
        fail(
          args.worktree === true
            ? trans.__(
                'Could not start a %1 session in a worktree',
                label(kind)
              )
            : mode === 'acp'
              ? trans.__(
                  'Could not start a %1 session in ACP mode',
                  label(kind)
                )
              : trans.__('Could not start a %1 session', label(kind)),
          error
        );
      }
    }
  });

  commands.addCommand(CommandIDs.kill, {
    label: trans.__('Kill Agent Session'),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      if (!args.noConfirm) {
        const answer = await showDialog({
          title: trans.__(
            'Kill %1 session %2?',
            label(session.kind),
            session.name
          ),
          body: trans.__(
            'Its process and every process it started are terminated. ' +
              'The transcript is kept and the session can be restored later.'
          ),
          buttons: [
            Dialog.cancelButton({ label: trans.__('Cancel') }),
            Dialog.warnButton({ label: trans.__('Kill') })
          ]
        });
        if (!answer.button.accept) {
          return;
        }
      }
      try {
        await kill(session);
      } catch (error) {
        fail(trans.__('Could not kill %1', session.name), error);
      }
      await model.refresh();
    }
  });

  commands.addCommand(CommandIDs.killAll, {
    label: trans.__('Kill All Agent Sessions'),
    execute: async () => {
      await model.refresh();
      const live = (model.sessions ?? []).filter(
        s => s.status === 'running' || s.status === 'orphaned'
      );
      await Promise.all(
        live.map(s =>
          kill(s).catch(error =>
            fail(trans.__('Could not kill %1', s.name), error)
          )
        )
      );
      await model.refresh();
    }
  });

  commands.addCommand(CommandIDs.adopt, {
    label: trans.__('Adopt Orphaned Session'),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      try {
        const adopted = await adoptSession(settings, session.id);
        await model.refresh();
        await open(adopted.name);
      } catch (error) {
        fail(trans.__('Could not adopt %1', session.name), error);
        await model.refresh();
      }
    }
  });

  commands.addCommand(CommandIDs.restore, {
    label: trans.__('Restore Agent Session'),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      try {
        const restored = await restoreSession(settings, session.id);
        await model.refresh();
        if (restored.status === 'running') {
          lostHere.delete(restored.id);
          await open(restored.name);
        } else if (resumeFailed(restored)) {
          notifyResumeFailed(commands, restored, trans);
        } else {
          Notification.warning(
            trans.__(
              '%1 did not resume: %2',
              sessionName(restored, trans),
              restored.reason ??
                trans.__('it exited with code %1', restored.exit_code)
            ),
            { autoClose: false }
          );
        }
      } catch (error) {
        fail(trans.__('Could not restore %1', session.name), error);
        await model.refresh();
      }
    }
  });

  commands.addCommand(CommandIDs.restoreAll, {
    label: trans.__('Restore All Interrupted Sessions'),
    execute: async () => {
      try {
        const result = await restoreAll(settings);
        // said as the server answers; the panel follows when the list comes
        const listed = model.refresh();
        const failed = result.failed.length;
        const restored = trans._n(
          'Restored %1 interrupted session',
          'Restored %1 interrupted sessions',
          result.restored.length
        );
        const message = failed
          ? trans.__(
              '%1; %2 failed: %3',
              restored,
              failed,
              result.failed.map(f => `${f.id}: ${f.error}`).join('; ')
            )
          : restored;
        const notify = failed ? Notification.warning : Notification.success;
        notify(message, { autoClose: failed ? false : 5000 });
        // the tabs that closed when their sessions were lost open again, as the loss
        // notice's Restore opens them
        await listed;
        for (const s of result.restored) {
          if (s.status === 'running' && lostHere.delete(s.id)) {
            await open(s.name);
          }
        }
      } catch (error) {
        fail(trans.__('Could not restore the interrupted sessions'), error);
      }
    }
  });

  commands.addCommand(CommandIDs.rename, {
    label: trans.__('Rename Session…'),
    caption: trans.__(
      'Give the session a title (its tab and its line in the Agents panel); empty: the title its program set'
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      const answer = await InputDialog.getText({
        title: trans.__(
          'Rename %1 session %2',
          label(session.kind),
          session.name
        ),
        label: trans.__('Title (empty: the one its program sets, if any)'),
        text: session.title_source === 'user' ? (session.title ?? '') : '',
        placeholder: session.title ?? trans.__('Terminal %1', session.name),
        okLabel: trans.__('Rename')
      });
      if (!answer.button.accept || answer.value === null) {
        return;
      }
      const title = answer.value.trim();
      try {
        await renameSession(settings, session.id, title || null);
      } catch (error) {
        fail(trans.__('Could not rename %1', session.name), error);
      }
      await model.refresh();
    }
  });

  commands.addCommand(CommandIDs.limit, {
    label: trans.__('Spending Limit…'),
    caption: trans.__(
      "What the agent may spend while nobody watches, since a person last typed: its own limit, none, or the server's"
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      if (session.status !== 'running' && session.status !== 'orphaned') {
        Notification.info(
          trans.__(
            'Session %1 is %2: a spending limit applies only while it runs.',
            session.name,
            session.status
          ),
          { autoClose: 5000 }
        );
        return;
      }
      const limit = await askLimit(
        session,
        trans.__(
          'Spending limit of %1 session %2',
          label(session.kind),
          session.name
        ),
        trans
      );
      if (limit === undefined) {
        return;
      }
      try {
        const changed = await setUnattendedLimit(settings, session.id, limit);
        Notification.info(
          trans.__(
            'Spending limit of %1: %2',
            session.name,
            describeLimit(changed.usage?.limit, trans)
          ),
          { autoClose: 5000 }
        );
      } catch (error) {
        fail(trans.__('Could not set the limit of %1', session.name), error);
      }
      await model.refresh();
    }
  });

  commands.addCommand(CommandIDs.refresh, {
    label: trans.__('Refresh Agent Sessions'),
    caption: trans.__(
      'Check the backend for ended or orphaned sessions, then refresh'
    ),
    execute: async () => {
      try {
        await reconcile(settings);
      } catch (error) {
        fail(trans.__('Could not check the sessions'), error);
      }
      await model.refresh();
    }
  });
}
