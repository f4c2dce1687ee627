const settled = Promise.resolve();

/**
 * Runs `fn` as a microtask, like queueMicrotask. Node's queueMicrotask wraps every callback in an
 * AsyncResource (a bound function, an async id and two native context switches per call), which
 * on the per-message path costs more than the work it schedules; a reaction on a settled promise
 * is the same microtask without that. One difference: an exception from `fn` (say, thrown by an
 * application's 'readable' listener) surfaces as an unhandled rejection, which Node by default
 * raises as an uncaught exception, as queueMicrotask would.
 */
export function defer(fn: () => void): void {
  void settled.then(fn);
}
