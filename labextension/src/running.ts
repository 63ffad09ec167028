/**
 * The sessions in JupyterLab's "Running Terminals and Kernels" sidebar, where users
 * already look: live and interrupted ones, with their kind and status. The Agents
 * panel has the full picture (exited/killed, conversation ids, times).
 */
import { IRunningSessions } from '@jupyterlab/running';

import { ISession } from './api';
import { kindIcon, kindLabel } from './icons';
import { SessionsModel } from './model';
import { IPanelActions } from './panel';

const LISTED = ['running', 'interrupted', 'orphaned'];

export function runningManager(
  model: SessionsModel,
  actions: IPanelActions,
  killAll: () => Promise<void>
): IRunningSessions.IManager {
  const item = (s: ISession): IRunningSessions.IRunningItem => ({
    className: `jp-AgentsRunning-item jp-AgentsRunning-${s.status}`,
    icon: () => kindIcon(s.kind),
    label: () => `${s.name} · ${kindLabel(s.kind)} · ${s.status}`,
    labelTitle: () =>
      [
        `terminal ${s.name} (session ${s.id})`,
        `${kindLabel(s.kind)}, ${s.status}`,
        s.cwd ? `in ${s.cwd}` : '',
        s.conversation_id ? `conversation ${s.conversation_id}` : '',
        s.reason ?? ''
      ]
        .filter(Boolean)
        .join('\n'),
    open: () => {
      if (s.status === 'running') {
        actions.open(s);
      } else if (s.status === 'orphaned') {
        actions.adopt(s);
      } else {
        actions.restore(s);
      }
    },
    shutdown: s.status === 'interrupted' ? undefined : () => actions.kill(s)
  });
  return {
    name: 'Agent sessions',
    running: () =>
      (model.sessions ?? []).filter(s => LISTED.includes(s.status)).map(item),
    refreshRunning: () => void model.refresh(),
    runningChanged: model.changed,
    shutdownAll: () => void killAll(),
    shutdownLabel: 'Kill',
    shutdownAllLabel: 'Kill All',
    shutdownAllConfirmationText:
      'Kill every running and orphaned session (shells and agents)? ' +
      'Transcripts are kept; the sessions can be restored later.'
  };
}
