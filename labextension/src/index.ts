/**
 * jupyter-agents for JupyterLab, as small plugins around one token:
 * - `sessions` provides `IAgentSessions` (the sessions model, kept current by the
 *   server's session events) and the commands that act on sessions (read-only
 *   sharing among them);
 * - `launcher` (launcher and palette items), `panel` (the Agents sidebar), `running`
 *   (a section of the Running sidebar), `status` (status bar), `interrupted` (the
 *   banner on restored tabs of interrupted terminals), `restart-notification` and
 *   `attention` (notifications and tab markers when an agent needs its user) and
 *   `replay` (a session's transcript played in a tab) each require it.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IDefaultFileBrowser } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { IRunningSessionManagers } from '@jupyterlab/running';
import { IConnectionStatus } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITerminalTracker } from '@jupyterlab/terminal';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';

import { reconcileReport } from './api';
import { AttentionWatcher } from './attention';
import { addCommands } from './commands';
import {
  InterruptedBanner,
  interruptedFor,
  RestoredBanner,
  restoredFor,
  TerminalWidget
} from './interrupted';
import { DEFAULT_POLL_INTERVAL, SessionsModel } from './model';
import { AgentsPanel, commandActions } from './panel';
import { addReplayCommand } from './replay';
import { notifyRestart } from './restart';
import { runningManager } from './running';
import { addShareCommands } from './sharing';
import { AgentsStatus } from './status';
import { CommandIDs, DOMAIN, IAgentSessions, PluginIDs } from './tokens';

const load = (translator: ITranslator | null): TranslationBundle =>
  (translator ?? nullTranslator).load(DOMAIN);

/** The settings of `schema/sessions.json` (the "Agents" page of the Settings Editor). */
async function watchSettings(
  registry: ISettingRegistry | null,
  apply: (settings: ISettingRegistry.ISettings) => void
): Promise<void> {
  if (!registry) {
    return;
  }
  try {
    const settings = await registry.load(PluginIDs.sessions);
    apply(settings);
    settings.changed.connect(apply);
  } catch (reason) {
    console.warn('jupyter-agents: could not load the settings', reason);
  }
}

const sessions: JupyterFrontEndPlugin<IAgentSessions> = {
  id: PluginIDs.sessions,
  description:
    'The agent sessions, kept current by server events, and the commands on them.',
  autoStart: true,
  provides: IAgentSessions,
  optional: [
    ISettingRegistry,
    IConnectionStatus,
    ITranslator,
    IDefaultFileBrowser
  ],
  activate: (
    app: JupyterFrontEnd,
    registry: ISettingRegistry | null,
    connection: IConnectionStatus | null,
    translator: ITranslator | null,
    browser: IDefaultFileBrowser | null
  ): IAgentSessions => {
    const model = new SessionsModel({
      serverSettings: app.serviceManager.serverSettings,
      events: app.serviceManager.events,
      standby: () => (connection && !connection.isConnected) || 'when-hidden'
    });
    void watchSettings(registry, settings => {
      const seconds = settings.composite.pollInterval;
      model.pollInterval =
        typeof seconds === 'number' ? seconds : DEFAULT_POLL_INTERVAL;
    });
    const trans = load(translator);
    addCommands({ app, model, trans, cwd: () => browser?.model.path });
    addShareCommands({ app, model, trans });
    return model;
  }
};

const launcher: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.launcher,
  description: 'Launcher and command palette items for new agent sessions.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ICommandPalette, ILauncher, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    translator: ITranslator | null
  ) => {
    const category = load(translator).__('Agents');
    palette?.addItem({ command: CommandIDs.restoreAll, category });
    palette?.addItem({ command: CommandIDs.refresh, category });
    void model.kindsReady.then(kinds =>
      kinds.forEach((kind, rank) => {
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
      })
    );
  }
};

const panel: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.panel,
  description: 'The Agents sidebar: every session by status, with its actions.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ILayoutRestorer, ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ) => {
    const trans = load(translator);
    const widget = new AgentsPanel(model, commandActions(app.commands), trans);
    app.shell.add(widget, 'left', { rank: 650 });
    restorer?.add(widget, 'jupyter-agents');
    app.commands.addCommand(CommandIDs.showPanel, {
      label: trans.__('Show Agents Panel'),
      // before the layout is restored, the restorer would hide it again
      execute: async () => {
        await app.restored;
        app.shell.activateById(widget.id);
      }
    });
    palette?.addItem({
      command: CommandIDs.showPanel,
      category: trans.__('Agents')
    });
  }
};

const running: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.running,
  description: 'An "Agent sessions" section in the Running sidebar.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [IRunningSessionManagers, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    managers: IRunningSessionManagers | null,
    translator: ITranslator | null
  ) => {
    managers?.add(runningManager(model, app.commands, load(translator)));
  }
};

