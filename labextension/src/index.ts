/**
 * jupyter-agents for JupyterLab: the "Agents" sidebar, commands, launcher items, a
 * status-bar item, a notification after a server restart, and a banner on restored
 * tabs of interrupted terminals.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { IRunningSessionManagers } from '@jupyterlab/running';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITerminalTracker } from '@jupyterlab/terminal';

import {
  adoptSession,
  createSession,
  deleteTerminal,
  ISession,
  killSession,
  listKinds,
  reconcile,
  reconcileReport,
  restoreAll,
  restoreSession
} from './api';
import { kindIcon, kindLabel } from './icons';
import {
  InterruptedBanner,
  interruptedFor,
  TerminalWidget
} from './interrupted';
import { SessionsModel } from './model';
import { AgentsPanel, IPanelActions } from './panel';
import { runningManager } from './running';
import { AgentsStatus } from './status';

namespace CommandIDs {
  export const showPanel = 'jupyter-agents:show-panel';
  export const create = 'jupyter-agents:new';
  export const restoreAll = 'jupyter-agents:restore-all';
  export const refresh = 'jupyter-agents:refresh';
}

const DEFAULT_KINDS = ['shell', 'claude', 'codex'];

function fail(what: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  Notification.error(`${what}: ${message}`, { autoClose: 10000 });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-agents:plugin',
  description:
    'Agents panel: terminals and agent sessions that outlive the server.',
  autoStart: true,
  optional: [
    ILayoutRestorer,
    ICommandPalette,
    ILauncher,
    IStatusBar,
    ITerminalTracker,
    IDefaultFileBrowser,
    IRunningSessionManagers
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    statusBar: IStatusBar | null,
    terminals: ITerminalTracker | null,
    browser: IDefaultFileBrowser | null,
    runningManagers: IRunningSessionManagers | null
  ) => {
    const model = new SessionsModel();
    let kinds = DEFAULT_KINDS;

    const open = async (session: ISession): Promise<void> => {
      try {
        await app.commands.execute('terminal:open', { name: session.name });
      } catch (error) {
        fail(`Could not open terminal ${session.name}`, error);
      }
    };

    const actions: IPanelActions = {
      open: session => void open(session),
      kill: async session => {
        const answer = await showDialog({
          title: `Kill ${kindLabel(session.kind)} session ${session.name}?`,
          body:
            'Its process and every process it started are terminated. ' +
            'The transcript is kept and the session can be restored later.',
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Kill' })]
        });
        if (!answer.button.accept) {
          return;
        }
        try {
          await killSession(session.id);
        } catch (error) {
          fail(`Could not kill ${session.name}`, error);
        }
        await model.refresh();
      },
      adopt: async session => {
        try {
          const adopted = await adoptSession(session.id);
          await model.refresh();
          await open(adopted);
        } catch (error) {
          fail(`Could not adopt ${session.name}`, error);
          await model.refresh();
        }
      },
      restore: async session => {
        try {
          const restored = await restoreSession(session.id);
          await model.refresh();
          if (restored.status === 'running') {
            await open(restored);
          } else {
            Notification.warning(
              `${kindLabel(restored.kind)} session ${restored.name} did not resume: ` +
                (restored.reason ??
                  `it exited with code ${restored.exit_code}`),
              { autoClose: false }
            );
          }
        } catch (error) {
          fail(`Could not restore ${session.name}`, error);
          await model.refresh();
        }
      },
      restoreAll: () => void app.commands.execute(CommandIDs.restoreAll),
      create: kind => void app.commands.execute(CommandIDs.create, { kind }),
      refresh: () => void app.commands.execute(CommandIDs.refresh)
    };

    const panel = new AgentsPanel(model, actions, () => kinds);
    app.shell.add(panel, 'left', { rank: 650 });
    restorer?.add(panel, 'jupyter-agents');

    app.commands.addCommand(CommandIDs.showPanel, {
      label: 'Show Agents Panel',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Agent Sessions',
      caption: 'Check the backend for ended or orphaned sessions, then refresh',
      execute: async () => {
        try {
          await reconcile();
        } catch (error) {
          fail('Could not check the sessions', error);
        }
        await model.refresh();
      }
    });
    app.commands.addCommand(CommandIDs.create, {
      label: args => {
        const kind = String(args.kind ?? 'shell');
        return args.isLauncher
          ? kindLabel(kind)
          : `New ${kindLabel(kind)} Session`;
      },
      caption: args =>
        `Start a ${kindLabel(String(args.kind ?? 'shell'))} session that survives server restarts`,
      icon: args => kindIcon(String(args.kind ?? 'shell')),
      execute: async args => {
        const kind = String(args.kind ?? 'shell');
        const cwd = args.cwd ? String(args.cwd) : browser?.model.path;
        try {
          const session = await createSession(kind, cwd || undefined);
          await model.refresh();
          await open(session);
        } catch (error) {
          fail(`Could not start a ${kindLabel(kind)} session`, error);
        }
      }
    });
    app.commands.addCommand(CommandIDs.restoreAll, {
      label: 'Restore All Interrupted Sessions',
      execute: async () => {
        try {
          const result = await restoreAll();
          await model.refresh();
          const failed = result.failed.length
            ? `; ${result.failed.length} failed: ` +
              result.failed.map(f => `${f.id}: ${f.error}`).join('; ')
            : '';
          const notify = result.failed.length
            ? Notification.warning
            : Notification.success;
          notify(
            `Restored ${result.restored.length} interrupted session(s)${failed}`,
            { autoClose: result.failed.length ? false : 5000 }
          );
        } catch (error) {
          fail('Could not restore the interrupted sessions', error);
        }
      }
    });

    runningManagers?.add(
      runningManager(model, actions, async () => {
        const live = (model.sessions ?? []).filter(
          s => s.status === 'running' || s.status === 'orphaned'
        );
        await Promise.all(
          live.map(s =>
            killSession(s.id).catch(error =>
              fail(`Could not kill ${s.name}`, error)
            )
          )
        );
        await model.refresh();
      })
    );

    const category = 'Agents';
    palette?.addItem({ command: CommandIDs.showPanel, category });
    palette?.addItem({ command: CommandIDs.restoreAll, category });
    palette?.addItem({ command: CommandIDs.refresh, category });
    const addKinds = (names: string[]) => {
      kinds = names;
      names.forEach((kind, rank) => {
        launcher?.add({
          command: CommandIDs.create,
          args: { kind, isLauncher: true },
          category,
          rank
        });
        palette?.addItem({
          command: CommandIDs.create,
          args: { kind },
          category
        });
      });
      panel.render();
    };
    listKinds()
      .then(found => addKinds(found.map(k => k.name)))
      .catch(() => addKinds(DEFAULT_KINDS));

    if (statusBar) {
      statusBar.registerStatusItem('jupyter-agents:status', {
        item: new AgentsStatus(model, () => app.shell.activateById(panel.id)),
        align: 'left',
        rank: 5
      });
    }

    // After a server restart: how many terminals were re-adopted, offer restore.
    const seenKey = `jupyter-agents:server-started:${PageConfig.getBaseUrl()}`;
    model.serverStarted.connect(async (_, started) => {
      if (window.localStorage.getItem(seenKey) === started) {
        return;
      }
      window.localStorage.setItem(seenKey, started);
      const sessions = model.sessions ?? [];
      const interrupted = sessions.filter(
        s => s.status === 'interrupted'
      ).length;
      // re-adopted at start: from the server's boot report when it keeps one, else
      // the running sessions older than this server process
      const boot = await reconcileReport().then(
        report => report.boot,
        () => undefined
      );
      const since = Date.parse(started);
      const readopted = boot
        ? boot.actions.filter(a => a.kind === 'adopt').length
        : sessions.filter(
            s => s.status === 'running' && Date.parse(s.created) < since
          ).length;
      if (readopted === 0 && interrupted === 0) {
        return;
      }
      const parts = [];
      if (readopted || !interrupted) {
        parts.push(
          `${readopted} terminal${readopted === 1 ? '' : 's'} re-adopted (still running)`
        );
      }
      if (interrupted) {
        parts.push(
          `${interrupted} session${interrupted === 1 ? '' : 's'} interrupted`
        );
      }
      const notify = interrupted ? Notification.warning : Notification.info;
      notify(`Jupyter server restarted: ${parts.join(', ')}.`, {
        autoClose: interrupted ? false : 8000,
        actions: [
          ...(interrupted
            ? [
                {
                  label: 'Restore all',
                  displayType: 'accent' as const,
                  callback: () =>
                    void app.commands.execute(CommandIDs.restoreAll)
                }
              ]
            : []),
          {
            label: 'Show agents',
            callback: () => app.shell.activateById(panel.id)
          }
        ]
      });
    });

    // The restored tab of an interrupted terminal says so and offers to restore it.
    terminals?.widgetAdded.connect(async (_, widget: TerminalWidget) => {
      const name = widget.content.session.name;
      await model.refresh();
      const lost = interruptedFor(model.sessions ?? [], name, model.started);
      if (!lost || widget.isDisposed) {
        return;
      }
      const banner = new InterruptedBanner(
        lost,
        async () => {
          try {
            // the fresh shell made in its place goes; the session takes its name back
            widget.dispose();
            await deleteTerminal(name).catch(() => undefined);
            const restored = await restoreSession(lost.id);
            await model.refresh();
            await open(restored);
          } catch (error) {
            fail(`Could not restore ${lost.name}`, error);
            await model.refresh();
          }
        },
        () => banner.dispose()
      );
      // gone once the session is no longer interrupted (restored from elsewhere)
      const follow = () => {
        const now = model.sessions?.find(s => s.id === lost.id);
        if (now && now.status !== 'interrupted') {
          banner.dispose();
        }
      };
      model.changed.connect(follow);
      banner.disposed.connect(() => model.changed.disconnect(follow));
      widget.contentHeader.addWidget(banner);
    });
  }
};

export default plugin;
