/** An array-backed queue with O(1) amortised push and shift; the hot-path queue of every path and socket. */
export class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  /** The item `i` places behind the head (0 = the head), or undefined. */
  at(i: number): T | undefined {
    return this.items[this.head + i];
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head++] = undefined;
    // Compact once the dead prefix dominates, so memory follows the live length.
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** Puts items, in order, in front of the current contents. */
  unshiftAll(front: readonly T[]): void {
    if (front.length === 0) return;
    this.items = [...front, ...this.items.slice(this.head)];
    this.head = 0;
  }

  /** Removes and returns everything. */
  drain(): T[] {
    const out = this.items.slice(this.head) as T[];
    this.items = [];
    this.head = 0;
    return out;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i] as T;
  }
}
