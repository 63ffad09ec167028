/**
 * This device and the notifications that reach its owner with JupyterLab closed
 * (`jupyter-agents:devices`):
 *
 * - **Presence.** While this Lab tab is visible it says so
 *   (`POST /api/agents/presence {visible, tab}`), again before the server's `ttl`
 *   runs out, and says it is hidden when it is; by default the server notifies only
 *   while no tab of the owner is visible. A server that does not take it (not the
 *   owner, an older server) is not asked again.
 * - **Notify this device** (`jupyter-agents:notifications`, the bell of the Agents
 *   panel): the service worker the server serves at `{base_url}agents/sw.js` is
 *   registered with the scope `{base_url}agents/` (its own folder, never `/`: on a hub
 *   that would reach other users' pages), subscribed with the server's VAPID key, and
 *   the subscription sent to the server as this device; the dialog lists the owner's
 *   devices, each removable. Push needs a secure page (HTTPS, or localhost) and a
 *   browser with a push service: where there is none, the dialog says why.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { request } from './api';
import { el } from './dom';

type Settings = ServerConnection.ISettings;

/** `GET /api/agents/push/key`. */
export interface IPushKey {
  public_key: string;
  available: boolean;
  reason: string | null;
}

/** One of the owner's devices (`GET /api/agents/push/subscriptions`). */
export interface IDevice {
  id: string;
  name: string;
  endpoint: string;
  created: string;
}

export const pushKey = (s: Settings): Promise<IPushKey> =>
  request<IPushKey>(s, 'api/agents/push/key');

export const listDevices = (s: Settings): Promise<IDevice[]> =>
  request<IDevice[]>(s, 'api/agents/push/subscriptions');

export const addDevice = (
  s: Settings,
  subscription: PushSubscriptionJSON,
  name: string
): Promise<IDevice> =>
  request<IDevice>(s, 'api/agents/push/subscriptions', {
    method: 'POST',
    body: JSON.stringify({ ...subscription, name })
  });

export const removeDevice = (s: Settings, id: string): Promise<void> =>
  request<void>(s, `api/agents/push/subscriptions/${id}`, {
    method: 'DELETE'
  });

/** The service worker's URL and scope under this server's base URL. */
export function workerPlace(s: Settings): { url: string; scope: string } {
  const scope = URLExt.join(s.baseUrl, 'agents/');
  return { url: URLExt.join(scope, 'sw.js'), scope };
}

/** Says while this tab is visible (module docstring). */
export class Presence {
  constructor(private _settings: Settings) {
    this._onChange = () => void this._say();
    document.addEventListener('visibilitychange', this._onChange);
    window.addEventListener('pagehide', this._onChange);
    void this._say();
  }

  /** Stop saying anything (the tab counts as hidden once its last word expires). */
  dispose(): void {
    document.removeEventListener('visibilitychange', this._onChange);
    window.removeEventListener('pagehide', this._onChange);
    window.clearTimeout(this._again);
    this._off = true;
  }

  private async _say(): Promise<void> {
    window.clearTimeout(this._again);
    if (this._off) {
      return;
    }
    const visible = document.visibilityState === 'visible';
    let ttl = 60;
    try {
      const reply = await request<{ ttl: number }>(
        this._settings,
        'api/agents/presence',
        {
          method: 'POST',
          body: JSON.stringify({ visible, tab: this._tab }),
          keepalive: true // a hidden or closing page's last word still goes
        }
      );
      ttl = reply?.ttl ?? ttl;
    } catch (error) {
      const status = (error as { status?: number }).status;
      if (status === 403 || status === 404) {
        this.dispose(); // not the owner, or a server without notifications
        return;
      }
    }
    if (visible && !this._off) {
      // again well before it expires (and soon after a failed attempt)
      this._again = window.setTimeout(
        this._onChange,
        Math.max(1, ttl / 2) * 1000
      );
    }
  }

  private _tab = `tab-${Math.random().toString(36).slice(2, 12)}`;
  private _onChange: () => void;
  private _again: number | undefined = undefined;
  private _off = false;
}

