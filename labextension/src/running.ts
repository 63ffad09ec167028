/**
 * The sessions in JupyterLab's "Running Terminals and Kernels" sidebar, where users
 * already look: live and interrupted ones, with their kind and status. The Agents
 * panel has the full picture (exited/killed, conversation ids, times).
 */
import { IRunningSessions } from '@jupyterlab/running';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';

import { ISession } from './api';
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
    return {
      className: `jp-AgentsRunning-item jp-AgentsRunning-${s.status}`,
      icon: () => kindIcon(s.kind),
      label: () => `${s.name} · ${kind} · ${statusLabel(s.status, trans)}`,
      labelTitle: () =>
        [
          trans.__('terminal %1 (session %2)', s.name, s.id),
          `${kind}, ${statusLabel(s.status, trans)}`,
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
      (model.sessions ?? []).filter(s => LISTED.includes(s.status)).map(item),
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
