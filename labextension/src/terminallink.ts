/**
 * `%agent attach` in a notebook: its output carries
 * `application/vnd.jupyter-agents.terminal+json` (`{name, id, kind}`), rendered here
 * as a button that opens the session's terminal tab in JupyterLab (the panel's Open:
 * an ended session says why instead of starting a shell). Nothing opens by itself: a
 * saved notebook re-rendering its outputs must not open tabs. Without this extension
 * the output's HTML link to the terminal's page shows instead.
 */
import { IRenderMime } from '@jupyterlab/rendermime';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { kindLabel } from './icons';
import { CommandIDs } from './tokens';

/** The MIME type `jupyter_agents.clients.magics.TERMINAL_MIME`. */
export const TERMINAL_MIME = 'application/vnd.jupyter-agents.terminal+json';

/** The button of one `%agent attach` output. */
class TerminalLinkRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private _commands: CommandRegistry,
    private _trans: TranslationBundle
  ) {
    super();
    this.addClass('jp-AgentsTerminalLink');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = (model.data[TERMINAL_MIME] ?? {}) as {
      name?: string;
      id?: string;
      kind?: string;
    };
    const name = String(data.name ?? '');
    const button = document.createElement('button');
    button.className = 'jp-mod-styled jp-mod-accept';
    button.dataset.name = name;
    button.textContent = this._trans.__(
      'Open terminal %1 (%2, %3)',
      name,
      kindLabel(String(data.kind ?? 'shell'), this._trans),
      String(data.id ?? '')
    );
    button.onclick = () =>
      void this._commands.execute(CommandIDs.open, { name });
    this.node.replaceChildren(button);
  }
}

/** The renderer factory for `TERMINAL_MIME`, first in rank (before its HTML). */
export function terminalLinkFactory(
  commands: CommandRegistry,
  trans: TranslationBundle
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [TERMINAL_MIME],
    defaultRank: 0,
    createRenderer: () => new TerminalLinkRenderer(commands, trans)
  };
}