/** Why this page cannot take pushes, or null when it can try. */
export function pushUnsupported(trans: TranslationBundle): string | null {
  if (!window.isSecureContext) {
    return trans.__(
      'This page is not secure (HTTPS or localhost): browsers allow push notifications only there.'
    );
  }
  if (!('serviceWorker' in navigator) || !('PushManager' in window)) {
    return trans.__('This browser has no push notifications.');
  }
  return null;
}

/** This page's service worker registration at our scope, if any. */
async function ownRegistration(
  s: Settings
): Promise<ServiceWorkerRegistration | undefined> {
  const { scope } = workerPlace(s);
  return navigator.serviceWorker.getRegistration(scope);
}

/** Turn this device on: register, subscribe, tell the server. Its device record. */
export async function notifyThisDevice(
  s: Settings,
  trans: TranslationBundle
): Promise<IDevice> {
  const why = pushUnsupported(trans);
  if (why) {
    throw new Error(why);
  }
  const key = await pushKey(s);
  if (!key.available) {
    throw new Error(
      trans.__('The server sends no pushes: %1', key.reason ?? '')
    );
  }
  if (Notification.permission !== 'granted') {
    const asked = await Notification.requestPermission();
    if (asked !== 'granted') {
      throw new Error(trans.__('Notifications are not allowed for this site.'));
    }
  }
  const { url, scope } = workerPlace(s);
  const registration = await navigator.serviceWorker.register(url, { scope });
  const ready = registration.active
    ? registration
    : await new Promise<ServiceWorkerRegistration>(resolve => {
        const worker = registration.installing ?? registration.waiting;
        worker?.addEventListener('statechange', () => {
          if (worker.state === 'activated') {
            resolve(registration);
          }
        });
      });
  const subscription =
    (await ready.pushManager.getSubscription()) ??
    (await ready.pushManager.subscribe({
      userVisibleOnly: true,
      applicationServerKey: key.public_key
    }));
  return addDevice(s, subscription.toJSON(), deviceName());
}

/** Turn this device off: the server forgets it, the browser unsubscribes. */
export async function stopThisDevice(
  s: Settings,
  devices: IDevice[]
): Promise<void> {
  const registration = await ownRegistration(s);
  const subscription = await registration?.pushManager.getSubscription();
  if (!subscription) {
    return;
  }
  const mine = devices.find(d => d.endpoint === subscription.endpoint);
  if (mine) {
    await removeDevice(s, mine.id);
  }
  await subscription.unsubscribe();
}

/** This device's endpoint, if it is subscribed here. */
async function thisEndpoint(s: Settings): Promise<string | null> {
  if (!('serviceWorker' in navigator)) {
    return null;
  }
  const registration = await ownRegistration(s);
  const subscription = await registration?.pushManager.getSubscription();
  return subscription?.endpoint ?? null;
}

/** A name a person tells devices apart by: the browser and the system. */
function deviceName(): string {
  const agent = navigator.userAgent;
  const browser = /Edg\//.test(agent)
    ? 'Edge'
    : /Firefox\//.test(agent)
      ? 'Firefox'
      : /Chrome\//.test(agent)
        ? 'Chrome'
        : /Safari\//.test(agent)
          ? 'Safari'
          : 'Browser';
  const system = /Android/.test(agent)
    ? 'Android'
    : /iPhone|iPad/.test(agent)
      ? 'iOS'
      : /Mac OS X/.test(agent)
        ? 'macOS'
        : /Windows/.test(agent)
          ? 'Windows'
          : /Linux/.test(agent)
            ? 'Linux'
            : '';
  return system ? `${browser} on ${system}` : browser;
}

