/**
 * Session titles on JupyterLab's terminal tabs.
 *
 * A session's `title` is the one a person gave it (`title_source` `user`), else the
 * last one its program set with OSC 0/2 (`program`). The server keeps both, so they
 * survive reloads and restarts; JupyterLab's tab shows a program's title only while
 * the tab lives ("Terminal 1" again after a reload). `TabTitles` labels each terminal
 * tab (the widgets of `ITerminalTracker`, matched to the running session of the same
 * terminal name) and keeps the label in step with the sessions model:
 * - a person's title wins: put back whenever something else (the program's title as
 *   xterm.js sees it, JupyterLab's "Terminal N" on connect) replaces it;
 * - a program's title is set when it changes in the model and wherever JupyterLab
 *   shows its default label; a newer one the program sets live shows by itself;
 * - no title (any more): JupyterLab's default label.
 *
 * `addRenameTerminal` adds "Rename Session…" to the context menu of terminal tabs and
 * terminals (the `rename` command, for the session of that terminal).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ITerminalTracker } from '@jupyterlab/terminal';
import { TranslationBundle } from '@jupyterlab/translation';

import { TerminalWidget } from './interrupted';
import { CommandIDs, IAgentSessions } from './tokens';

export class TabTitles {
  constructor(private _options: TabTitles.IOptions) {
    const { model, terminals } = _options;
    terminals.forEach(widget => this._follow(widget));
    terminals.widgetAdded.connect((_, widget) => this._follow(widget));
    model.changed.connect(() => this._widgets.forEach(w => this._apply(w)));
  }

  private _follow(widget: TerminalWidget): void {
    if (this._widgets.has(widget)) {
      return;
    }
    this._widgets.add(widget);
    // after the change that is being made (never from inside another title handler:
    // MainAreaWidget syncs its title and its content's under a guard)
    let scheduled = false;
    const onTitle = () => {
      if (!scheduled) {
        scheduled = true;
        void Promise.resolve().then(() => {
          scheduled = false;
          this._apply(widget);
        });
      }
    };
    widget.title.changed.connect(onTitle);
    widget.disposed.connect(() => {
      widget.title.changed.disconnect(onTitle);
      this._widgets.delete(widget);
      this._applied.delete(widget);
    });
    void this._options.model.ready.then(() => this._apply(widget));
  }

  /** The label the tab of `widget` should have now, given what it has. */
  private _apply(widget: TerminalWidget): void {
    if (widget.isDisposed) {
      return;
    }
    const name = widget.content.session.name;
    const session = this._options.model.sessions?.find(
      s => s.name === name && s.status === 'running'
    );
    if (!session) {
      return;
    }
    const title = session.title || null;
    const last = this._applied.get(widget) ?? null;
    this._applied.set(widget, title);
    const label = widget.title.label;
    const labTrans = this._options.labTrans;
    const defaults = [
      labTrans.__('Terminal %1', name),
      labTrans.__('Terminal')
    ];
    let wanted: string | null = null;
    if (title && session.title_source === 'user') {
      wanted = title;
    } else if (title) {
      wanted = title !== last || defaults.includes(label) ? title : null;
    } else if (last && label === last) {
      wanted = defaults[0]; // the title we put there is gone
    }
    if (wanted !== null && wanted !== label) {
      widget.title.label = wanted; // the tab's; MainAreaWidget copies it to the terminal's
    }
  }

  private _widgets = new Set<TerminalWidget>();
  /** The session title each tab was last labelled from (null: none). */
  private _applied = new Map<TerminalWidget, string | null>();
}

export namespace TabTitles {
  export interface IOptions {
    model: IAgentSessions;
    terminals: ITerminalTracker;
    /** JupyterLab's own strings (its default tab labels, "Terminal %1"). */
    labTrans: TranslationBundle;
  }
}

/**
 * The `renameTerminal` command, in the context menu of terminal tabs and of the
 * terminal itself: renames the session of the terminal clicked (or of the current
 * one).
 */
export function addRenameTerminal(options: {
  app: JupyterFrontEnd;
  terminals: ITerminalTracker;
  trans: TranslationBundle;
}): void {
  const { app, terminals, trans } = options;
  const target = (): TerminalWidget | null => {
    // a tab carries its widget's id; inside a tab, the main area widget is the node
    const tab = app.contextMenuHitTest(node => !!node.dataset.id);
    if (tab) {
      return terminals.find(w => w.id === tab.dataset.id) ?? null;
    }
    const area = app.contextMenuHitTest(node =>
      node.classList.contains('jp-MainAreaWidget')
    );
    if (area) {
      return terminals.find(w => w.node === area) ?? null;
    }
    return terminals.currentWidget;
  };
  app.commands.addCommand(CommandIDs.renameTerminal, {
    label: trans.__('Rename Session…'),
    caption: trans.__('Give this terminal’s session a title'),
    isVisible: () => target() !== null,
    execute: async () => {
      const widget = target();
      if (widget) {
        await app.commands.execute(CommandIDs.rename, {
          name: widget.content.session.name
        });
      }
    }
  });
  for (const selector of [
    '.lm-DockPanel-tabBar .lm-TabBar-tab',
    '.jp-Terminal'
  ]) {
    app.contextMenu.addItem({
      command: CommandIDs.renameTerminal,
      selector,
      rank: 60
    });
  }
}
