/**
 * Read-only sharing of a running session with another user (on JupyterHub):
 * - `jupyter-agents:share` `{id}` asks whom (a user name, or anyone the server lets
 *   in) and for how long, makes the share, then shows its links with Copy buttons:
 *   the watch page and, on JupyterHub, the hub's share-code link that lands on it (or
 *   why the hub made none). When the server cannot share, the dialog says what it
 *   needs, in the server's words (409: no JupyterHub owner, or the authorizer and
 *   identity provider classes are not configured).
 * - `jupyter-agents:revoke-share` `{id}` revokes a share: its viewers are disconnected
 *   at once.
 * The Agents panel shows each live share of a session as a badge (`shareBadge`: who
 * watches now, or "shared") with a Revoke button; the model keeps the shares current.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Clipboard, Dialog, showDialog } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { shareIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { createShare, INewShare, IShare, revokeShare } from './api';
import { fail, sessionOf } from './commands';
import { el } from './dom';
import { kindLabel } from './icons';
import { CommandIDs, IAgentSessions } from './tokens';

/** How long a share may last (seconds; the server allows 8 h at most). */
const EXPIRIES = [900, 3600, 14400, 28800];

/** The expiry offered first. */
const DEFAULT_EXPIRY = 3600;

/** Who a share lets watch. */
function viewerLabel(share: IShare, trans: TranslationBundle): string {
  return share.viewer ?? trans.__('anyone with access to this server');
}

/** When a share ends, as a local time of day (a share lasts 8 h at most). */
function until(share: IShare): string {
  return new Date(share.expires).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit'
  });
}

/** A link of the server (a path, or already absolute) as an absolute URL. */
function absolute(url: string): string {
  return new URL(url, window.location.origin).href;
}

/** A share's badge in the Agents panel: who watches now (or "shared") and details. */
export function shareBadge(
  share: IShare,
  trans: TranslationBundle
): { text: string; title: string } {
  const watchers = share.watchers ?? [];
  return {
    text: watchers.length
      ? trans.__('watched by %1', watchers.join(', '))
      : trans.__('shared'),
    title: [
      trans.__(
        'Shared read-only with %1 until %2',
        viewerLabel(share, trans),
        until(share)
      ),
      watchers.length
        ? trans.__('Watching now: %1', watchers.join(', '))
        : trans.__('No one is watching now')
    ].join('\n')
  };
}

/** What the share dialog asks. */
interface IShareRequest {
  /** A user name; empty: anyone the server lets in. */
  viewer: string;
  /** Seconds. */
  expiresIn: number;
}

/** The share dialog's form: whom and for how long. */
class ShareForm extends Widget {
  constructor(trans: TranslationBundle) {
    super();
    this.addClass('jp-AgentsShare');
    this._viewer = el('input', 'jp-mod-styled');
    this._viewer.name = 'viewer';
    this._viewer.autocomplete = 'off';
    this._viewer.spellcheck = false;
    this._viewer.placeholder = trans.__(
      'a user name; empty: anyone with access to this server'
    );
    this._expiry = el('select', 'jp-mod-styled');
    this._expiry.name = 'expires';
    for (const seconds of EXPIRIES) {
      const option = el(
        'option',
        '',
        seconds < 3600
          ? trans._n('%1 minute', '%1 minutes', seconds / 60)
          : trans._n('%1 hour', '%1 hours', seconds / 3600)
      );
      option.value = String(seconds);
      option.selected = seconds === DEFAULT_EXPIRY;
      this._expiry.append(option);
    }
    this.node.append(
      el(
        'p',
        '',
        trans.__(
          'They see the terminal live from when they open it (not its earlier output) and cannot type into it or resize it.'
        )
      ),
      field(trans.__('Viewer'), this._viewer),
      field(trans.__('For'), this._expiry)
    );
  }

  getValue(): IShareRequest {
    return {
      viewer: this._viewer.value.trim(),
      expiresIn: Number(this._expiry.value)
    };
  }

  private _viewer: HTMLInputElement;
  private _expiry: HTMLSelectElement;
}

/** A labelled form field. */
function field(label: string, control: HTMLElement): HTMLLabelElement {
  const node = el('label', 'jp-AgentsShare-field');
  node.append(el('span', 'jp-AgentsShare-label', label), control);
  return node;
}

