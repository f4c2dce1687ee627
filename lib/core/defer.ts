const settled = Promise.resolve();

/**
 * Runs `fn` as a microtask, like queueMicrotask. Node's queueMicrotask wraps every callback in an
 * AsyncResource (a bound function, an async id and two native context switches per call), which
 * on the per-message path costs more than the work it schedules; a reaction on a settled promise
 * is the same microtask without that. An exception from `fn` is rethrown on the next tick, so it
 * still surfaces as an uncaught exception rather than as an unhandled rejection.
 */
export function defer(fn: () => void): void {
  settled.then(fn).catch(rethrow);
}

function rethrow(e: unknown): void {
  process.nextTick(() => {
    throw e;
  });
}