const status: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.status,
  description: 'Running, interrupted and orphaned counts in the status bar.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [IStatusBar, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    statusBar: IStatusBar | null,
    translator: ITranslator | null
  ) => {
    if (!statusBar) {
      return; // a front end without a status bar (Notebook 7's notebook page)
    }
    const showPanel = () => {
      if (app.commands.hasCommand(CommandIDs.showPanel)) {
        void app.commands.execute(CommandIDs.showPanel);
      }
    };
    statusBar.registerStatusItem(PluginIDs.status, {
      item: new AgentsStatus(model, load(translator), showPanel),
      align: 'left',
      rank: 5
    });
  }
};

const interrupted: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.interrupted,
  description:
    'The restored tab of an interrupted terminal says what happened: restored in place ' +
    '(with "Start a fresh shell instead"), or lost (with "Restore").',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ITerminalTracker, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    terminals: ITerminalTracker | null,
    translator: ITranslator | null
  ) => {
    if (!terminals) {
      return;
    }
    const trans = load(translator);
    // sessions restored by a command of ours (panel, banner, notification): their tab
    // needs no banner
    const ourRestores = new Set<string>();
    app.commands.commandExecuted.connect((_, { id, args }) => {
      if (id === CommandIDs.restore && args.id) {
        ourRestores.add(String(args.id));
      } else if (id === CommandIDs.restoreAll) {
        (model.sessions ?? [])
          .filter(s => s.status === 'interrupted')
          .forEach(s => ourRestores.add(s.id));
      }
    });
    // the ids the server found interrupted when it started, per server start
    let boot: { started: string; ids: Promise<Set<string>> } | undefined;
    const interruptedAtBoot = (): Promise<Set<string>> => {
      const started = model.started ?? '';
      if (!boot || boot.started !== started) {
        boot = {
          started,
          ids: reconcileReport(model.serverSettings).then(
            report =>
              new Set(
                (report.boot?.actions ?? [])
                  .filter(a => a.kind === 'interrupt')
                  .map(a => a.session_id)
              ),
            () => new Set<string>()
          )
        };
      }
      return boot.ids;
    };

    terminals.widgetAdded.connect(async (_, widget: TerminalWidget) => {
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
      const restored = restoredFor(sessions, name, await interruptedAtBoot());
      if (restored && !ourRestores.has(restored.id) && !widget.isDisposed) {
        const banner: RestoredBanner = new RestoredBanner(
          restored,
          trans,
          async () => {
            // a new plain shell where the restored one runs; this tab goes (the
            // restored session keeps running, listed in the Agents panel)
            await app.commands.execute(CommandIDs.create, {
              kind: 'shell',
              cwd: restored.cwd ?? ''
            });
            widget.dispose();
          },
          () => banner.dispose()
        );
        widget.contentHeader.addWidget(banner);
        return;
      }
      const lost = interruptedFor(sessions, name, model.started);
      if (!lost || widget.isDisposed) {
        return;
      }
      const banner = new InterruptedBanner(
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

const restartNotification: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.restartNotification,
  description:
    'After a server restart, a notification: sessions re-adopted and interrupted.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ISettingRegistry, IStateDB, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    registry: ISettingRegistry | null,
    state: IStateDB | null,
    translator: ITranslator | null
  ) => {
    const trans = load(translator);
    let enabled = true;
    const settings = watchSettings(registry, s => {
      enabled = s.composite.notifications !== false;
    });
    let handled: string | undefined;
    const onStart = async (started: string) => {
      if (started === handled) {
        return;
      }
      handled = started;
      await settings;
      if (enabled) {
        await notifyRestart({ app, model, state, trans, started });
      }
    };
    model.serverStarted.connect((_, started) => void onStart(started));
    if (model.started) {
      void onStart(model.started);
    }
  }
};

const attention: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.attention,
  description:
    'When an agent session starts needing you: a notification with "Open", a marker ' +
    'on its terminal tab and, if allowed, a browser notification while Lab is hidden.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ITerminalTracker, ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    terminals: ITerminalTracker | null,
    registry: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    const watcher = new AttentionWatcher({
      model,
      trans: load(translator),
      open: s => app.commands.execute(CommandIDs.open, { name: s.name }),
      tabs: () => {
        const tabs: TerminalWidget[] = [];
        terminals?.forEach(w => tabs.push(w as TerminalWidget));
        return tabs;
      }
    });
    terminals?.widgetAdded.connect(() => watcher.update());
    void watchSettings(registry, settings => {
      watcher.notifications = settings.composite.notifications !== false;
      watcher.browserNotifications =
        settings.composite.browserNotifications === true;
    });
  }
};

const replay: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.replay,
  description:
    'Replay a session: its transcript played with its timing in a tab (speed, seek bar).',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ILayoutRestorer, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    restorer: ILayoutRestorer | null,
    translator: ITranslator | null
  ) => {
    addReplayCommand({ app, model, trans: load(translator), restorer });
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  sessions,
  launcher,
  panel,
  running,
  status,
  interrupted,
  restartNotification,
  attention,
  replay
];

export default plugins;
