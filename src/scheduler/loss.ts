/**
 * Device loss, watched once per device: the contexts on one device (its owner and borrowers) hear
 * of it through one reaction, and a context leaves when destroyed. A reaction of each context's own
 * would stay on `device.lost` until the device is lost: a borrowing context made and destroyed in a
 * loop would leave one behind each time.
 */

/** What hears of the loss: a context's scheduler. */
export interface LossListener {
  deviceLost(reason: string, message: string): void;
}

type LostInfo = { reason: string; message: string };
const watched = new WeakMap<GPUDevice, { listeners: Set<WeakRef<LossListener>>; info: Promise<LostInfo>; lost?: LostInfo }>();

/** Watches `device` for `listener` (held weakly); resolves with the loss once every listener heard of it. */
export function watchDeviceLoss(device: GPUDevice, listener: LossListener): Promise<LostInfo> {
  let w = watched.get(device);
  if (!w) {
    const listeners = new Set<WeakRef<LossListener>>();
    const info = device.lost.then((i) => {
      for (const ref of listeners) ref.deref()?.deviceLost(i.reason, i.message);
      return (watched.get(device)!.lost = { reason: i.reason, message: i.message });
    });
    watched.set(device, (w = { listeners, info }));
  }
  // A context made on a device already lost hears of it as the first one did: on a microtask.
  const lost = w.lost;
  if (lost) void Promise.resolve().then(() => listener.deviceLost(lost.reason, lost.message));
  // Contexts dropped without destroy() leave a WeakRef: swept whenever their number reaches a power of two.
  const n = w.listeners.size;
  if (n >= 64 && (n & (n - 1)) === 0) for (const ref of w.listeners) if (!ref.deref()) w.listeners.delete(ref);
  w.listeners.add(new WeakRef(listener));
  return w.info;
}

/** `listener` no longer hears of `device`'s loss (its context was destroyed). */
export function unwatchDeviceLoss(device: GPUDevice, listener: LossListener): void {
  const listeners = watched.get(device)?.listeners;
  if (listeners) for (const ref of listeners) if (ref.deref() === listener) listeners.delete(ref);
}
