/**
 * Permission requests: an agent asks to run a tool; the panel row and the notification
 * show what, and answer it (Allow, the CLI's own "allow from now on" choices, Deny with
 * an optional message the agent receives). The agent goes on with no key pressed in
 * its terminal. A request answered meanwhile elsewhere (the terminal, another page, a
 * phone) is gone from the next snapshot; answering it here then says so.
 */
import { InputDialog, Notification } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';

import { answerRequest, IAnswer, IPendingRequest } from './api';
import { sessionName } from './icons';
import { IAgentSessions } from './tokens';

/** The one line that says what a request will do: its command, file or URL. */
export function requestWhat(r: IPendingRequest): string {
  const input = r.input ?? {};
  return (
    r.command ??
    input.file_path ??
    input.notebook_path ??
    input.url ??
    input.path ??
    input.pattern ??
    input.query ??
    ''
  );
}

/** "Claude Code 3 asks to use Bash: `rm -rf build`" */
export function requestSentence(
  r: IPendingRequest,
  trans: TranslationBundle
): string {
  const who = sessionName(r, trans);
  const what = requestWhat(r);
  const line = what.split('\n')[0];
  const shown = line.length > 120 ? `${line.slice(0, 119)}…` : line;
  return what
    ? trans.__('%1 asks to use %2: %3', who, r.tool, shown)
    : trans.__('%1 asks to use %2', who, r.tool);
}

/**
 * Answer `r` as a person chose: `deny` first asks what the agent should be told
 * (optional; Cancel answers nothing). False when nothing was sent or it failed (the
 * server's words are shown: answered elsewhere, ended).
 */
export async function answerAsked(
  model: IAgentSessions,
  r: IPendingRequest,
  decision: 'allow' | 'deny',
  trans: TranslationBundle,
  suggestion?: number
): Promise<boolean> {
  const answer: IAnswer = { decision };
  if (decision === 'deny') {
    const asked = await InputDialog.getText({
      title: trans.__('Deny %1', r.tool),
      label: trans.__(
        'What should the agent do instead? (optional; it reads this)'
      ),
      placeholder: trans.__('e.g. use the test database'),
      okLabel: trans.__('Deny')
    });
    if (!asked.button.accept) {
      return false;
    }
    const message = (asked.value ?? '').trim();
    if (message) {
      answer.message = message;
    }
  } else if (suggestion !== undefined) {
    answer.suggestion = suggestion;
  }
  try {
    await answerRequest(model.serverSettings, r.id, answer);
    return true;
  } catch (error) {
    Notification.error(
      trans.__(
        'Could not answer the request of %1: %2',
        r.title || r.name,
        (error as Error).message
      ),
      { autoClose: 8000 }
    );
    return false;
  } finally {
    void model.refresh();
  }
}

/** The buttons that answer `r`: Allow and Deny. */
export function requestActions(
  model: IAgentSessions,
  r: IPendingRequest,
  trans: TranslationBundle
): Notification.IAction[] {
  return [
    {
      label: trans.__('Allow'),
      caption: trans.__('Run it: %1', requestWhat(r)),
      displayType: 'accent',
      callback: () => void answerAsked(model, r, 'allow', trans)
    },
    {
      label: trans.__('Deny'),
      caption: trans.__('Do not run it; tell the agent why'),
      displayType: 'warn',
      callback: () => void answerAsked(model, r, 'deny', trans)
    }
  ];
}

/**
 * A request as the panel shows it under its session's row. `refocus` puts the focus
 * back where a person answering by keyboard goes on from (the session's row): called
 * as an answer starts (its buttons are disabled, which would drop the focus) and when
 * it ended (the request's box is gone, or a dialog closed).
 */
export function requestElement(
  model: IAgentSessions,
  r: IPendingRequest,
  trans: TranslationBundle,
  refocus: () => void = () => undefined
): HTMLElement {
  const box = document.createElement('div');
  box.className = 'jp-AgentsPanel-request';
  box.dataset.requestId = r.id;
  const head = document.createElement('div');
  head.className = 'jp-AgentsPanel-requestHead';
  head.textContent = trans.__('Asks to use %1', r.tool);
  box.append(head);
  const what = requestWhat(r);
  if (what) {
    const code = document.createElement('pre');
    code.className = 'jp-AgentsPanel-requestWhat';
    code.textContent = what;
    box.append(code);
  }
  if (r.description) {
    const why = document.createElement('div');
    why.className = 'jp-AgentsPanel-requestWhy';
    why.textContent = r.description;
    box.append(why);
  }
  if (r.input?.old_string !== undefined || r.input?.new_string !== undefined) {
    const change = document.createElement('pre');
    change.className = 'jp-AgentsPanel-requestChange';
    change.textContent = [
      ...(r.input.old_string ?? '').split('\n').map(l => `- ${l}`),
      ...(r.input.new_string ?? '').split('\n').map(l => `+ ${l}`)
    ].join('\n');
    box.append(change);
  }
  const actions = document.createElement('div');
  actions.className = 'jp-AgentsPanel-requestActions';
  const button = (
    label: string,
    action: string,
    css: string,
    title: string,
    run: () => Promise<boolean>
  ) => {
    const b = document.createElement('button');
    b.className = `jp-mod-styled ${css}`;
    b.textContent = label;
    b.title = title;
    b.dataset.action = action;
    b.onclick = event => {
      event.stopPropagation();
      const hadFocus = box.contains(document.activeElement);
      if (hadFocus) {
        refocus();
      }
      actions
        .querySelectorAll('button')
        .forEach(x => ((x as HTMLButtonElement).disabled = true));
      void run().then(done => {
        if (!done) {
          actions
            .querySelectorAll('button')
            .forEach(x => ((x as HTMLButtonElement).disabled = false));
        }
        if (hadFocus) {
          refocus();
        }
      });
    };
    actions.append(b);
    return b;
  };
  button(
    trans.__('Allow'),
    'allow',
    'jp-mod-accept',
    trans.__('Run it once; the agent goes on'),
    () => answerAsked(model, r, 'allow', trans)
  );
  for (const s of r.suggestions ?? []) {
    const b = button(
      s.label,
      'always',
      'jp-AgentsPanel-requestAlways',
      trans.__('Allow, and: %1', s.label),
      () => answerAsked(model, r, 'allow', trans, s.index)
    );
    b.dataset.suggestion = String(s.index);
  }
  button(
    trans.__('Deny…'),
    'deny',
    'jp-mod-warn',
    trans.__('Do not run it; tell the agent what to do instead'),
    () => answerAsked(model, r, 'deny', trans)
  );
  box.append(actions);
  if (r.falls_back_to_dialog) {
    const note = document.createElement('div');
    note.className = 'jp-AgentsPanel-requestNote';
    note.textContent = trans.__(
      'Unanswered, its terminal asks at %1',
      new Date(r.until).toLocaleTimeString()
    );
    box.append(note);
  }
  return box;
}