/** The dialog's body: this device on or off, the owner's devices, each removable. */
export class DevicesBody extends Widget {
  constructor(
    private _settings: Settings,
    private _trans: TranslationBundle
  ) {
    super();
    this.addClass('jp-AgentsDevices');
    this._status = el('p', 'jp-AgentsDevices-status');
    this._status.setAttribute('aria-live', 'polite');
    this._toggle = el('button', 'jp-mod-styled jp-mod-accept');
    this._toggle.dataset.action = 'this-device';
    this._toggle.textContent = _trans.__('Notify this device');
    this._toggle.disabled = true; // until what this device is is known
    this._toggle.onclick = () => void this._flip();
    this._list = el('ul', 'jp-AgentsDevices-list');
    this.node.append(
      el(
        'p',
        'jp-AgentsDevices-about',
        _trans.__(
          'A device notified here gets each permission request an agent asks while no JupyterLab tab of yours is visible, with Allow and Deny. It carries the command, not the output.'
        )
      ),
      this._toggle,
      this._status,
      el('h3', 'jp-AgentsDevices-head', _trans.__('Your devices')),
      this._list
    );
    void this.refresh();
  }

  /** Read the devices and this device's state again. */
  async refresh(): Promise<void> {
    const trans = this._trans;
    try {
      const [devices, mine] = await Promise.all([
        listDevices(this._settings),
        thisEndpoint(this._settings).catch(() => null)
      ]);
      this._devices = devices;
      this._on = !!mine && devices.some(d => d.endpoint === mine);
      this._list.replaceChildren(
        ...devices.map(device => this._row(device, device.endpoint === mine))
      );
      if (!devices.length) {
        this._list.append(
          el('li', 'jp-AgentsDevices-none', trans.__('None yet.'))
        );
      }
    } catch (error) {
      this._say(
        trans.__('Could not list your devices: %1', (error as Error).message),
        true
      );
    }
    this._toggle.textContent = this._on
      ? trans.__('Stop notifying this device')
      : trans.__('Notify this device');
    const why = pushUnsupported(trans);
    this._toggle.disabled = !this._on && why !== null;
    if (why && !this._on) {
      this._say(why, false);
    }
  }

  private _row(device: IDevice, mine: boolean): HTMLLIElement {
    const trans = this._trans;
    const row = el('li', 'jp-AgentsDevices-device');
    row.dataset.deviceId = device.id;
    const name = mine ? trans.__('%1 (this device)', device.name) : device.name;
    const since = new Date(device.created).toLocaleString();
    row.append(
      el('span', 'jp-AgentsDevices-name', name),
      el('span', 'jp-AgentsDevices-since', trans.__('since %1', since))
    );
    const remove = el('button', 'jp-mod-styled jp-mod-warn');
    remove.dataset.action = 'remove';
    remove.textContent = trans.__('Remove');
    remove.title = trans.__('Notify %1 no more', device.name);
    remove.onclick = async () => {
      remove.disabled = true;
      try {
        await removeDevice(this._settings, device.id);
      } catch (error) {
        this._say((error as Error).message, true);
      }
      await this.refresh();
    };
    row.append(remove);
    return row;
  }

  private async _flip(): Promise<void> {
    const trans = this._trans;
    this._toggle.disabled = true;
    try {
      if (this._on) {
        await stopThisDevice(this._settings, this._devices);
        this._say(trans.__('This device is notified no more.'), false);
      } else {
        const device = await notifyThisDevice(this._settings, trans);
        this._say(trans.__('%1 is notified now.', device.name), false);
      }
    } catch (error) {
      this._say(
        trans.__(
          'Could not turn notifications on here: %1',
          (error as Error).message
        ),
        true
      );
    }
    this._toggle.disabled = false;
    await this.refresh();
  }

  private _say(text: string, failed: boolean): void {
    this._status.textContent = text;
    this._status.classList.toggle('jp-mod-error', failed);
  }

  private _status: HTMLParagraphElement;
  private _toggle: HTMLButtonElement;
  private _list: HTMLUListElement;
  private _devices: IDevice[] = [];
  private _on = false;
}

/** Show the devices dialog. */
export async function showDevices(
  settings: Settings,
  trans: TranslationBundle
): Promise<void> {
  await showDialog({
    title: trans.__('Agent notifications'),
    body: new DevicesBody(settings, trans),
    buttons: [Dialog.okButton({ label: trans.__('Close') })]
  });
}
