/** The flush's priority queue of streams with a ready head op. */
import type { StreamQueue } from '../op.js';

/** A binary heap of streams keyed by (priority, head op id); `inHeap` marks its members. */
export class StreamHeap {
  readonly #items: StreamQueue[] = [];

  static #less(a: StreamQueue, b: StreamQueue): boolean {
    if (a.priority !== b.priority) return a.priority < b.priority;
    return (a.headOp?.id ?? Infinity) < (b.headOp?.id ?? Infinity);
  }

  push(q: StreamQueue): void {
    q.inHeap = true;
    const h = this.#items;
    h.push(q);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!StreamHeap.#less(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  pop(): StreamQueue | undefined {
    const h = this.#items;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    top.inHeap = false;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && StreamHeap.#less(h[l]!, h[m]!)) m = l;
        if (r < h.length && StreamHeap.#less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}
