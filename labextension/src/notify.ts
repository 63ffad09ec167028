/**
 * Changing what a shown notification says, reliably.
 */
import { Notification } from '@jupyterlab/apputils';
import { ReadonlyJSONValue } from '@lumino/coreutils';

/**
 * Show `message` in place of the notification `id`: that one is dismissed and a new
 * one emitted, whose id is returned. Not `Notification.update`: JupyterLab hands an
 * update of a toast that has not rendered yet to react-toastify as a new toast with
 * the same id, which react-toastify drops (it already holds that id), so the toast
 * goes on saying what it first said while the notification center says the new
 * text. Notifications often change as they appear: tabs restore their sessions as a
 * page opens, a permission request follows the attention that announced it.
 */
export function replaceNotification(
  id: string,
  message: string,
  type: Notification.TypeOptions,
  options: Notification.IOptions<ReadonlyJSONValue>
): string {
  Notification.dismiss(id);
  return Notification.emit(message, type, options);
}
