/**
 * An agent's conversations as a document, and what a user can do when a conversation
 * cannot be resumed:
 * - `jupyter-agents:conversation {id}` opens the session's conversations
 *   (`GET /api/agents/sessions/<id>/conversation?format=md`: the turns, tool calls
 *   summarised, timestamps; from the CLI's files or the server's archive) rendered as
 *   Markdown in a main-area tab, with a Refresh button;
 * - `jupyter-agents:fresh {id}` starts a new session of an ended one's kind in its
 *   folder whose terminal first shows the end of the old transcript
 *   (`POST .../fresh`), and opens it: what a resume that failed offers
 *   (`interrupted.ts`).
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { ITerminalTracker } from '@jupyterlab/terminal';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { conversationMarkdown, displayName, ISession, startFresh } from './api';
import { fail, sessionOf, showDocument } from './commands';
import { kindIcon, kindLabel } from './icons';
import { renderOffline } from './offline';
import { CommandIDs, DOMAIN, IAgentSessions, PluginIDs } from './tokens';
import { addTurnsCommand, addTurnsToTerminals } from './turns';

/** The rendered Markdown of one session's conversations. */
class ConversationView extends Widget {
  constructor(
    private _options: ConversationDocument.IOptions,
    private _session: ISession
  ) {
    super();
    this.addClass('jp-AgentsConversation');
    this.node.dataset.sessionId = _session.id;
  }

  /** Fetch the conversation again and render it (the server's message on failure). */
  async load(): Promise<void> {
    const { model, rendermime, trans } = this._options;
    let markdown: string;
    try {
      markdown = await conversationMarkdown(
        model.serverSettings,
        this._session.id
      );
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const note = document.createElement('p');
      note.className = 'jp-AgentsConversation-error';
      note.textContent = trans.__('No conversation to show: %1', message);
      this.node.replaceChildren(note);
      return;
    }
    // untrusted, nothing fetched from elsewhere (offline.ts)
    this.node.replaceChildren(await renderOffline(rendermime, markdown));
  }
}

/** A main-area tab showing an agent session's conversations. */
export class ConversationDocument extends MainAreaWidget<Widget> {
  constructor(options: ConversationDocument.IOptions, session: ISession) {
    const view = new ConversationView(options, session);
    super({ content: view });
    const { trans } = options;
    this.id = `jupyter-agents-conversation-${session.id}`;
    this.addClass('jp-AgentsConversationDocument');
    this.title.label = trans.__('Conversation: %1', displayName(session));
    this.title.caption = trans.__(
      '%1 session %2: its conversations, from its files or the server’s archive',
      kindLabel(session.kind, trans),
      session.id
    );
    this.title.icon = kindIcon(session.kind);
    this.title.closable = true;
    this.toolbar.addItem(
      'refresh',
      new ToolbarButton({
        icon: refreshIcon,
        tooltip: trans.__('Read the conversation again'),
        onClick: () => void view.load()
      })
    );
    this.toolbar.addItem(
      'turns',
      new ToolbarButton({
        label: trans.__('Watch live'),
        tooltip: trans.__('Its turns as they happen, tool calls folded'),
        onClick: () =>
          void options.commands?.execute(CommandIDs.turns, { id: session.id })
      })
    );
    this.ready = view.load();
  }

  /** Resolves once the first rendering is done. */
  readonly ready: Promise<void>;
}

export namespace ConversationDocument {
  export interface IOptions {
    model: IAgentSessions;
    rendermime: IRenderMimeRegistry;
    trans: TranslationBundle;
    /** The application's commands (the toolbar's Watch live). */
    commands?: CommandRegistry;
  }
}

/** Register the two commands. */
export function addConversationCommands(
  app: JupyterFrontEnd,
  options: ConversationDocument.IOptions
): void {
  const { model, trans } = options;
  app.commands.addCommand(CommandIDs.conversation, {
    label: trans.__('Show Agent Conversation'),
    caption: trans.__(
      'The agent’s conversation as a document: turns, tool calls, times'
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      await showDocument(
        app,
        `jupyter-agents-conversation-${session.id}`,
        () => new ConversationDocument(options, session)
      );
    }
  });

  app.commands.addCommand(CommandIDs.fresh, {
    label: trans.__('Start a Fresh Session Here'),
    caption: trans.__(
      'A new session of this kind in the same folder; its terminal shows the end of the old one first'
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      try {
        const fresh = await startFresh(model.serverSettings, session.id);
        await model.refresh();
        await app.commands.execute(CommandIDs.open, { name: fresh.name });
      } catch (error) {
        fail(trans.__('Could not start a fresh session'), error);
      }
    }
  });
}

/** The conversation document and the offers for conversations that cannot resume. */
export const conversationPlugin: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.conversation,
  description:
    'An agent’s conversation as a document, and a fresh session where one cannot be resumed.',
  autoStart: true,
  requires: [IAgentSessions, IRenderMimeRegistry],
  optional: [ITranslator, ITerminalTracker],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    rendermime: IRenderMimeRegistry,
    translator: ITranslator | null,
    terminals: ITerminalTracker | null
  ) => {
    const trans = (translator ?? nullTranslator).load(DOMAIN);
    addConversationCommands(app, {
      model,
      rendermime,
      trans,
      commands: app.commands
    });
    addTurnsCommand(app, {
      model,
      rendermime,
      trans,
      terminalOf: name =>
        terminals?.find(tab => tab.content.session.name === name) ?? undefined,
      replay: (id, at) => app.commands.execute(CommandIDs.replay, { id, at })
    });
    if (terminals) {
      addTurnsToTerminals(terminals, model, app.commands, trans);
    }
  }
};
