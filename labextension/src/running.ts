/**
 * The sessions in JupyterLab's "Running Terminals and Kernels" sidebar, where users
 * already look: live and interrupted ones, by title (else terminal name), with their
 * kind and a badge (the agent's attention state when it reports one, else the
 * status); those that need the user first. The Agents panel has the full picture
 * (exited/killed, conversation ids, times).
 */
import { IRunningSessions } from '@jupyterlab/running';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { displayName, ISession } from './api';
import { attentionLabel, attentionSentence, needsYou } from './attention';
import { kindIcon, kindLabel, statusLabel } from './icons';
import { commandActions } from './panel';
import { CommandIDs, IAgentSessions } from './tokens';

const LISTED = ['running', 'interrupted', 'orphaned'];

export function runningManager(
  model: IAgentSessions,
  commands: CommandRegistry,
  trans: TranslationBundle
): IRunningSessions.IManager {
  const actions = commandActions(commands);
  const item = (s: ISession): IRunningSessions.IRunningItem => {
    const kind = kindLabel(s.kind, trans);
    const attention = s.status === 'running' ? (s.attention ?? null) : null;
    const badge = attention
      ? attentionLabel(attention, trans)
      : statusLabel(s.status, trans);
    return {
      className:
        `jp-AgentsRunning-item jp-AgentsRunning-${s.status}` +
        (attention ? ` jp-AgentsRunning-attention-${attention}` : '') +
        (needsYou(s) ? ' jp-AgentsRunning-needsYou' : ''),
      icon: () => kindIcon(s.kind),
      label: () => `${displayName(s)} · ${kind}`,
      detail: () => badge,
      labelTitle: () =>
        [
          s.title ?? '',
          trans.__('terminal %1 (session %2)', s.name, s.id),
          `${kind}, ${statusLabel(s.status, trans)}`,
          attention ? attentionSentence(s, trans) : '',
          s.cwd ? trans.__('in %1', s.cwd) : '',
          s.conversation_id
            ? trans.__('conversation %1', s.conversation_id)
            : '',
          s.reason ?? ''
        ]
          .filter(Boolean)
          .join('\n'),
      open: () => {
        if (s.status === 'running') {
          void actions.open(s);
        } else if (s.status === 'orphaned') {
          void actions.adopt(s);
        } else {
          void actions.restore(s);
        }
      },
      shutdown:
        s.status === 'interrupted' ? undefined : () => void actions.kill(s)
    };
  };
  return {
    name: trans.__('Agent sessions'),
    running: () =>
      (model.sessions ?? [])
        .filter(s => LISTED.includes(s.status))
        // those that need the user first (a stable sort keeps the rest in order)
        .sort((a, b) => Number(needsYou(b)) - Number(needsYou(a)))
        .map(item),
    refreshRunning: () => void model.refresh(),
    runningChanged: model.changed,
    shutdownAll: () =>
      void commands.execute(CommandIDs.killAll, { noConfirm: true }),
    shutdownLabel: trans.__('Kill'),
    shutdownAllLabel: trans.__('Kill All'),
    shutdownAllConfirmationText: trans.__(
      'Kill every running and orphaned session (shells and agents)? ' +
        'Transcripts are kept; the sessions can be restored later.'
    )
  };
}
