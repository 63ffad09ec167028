import { nullTranslator, TranslationBundle } from '@jupyterlab/translation';
import { LabIcon, terminalIcon } from '@jupyterlab/ui-components';

import { displayName, IKind, ISession, Status } from './api';
import { DOMAIN } from './tokens';

const svg = (body: string): string =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">${body}</svg>`;

/** The sidebar tab: a terminal window with a spark. */
export const agentsIcon = new LabIcon({
  name: 'jupyter-agents:agents',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161">' +
      '<path d="M1 3a1 1 0 0 1 1-1h9v1.5H2.5v9h11V8H15v5a1 1 0 0 1-1 1H2a1 1 0 0 1-1-1z"/>' +
      '<path d="M4 6.2l2.2 1.8L4 9.8l-.8-.9L4.3 8 3.2 7.1zM6.8 10h3v1.2h-3z"/>' +
      '<path d="M13 1l.7 1.8L15.5 3.5l-1.8.7L13 6l-.7-1.8-1.8-.7 1.8-.7z"/>' +
      '</g>'
  )
});

/** A replay: a terminal window with a play triangle. */
/** A spending limit: a gauge with its needle. */
export const limitIcon = new LabIcon({
  name: 'jupyter-agents:limit',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161">' +
      '<path d="M8 3a7 7 0 0 0-7 7v1.5h1.5V10a5.5 5.5 0 0 1 11 0v1.5H15V10a7 7 0 0 0-7-7z"/>' +
      '<path d="M11.3 5.6l1 1-3.5 3.6a1.2 1.2 0 1 1-1-1z"/>' +
      '</g>'
  )
});

/** A git branch: two commits, one branching off. */
export const branchIcon = new LabIcon({
  name: 'jupyter-agents:branch',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161">' +
      '<path d="M4 1.5a2 2 0 0 1 .75 3.86v5.28a2 2 0 1 1-1.5 0V5.36A2 2 0 0 1 4 1.5zm0 1.3a.7.7 0 1 0 0 1.4.7.7 0 0 0 0-1.4zm0 9.5a.7.7 0 1 0 0 1.4.7.7 0 0 0 0-1.4z"/>' +
      '<path d="M12 1.5a2 2 0 0 1 .75 3.86V6.5a3 3 0 0 1-3 3h-2a1.5 1.5 0 0 0-1.5 1.5H4.75A3 3 0 0 1 7.75 8h2a1.5 1.5 0 0 0 1.5-1.5V5.36A2 2 0 0 1 12 1.5zm0 1.3a.7.7 0 1 0 0 1.4.7.7 0 0 0 0-1.4z"/>' +
      '</g>'
  )
});

export const replayIcon = new LabIcon({
  name: 'jupyter-agents:replay',
  svgstr: svg(
    '<g class="jp-icon3" fill="#616161">' +
      '<path d="M1 3a1 1 0 0 1 1-1h12a1 1 0 0 1 1 1v10a1 1 0 0 1-1 1H2a1 1 0 0 1-1-1zm1.5.5v9h11v-9z"/>' +
      '<path d="M6 5.5v5l4.5-2.5z"/>' +
      '</g>'
  )
});

const letter = (name: string, text: string, color: string): LabIcon =>
  new LabIcon({
    name,
    svgstr: svg(
      `<circle cx="8" cy="8" r="7" fill="${color}"/>` +
        `<text x="8" y="11.5" font-size="10" font-family="sans-serif" font-weight="bold" ` +
        `text-anchor="middle" fill="#fff">${text}</text>`
    )
  });

export const customKindIcon = letter('jupyter-agents:agent', 'A', '#7a5af8');

/** What the server told of each kind (`GET /api/agents/kinds`): its label and icon. */
const described = new Map<string, { label: string; icon: LabIcon }>();

/**
 * Take the kinds the server describes: each agent kind's label and badge live in the
 * server's agents wing, not in a list of the Lab's own.
 */
export function describeKinds(kinds: IKind[]): void {
  for (const kind of kinds) {
    const badge = kind.badge;
    described.set(kind.name, {
      label: kind.label || kind.name,
      icon: badge
        ? letter(`jupyter-agents:kind-${kind.name}`, badge.letter, badge.color)
        : customKindIcon
    });
  }
}

/** The icon of a session kind. */
export function kindIcon(kind: string): LabIcon {
  if (kind === 'shell') {
    return terminalIcon;
  }
  return described.get(kind)?.icon ?? customKindIcon;
}

/** A human label for a session kind (agent names are product names). */
export function kindLabel(
  kind: string,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  if (kind === 'shell') {
    return trans.__('Shell');
  }
  return described.get(kind)?.label ?? kind;
}

/** How a session ended when a person finished its worktree: merged or discarded. */
export type Finished = 'merged' | 'discarded';

/**
 * A session's status as the panel shows it: `merged` or `discarded` for a worktree
 * session that ended by a merge or a discard of its worktree (its record says
 * `killed` when the finish ended it, `exited` when it had ended before), else its
 * status.
 */
export function shownStatus(
  s: Pick<ISession, 'status' | 'worktree'>
): Status | Finished {
  const ended = s.worktree?.ended ?? '';
  if (s.status === 'killed' || s.status === 'exited') {
    if (ended.startsWith('merged')) {
      return 'merged';
    }
    if (ended === 'discarded') {
      return 'discarded';
    }
  }
  return s.status;
}

/**
 * What notices, banners and toasts call a session, the same everywhere: the title the
 * panel shows (a program's without its status glyphs), else its kind and terminal
 * number ("Claude Code 2", "Terminal 1" for a shell).
 */
export function sessionName(
  s: Pick<ISession, 'name' | 'title' | 'kind'> & {
    title_source?: ISession['title_source'];
  },
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  const shown = displayName(s);
  if (s.title && shown !== s.name) {
    return shown;
  }
  return s.kind === 'shell'
    ? trans.__('Terminal %1', s.name)
    : trans.__('%1 %2', kindLabel(s.kind, trans), s.name);
}

/**
 * What opening a running session shows, for a tooltip: its terminal; for an ACP
 * session, which has none, its turns and the box that prompts it.
 */
export function openCaption(
  s: Pick<ISession, 'name' | 'title' | 'kind' | 'mode'> & {
    title_source?: ISession['title_source'];
  },
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  return s.mode === 'acp'
    ? trans.__('Open the turns and prompt box of %1', sessionName(s, trans))
    : trans.__('Open the terminal of %1', sessionName(s, trans));
}

/** A session's status, as a word in the user's language. */
export function statusLabel(
  status: Status | Finished,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  switch (status) {
    case 'running':
      return trans.__('running');
    case 'interrupted':
      return trans.__('interrupted');
    case 'orphaned':
      return trans.__('orphaned');
    case 'exited':
      return trans.__('exited');
    case 'killed':
      return trans.__('killed');
    case 'merged':
      return trans.__('merged');
    case 'discarded':
      return trans.__('discarded');
    default:
      return status;
  }
}