/** A link of a new share, read-only, with a Copy button. */
function linkField(
  kind: 'watch' | 'hub',
  label: string,
  url: string,
  trans: TranslationBundle
): HTMLElement {
  const input = el('input', 'jp-AgentsShare-link jp-mod-styled');
  input.dataset.link = kind;
  input.readOnly = true;
  input.value = url;
  input.onfocus = () => input.select();
  const copy = el('button', 'jp-mod-styled', trans.__('Copy'));
  copy.type = 'button';
  copy.dataset.action = 'copy';
  copy.onclick = () => {
    Clipboard.copyToSystem(url);
    copy.textContent = trans.__('Copied');
  };
  const line = el('div', 'jp-AgentsShare-linkLine');
  line.append(input, copy);
  const node = el('div', 'jp-AgentsShare-field');
  node.append(el('span', 'jp-AgentsShare-label', label), line);
  return node;
}

/** What the dialog shows once a share is made: whom, until when, its links. */
function sharedBody(share: INewShare, trans: TranslationBundle): Widget {
  const node = el('div', 'jp-AgentsShare');
  node.append(
    el(
      'p',
      '',
      trans.__(
        '%1 can watch it, read-only, until %2. Revoke it from its badge in the Agents panel.',
        viewerLabel(share, trans),
        until(share)
      )
    ),
    linkField('watch', trans.__('Watch page'), absolute(share.url), trans)
  );
  if (share.accept_url) {
    node.append(
      linkField(
        'hub',
        trans.__(
          'JupyterHub link: gives access to this server, then opens the watch page (it holds a share code: send it to the viewer only)'
        ),
        absolute(share.accept_url),
        trans
      )
    );
  }
  if (share.hub_error) {
    node.append(
      el(
        'p',
        'jp-AgentsShare-note',
        trans.__('No JupyterHub link: %1', share.hub_error)
      )
    );
  }
  return new Widget({ node });
}

export namespace Sharing {
  export interface IOptions {
    app: JupyterFrontEnd;
    model: IAgentSessions;
    trans: TranslationBundle;
  }
}

/** Register `jupyter-agents:share` `{id}` and `jupyter-agents:revoke-share` `{id}`. */
export function addShareCommands(options: Sharing.IOptions): void {
  const { app, model, trans } = options;
  const settings = model.serverSettings;

  app.commands.addCommand(CommandIDs.share, {
    label: trans.__('Share Read-Only…'),
    caption: trans.__(
      'Let another user watch the session live, without typing into it'
    ),
    icon: shareIcon,
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      const name = trans.__(
        '%1 session %2',
        kindLabel(session.kind, trans),
        session.name
      );
      const refused = model.sharingRefused;
      if (refused) {
        // the server said at start that it cannot share: say why before any form
        await showDialog({
          title: trans.__('Could not share %1', name),
          body: new Widget({ node: el('p', 'jp-AgentsShare-error', refused) }),
          buttons: [Dialog.okButton({ label: trans.__('Close') })]
        });
        return;
      }
      const form = await showDialog({
        title: trans.__('Share %1 read-only', name),
        body: new ShareForm(trans),
        focusNodeSelector: 'input',
        buttons: [
          Dialog.cancelButton({ label: trans.__('Cancel') }),
          Dialog.okButton({ label: trans.__('Share') })
        ]
      });
      if (!form.button.accept || !form.value) {
        return;
      }
      let share: INewShare;
      try {
        share = await createShare(
          settings,
          session.id,
          form.value.expiresIn,
          form.value.viewer || undefined
        );
      } catch (error) {
        // the server's own words: what it needs to share, or what was wrong
        const message = error instanceof Error ? error.message : String(error);
        await showDialog({
          title: trans.__('Could not share %1', name),
          body: new Widget({
            node: el('p', 'jp-AgentsShare-error', message)
          }),
          buttons: [Dialog.okButton({ label: trans.__('Close') })]
        });
        return;
      }
      await model.refresh();
      await showDialog({
        title: trans.__('%1 is shared read-only', name),
        body: sharedBody(share, trans),
        buttons: [Dialog.okButton({ label: trans.__('Done') })]
      });
    }
  });

  app.commands.addCommand(CommandIDs.revokeShare, {
    label: trans.__('Revoke Read-Only Share'),
    caption: trans.__('End the share now: its viewers are disconnected'),
    execute: async args => {
      try {
        await revokeShare(settings, String(args.id ?? ''));
      } catch (error) {
        fail(trans.__('Could not revoke the share'), error);
      }
      await model.refresh();
    }
  });
}
