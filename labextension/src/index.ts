/**
 * jupyter-agents for JupyterLab, as small plugins around one token:
 * - `sessions` provides `IAgentSessions` (the sessions model, kept current by the
 *   server's session events) and the commands that act on sessions (read-only
 *   sharing among them);
 * - `launcher` (launcher and palette items), `panel` (the Agents sidebar), `running`
 *   (a section of the Running sidebar), `status` (status bar), `interrupted` (the
 *   banner on restored tabs of interrupted terminals), `restart-notification` and
 *   `attention` (notifications and tab markers when an agent needs its user) and
 *   `replay` (a session's transcript played in a tab) each require it;
 * - `titles` (session titles on terminal tabs, "Rename Session…" in their context
 *   menu) requires it too;
 * - `clipboard` (OSC 52 copies from programs in terminal tabs) needs only the
 *   terminal tracker;
 * - `conversation` (an agent's conversation as a document, a fresh session where one
 *   cannot be resumed: `conversation.ts`) requires it and the rendermime registry;
 * - `worktree` (the review of a worktree session in a tab: its files, their diffs,
 *   notebooks through nbdime; merge or discard: `worktree.ts`) requires both too;
 * - `devices` (this tab's presence, and "Agent Notifications…": permission requests
 *   pushed to this device: `devices.ts`) requires it.
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
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ITerminalTracker } from '@jupyterlab/terminal';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';

import { AttentionWatcher } from './attention';
import { ClipboardBridge } from './clipboard';
import { TerminalSizing } from './sizing';
import { terminalLinkFactory } from './terminallink';
import { addCommands } from './commands';
import { conversationPlugin } from './conversation';
import { Presence, showDevices } from './devices';
import { worktreePlugin } from './worktree';
import { EventConnection } from './events';
import { InterruptedTabs, TerminalWidget } from './interrupted';
import { DEFAULT_POLL_INTERVAL, SessionsModel } from './model';
import { AgentsPanel, commandActions } from './panel';
import { addReplayCommand } from './replay';
import { followLosses, followRestarts } from './restart';
import { addRenameTerminal, TabTitles } from './titles';
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
    const serverSettings = app.serviceManager.serverSettings;
    const standby = () =>
      (connection && !connection.isConnected) || 'when-hidden';
    const model = new SessionsModel({
      serverSettings,
      events: new EventConnection({ serverSettings, standby }),
      standby
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
        // a card that cannot start is not offered: the Launcher draws every card
        // enabled; the panel lists such kinds, folded, with how to install them
        if (!model.unavailable(kind)) {
          launcher?.add({
            command: CommandIDs.create,
            args: { kind, isLauncher: true },
            category,
            rank
          });
        }
        palette?.addItem({
          command: CommandIDs.create,
          args: { kind },
          category
        });
        // a kind that speaks ACP: a card and an item that start it in ACP mode
        if (!model.modes(kind).includes('acp')) {
          return;
        }
        if (!model.unavailable(kind, 'acp')) {
          launcher?.add({
            command: CommandIDs.create,
            args: { kind, mode: 'acp', isLauncher: true },
            category,
            rank: rank + 0.5
          });
        }
        palette?.addItem({
          command: CommandIDs.create,
          args: { kind, mode: 'acp' },
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
    if (terminals) {
      new InterruptedTabs({ app, model, terminals, trans: load(translator) });
    }
  }
};

const restartNotification: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.restartNotification,
  description:
    'After a server restart, a notification: sessions reattached and interrupted.',
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
    let enabled = true;
    const ready = watchSettings(registry, s => {
      enabled = s.composite.notifications !== false;
    });
    followRestarts({
      app,
      model,
      state,
      trans: load(translator),
      ready,
      enabled: () => enabled
    });
    followLosses({
      app,
      model,
      trans: load(translator),
      enabled: () => enabled
    });
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
      },
      viewed: s =>
        s.mode === 'acp' &&
        Array.from(app.shell.widgets('main')).some(
          w => w.id === `jupyter-agents-turns-${s.id}` && w.isVisible
        )
    });
    terminals?.widgetAdded.connect(() => watcher.update());
    // a tab that comes on screen takes over what its notification said
    app.shell.currentChanged?.connect(() => watcher.update());
    document.addEventListener('visibilitychange', () => watcher.update());
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

const titles: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.titles,
  description:
    "Terminal tabs labelled with their session's title; Rename Session… on the tab.",
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ITerminalTracker, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    terminals: ITerminalTracker | null,
    translator: ITranslator | null
  ) => {
    if (terminals) {
      const labTrans = (translator ?? nullTranslator).load('jupyterlab');
      new TabTitles({ model, terminals, labTrans });
      addRenameTerminal({ app, terminals, trans: load(translator) });
    }
  }
};

const clipboard: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.clipboard,
  description:
    'Programs in terminal tabs copy to the clipboard with OSC 52 (setting clipboardFromPrograms).',
  autoStart: true,
  requires: [ITerminalTracker],
  optional: [ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    terminals: ITerminalTracker,
    registry: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    const bridge = new ClipboardBridge(terminals, load(translator));
    if (registry) {
      bridge.enabled = false; // until the setting is read
      void watchSettings(registry, settings => {
        bridge.enabled = settings.composite.clipboardFromPrograms !== false;
      });
    }
  }
};

const sizing: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.sizing,
  description:
    'A terminal tab sized by another window (the one that typed last) shows the terminal at that size, scaled to fit, and says so.',
  autoStart: true,
  requires: [ITerminalTracker],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    terminals: ITerminalTracker,
    translator: ITranslator | null
  ) => {
    new TerminalSizing(terminals, load(translator));
  }
};

const terminalLink: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.terminalLink,
  description:
    "%agent attach in a notebook: a button that opens the session's terminal tab.",
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    translator: ITranslator | null
  ) => {
    rendermime.addFactory(
      terminalLinkFactory(app.commands, load(translator)),
      0
    );
  }
};

const devices: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.devices,
  description:
    'Permission requests pushed to the owner\'s devices with JupyterLab closed: this tab says while it is visible; "Agent Notifications…" turns this device on.',
  autoStart: true,
  requires: [IAgentSessions],
  optional: [ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ) => {
    const trans = load(translator);
    new Presence(model.serverSettings);
    app.commands.addCommand(CommandIDs.notifications, {
      label: trans.__('Agent Notifications…'),
      caption: trans.__(
        'Notify this device of agents’ permission requests while no JupyterLab tab of yours is visible'
      ),
      execute: () => showDevices(model.serverSettings, trans)
    });
    palette?.addItem({
      command: CommandIDs.notifications,
      category: trans.__('Agents')
    });
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
  replay,
  titles,
  clipboard,
  sizing,
  terminalLink,
  conversationPlugin,
  worktreePlugin,
  devices
];

export default plugins;
